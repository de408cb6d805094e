// Service replicas (JobSpec::service) in the core's lifecycle: kept running however they
// end, restarts not counted; only a cancellation ends them.
#include <gtest/gtest.h>

#include "head/core/lifecycle.h"
#include "head/core/liveness.h"
#include "head/core/queries.h"
#include "head/core/submit.h"
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;
using api::NodeState;

api::JobSpec Replica() {
  api::JobSpec s = Spec(1, 1);
  s.service = "chat";
  s.service_model = "tiny";
  return s;
}

TEST_F(CoreTest, AReplicaThatExitsZeroRunsAgainAndNeverSucceeds) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(id, 0, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_EQ(Job(id).reason, "replica restarting after: rank 0 on n1 exited 0 (attempt 1)");
  Beat("n1");  // the agent confirms attempt 0 gone
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(state_.counters.transitions.count({"running", "succeeded"}), 0u);
}

TEST_F(CoreTest, AFailingReplicaRestartsWithoutLimit) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());  // max_restarts 0
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSERT_EQ(Pass(), 1) << "attempt " << attempt;
    Advance(kReplicaQuickEndMs);  // each ran long enough not to be a crash loop
    Beat("n1", {Exited(id, attempt, 0, 1)});
    ASSERT_EQ(Job(id).state, JobState::kPending) << Job(id).reason;
    Beat("n1");
  }
  EXPECT_EQ(Job(id).attempt, 5);
  EXPECT_EQ(state_.counters.transitions.count({"running", "failed"}), 0u);
}

// A replica that exits as soon as it starts (its model path missing on the node, a bad
// flag) is not restarted several times a second for as long as the service exists: from
// its second quick end in a row it waits 1 s, then 2 s, 4 s, ... up to a minute, with the
// wait as its pending reason; an attempt that runs a minute ends the loop.
TEST_F(CoreTest, AReplicaInACrashLoopWaitsLongerBeforeEachStart) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  Advance(100);
  Beat("n1", {Exited(id, 0, 0, 1)});
  Beat("n1");
  ASSERT_EQ(Pass(), 1) << "one quick end restarts at once: " << state_.pending_reasons[id];
  int64_t wait = 1000;
  for (int attempt = 1; attempt <= 9; ++attempt) {
    Advance(100);
    Beat("n1", {Exited(id, attempt, 0, 1)});
    Beat("n1");
    EXPECT_NE(Job(id).reason.find(fmt::format("crash loop: {} attempts in a row ended within 1m00s", attempt + 1)),
              std::string::npos)
        << Job(id).reason;
    ASSERT_EQ(Pass(), 0) << "attempt " << attempt;
    const std::string& why = state_.pending_reasons.at(id);
    EXPECT_TRUE(why.starts_with(fmt::format("crash loop back-off: {} attempts in a row", attempt + 1))) << why;
    EXPECT_NE(why.find("rank 0 on n1 exited with code 1"), std::string::npos) << why;
    EXPECT_NE(why.find(fmt::format("cohort logs {} -a {}", id, attempt)), std::string::npos) << why;
    EXPECT_EQ(Metrics(state_, now_).pending_by_reason.at("backoff"), 1);
    Advance(wait - 1);
    ASSERT_EQ(Pass(), 0) << "attempt " << attempt << " waits " << wait << " ms";
    Advance(1);
    ASSERT_EQ(Pass(), 1) << "attempt " << attempt << " waits " << wait << " ms";
    wait = std::min<int64_t>(wait * 2, 60'000);
  }
  EXPECT_EQ(wait, 60'000);
  // This attempt runs a minute: the loop is over, the next restart is at once.
  Advance(kReplicaQuickEndMs);
  Beat("n1", {Exited(id, 10, 0, 1)});
  Beat("n1");
  EXPECT_EQ(Pass(), 1) << state_.pending_reasons[id];
}

// A replica in a crash loop for days adds an attempt a minute: its record keeps the newest
// kMaxReplicaHistory attempts, the older ones folded into its first record with their
// GPU-seconds whole, and its back-off is read as before.
TEST_F(CoreTest, AReplicasHistoryStaysBoundedAndKeepsItsGpuSeconds) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  const int attempts = static_cast<int>(kMaxReplicaHistory) + 30;
  int64_t ran_ms = 0;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    ASSERT_EQ(Pass(), 1) << "attempt " << attempt << ": " << state_.pending_reasons[id];
    const int64_t run = 1'000 + 10 * attempt;
    Advance(run);
    ran_ms += run;
    Beat("n1", {Exited(id, attempt, 0, 1)});
    Beat("n1");
    Advance(kReplicaBackoffMaxMs);  // its back-off passes
  }
  const auto& history = Job(id).history;
  ASSERT_EQ(history.size(), kMaxReplicaHistory);
  int64_t recorded_ms = 0;
  for (const auto& h : history) recorded_ms += h.end_ms - h.start_ms;
  EXPECT_EQ(recorded_ms, ran_ms) << "one GPU each: the GPU-seconds of every attempt are still there";
  EXPECT_EQ(history.front().attempt, 0);
  EXPECT_EQ(history.front().nodes, std::vector<std::string>{"n1"});
  EXPECT_TRUE(history.front().end_reason.starts_with(
      fmt::format("attempts 0-{}, folded into one record (the history keeps {})", attempts - kMaxReplicaHistory,
                  kMaxReplicaHistory)))
      << history.front().end_reason;
  EXPECT_EQ(history[1].attempt, attempts - static_cast<int>(kMaxReplicaHistory) + 1);
  EXPECT_EQ(history.back().attempt, attempts - 1);
  EXPECT_EQ(Job(id).attempt, attempts);
  // Still a crash loop: the next start waits its back-off.
  EXPECT_EQ(ReplicaBackoffOf(Job(id)).delay_ms, kReplicaBackoffMaxMs);
  // Its record round-trips the store's codec.
  auto decoded = api::JobFromJson(api::ToJson(Job(id)));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_EQ(decoded->history.size(), kMaxReplicaHistory);
}

