// The shared Communicator suite: every collective on every available backend, for world
// sizes 1..8 (non-powers of two included) and every dtype, against a reference computed
// here from each rank's seeded random data. Each rank is a thread with its own
// communicator; rendezvous goes through an in-memory store.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm_test_util.h"
#include "device_buffer.h"

namespace cohort::comm {
namespace {

using commtest::Decode;
using commtest::Encode;
using commtest::IsFloat;
using commtest::MakeBuffer;
using commtest::RandomValues;
using commtest::RoundTo;
using commtest::RunRanks;
using commtest::UnitRoundoff;

struct SuiteParam {
  std::string backend;
  int world;
  DataType type;
};

void PrintTo(const SuiteParam& p, std::ostream* os) {
  *os << p.backend << " world " << p.world << " " << DataTypeName(p.type);
}

std::string ParamName(const ::testing::TestParamInfo<SuiteParam>& info) {
  return fmt::format("{}_world{}_{}", info.param.backend, info.param.world,
                     DataTypeName(info.param.type));
}

std::vector<SuiteParam> AllParams() {
  std::vector<SuiteParam> out;
  for (const auto& backend : AvailableBackends()) {
    for (int world : {1, 2, 3, 4, 5, 8}) {
      // NCCL allows one rank per GPU in a communicator.
      if (backend == "nccl" && world > commtest::CudaDeviceCount()) continue;
      for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                            DataType::kInt32, DataType::kInt64}) {
        out.push_back({backend, world, type});
      }
    }
  }
  return out;
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// The reduction of inputs[r][i] over r, reduced exactly (in double) and rounded once to
// `type`, with the tolerance the backend may need: each of the n-1 partial sums it
// rounds to `type` can be off by half an ulp of at most sum|x|.
struct Reference {
  std::vector<double> value;
  std::vector<double> tolerance;
};

Reference Reduce(const std::vector<std::vector<double>>& inputs, ReduceOp op, DataType type) {
  const size_t n = inputs.size();
  const size_t count = inputs[0].size();
  Reference ref{std::vector<double>(count), std::vector<double>(count, 0.0)};
  for (size_t i = 0; i < count; ++i) {
    double acc = inputs[0][i], abs_sum = 0;
    for (size_t r = 0; r < n; ++r) {
      const double x = inputs[r][i];
      abs_sum += std::fabs(x);
      if (r == 0) continue;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += x; break;
        case ReduceOp::kMax: acc = std::max(acc, x); break;
        case ReduceOp::kMin: acc = std::min(acc, x); break;
      }
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<double>(n);
    ref.value[i] = RoundTo(type, acc);
    if (IsFloat(type) && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
      double tol = static_cast<double>(n + 2) * UnitRoundoff(type) * abs_sum;
      if (op == ReduceOp::kAvg) tol = tol / static_cast<double>(n) + UnitRoundoff(type) * std::fabs(acc);
      // float16 subnormals have an absolute step of 2^-24.
      if (type == DataType::kFloat16) tol += static_cast<double>(n + 1) * std::ldexp(1.0, -24);
      ref.tolerance[i] = tol;
    }
  }
  return ref;
}

// Compares got[i] with ref over [begin, begin + got.size()); reports the first few misses.
void ExpectMatches(const std::vector<double>& got, const Reference& ref, size_t begin,
                   const std::string& what) {
  ASSERT_LE(begin + got.size(), ref.value.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref.value[begin + i];
    const double tol = ref.tolerance[begin + i];
    if (std::fabs(got[i] - want) <= tol) continue;
    if (++misses <= 3) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want
                    << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(misses, 0) << what;
}

std::vector<std::vector<double>> InputsFor(const std::vector<int>& world_ranks, DataType type,
                                           size_t count, int salt) {
  std::vector<std::vector<double>> inputs;
  for (int w : world_ranks) inputs.push_back(RandomValues(type, count, w, salt));
  return inputs;
}

std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// AllReduce with every op, in and out of place, on `comm` whose member r is world rank
// members[r]; checks the result against the reference.
void CheckAllReduce(Communicator& comm, const std::string& backend, const std::vector<int>& members,
                    DataType type, int salt_base, std::initializer_list<size_t> counts) {
  int salt = salt_base;
  for (ReduceOp op : kOps) {
    for (bool in_place : {false, true}) {
      for (size_t count : counts) {
        ++salt;
        const auto inputs = InputsFor(members, type, count, salt);
        const auto mine = Encode(type, inputs[comm.rank()]);
        auto send = MakeBuffer(backend, mine.size());
        send->Upload(mine);
        auto recv = MakeBuffer(backend, in_place ? 0 : mine.size());
        void* out = in_place ? send->data() : recv->data();
        const std::string what = fmt::format("allreduce {} {} count {} {} (rank {} of {})",
                                             DataTypeName(type), ReduceOpName(op), count,
                                             in_place ? "in place" : "out of place", comm.rank(),
                                             comm.size());
        ASSERT_OK(comm.AllReduce(send->data(), out, count, type, op));
        const auto got = Decode(type, (in_place ? send : recv)->Download());
        ExpectMatches(got, Reduce(inputs, op, type), 0, what);
        if (!in_place) {
          EXPECT_EQ(send->Download(), mine) << what << ": send was modified";
        }
      }
    }
  }
}

void CheckAllGather(Communicator& comm, const std::string& backend, const std::vector<int>& members,
                    DataType type, int salt, bool in_place) {
  const int n = comm.size();
  std::vector<size_t> counts;
  for (int i = 0; i < n; ++i) counts.push_back(i % 3 == 1 ? 0 : static_cast<size_t>(4 * i + 1));
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<double> expect;
  for (int i = 0; i < n; ++i) {
    auto part = RandomValues(type, counts[i], members[i], salt);
    expect.insert(expect.end(), part.begin(), part.end());
  }
  const auto mine = Encode(type, RandomValues(type, counts[comm.rank()], members[comm.rank()], salt));
  auto recv = MakeBuffer(backend, total * SizeOf(type));
  std::unique_ptr<commtest::TestBuffer> send;
  const void* send_ptr;
  const size_t my_offset =
      std::accumulate(counts.begin(), counts.begin() + comm.rank(), size_t{0}) * SizeOf(type);
  if (in_place) {
    std::vector<std::byte> init(total * SizeOf(type), std::byte{0x5a});
    std::copy(mine.begin(), mine.end(), init.begin() + static_cast<long>(my_offset));
    recv->Upload(init);
    send_ptr = static_cast<std::byte*>(recv->data()) + my_offset;
  } else {
    send = MakeBuffer(backend, mine.size());
    send->Upload(mine);
    send_ptr = send->data();
  }
  const std::string what = fmt::format("allgather {} {} (rank {} of {})", DataTypeName(type),
                                       in_place ? "in place" : "out of place", comm.rank(), n);
  ASSERT_OK(comm.AllGather(send_ptr, recv->data(), counts, type));
  EXPECT_EQ(Decode(type, recv->Download()), expect) << what;
}

void CheckBroadcast(Communicator& comm, const std::string& backend, const std::vector<int>& members,
                    DataType type, int salt, int root, size_t count) {
  const auto root_data = RandomValues(type, count, members[root], salt);
  auto buf = MakeBuffer(backend, count * SizeOf(type));
  buf->Upload(Encode(type, comm.rank() == root ? root_data
                                               : RandomValues(type, count, members[comm.rank()], salt + 1)));
  ASSERT_OK(comm.Broadcast(buf->data(), count, type, root));
  EXPECT_EQ(Decode(type, buf->Download()), root_data)
      << "broadcast " << DataTypeName(type) << " from root " << root << " to rank " << comm.rank();
}

class CommSuite : public ::testing::TestWithParam<SuiteParam> {};

TEST_P(CommSuite, AllReduce) {
  const auto& p = GetParam();
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    EXPECT_EQ(comm.size(), p.world);
    EXPECT_EQ(comm.backend(), p.backend);
    CheckAllReduce(comm, p.backend, Iota(p.world), p.type, 0, {1, 37, 4099});
    // Zero elements: legal, no pointers needed.
    ASSERT_OK(comm.AllReduce(nullptr, nullptr, 0, p.type, ReduceOp::kSum));
  });
}

