// Adaptive heartbeat timing (core/timing.h): the interval chosen for the cluster's size,
// the timeouts scaled with it, and the transitions, on a clock the test moves.
#include "core_test_util.h"
#include "head/core/timing.h"

#include <cmath>
#include <limits>

namespace cohort::head::core::testing {
namespace {

using api::NodeState;

api::AgentTiming Base() {
  api::AgentTiming t;
  t.heartbeat_interval_ms = 1000;
  t.failure_timeout_ms = 3000;
  t.fence_timeout_ms = 2000;
  t.kill_grace_ms = 5000;
  return t;
}

TEST(ScaledTimingTest, TheBaseWhileTheNodesFitTheRate) {
  for (size_t nodes : {size_t{0}, size_t{1}, size_t{999}, size_t{1000}}) {
    api::AgentTiming t = ScaledTiming(Base(), nodes, 1000);
    EXPECT_EQ(t.heartbeat_interval_ms, 1000) << nodes;
    EXPECT_EQ(t.failure_timeout_ms, 3000) << nodes;
    EXPECT_EQ(t.fence_timeout_ms, 2000) << nodes;
  }
}

TEST(ScaledTimingTest, BeyondTheRateTheIntervalGrowsInQuarterStepsAndTheTimeoutsWithIt) {
  api::AgentTiming t = ScaledTiming(Base(), 1001, 1000);  // 1001 ms needed: 1250
  EXPECT_EQ(t.heartbeat_interval_ms, 1250);
  EXPECT_EQ(t.failure_timeout_ms, 3750);
  EXPECT_EQ(t.fence_timeout_ms, 2500);
  EXPECT_EQ(t.kill_grace_ms, 5000) << "the kill grace is no heartbeat timing";

  t = ScaledTiming(Base(), 10'000, 1000);
  EXPECT_EQ(t.heartbeat_interval_ms, 10'000);
  EXPECT_EQ(t.failure_timeout_ms, 30'000);
  EXPECT_EQ(t.fence_timeout_ms, 20'000);

  t = ScaledTiming(Base(), 10'000, 4000);  // 2.5 s
  EXPECT_EQ(t.heartbeat_interval_ms, 2500);
  EXPECT_EQ(t.failure_timeout_ms, 7500);
  EXPECT_EQ(t.fence_timeout_ms, 5000);
}

TEST(ScaledTimingTest, KeepsTheBaseRelationsForAnySizeAndBase) {
  // Bases as `cohort head` allows them: 2 intervals <= fence < failure.
  const api::AgentTiming bases[] = {Base(), {1000, 10'000, 6000, 5000}, {10, 30, 20, 0}, {333, 1001, 1000, 0},
                                    {7, 100, 14, 0}};
  for (const auto& base : bases) {
    int64_t last = 0;
    for (size_t nodes = 0; nodes <= 200'000; nodes = nodes * 3 + 7) {
      for (double rate : {1.0, 7.0, 1000.0, 1e6}) {
        api::AgentTiming t = ScaledTiming(base, nodes, rate);
        SCOPED_TRACE(fmt::format("base {}/{}/{}, {} nodes at {}/s", base.heartbeat_interval_ms,
                                 base.failure_timeout_ms, base.fence_timeout_ms, nodes, rate));
        EXPECT_GE(t.heartbeat_interval_ms, base.heartbeat_interval_ms) << "never below the base";
        if (t.heartbeat_interval_ms > base.heartbeat_interval_ms && t.heartbeat_interval_ms < 86'400'000) {
          EXPECT_LE(static_cast<double>(nodes) * 1000 / static_cast<double>(t.heartbeat_interval_ms), rate)
              << "a longer interval brings the rate within the target";
        }
        EXPECT_LE(2 * t.heartbeat_interval_ms, t.fence_timeout_ms);
        EXPECT_LT(t.fence_timeout_ms, t.failure_timeout_ms);
        // The timeouts scale with the interval (to the millisecond).
        const double factor = static_cast<double>(t.heartbeat_interval_ms) / base.heartbeat_interval_ms;
        EXPECT_NEAR(t.failure_timeout_ms, base.failure_timeout_ms * factor, 1.0);
        EXPECT_NEAR(t.fence_timeout_ms, base.fence_timeout_ms * factor, 1.0);
        if (rate == 1000.0) {
          EXPECT_GE(t.heartbeat_interval_ms, last) << "more nodes never shorten the interval";
          last = t.heartbeat_interval_ms;
        }
      }
    }
  }
}

TEST(ScaledTimingTest, TheRateTargetMustBeAPositiveNumberOfHeartbeatsPerSecond) {
  for (double ok : {1.0, 1000.0, 1e6}) EXPECT_TRUE(ValidateHeartbeatRateTarget(ok).has_value()) << ok;
  for (double bad : {0.0, -5.0, 0.5, 1e6 + 1, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    auto r = ValidateHeartbeatRateTarget(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("heartbeat rate target"), std::string::npos) << r.error().message;
  }
}

// A cluster whose target allows 2 heartbeats a second: the third node stretches the
// interval to 1.5 s (failure 4.5 s, fence 3 s).
class AdaptiveTimingTest : public CoreTest {
 protected:
  AdaptiveTimingTest() {
    ctx_.base_timing = Base();
    ctx_.heartbeat_rate_target = 2;
    // The clock jumps by seconds between checks here: not the head's own gaps (liveness.h).
    ctx_.liveness_interval_ms = 1'000'000;
  }
};

TEST_F(AdaptiveTimingTest, RepliesCarryTheTimingForTheClustersSize) {
  Register(Reg("n1"));
  EXPECT_EQ(timing_.heartbeat_interval_ms, 1000);
  Register(Reg("n2"));
  EXPECT_EQ(timing_.heartbeat_interval_ms, 1000);
  EXPECT_EQ(Beat("n1").timing.heartbeat_interval_ms, 1000);
  Register(Reg("n3"));
  EXPECT_EQ(timing_.heartbeat_interval_ms, 1500) << "the registration reply counts the new node";
  EXPECT_EQ(timing_.failure_timeout_ms, 4500);
  EXPECT_EQ(timing_.fence_timeout_ms, 3000);
  api::HeartbeatReply r = Beat("n1");
  EXPECT_EQ(r.timing.heartbeat_interval_ms, 1500) << "and every heartbeat reply after it";
  EXPECT_EQ(r.timing.failure_timeout_ms, 4500);
  EXPECT_EQ(r.timing.fence_timeout_ms, 3000);
}

TEST_F(AdaptiveTimingTest, ALongerTimingHoldsEveryNodeToItsLongerFailureTimeoutAtOnce) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  Beat("n1");  // granted 3 s; its agent fences after 2 s, earlier than the head now waits
  Register(Reg("n3"));
  Advance(3001);
  Beat("n2");
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp) << "4.5 s now, not the 3 s it was granted";
  Advance(1499);
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp);
  Advance(1);
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kDown);
  EXPECT_EQ(state_.nodes.at("n1").reason, "no heartbeat for 4.5s");
}

TEST_F(AdaptiveTimingTest, AShorterTimingBindsOnlyAfterTheLongerOneGrantedBeforeHasRunOut) {
  for (const char* n : {"n1", "n2", "n3"}) Register(Reg(n));
  Beat("n1");  // granted 4.5 s: its lease may last until 4.5 s after this
  Beat("n2");
  // The timing shrinks (as after a restart with a higher target): 3 s.
  ctx_.heartbeat_rate_target = 1000;
  Advance(1000);
  EXPECT_EQ(Beat("n1").timing.failure_timeout_ms, 3000);
  EXPECT_EQ(NodeFailureTimeoutMs(state_, ctx_, state_.runtime.at("n1"), now_), 4500)
      << "the longer grant binds for one of itself after the shorter one is sent";
  EXPECT_EQ(NodeFailureTimeoutMs(state_, ctx_, state_.runtime.at("n2"), now_), 4500)
      << "a node not yet told is held to what it was told";
  Advance(3001);
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp) << "silent 3.0s, within the window";
  Advance(1499);
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp);
  Advance(1);
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kDown);
  EXPECT_EQ(state_.nodes.at("n2").state, NodeState::kDown) << "silent 5.5 s, past its 4.5 s";
}

TEST_F(AdaptiveTimingTest, AfterTheWindowTheShorterTimeoutBinds) {
  for (const char* n : {"n1", "n2", "n3"}) Register(Reg(n));
  Beat("n1");
  ctx_.heartbeat_rate_target = 1000;
  Beat("n1");  // told 3 s; 4.5 s binds for 4.5 s from now
  for (int i = 0; i < 5; ++i) {
    Advance(1000);
    Beat("n1");
  }
  EXPECT_EQ(NodeFailureTimeoutMs(state_, ctx_, state_.runtime.at("n1"), now_), 3000);
  Advance(3001);
  Beat("n2");
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kDown);
}

TEST_F(AdaptiveTimingTest, ARestartedHeadHoldsNodesToTheTimeoutGrantedBeforeIt) {
  for (const char* n : {"n1", "n2", "n3"}) Register(Reg(n));
  std::vector<api::Node> nodes;
  for (const auto& [name, n] : state_.nodes) nodes.push_back(n);
  ctx_.heartbeat_rate_target = 1000;  // restarted with a higher target: 3 s
  state_ = LoadState(nodes, {}, now_);
  AdoptGrantedBeforeRestart(state_, 4500, now_);
  Advance(3001);
  Beat("n3");  // (two silent nodes are not an unhealthy zone)
  fx_ = CheckLiveness(state_, ctx_, now_);
  for (const char* n : {"n1", "n2"}) EXPECT_EQ(state_.nodes.at(n).state, NodeState::kUp) << n;
  Advance(1499);
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  for (const char* n : {"n1", "n2"}) EXPECT_EQ(state_.nodes.at(n).state, NodeState::kUp) << n;
  Advance(1);
  Beat("n3");
  fx_ = CheckLiveness(state_, ctx_, now_);
  for (const char* n : {"n1", "n2"}) EXPECT_EQ(state_.nodes.at(n).state, NodeState::kDown) << n;
}

TEST_F(AdaptiveTimingTest, AnotherAgentMayTakeTheNameOnlyAfterTheNodesFailureTimeout) {
  for (const char* n : {"n1", "n2", "n3"}) Register(Reg(n));
  Advance(4000);  // past the base 3 s, within the 4.5 s that binds now
  auto r = core::Register(state_, ctx_, Reg("n1", 2, "intruder"), now_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  Advance(501);
  EXPECT_TRUE(core::Register(state_, ctx_, Reg("n1", 2, "intruder"), now_).has_value());
}

}  // namespace
}  // namespace cohort::head::core::testing