// A crash loop longer than the records a replica keeps: its reason counted the kept records
// only ("crash loop: 50 attempts in a row" after 120; "49" for ever once the folded
// attempts had run a minute in all). Now every folded attempt counts while they ran under
// a minute in all (each was quick), and the count says "at least" once that is unknown.
// And `cohort logs -a K` of a folded attempt said it never started ("job 1 has no attempt
// 5 that started"): it says the record was folded, into which, and what can be read.
TEST_F(CoreTest, ACrashLoopLongerThanTheKeptHistoryIsCountedWholeAndFoldedLogsAreExplained) {
  Register(Reg("n1"));
  for (const auto& [run, attempts, count] : {std::tuple{int64_t{500}, 120, std::string("120")},
                                             std::tuple{int64_t{2'000}, 80, std::string("at least 49")}}) {
    const api::JobId id = Submit(Replica());
    for (int attempt = 0; attempt < attempts; ++attempt) {
      ASSERT_EQ(Pass(), 1) << "attempt " << attempt << ": " << state_.pending_reasons[id];
      Advance(run);
      Beat("n1", {Exited(id, attempt, 0, 1)});
      Beat("n1");
      if (attempt + 1 < attempts) Advance(kReplicaBackoffMaxMs);  // its back-off passes
    }
    ASSERT_EQ(Job(id).history.size(), kMaxReplicaHistory);
    EXPECT_NE(Job(id).reason.find(fmt::format("crash loop: {} attempts in a row ended within 1m00s", count)),
              std::string::npos)
        << Job(id).reason;
    ASSERT_EQ(Pass(), 0);
    EXPECT_TRUE(state_.pending_reasons.at(id).starts_with(fmt::format("crash loop back-off: {} attempts in a row", count)))
        << state_.pending_reasons.at(id);
    EXPECT_EQ(ReplicaBackoffOf(Job(id)).delay_ms, kReplicaBackoffMaxMs);

    const int first_kept = attempts - static_cast<int>(kMaxReplicaHistory) + 1;
    auto folded = LocateLog(state_, id, 5, 0);
    ASSERT_FALSE(folded.has_value());
    EXPECT_EQ(folded.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(folded.error().message,
              fmt::format("job {} attempt 5's record was folded: a service replica keeps the records of its newest 50 "
                          "attempts only, and attempts 0-{} are one record now, read as attempt 0 (its logs are that "
                          "attempt's); attempts that can be read: 0, {}-{}",
                          id, first_kept - 1, first_kept, attempts - 1));
    auto never = LocateLog(state_, id, attempts + 3, 0);
    ASSERT_FALSE(never.has_value());
    EXPECT_EQ(never.error().message, fmt::format("job {} has no attempt {} that started (it is PENDING; attempts that "
                                                 "can be read: 0, {}-{})",
                                                 id, attempts + 3, first_kept, attempts - 1));
    EXPECT_TRUE(LocateLog(state_, id, 0, 0).has_value());
    EXPECT_TRUE(LocateLog(state_, id, first_kept, 0).has_value());
    ASSERT_TRUE(Cancel(state_, ctx_, id, now_).has_value());
  }
}

TEST(FoldOldestAttemptsTest, KeepsGpuSecondsAcrossAmountsAndNeverTouchesAnOpenAttempt) {
  api::JobSpec spec = Spec(1, 2);
  std::vector<api::AttemptRecord> h = {
      {0, 1'000, 2'000, {"n1"}, "a", 2, 0},   // 2 GPUs x 1 s
      {1, 3'000, 5'000, {"n2"}, "b", 1, 0},   // 1 GPU x 2 s: 1 s at 2 GPUs
      {2, 6'000, 0, {"n1"}, "", 2, 0},        // running
  };
  FoldOldestAttempts(spec, h, 2);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].start_ms, 1'000);
  EXPECT_EQ(h[0].end_ms, 3'000) << "2 GPU-seconds + 2 GPU-seconds at 2 GPUs";
  EXPECT_EQ(h[0].end_reason, "attempts 0-1, folded into one record (the history keeps 2); the last ended: b");
  EXPECT_EQ(h[1].end_ms, 0);
  std::vector<api::AttemptRecord> open = {{0, 1'000, 0, {"n1"}, "", 2, 0}, {1, 3'000, 0, {"n1"}, "", 2, 0},
                                          {2, 6'000, 0, {"n1"}, "", 2, 0}};
  FoldOldestAttempts(spec, open, 2);
  EXPECT_EQ(open.size(), 3u) << "an attempt not ended is never folded";
}

TEST_F(CoreTest, AReplicaOnALostNodeIsPlacedElsewhere) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  const std::string first = Job(id).allocation.nodes.front().node;
  const std::string other = first == "n1" ? "n2" : "n1";
  Advance(3001);
  Beat(other);
  fx_ = CheckLiveness(state_, ctx_, now_);
  ASSERT_EQ(state_.nodes.at(first).state, NodeState::kDown);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(Job(id).allocation.nodes.front().node, other);
}

TEST_F(CoreTest, ACancelledReplicaEnds) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  auto r = Cancel(state_, ctx_, id, now_);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(Job(id).state, JobState::kCancelled);
}

}  // namespace
}  // namespace cohort::head::core::testing