TEST_P(CommSuite, ReduceScatter) {
  const auto& p = GetParam();
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    const int n = comm.size();
    std::vector<size_t> even(static_cast<size_t>(n), 13);
    std::vector<size_t> uneven;
    for (int i = 0; i < n; ++i) uneven.push_back(i % 3 == 1 ? 0 : static_cast<size_t>(5 * i + 3));
    int salt = 100;
    for (const auto* layout : {&even, &uneven}) {
      const size_t total = std::accumulate(layout->begin(), layout->end(), size_t{0});
      const size_t begin =
          std::accumulate(layout->begin(), layout->begin() + comm.rank(), size_t{0});
      for (ReduceOp op : kOps) {
        ++salt;
        const auto inputs = InputsFor(Iota(n), p.type, total, salt);
        auto send = MakeBuffer(p.backend, total * SizeOf(p.type));
        const auto mine = Encode(p.type, inputs[comm.rank()]);
        send->Upload(mine);
        auto recv = MakeBuffer(p.backend, (*layout)[comm.rank()] * SizeOf(p.type));
        const std::string what = fmt::format(
            "reduce_scatter {} {} {} (rank {} of {})", DataTypeName(p.type), ReduceOpName(op),
            layout == &even ? "even" : "uneven", comm.rank(), n);
        ASSERT_OK(comm.ReduceScatter(send->data(), recv->data(), *layout, p.type, op));
        ExpectMatches(Decode(p.type, recv->Download()), Reduce(inputs, op, p.type), begin, what);
        EXPECT_EQ(send->Download(), mine) << what << ": send was modified";
        // In place (NCCL's convention): recv is this rank's slice of send.
        const size_t esz = SizeOf(p.type);
        void* slice = static_cast<std::byte*>(send->data()) + begin * esz;
        ASSERT_OK(comm.ReduceScatter(send->data(), slice, *layout, p.type, op));
        const auto all = send->Download();
        const std::vector<std::byte> got(all.begin() + static_cast<long>(begin * esz),
                                         all.begin() + static_cast<long>((begin + (*layout)[comm.rank()]) * esz));
        ExpectMatches(Decode(p.type, got), Reduce(inputs, op, p.type), begin, what + " in place");
      }
    }
  });
}

