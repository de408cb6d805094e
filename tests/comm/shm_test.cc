// The shm backend beyond the shared suite (communicator_suite_test.cc and
// communicator_failure_test.cc run it like every backend): collectives whose uneven
// contributions take several rounds of the segment's halves, messages longer than a
// channel, a tag mismatch that leaves the channel in step, backend "auto" choosing shm on
// one host and gloo when a rank is elsewhere, and no name left in /dev/shm.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <cstdint>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/shm/shm_communicator.h"
#include "comm_test_util.h"

namespace cohort::comm {
namespace {

using commtest::LocalOptions;
using commtest::MemStore;
using commtest::RunRanks;
using ::testing::HasSubstr;

// Exactly representable values: rank r's element i.
float Value(int r, size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(r) * 3) % 1000); }

TEST(ShmTest, UnevenCollectivesTakeSeveralRoundsAndStayExact) {
  // Three ranks: a half is 4 MiB / 2 / 3 = 682 KiB, so each contribution below needs
  // several rounds, and the ranks need different numbers of them.
  const std::vector<size_t> rs_counts = {300001, 0, 170003};
  const std::vector<size_t> ag_counts = {0, 400003, 5};
  const size_t bcast = 700001, ar = 200003;
  RunRanks("shm", 3, [&](Communicator& comm) {
    const int me = comm.rank();
    ASSERT_EQ(comm.backend(), "shm");
    // ReduceScatter: the segment of rank r is the sum over ranks at its offsets.
    const size_t total = std::accumulate(rs_counts.begin(), rs_counts.end(), size_t{0});
    std::vector<float> send(total);
    for (size_t i = 0; i < total; ++i) send[i] = Value(me, i);
    std::vector<float> recv(rs_counts[static_cast<size_t>(me)] + 1, -1.0f);
    ASSERT_OK(comm.ReduceScatter(send.data(), recv.data(), rs_counts, DataType::kFloat32,
                                 ReduceOp::kSum));
    const size_t offset = me == 0 ? 0 : rs_counts[0] + (me == 2 ? rs_counts[1] : 0);
    for (size_t i = 0; i < rs_counts[static_cast<size_t>(me)]; ++i) {
      const float want = Value(0, offset + i) + Value(1, offset + i) + Value(2, offset + i);
      ASSERT_EQ(recv[i], want) << "reduce_scatter rank " << me << " element " << i;
    }
    EXPECT_EQ(recv.back(), -1.0f) << "wrote past its segment";

    // AllGather: every rank gets every contribution in rank order.
    const size_t ag_total = std::accumulate(ag_counts.begin(), ag_counts.end(), size_t{0});
    std::vector<int64_t> mine(ag_counts[static_cast<size_t>(me)]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = me * 1'000'000 + static_cast<int64_t>(i);
    std::vector<int64_t> all(ag_total, -1);
    ASSERT_OK(comm.AllGather(mine.data(), all.data(), ag_counts, DataType::kInt64));
    size_t at = 0;
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < ag_counts[static_cast<size_t>(r)]; ++i, ++at) {
        ASSERT_EQ(all[at], r * 1'000'000 + static_cast<int64_t>(i)) << "allgather element " << at;
      }
    }

    // Broadcast from rank 1.
    std::vector<float> b(bcast);
    for (size_t i = 0; i < bcast; ++i) b[i] = me == 1 ? Value(1, i) : -2.0f;
    ASSERT_OK(comm.Broadcast(b.data(), bcast, DataType::kFloat32, 1));
    for (size_t i = 0; i < bcast; ++i) ASSERT_EQ(b[i], Value(1, i)) << "broadcast element " << i;

    // AllReduce avg of int64 (truncating), in place.
    std::vector<int64_t> x(ar);
    for (size_t i = 0; i < ar; ++i) x[i] = static_cast<int64_t>(i) + me;
    ASSERT_OK(comm.AllReduce(x.data(), x.data(), ar, DataType::kInt64, ReduceOp::kAvg));
    for (size_t i = 0; i < ar; ++i) ASSERT_EQ(x[i], static_cast<int64_t>(i) + 1) << "avg element " << i;
  });
}

