// The head's own lag and the unhealthy zone (core/liveness.h), on a clock the test moves:
// time the head did not listen is not counted against nodes, fences it caused are not the
// jobs' failures, and when most nodes fall silent at once none is marked DOWN.
#include <cmath>

#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;
using api::NodeState;

class LagTest : public CoreTest {
 protected:
  LagTest() {
    ctx_.base_timing.heartbeat_interval_ms = 100;
    ctx_.base_timing.fence_timeout_ms = 2000;
    ctx_.base_timing.failure_timeout_ms = 3000;
    ctx_.liveness_interval_ms = 100;
  }

  // Registers n1..n`count` and starts the control loop's accounting (its first check).
  void Nodes(int count) {
    for (int i = 1; i <= count; ++i) Register(Reg("n" + std::to_string(i)));
    Check();
  }
  void Check() {
    fx_ = CheckLiveness(state_, ctx_, now_);
    for (const auto& l : fx_.log) said_.push_back(l.text);
  }
  // The control loop runs on time for `ms`, and every node but `silent` heartbeats.
  void RunFor(int64_t ms, const std::set<std::string>& silent) {
    for (int64_t t = 0; t < ms; t += 100) {
      Advance(100);
      for (const auto& [name, node] : state_.nodes) {
        if (!silent.contains(name)) Beat(name, Tasks(name));
      }
      Check();
    }
  }
  // What the node's agent runs: every task the head placed there (level-triggered).
  std::vector<api::TaskReport> Tasks(const std::string& node) {
    std::vector<api::TaskReport> out;
    for (const auto& [id, job] : state_.jobs) {
      if (job.state != JobState::kRunning) continue;
      for (const auto& na : job.allocation.nodes) {
        for (const auto& t : na.tasks) {
          if (na.node == node) out.push_back(Running(id, job.attempt, t.rank));
        }
      }
    }
    return out;
  }
  static api::TaskReport Killed(api::JobId job, int attempt, int rank) {
    api::TaskReport t = Exited(job, attempt, rank, 128 + 9);
    t.signal = 9;
    return t;
  }
  // Whether any liveness check so far logged `part`.
  bool Said(const std::string& part) const {
    return std::any_of(said_.begin(), said_.end(),
                       [&](const std::string& l) { return l.find(part) != std::string::npos; });
  }
  NodeState State(const std::string& node) const { return state_.nodes.at(node).state; }
  std::string Shown(const std::string& node) const {
    return StatusOf(state_, state_.nodes.at(node), now_).display_state;
  }

  std::vector<std::string> said_;
};