TEST_P(CommSuite, AllGather) {
  const auto& p = GetParam();
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    CheckAllGather(comm, p.backend, Iota(p.world), p.type, 200, /*in_place=*/false);
    CheckAllGather(comm, p.backend, Iota(p.world), p.type, 201, /*in_place=*/true);
  });
}

TEST_P(CommSuite, BroadcastFromEveryRoot) {
  const auto& p = GetParam();
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      CheckBroadcast(comm, p.backend, Iota(p.world), p.type, 300 + root, root, 1000);
      CheckBroadcast(comm, p.backend, Iota(p.world), p.type, 350 + root, root, 0);
    }
  });
}

TEST_P(CommSuite, BarrierWaitsForEveryone) {
  const auto& p = GetParam();
  std::atomic<int> arrived{0};
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    for (int round = 1; round <= 5; ++round) {
      arrived.fetch_add(1);
      ASSERT_OK(comm.Barrier());
      // Nobody leaves round k before everyone has entered it.
      EXPECT_GE(arrived.load(), round * comm.size()) << "rank " << comm.rank() << " round " << round;
    }
  });
}

TEST_P(CommSuite, SendRecvRing) {
  const auto& p = GetParam();
  if (p.world < 2) GTEST_SKIP() << "point-to-point needs two ranks";
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int round = 0; round < 2; ++round) {
      const size_t send_count = static_cast<size_t>(100 + 10 * r + round);
      const size_t recv_count = static_cast<size_t>(100 + 10 * left + round);
      const auto mine = RandomValues(p.type, send_count, r, 400 + round);
      auto send = MakeBuffer(p.backend, send_count * SizeOf(p.type));
      send->Upload(Encode(p.type, mine));
      auto recv = MakeBuffer(p.backend, recv_count * SizeOf(p.type));
      // Sends may wait for the matching receive: even ranks send first, odd ranks receive
      // first (an odd-sized ring still completes: rank n-1 and rank 0 are both even).
      const int send_tag = 10 + r + round, recv_tag = 10 + left + round;
      if (r % 2 == 0) {
        ASSERT_OK(comm.Send(send->data(), send_count, p.type, right, send_tag));
        ASSERT_OK(comm.Recv(recv->data(), recv_count, p.type, left, recv_tag));
      } else {
        ASSERT_OK(comm.Recv(recv->data(), recv_count, p.type, left, recv_tag));
        ASSERT_OK(comm.Send(send->data(), send_count, p.type, right, send_tag));
      }
      EXPECT_EQ(Decode(p.type, recv->Download()), RandomValues(p.type, recv_count, left, 400 + round))
          << "rank " << r << " from rank " << left << " round " << round;
    }
  });
}