TEST(ShmTest, LongMessagesCrossInChunksAndATagMismatchKeepsTheChannelInStep) {
  RunRanks("shm", 2, [&](Communicator& comm) {
    const int me = comm.rank(), peer = 1 - me;
    // 3 MB each way (a channel between two ranks holds 512 KiB): even ranks send first.
    const size_t n = 750'001;
    std::vector<float> out(n), in(n, -1.0f);
    for (size_t i = 0; i < n; ++i) out[i] = Value(me, i);
    if (me == 0) {
      ASSERT_OK(comm.Send(out.data(), n, DataType::kFloat32, peer, 4));
      ASSERT_OK(comm.Recv(in.data(), n, DataType::kFloat32, peer, 4));
    } else {
      ASSERT_OK(comm.Recv(in.data(), n, DataType::kFloat32, peer, 4));
      ASSERT_OK(comm.Send(out.data(), n, DataType::kFloat32, peer, 4));
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(in[i], Value(peer, i)) << "element " << i;

    // An empty message, then a receive that names another tag: it fails on the receiver,
    // names both sides, and consumes the message, so the next pair still matches.
    ASSERT_OK(me == 0 ? comm.Send(nullptr, 0, DataType::kInt32, peer, 1)
                      : comm.Recv(nullptr, 0, DataType::kInt32, peer, 1));
    std::vector<int32_t> small(1000, me);
    if (me == 0) {
      ASSERT_OK(comm.Send(small.data(), small.size(), DataType::kInt32, peer, 7));
      ASSERT_OK(comm.Send(small.data(), small.size(), DataType::kInt32, peer, 8));
    } else {
      auto wrong = comm.Recv(small.data(), small.size(), DataType::kInt32, peer, 9);
      ASSERT_FALSE(wrong.has_value());
      EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
      EXPECT_THAT(wrong.error().message, HasSubstr("recv from rank 0 (tag 9, int32, 1000 elements)"));
      EXPECT_THAT(wrong.error().message, HasSubstr("has tag 7, int32, 1000 elements"));
      EXPECT_EQ(small[0], 1) << "a mismatched message must not reach the buffer";
      ASSERT_OK(comm.Recv(small.data(), small.size(), DataType::kInt32, peer, 8));
      EXPECT_EQ(small[0], 0);
    }
    // Still usable for collectives.
    int64_t v = me + 1;
    ASSERT_OK(comm.AllReduce(&v, &v, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(v, 3);
  });
}

TEST(ShmTest, AutoPicksShmOnOneHostAndGlooWhenARankIsElsewhere) {
  ASSERT_NE(ShmHostKey(), "") << "this host's key (boot id, /dev/shm, PID namespace)";
  RunRanks("auto", 3, [](Communicator& comm) {
    EXPECT_EQ(comm.backend(), "shm");
    int64_t v = comm.rank();
    ASSERT_OK(comm.AllReduce(&v, &v, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(v, 3);
  });
  // Rank 1 reports another host (as a rank on another machine would): every rank uses
  // gloo. Rank 1 is made as gloo directly so that it does not overwrite its key.
  auto store = std::make_shared<MemStore>();
  ASSERT_OK(store->Set("test/auto/host/1", "another-host"));
  std::vector<Result<std::unique_ptr<Communicator>>> made(2);
  {
    std::jthread a([&] { made[0] = CreateCommunicator(LocalOptions("auto", 0, 2, store)); });
    std::jthread b([&] { made[1] = CreateCommunicator(LocalOptions("gloo", 1, 2, store)); });
  }
  for (auto& m : made) ASSERT_TRUE(m.has_value()) << m.error().ToString();
  EXPECT_EQ((*made[0])->backend(), "gloo");
  EXPECT_THAT(store->Get("test/auto/choice", Millis(10)).value_or(""), ::testing::StartsWith("gloo\n"));
  std::vector<int64_t> v = {1, 2};
  {
    std::jthread a([&] { EXPECT_TRUE((*made[0])->AllReduce(&v[0], &v[0], 1, DataType::kInt64, ReduceOp::kSum)); });
    std::jthread b([&] { EXPECT_TRUE((*made[1])->AllReduce(&v[1], &v[1], 1, DataType::kInt64, ReduceOp::kSum)); });
  }
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], 3);
}

TEST(ShmTest, AutoSplitsTheRanksOfOneHostOverShmInsideAGlooWorld) {
  // Ranks 0 and 1 on host a, 2 and 3 on host b: the world is gloo, a group inside one host
  // (a tensor group inside a node) is shm, a group across hosts gloo.
  RunRanks("auto", 4, [](Communicator& comm) {
    const int me = comm.rank();
    EXPECT_EQ(comm.backend(), "gloo");
    std::vector<int> same_host = me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    std::vector<int> across = me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    auto inside = comm.Split(same_host);
    ASSERT_TRUE(inside.has_value()) << inside.error().ToString();
    EXPECT_EQ((*inside)->backend(), "shm");
    auto between = comm.Split(across);
    ASSERT_TRUE(between.has_value()) << between.error().ToString();
    EXPECT_EQ((*between)->backend(), "gloo");
    // A split of the shm group stays shm.
    std::vector<int> self = {(*inside)->rank()};
    auto alone = (*inside)->Split(self);
    ASSERT_TRUE(alone.has_value()) << alone.error().ToString();
    EXPECT_EQ((*alone)->backend(), "shm");
    int64_t a = me, b = me;
    ASSERT_OK((*inside)->AllReduce(&a, &a, 1, DataType::kInt64, ReduceOp::kSum));
    ASSERT_OK((*between)->AllReduce(&b, &b, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(a, me < 2 ? 1 : 5);
    EXPECT_EQ(b, me % 2 == 0 ? 2 : 4);
  }, [](CommOptions& o) { o.host_key = o.rank < 2 ? "host-a" : "host-b"; });
}

TEST(ShmTest, AutoPicksGlooWhenDevShmHasLittleRoom) {
  // A container's /dev/shm (64 MB by default) stands here as a 16 MB tmpfs mounted in a
  // child's own mount namespace.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=16m") != 0) {
      _exit(77);
    }
    if (ShmFreeBytes("/dev/shm") >= kShmRoomForAuto) _exit(3);
    auto store = std::make_shared<MemStore>();
    std::vector<Result<std::unique_ptr<Communicator>>> made(2);
    {
      std::jthread a([&] { made[0] = CreateCommunicator(LocalOptions("auto", 0, 2, store)); });
      std::jthread b([&] { made[1] = CreateCommunicator(LocalOptions("auto", 1, 2, store)); });
    }
    for (auto& m : made) {
      if (!m.has_value() || (*m)->backend() != "gloo") _exit(4);
    }
    // No shm splits either: the keys went out empty.
    std::vector<Result<std::unique_ptr<Communicator>>> split(2);
    const std::vector<int> both = {0, 1};
    {
      std::jthread a([&] { split[0] = (*made[0])->Split(both); });
      std::jthread b([&] { split[1] = (*made[1])->Split(both); });
    }
    for (auto& m : split) {
      if (!m.has_value() || (*m)->backend() != "gloo") _exit(5);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a small tmpfs on /dev/shm here (needs root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the small tmpfs has room, 4: auto did not pick gloo, "
                                       "5: a split was not gloo";
  // Here, with a roomy /dev/shm, the same world is shm.
  ASSERT_GE(ShmFreeBytes("/dev/shm"), kShmRoomForAuto) << "this machine's /dev/shm";
}

// Names of this process's segments in /dev/shm.
std::set<std::string> OwnSegments() {
  std::set<std::string> out;
  const std::string prefix = fmt::format("cohort-shm-{}-", getpid());
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).starts_with(prefix)) out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

TEST(ShmTest, NoNameStaysInDevShm) {
  // While the groups and their splits are alive, and after.
  RunRanks("shm", 4, [](Communicator& comm) {
    std::vector<int> evens = {0, 2}, odds = {1, 3};
    auto half = comm.Split(comm.rank() % 2 == 0 ? evens : odds);
    ASSERT_TRUE(half.has_value()) << half.error().ToString();
    int64_t v = 1;
    ASSERT_OK((*half)->AllReduce(&v, &v, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(v, 2);
    ASSERT_OK(comm.Barrier());
    EXPECT_EQ(OwnSegments(), std::set<std::string>{}) << "rank " << comm.rank();
  });
  // A rank 0 whose peer never comes: it times out and removes the name it made.
  auto lonely = CreateCommunicator(LocalOptions("shm", 0, 2, std::make_shared<MemStore>(), Millis(200)));
  ASSERT_FALSE(lonely.has_value());
  EXPECT_EQ(lonely.error().code, ErrorCode::kDeadlineExceeded) << lonely.error().ToString();
  EXPECT_EQ(OwnSegments(), std::set<std::string>{});
}

TEST(ShmTest, StaleNamesOfDeadCreatorsAreRemoved) {
  char tmpl[] = "/tmp/shm_stale_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: its pid names no process
  auto touch = [&](const std::string& name, bool old) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << "x";
    if (old) {
      timespec times[2] = {{time(nullptr) - 7200, 0}, {time(nullptr) - 7200, 0}};
      utimensat(AT_FDCWD, path.c_str(), times, 0);
    }
  };
  touch(fmt::format("cohort-shm-{}-dead", child), true);        // removed
  touch(fmt::format("cohort-shm-{}-fresh", child), false);      // its rendezvous may go on
  touch(fmt::format("cohort-shm-{}-alive", getpid()), true);    // its creator lives
  touch("cohort-shm-notapid-x", true);
  touch("someone-else", true);
  EXPECT_EQ(RemoveStaleShmSegments(dir, std::chrono::seconds(3600)), 1u);
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.insert(e.path().filename());
  EXPECT_EQ(left, (std::set<std::string>{fmt::format("cohort-shm-{}-fresh", child),
                                         fmt::format("cohort-shm-{}-alive", getpid()),
                                         "cohort-shm-notapid-x", "someone-else"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::comm