TEST_F(LagTest, AHeadGapLongerThanTheFailureTimeoutMarksNoNodeDown) {
  Nodes(2);
  const api::JobId id = Submit(Spec(2, 1));
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  Advance(10'000);  // the head was stopped: no check, no heartbeat
  Check();
  EXPECT_EQ(State("n1"), NodeState::kUp);
  EXPECT_EQ(State("n2"), NodeState::kUp);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_TRUE(Logged("the head did not listen for 10.0s"));
  EXPECT_EQ(state_.counters.unheard_ms, 9900u) << "the gap beyond one liveness interval";
  EXPECT_LT(HeartbeatAgeMs(state_.runtime.at("n1"), now_), 1000) << "the gap is not in the age";
  EXPECT_DOUBLE_EQ(Metrics(state_, now_).unheard_seconds, 9.9);
  // Only the time the head listened counts from here: a node that stays silent is DOWN
  // one failure timeout later, not before.
  RunFor(2500, {"n1"});
  EXPECT_EQ(State("n1"), NodeState::kUp);
  RunFor(600, {"n1"});
  EXPECT_EQ(State("n1"), NodeState::kDown);
}

TEST_F(LagTest, TheFirstHeartbeatAfterTheGapCreditsItBeforeTheControlLoopDoes) {
  Nodes(2);
  RunFor(500, {});
  Advance(10'000);
  Beat("n2");  // an HTTP thread ran before the control loop
  EXPECT_TRUE(Logged("the head did not listen for 10.0s"));
  Check();
  EXPECT_EQ(State("n1"), NodeState::kUp);
  EXPECT_FALSE(Logged("did not listen")) << "the gap is credited once";
  EXPECT_EQ(state_.counters.unheard_ms, 9900u);
}

TEST_F(LagTest, AShortStallIsNotCreditedAndLivenessIsNotStartedBeforeTheFirstCheck) {
  Register(Reg("n1"));
  Advance(10'000);  // no control loop yet: the load's fresh timers cover this
  Beat("n1");
  EXPECT_EQ(state_.counters.unheard_ms, 0u);
  Check();
  Advance(150);  // within a liveness interval and a heartbeat interval
  Check();
  EXPECT_EQ(state_.counters.unheard_ms, 0u);
  EXPECT_FALSE(Logged("did not listen"));
}

TEST_F(LagTest, TasksFencedDuringTheHeadsGapAreRequeuedWithoutCountingARestart) {
  Nodes(2);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/0));
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  Advance(5000);  // past the agents' fence timeout: they killed their tasks
  Beat("n1", {Killed(id, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_EQ(Job(id).moves, 1) << "not counted against max_restarts (0)";
  EXPECT_NE(Job(id).reason.find("not counted as a restart"), std::string::npos) << Job(id).reason;
  EXPECT_TRUE(Logged("requeued as attempt 1, not counted as a restart"));
  Beat("n2", {Killed(id, 0, 1)});
  RunFor(200, {});
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(State("n1"), NodeState::kUp);
  EXPECT_EQ(State("n2"), NodeState::kUp);
}

TEST_F(LagTest, AHeadGapDoesNotMakeAnAttemptHung) {
  Nodes(1);
  api::JobSpec spec = Spec(1, 1, /*max_restarts=*/1);
  spec.progress_timeout_s = 60;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  Advance(70'000);  // no progress report could reach the head meanwhile
  Check();
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  Advance(59'000);
  fx_ = CheckProgress(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kRunning) << "the clock restarted when the head listened again";
  Advance(1'001);
  fx_ = CheckProgress(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kPending);
}

TEST_F(LagTest, AFailureWellAfterTheGapCountsAsUsual) {
  Nodes(2);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/0));
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  Advance(5000);
  Check();
  RunFor(3100, {});  // past the window of excused fences
  Beat("n1", {Killed(id, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kFailed);
}

TEST_F(LagTest, ASilenceTheHeadDidNotCauseIsNotExcused) {
  Nodes(2);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  RunFor(2500, {"n1"});  // n1 alone is silent (its own network), past the fence timeout
  Beat("n1", {Killed(id, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).moves, 0) << "a restart is counted";
}

TEST_F(LagTest, MostNodesSilentAtOnceMarkNoneDownAndFailNoJob) {
  Nodes(4);
  const api::JobId id = Submit(Spec(2, 1));
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  RunFor(1600, {"n1", "n2", "n3"});  // half the failure timeout: 3 of 4 silent
  EXPECT_TRUE(state_.liveness.suspended);
  EXPECT_TRUE(Said("3 of 4 UP nodes are silent at once"));
  ClusterMetrics m = Metrics(state_, now_);
  EXPECT_TRUE(m.liveness_suspended);
  EXPECT_DOUBLE_EQ(m.silent_ratio, 0.75);
  RunFor(5000, {"n1", "n2", "n3"});  // well past the failure timeout
  for (const char* n : {"n1", "n2", "n3"}) {
    EXPECT_EQ(State(n), NodeState::kUp) << n;
    EXPECT_EQ(Shown(n), "UNREACHABLE") << n;
  }
  EXPECT_EQ(Shown("n4"), "UP");
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  // No new work goes to an unreachable node.
  const api::JobId waits = Submit(Spec(2, 1));
  Pass();
  EXPECT_EQ(Job(waits).state, JobState::kPending);
  EXPECT_NE(state_.pending_reasons.at(waits).find("unreachable"), std::string::npos)
      << state_.pending_reasons.at(waits);
}

TEST_F(LagTest, LeavingTheZoneTheFencedGangsAreRequeuedAndTheNodesAreBack) {
  Nodes(4);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/0));
  ASSERT_EQ(Pass(), 1);
  std::vector<std::string> placed;
  for (const auto& na : Job(id).allocation.nodes) placed.push_back(na.node);
  std::set<std::string> cut = {placed[0], placed[1]};
  for (const char* n : {"n1", "n2", "n3", "n4"}) {
    if (cut.size() < 3) cut.insert(n);
  }
  RunFor(500, {});
  RunFor(5000, cut);
  ASSERT_TRUE(state_.liveness.suspended);
  // The cut nodes come back; their agents fenced the gang long ago.
  Beat(placed[0], {Killed(id, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).moves, 1) << "not counted against max_restarts (0)";
  Beat(placed[1], {Killed(id, 0, 1)});
  RunFor(300, {});
  EXPECT_FALSE(state_.liveness.suspended);
  EXPECT_EQ(state_.liveness.zone_since_mono_ms, 0);
  EXPECT_TRUE(Said("left the unhealthy zone"));
  for (const char* n : {"n1", "n2", "n3", "n4"}) EXPECT_EQ(Shown(n), "UP") << n;
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
}

TEST_F(LagTest, LeavingTheZoneANodeStillSilentHasOneFailureTimeoutToReportIn) {
  Nodes(4);
  RunFor(500, {});
  RunFor(5000, {"n1", "n2", "n3"});
  ASSERT_TRUE(state_.liveness.suspended);
  RunFor(100, {"n1"});  // n2 and n3 are back; n1's heartbeat is a few milliseconds late
  EXPECT_FALSE(state_.liveness.suspended);
  EXPECT_TRUE(Said("left the unhealthy zone"));
  EXPECT_EQ(State("n1"), NodeState::kUp);
  EXPECT_EQ(Shown("n1"), "UNREACHABLE") << "still no new work for it";
  RunFor(2900, {"n1"});
  EXPECT_EQ(State("n1"), NodeState::kUp);
  RunFor(200, {"n1"});
  EXPECT_EQ(State("n1"), NodeState::kDown);
  EXPECT_EQ(Shown("n1"), "DOWN");
  EXPECT_EQ(State("n2"), NodeState::kUp);
}

TEST_F(LagTest, TheZoneLastingItsTimeoutMarksTheSilentNodesDown) {
  Nodes(4);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  RunFor(500, {});
  const int64_t timeout = ctx_.base_timing.failure_timeout_ms * kZoneTimeoutFailureTimeouts;
  RunFor(timeout, {"n1", "n2", "n3"});
  EXPECT_EQ(State("n1"), NodeState::kUp) << "not before the zone's timeout";
  RunFor(2000, {"n1", "n2", "n3"});
  EXPECT_TRUE(Said("the unhealthy zone has lasted"));
  for (const char* n : {"n1", "n2", "n3"}) EXPECT_EQ(State(n), NodeState::kDown) << n;
  EXPECT_NE(Job(id).state, JobState::kRunning) << "no job waits on a node forever";
}

TEST_F(LagTest, BelowTheThresholdTheSilentNodesAreDownAsUsual) {
  Nodes(4);
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  const std::string victim = Job(id).allocation.nodes[0].node;
  std::set<std::string> silent = {victim};
  for (const char* n : {"n1", "n2", "n3", "n4"}) {
    if (silent.size() < 2) silent.insert(n);
  }
  RunFor(500, {});
  RunFor(3200, silent);  // 2 of 4: below 0.55
  EXPECT_FALSE(state_.liveness.suspended);
  for (const auto& n : silent) EXPECT_EQ(State(n), NodeState::kDown) << n;
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).moves, 0);
}

TEST_F(LagTest, ASmallClusterFailsOverAsUsualEvenWhenEveryNodeIsSilent) {
  Nodes(2);
  RunFor(500, {});
  RunFor(3200, {"n1", "n2"});
  EXPECT_FALSE(state_.liveness.suspended) << "the zone needs 3 silent nodes";
  EXPECT_EQ(State("n1"), NodeState::kDown);
  EXPECT_EQ(State("n2"), NodeState::kDown);
}

TEST_F(LagTest, TheThresholdIsConfigured) {
  ctx_.unhealthy_zone_threshold = 0.8;
  Nodes(4);
  RunFor(500, {});
  RunFor(3200, {"n1", "n2", "n3"});  // 0.75 < 0.8
  EXPECT_FALSE(state_.liveness.suspended);
  EXPECT_EQ(State("n1"), NodeState::kDown);
  EXPECT_TRUE(ValidateUnhealthyZoneThreshold(1).has_value());
  EXPECT_TRUE(ValidateUnhealthyZoneThreshold(0.55).has_value());
  for (double bad : {0.0, -0.5, 1.01, std::nan("")}) {
    auto r = ValidateUnhealthyZoneThreshold(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("a fraction in (0, 1]"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace cohort::head::core::testing
