// The nccl backend on real GPUs (ctest label `gpu`; every test skips without a device).
// Every collective against a host reference, for a world of one GPU and, when the
// machine has several, for 2 and all of them (NCCL allows one rank per device per
// communicator). Each rank is a thread on device rank % devices with its own
// communicator; rendezvous goes through an in-memory store. Also: creation timing out
// without peers (needs one GPU), mismatch detection, tag checks and an absent rank
// (need two).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm_test_util.h"
#include "device_buffer.h"

namespace cohort::comm {
namespace {

using commtest::Decode;
using commtest::Encode;
using commtest::IsFloat;
using commtest::LocalOptions;
using commtest::MakeDeviceBuffer;
using commtest::MemStore;
using commtest::RandomValues;
using commtest::RoundTo;
using commtest::UnitRoundoff;
using ::testing::HasSubstr;

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                               DataType::kInt32, DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

int Devices() { return commtest::CudaDeviceCount(); }

#define SKIP_WITHOUT_GPUS(n)                                                        \
  do {                                                                              \
    if (Devices() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s), have " << Devices(); \
  } while (0)

// 1, 2 and every device (distinct values only).
std::vector<int> Worlds() {
  std::vector<int> w = {1};
  if (Devices() >= 2) w.push_back(2);
  if (Devices() > 2) w.push_back(Devices());
  return w;
}

// Runs body(comm) on `world` threads, rank r on device r % Devices().
void RunRanks(int world, const std::function<void(Communicator&)>& body,
              const std::function<void(CommOptions&)>& tweak = nullptr) {
  auto store = std::make_shared<MemStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      if (!commtest::UseDevice(r % Devices())) return;
      CommOptions o = LocalOptions("nccl", r, world, store, Millis(60000));
      if (tweak) tweak(o);
      auto comm = CreateCommunicator(o);
      if (!comm) {
        ADD_FAILURE() << "rank " << r << ": " << comm.error().ToString();
        return;
      }
      EXPECT_EQ((*comm)->backend(), "nccl");
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

struct Reference {
  std::vector<double> value, tolerance;
};

// inputs[r][i] reduced in double and rounded once; float sums and averages may be off
// by the roundings of n partial results (and NCCL's 1/n pre-multiplication for avg).
Reference Reduce(const std::vector<std::vector<double>>& inputs, ReduceOp op, DataType type) {
  const size_t n = inputs.size(), count = inputs[0].size();
  Reference ref{std::vector<double>(count), std::vector<double>(count, 0.0)};
  for (size_t i = 0; i < count; ++i) {
    double acc = inputs[0][i], abs_sum = std::fabs(inputs[0][i]);
    for (size_t r = 1; r < n; ++r) {
      const double x = inputs[r][i];
      abs_sum += std::fabs(x);
      if (op == ReduceOp::kMax) acc = std::max(acc, x);
      else if (op == ReduceOp::kMin) acc = std::min(acc, x);
      else acc += x;
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<double>(n);
    ref.value[i] = RoundTo(type, acc);
    if (IsFloat(type) && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
      double tol = static_cast<double>(n + 3) * UnitRoundoff(type) * abs_sum;
      if (type == DataType::kFloat16) tol += static_cast<double>(n + 2) * std::ldexp(1.0, -24);
      ref.tolerance[i] = tol;
    }
  }
  return ref;
}

void ExpectMatches(const std::vector<double>& got, const Reference& ref, size_t begin,
                   const std::string& what) {
  ASSERT_LE(begin + got.size(), ref.value.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - ref.value[begin + i]) <= ref.tolerance[begin + i]) continue;
    if (++misses <= 3) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want "
                    << ref.value[begin + i] << " (tolerance " << ref.tolerance[begin + i] << ")";
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

std::vector<std::vector<double>> Inputs(int n, DataType type, size_t count, int salt) {
  std::vector<std::vector<double>> in;
  for (int r = 0; r < n; ++r) in.push_back(RandomValues(type, count, r, salt));
  return in;
}

TEST(Nccl, OfferedWhenADeviceIsPresent) {
  SKIP_WITHOUT_GPUS(1);
  EXPECT_THAT(AvailableBackends(), ::testing::Contains("nccl"));
}

TEST(Nccl, AllReduceEveryTypeOpAndPlacement) {
  SKIP_WITHOUT_GPUS(1);
  for (int world : Worlds()) {
    RunRanks(world, [&](Communicator& comm) {
      int salt = 0;
      for (DataType type : kTypes) {
        for (ReduceOp op : kOps) {
          for (bool in_place : {false, true}) {
            for (size_t count : {size_t{1}, size_t{37}, size_t{4099}, size_t{300007}}) {
              const auto inputs = Inputs(comm.size(), type, count, ++salt);
              const auto mine = Encode(type, inputs[comm.rank()]);
              auto send = MakeDeviceBuffer(mine.size());
              send->Upload(mine);
              auto recv = MakeDeviceBuffer(in_place ? 0 : mine.size());
              void* out = in_place ? send->data() : recv->data();
              const std::string what =
                  fmt::format("allreduce {} {} count {} {} (rank {} of {})", DataTypeName(type),
                              ReduceOpName(op), count, in_place ? "in place" : "out of place",
                              comm.rank(), comm.size());
              ASSERT_OK(comm.AllReduce(send->data(), out, count, type, op));
              ExpectMatches(Decode(type, (in_place ? send : recv)->Download()),
                            Reduce(inputs, op, type), 0, what);
              if (!in_place) {
                EXPECT_EQ(send->Download(), mine) << what << ": send was modified";
              }
            }
          }
        }
      }
      ASSERT_OK(comm.AllReduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
    });
  }
}

TEST(Nccl, ReduceScatterEvenAndUneven) {
  SKIP_WITHOUT_GPUS(1);
  for (int world : Worlds()) {
    RunRanks(world, [&](Communicator& comm) {
      const int n = comm.size();
      std::vector<size_t> even(static_cast<size_t>(n), 1031);
      std::vector<size_t> uneven;
      for (int i = 0; i < n; ++i) uneven.push_back(i % 3 == 1 ? 0 : static_cast<size_t>(5 * i + 3));
      int salt = 100;
      for (DataType type : kTypes) {
        for (const auto* layout : {&even, &uneven}) {
          const size_t total = std::accumulate(layout->begin(), layout->end(), size_t{0});
          const size_t begin = std::accumulate(layout->begin(), layout->begin() + comm.rank(), size_t{0});
          for (ReduceOp op : kOps) {
            const auto inputs = Inputs(n, type, total, ++salt);
            const auto mine = Encode(type, inputs[comm.rank()]);
            auto send = MakeDeviceBuffer(mine.size());
            send->Upload(mine);
            auto recv = MakeDeviceBuffer((*layout)[comm.rank()] * SizeOf(type));
            const std::string what = fmt::format("reduce_scatter {} {} {} (rank {} of {})",
                                                 DataTypeName(type), ReduceOpName(op),
                                                 layout == &even ? "even" : "uneven", comm.rank(), n);
            ASSERT_OK(comm.ReduceScatter(send->data(), recv->data(), *layout, type, op));
            ExpectMatches(Decode(type, recv->Download()), Reduce(inputs, op, type), begin, what);
            EXPECT_EQ(send->Download(), mine) << what << ": send was modified";
          }
        }
      }
    });
  }
}

TEST(Nccl, AllGatherEvenUnevenAndInPlace) {
  SKIP_WITHOUT_GPUS(1);
  for (int world : Worlds()) {
    RunRanks(world, [&](Communicator& comm) {
      const int n = comm.size();
      std::vector<size_t> even(static_cast<size_t>(n), 777), uneven;
      for (int i = 0; i < n; ++i) uneven.push_back(i % 3 == 1 ? 0 : static_cast<size_t>(4 * i + 1));
      int salt = 200;
      for (DataType type : kTypes) {
        for (const auto* counts : {&even, &uneven}) {
          for (bool in_place : {false, true}) {
            ++salt;
            const size_t esz = SizeOf(type);
            const size_t total = std::accumulate(counts->begin(), counts->end(), size_t{0});
            const size_t my_offset =
                std::accumulate(counts->begin(), counts->begin() + comm.rank(), size_t{0}) * esz;
            std::vector<double> expect;
            for (int i = 0; i < n; ++i) {
              auto part = RandomValues(type, (*counts)[i], i, salt);
              expect.insert(expect.end(), part.begin(), part.end());
            }
            const auto mine = Encode(type, RandomValues(type, (*counts)[comm.rank()], comm.rank(), salt));
            auto recv = MakeDeviceBuffer(total * esz);
            std::unique_ptr<commtest::TestBuffer> send;
            const void* send_ptr;
            if (in_place) {
              std::vector<std::byte> init(total * esz, std::byte{0x5a});
              std::copy(mine.begin(), mine.end(), init.begin() + static_cast<long>(my_offset));
              recv->Upload(init);
              send_ptr = static_cast<std::byte*>(recv->data()) + my_offset;
            } else {
              send = MakeDeviceBuffer(mine.size());
              send->Upload(mine);
              send_ptr = send->data();
            }
            ASSERT_OK(comm.AllGather(send_ptr, recv->data(), *counts, type));
            EXPECT_EQ(Decode(type, recv->Download()), expect)
                << "allgather " << DataTypeName(type) << (counts == &even ? " even" : " uneven")
                << (in_place ? " in place" : "") << " rank " << comm.rank();
          }
        }
      }
    });
  }
}

TEST(Nccl, BroadcastFromEveryRoot) {
  SKIP_WITHOUT_GPUS(1);
  for (int world : Worlds()) {
    RunRanks(world, [&](Communicator& comm) {
      for (DataType type : kTypes) {
        for (int root = 0; root < comm.size(); ++root) {
          const auto root_data = RandomValues(type, 1000, root, 300 + root);
          auto buf = MakeDeviceBuffer(1000 * SizeOf(type));
          buf->Upload(Encode(type, comm.rank() == root ? root_data
                                                       : RandomValues(type, 1000, comm.rank(), 999)));
          ASSERT_OK(comm.Broadcast(buf->data(), 1000, type, root));
          EXPECT_EQ(Decode(type, buf->Download()), root_data) << "root " << root;
          ASSERT_OK(comm.Broadcast(nullptr, 0, type, root));
        }
      }
    });
  }
}

TEST(Nccl, BarrierWaitsForEveryone) {
  SKIP_WITHOUT_GPUS(1);
  for (int world : Worlds()) {
    std::atomic<int> arrived{0};
    RunRanks(world, [&](Communicator& comm) {
      for (int round = 1; round <= 5; ++round) {
        arrived.fetch_add(1);
        ASSERT_OK(comm.Barrier());
        EXPECT_GE(arrived.load(), round * comm.size());
      }
    });
  }
}

TEST(Nccl, SendRecvRing) {
  SKIP_WITHOUT_GPUS(2);
  for (int world : Worlds()) {
    if (world < 2) continue;
    RunRanks(world, [&](Communicator& comm) {
      const int r = comm.rank(), n = comm.size();
      const int right = (r + 1) % n, left = (r + n - 1) % n;
      for (DataType type : kTypes) {
        const size_t send_count = 100 + 10 * r, recv_count = 100 + 10 * left;
        auto send = MakeDeviceBuffer(send_count * SizeOf(type));
        send->Upload(Encode(type, RandomValues(type, send_count, r, 400)));
        auto recv = MakeDeviceBuffer(recv_count * SizeOf(type));
        if (r % 2 == 0) {
          ASSERT_OK(comm.Send(send->data(), send_count, type, right, 10 + r));
          ASSERT_OK(comm.Recv(recv->data(), recv_count, type, left, 10 + left));
        } else {
          ASSERT_OK(comm.Recv(recv->data(), recv_count, type, left, 10 + left));
          ASSERT_OK(comm.Send(send->data(), send_count, type, right, 10 + r));
        }
        EXPECT_EQ(Decode(type, recv->Download()), RandomValues(type, recv_count, left, 400));
      }
    });
  }
}

TEST(Nccl, SplitIntoParityGroups) {
  SKIP_WITHOUT_GPUS(2);
  for (int world : Worlds()) {
    if (world < 2) continue;
    RunRanks(world, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<int> parity;
      for (int i = r % 2; i < comm.size(); i += 2) parity.push_back(i);
      auto g = comm.Split(parity);
      ASSERT_TRUE(g.has_value()) << g.error().ToString();
      EXPECT_EQ((*g)->size(), static_cast<int>(parity.size()));
      // Sum of world ranks in the group, through the group.
      auto buf = MakeDeviceBuffer(sizeof(int64_t));
      buf->Upload(Encode(DataType::kInt64, {static_cast<double>(r)}));
      ASSERT_OK((*g)->AllReduce(buf->data(), buf->data(), 1, DataType::kInt64, ReduceOp::kSum));
      const double want = std::accumulate(parity.begin(), parity.end(), 0.0);
      EXPECT_EQ(Decode(DataType::kInt64, buf->Download())[0], want);
      // The parent stays usable.
      ASSERT_OK(comm.Barrier());
    });
  }
}

TEST(Nccl, MismatchedCollectivesFailAlikeAndStayUsable) {
  SKIP_WITHOUT_GPUS(2);
  RunRanks(2, [&](Communicator& comm) {
    const size_t count = comm.rank() == 0 ? 8 : 16;
    auto buf = MakeDeviceBuffer(16 * sizeof(float));
    auto r = comm.AllReduce(buf->data(), buf->data(), count, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("collective mismatch at #1"));
    ASSERT_OK(comm.Barrier());
  });
}

TEST(Nccl, PointToPointTagsMustComeInOrder) {
  SKIP_WITHOUT_GPUS(2);
  RunRanks(2, [&](Communicator& comm) {
    auto buf = MakeDeviceBuffer(4 * sizeof(float));
    if (comm.rank() == 0) {
      ASSERT_OK(comm.Send(buf->data(), 4, DataType::kFloat32, 1, 7));
    } else {
      auto r = comm.Recv(buf->data(), 4, DataType::kFloat32, 0, 5);
      ASSERT_FALSE(r.has_value());
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
      EXPECT_THAT(r.error().message, HasSubstr("tag 7"));
    }
  });
}

TEST(Nccl, CreationTimesOutWithoutPeers) {
  SKIP_WITHOUT_GPUS(1);
  ASSERT_TRUE(commtest::UseDevice(0));
  auto store = std::make_shared<MemStore>();
  const auto start = std::chrono::steady_clock::now();
  auto c = CreateCommunicator(LocalOptions("nccl", 0, 2, store, Millis(3000)));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kDeadlineExceeded) << c.error().ToString();
  EXPECT_THAT(c.error().message, HasSubstr("rendezvous of nccl group 'world' (rank 0 of 2)"));
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(Nccl, AbsentRankIsNamedAndTheCommunicatorBreaks) {
  SKIP_WITHOUT_GPUS(2);
  std::atomic<bool> done{false};
  RunRanks(2, [&](Communicator& comm) {
    auto buf = MakeDeviceBuffer(sizeof(float));
    ASSERT_OK(comm.AllReduce(buf->data(), buf->data(), 1, DataType::kFloat32, ReduceOp::kSum));
    if (comm.rank() == 1) {
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;  // never calls the second collective
    }
    auto r = comm.AllReduce(buf->data(), buf->data(), 1, DataType::kFloat32, ReduceOp::kSum);
    done.store(true);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kDeadlineExceeded);
    EXPECT_THAT(r.error().message, HasSubstr("allreduce #2"));
    EXPECT_THAT(r.error().message, HasSubstr("rank 1, which never started it"));
    auto again = comm.Barrier();
    ASSERT_FALSE(again.has_value());
    EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);
  }, [](CommOptions& o) { o.timeout = Millis(3000); });
}

}  // namespace
}  // namespace cohort::comm
