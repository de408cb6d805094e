// WakeupLateness and LapseAllowance on made-up times: no clock is read.
#include "agent/wakeup_lateness.h"

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

const SteadyTime t0 = SteadyTime(1000s);

TEST(WakeupLateness, NothingRecordedIsNoDelay) {
  WakeupLateness w(10s);
  EXPECT_EQ(w.Recent(t0), 0ms);
}

TEST(WakeupLateness, EarlyAndOnTimeWakeUpsCountAsZero) {
  WakeupLateness w(10s);
  w.Record(t0, t0 - 5ms);
  w.Record(t0 + 100ms, t0 + 100ms);
  EXPECT_EQ(w.Recent(t0 + 100ms), 0ms);
}

TEST(WakeupLateness, RecentIsTheLargestLatenessInTheWindow) {
  WakeupLateness w(10s);
  w.Record(t0, t0 + 30ms);
  w.Record(t0 + 1s, t0 + 1s + 250ms);
  w.Record(t0 + 2s, t0 + 2s + 40ms);
  EXPECT_EQ(w.Recent(t0 + 3s), 250ms);
}

TEST(WakeupLateness, OldLatenessLeavesTheWindow) {
  WakeupLateness w(10s);
  w.Record(t0, t0 + 500ms);            // at t0 + 0.5 s
  w.Record(t0 + 5s, t0 + 5s + 80ms);   // at t0 + 5.08 s
  EXPECT_EQ(w.Recent(t0 + 10s), 500ms);
  EXPECT_EQ(w.Recent(t0 + 11s), 80ms);  // the 500 ms wake-up is more than 10 s ago
  EXPECT_EQ(w.Recent(t0 + 16s), 0ms);
}

TEST(WakeupLateness, ALaterSmallerLatenessOutlivesAnOlderLargerOne) {
  WakeupLateness w(1s);
  w.Record(t0, t0 + 300ms);
  w.Record(t0 + 700ms, t0 + 710ms);
  EXPECT_EQ(w.Recent(t0 + 1200ms), 300ms);
  EXPECT_EQ(w.Recent(t0 + 1500ms), 10ms);
}

TEST(LapseAllowance, IdleNodeGetsNone) { EXPECT_EQ(LapseAllowance(0ms, 1000ms), 0ms); }

TEST(LapseAllowance, ForgivesAFewTimesTheDelay) {
  EXPECT_EQ(LapseAllowance(50ms, 1000ms), kRenewalWakeups * 50ms);
}

TEST(LapseAllowance, LeavesRoomForTheKillersOwnLateWakeUp) {
  EXPECT_EQ(LapseAllowance(150ms, 1000ms), 600ms);  // 4 × 150; 1000 - 2 × 150 = 700 is room enough
  EXPECT_EQ(LapseAllowance(250ms, 1000ms), 500ms);  // 4 × 250 = 1000, but 2 × 250 must stay free
  for (Millis delay : {0ms, 10ms, 100ms, 333ms, 499ms, 500ms, 900ms, 5000ms}) {
    Millis a = LapseAllowance(delay, 1000ms);
    EXPECT_GE(a, 0ms) << delay.count();
    if (a > 0ms) {
      EXPECT_LE(a + kOwnWakeupReserve * delay, 1000ms) << delay.count();
    }
  }
}

TEST(LapseAllowance, NoneWhenTheDelayEatsTheMargin) {
  EXPECT_EQ(LapseAllowance(500ms, 1000ms), 0ms);
  EXPECT_EQ(LapseAllowance(3s, 1000ms), 0ms);
  EXPECT_EQ(LapseAllowance(100ms, 0ms), 0ms);
  EXPECT_EQ(LapseAllowance(100ms, -5ms), 0ms);
}

}  // namespace
}  // namespace cohort::agent
