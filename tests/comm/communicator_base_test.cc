// CommunicatorBase on its own, under a recording fake backend: bad arguments never reach
// the backend, collectives are numbered (#1, #2, ... and not by Send/Recv/Split), a broken
// communicator refuses every call with the first cause, and Split names sub-groups in the
// store ("<group>/s0-2.<n>") and maps member ranks to world ranks. The backends' own
// behaviour is communicator_suite_test.cc's and communicator_failure_test.cc's.
#include "comm/communicator_base.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace cohort::comm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the fake saw: one line per Run* call, and the sub-groups it was asked to connect.
struct Journal {
  std::vector<std::string> calls;
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // id, world ranks
  int broken_calls = 0;
};

class FakeCommunicator final : public CommunicatorBase {
 public:
  FakeCommunicator(std::shared_ptr<Journal> journal, std::string group_id,
                   std::vector<int> world_ranks, int rank)
      : CommunicatorBase(GroupConfig{nullptr, "p", Millis(5000), true, {}}, std::move(group_id),
                         std::move(world_ranks), rank),
        journal_(std::move(journal)) {}

  std::string_view backend() const override { return "fake"; }
  void Break(const std::string& why) { MarkBroken(Error(ErrorCode::kUnavailable, why)); }
  // Makes the next transfer fail (and break the communicator, as a backend must).
  void FailNextTransfer() { fail_next_ = true; }

 private:
  Result<void> Note(const CollectiveDescriptor& d) {
    journal_->calls.push_back(fmt::format("#{} {}", d.seq, DescribeCall(d)));
    if (!fail_next_) return {};
    fail_next_ = false;
    Error e(ErrorCode::kDeadlineExceeded, DescribeOp(d) + " timed out");
    MarkBroken(e);
    return std::unexpected(e);
  }
  Result<void> RunAllReduce(const CollectiveDescriptor& d, const void*, void*, size_t, DataType,
                            ReduceOp) override {
    return Note(d);
  }
  Result<void> RunReduceScatter(const CollectiveDescriptor& d, const void*, void*,
                                std::span<const size_t>, DataType, ReduceOp) override {
    return Note(d);
  }
  Result<void> RunAllGather(const CollectiveDescriptor& d, const void*, void*,
                            std::span<const size_t>, DataType) override {
    return Note(d);
  }
  Result<void> RunBroadcast(const CollectiveDescriptor& d, void*, size_t, DataType,
                            int) override {
    return Note(d);
  }
  Result<void> RunBarrier(const CollectiveDescriptor& d) override { return Note(d); }
  Result<void> RunPointToPoint(const PointToPointCall& call) override {
    journal_->calls.push_back(call.op);
    return {};
  }
  Result<std::unique_ptr<Communicator>> ConnectGroup(std::string group_id,
                                                     std::vector<int> world_ranks,
                                                     int rank) override {
    journal_->groups.emplace_back(group_id, world_ranks);
    return std::unique_ptr<Communicator>(
        new FakeCommunicator(journal_, std::move(group_id), std::move(world_ranks), rank));
  }
  void OnBroken() override { ++journal_->broken_calls; }

  std::shared_ptr<Journal> journal_;
  bool fail_next_ = false;
};

// Rank `rank` of a world of `size`.
std::unique_ptr<FakeCommunicator> World(std::shared_ptr<Journal> journal, int size, int rank) {
  return std::make_unique<FakeCommunicator>(std::move(journal), "world", WorldRanks(size), rank);
}

TEST(CommunicatorBase, BadArgumentsNeverReachTheBackend) {
  auto journal = std::make_shared<Journal>();
  auto c = World(journal, 4, 1);
  float x[8] = {};
  const std::vector<size_t> three = {1, 1, 1};
  const std::vector<size_t> four = {2, 2, 2, 2};
  auto expect_invalid = [](const Result<void>& r, const std::string& message) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message, message);
  };
  expect_invalid(c->AllReduce(nullptr, x, 8, DataType::kFloat32, ReduceOp::kSum),
                 "allreduce: send is null for 8 elements");
  expect_invalid(c->ReduceScatter(x, x, three, DataType::kFloat32, ReduceOp::kSum),
                 "reduce_scatter: recv_counts has 3 entries, the group has 4 ranks");
  expect_invalid(c->AllGather(x, nullptr, four, DataType::kFloat32),
                 "allgather: recv is null for 8 elements");
  expect_invalid(c->Broadcast(x, 8, DataType::kFloat32, 4),
                 "broadcast: root 4 is not a rank of a group of 4");
  expect_invalid(c->Send(x, 8, DataType::kFloat32, 1, 0),
                 "send: peer 1 must be another rank of a group of 4");
  expect_invalid(c->Recv(x, 8, DataType::kFloat32, 0, -1), "recv: tag must be >= 0, got -1");
  auto split = c->Split(std::vector<int>{0, 2});
  ASSERT_FALSE(split.has_value());
  EXPECT_THAT(split.error().message,
              HasSubstr("split: rank 1 called Split for a group it is not in"));
  EXPECT_TRUE(journal->calls.empty());
  EXPECT_TRUE(journal->groups.empty());
  // Null buffers are fine for zero elements, and the first valid collective is #1.
  ASSERT_TRUE(c->AllReduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_THAT(journal->calls, ElementsAre("#1 allreduce(float32, 0, sum)"));
}