// Runs a few collectives inside a group whose member i is world rank members[i].
void CheckGroup(Communicator& g, const std::string& backend, const std::vector<int>& members,
                DataType type, int salt) {
  ASSERT_EQ(g.size(), static_cast<int>(members.size()));
  CheckAllReduce(g, backend, members, type, salt, {33});
  CheckAllGather(g, backend, members, type, salt + 50, false);
  CheckBroadcast(g, backend, members, type, salt + 60, g.size() - 1, 77);
  ASSERT_OK(g.Barrier());
}

TEST_P(CommSuite, SplitIntoGroups) {
  const auto& p = GetParam();
  RunRanks(p.backend, p.world, [&](Communicator& world) {
    const int r = world.rank(), n = world.size();
    // Parity groups: {0,2,4,..} and {1,3,5,..}, splitting at the same time.
    std::vector<int> parity;
    for (int i = r % 2; i < n; i += 2) parity.push_back(i);
    auto g = world.Split(parity);
    ASSERT_TRUE(g.has_value()) << g.error().ToString();
    EXPECT_EQ((*g)->rank(), static_cast<int>(std::find(parity.begin(), parity.end(), r) - parity.begin()));
    CheckGroup(**g, p.backend, parity, p.type, 500);
    // The parent stays usable and independent of its children.
    CheckAllReduce(world, p.backend, Iota(n), p.type, 600, {5});

    if (n % 2 == 0 && n >= 4) {
      // A 2 x (n/2) grid: rows (tensor-parallel) and columns (data-parallel) at once.
      const int cols = n / 2;
      std::vector<int> row, col;
      for (int c = 0; c < cols; ++c) row.push_back((r / cols) * cols + c);
      col = {r % cols, r % cols + cols};
      auto row_comm = world.Split(row);
      ASSERT_TRUE(row_comm.has_value()) << row_comm.error().ToString();
      auto col_comm = world.Split(col);
      ASSERT_TRUE(col_comm.has_value()) << col_comm.error().ToString();
      CheckGroup(**row_comm, p.backend, row, p.type, 700);
      CheckGroup(**col_comm, p.backend, col, p.type, 800);
      // Interleaved use of both.
      CheckAllReduce(**row_comm, p.backend, row, p.type, 900, {3});
      CheckAllReduce(**col_comm, p.backend, col, p.type, 950, {3});

      // Nested: split the parity group into halves (ranks of the parity group).
      const int gs = (*g)->size(), gr = (*g)->rank();
      std::vector<int> half, half_world;
      for (int i = gr < gs / 2 ? 0 : gs / 2; i < (gr < gs / 2 ? gs / 2 : gs); ++i) {
        half.push_back(i);
        half_world.push_back(parity[i]);
      }
      auto h = (*g)->Split(half);
      ASSERT_TRUE(h.has_value()) << h.error().ToString();
      CheckGroup(**h, p.backend, half_world, p.type, 1000);
    }
    // Splitting the same list twice gives a second, separate communicator.
    auto again = world.Split(parity);
    ASSERT_TRUE(again.has_value()) << again.error().ToString();
    CheckAllReduce(**again, p.backend, parity, p.type, 1100, {4});
  });
}

// Large messages: fewer worlds and one integer type, to keep the suite fast.
class CommSuiteLarge : public ::testing::TestWithParam<SuiteParam> {};

std::vector<SuiteParam> LargeParams() {
  std::vector<SuiteParam> out;
  for (const auto& p : AllParams()) {
    if (p.world >= 2 && p.world <= 4 && p.type != DataType::kInt32) out.push_back(p);
  }
  return out;
}

TEST_P(CommSuiteLarge, AllReduce) {
  const auto& p = GetParam();
  // Larger than Gloo's 1 MiB segment on float32/int64: several segments per rank.
  const size_t count = p.type == DataType::kFloat32 || p.type == DataType::kInt64 ? 300'007 : 65'539;
  RunRanks(p.backend, p.world, [&](Communicator& comm) {
    const auto inputs = InputsFor(Iota(p.world), p.type, count, 77);
    auto buf = MakeBuffer(p.backend, count * SizeOf(p.type));
    buf->Upload(Encode(p.type, inputs[comm.rank()]));
    ASSERT_OK(comm.AllReduce(buf->data(), buf->data(), count, p.type, ReduceOp::kSum));
    ExpectMatches(Decode(p.type, buf->Download()), Reduce(inputs, ReduceOp::kSum, p.type), 0,
                  "large allreduce");
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, CommSuite, ::testing::ValuesIn(AllParams()), ParamName);
INSTANTIATE_TEST_SUITE_P(Backends, CommSuiteLarge, ::testing::ValuesIn(LargeParams()), ParamName);

}  // namespace
}  // namespace cohort::comm