TEST(CommunicatorBase, OnlyCollectivesAreNumbered) {
  auto journal = std::make_shared<Journal>();
  auto c = World(journal, 2, 0);
  int32_t v[2] = {};
  const std::vector<size_t> counts = {1, 1};
  ASSERT_TRUE(c->Barrier());
  ASSERT_TRUE(c->Send(v, 2, DataType::kInt32, 1, 7));
  ASSERT_TRUE(c->Broadcast(v, 2, DataType::kInt32, 1));
  ASSERT_TRUE(c->Split(std::vector<int>{0}));
  ASSERT_TRUE(c->AllGather(v, v, counts, DataType::kInt32));
  ASSERT_TRUE(c->Recv(v, 1, DataType::kInt32, 1, 3));
  ASSERT_TRUE(c->ReduceScatter(v, v, counts, DataType::kInt32, ReduceOp::kMax));
  EXPECT_THAT(journal->calls,
              ElementsAre("#1 barrier()", "send to rank 1 (tag 7, int32, 2 elements)",
                          "#2 broadcast(int32, 2, root 1)", HasSubstr("#3 allgather(int32, 2"),
                          "recv from rank 1 (tag 3, int32, 1 elements)",
                          HasSubstr("#4 reduce_scatter(int32, 2")));
}

TEST(CommunicatorBase, ABrokenCommunicatorRefusesEverythingWithTheFirstCause) {
  auto journal = std::make_shared<Journal>();
  auto c = World(journal, 3, 2);
  c->FailNextTransfer();
  auto failed = c->Barrier();
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(journal->broken_calls, 1);
  c->Break("a later failure");  // does not replace the first cause
  EXPECT_EQ(journal->broken_calls, 2);
  const std::string why =
      "communicator unusable after an earlier failure; create a new one (barrier #1 timed out)";
  float x = 0;
  for (const Result<void>& r :
       {c->Barrier(), c->AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum),
        c->Send(&x, 1, DataType::kFloat32, 0, 0), c->Recv(&x, 1, DataType::kFloat32, 1, 0)}) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_EQ(r.error().message, why);
  }
  auto split = c->Split(std::vector<int>{1, 2});
  ASSERT_FALSE(split.has_value());
  EXPECT_EQ(split.error().message, why);
  EXPECT_EQ(journal->calls.size(), 1u);  // only the barrier that failed
  EXPECT_TRUE(journal->groups.empty());
}

TEST(CommunicatorBase, SplitNamesSubGroupsAndMapsWorldRanks) {
  auto journal = std::make_shared<Journal>();
  auto world = World(journal, 6, 4);
  auto a = world->Split(std::vector<int>{0, 2, 4});
  ASSERT_TRUE(a.has_value()) << a.error().ToString();
  EXPECT_EQ((*a)->rank(), 2);
  EXPECT_EQ((*a)->size(), 3);
  auto again = world->Split(std::vector<int>{0, 2, 4});
  ASSERT_TRUE(again.has_value());
  auto inner = (*a)->Split(std::vector<int>{1, 2});  // world ranks 2 and 4
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ((*inner)->rank(), 1);
  ASSERT_EQ(journal->groups.size(), 3u);
  EXPECT_EQ(journal->groups[0].first, "world/s0-2-4.0");
  EXPECT_EQ(journal->groups[1].first, "world/s0-2-4.1");
  EXPECT_EQ(journal->groups[2].first, "world/s0-2-4.0/s1-2.0");
  EXPECT_THAT(journal->groups[2].second, ElementsAre(2, 4));
  // The sub-group's collectives are numbered on their own.
  ASSERT_TRUE(world->Barrier());
  ASSERT_TRUE((*inner)->Barrier());
  EXPECT_THAT(journal->calls, ElementsAre("#1 barrier()", "#1 barrier()"));
}

TEST(CommunicatorBase, StoreNamesAndClaims) {
  std::vector<int> many(17);
  for (int i = 0; i < 17; ++i) many[i] = 2 * i;
  EXPECT_EQ(MemberKey(std::vector<int>{3}), "s3");
  EXPECT_EQ(MemberKey(std::vector<int>{0, 2, 4, 6}), "s0-2-4-6");
  EXPECT_THAT(MemberKey(many), ::testing::MatchesRegex("s17x[0-9a-f]{16}"));
  EXPECT_NE(MemberKey(many), MemberKey(WorldRanks(17)));
  GroupConfig config{nullptr, "train/j/0", Millis(1000), true, {}};
  EXPECT_EQ(GroupKeyPrefix(config, "", "world/s0-1.0"), "train/j/0/world/s0-1.0/");
  EXPECT_EQ(GroupKeyPrefix(config, "nccl/", "world"), "train/j/0/nccl/world/");
  EXPECT_EQ(RendezvousName("gloo", "world", 1, 4),
            "rendezvous of gloo group 'world' (rank 1 of 4)");
  EXPECT_TRUE(ClaimRank(nullptr, "p/world/", 0, "x"));  // a world of one without a store
  auto store = std::make_shared<commtest::MemStore>();
  const std::string what = RendezvousName("gloo", "world", 1, 2);
  ASSERT_TRUE(ClaimRank(store, "p/world/", 1, what));
  ASSERT_TRUE(ClaimRank(store, "p/world/", 0, what));
  auto twice = ClaimRank(store, "p/world/", 1, what);
  ASSERT_FALSE(twice.has_value());
  EXPECT_EQ(twice.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(twice.error().message,
              ::testing::StartsWith(what + ": rank 1 was claimed 2 times (two processes"));
}

}  // namespace
}  // namespace cohort::comm
