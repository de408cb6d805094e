// The lease file (lease.h): its round trip, what a reader makes of old or broken files,
// and when a task under it is to be killed.
#include "agent/lease.h"

#include <gtest/gtest.h>

#include <fstream>

#include "agent/wakeup_lateness.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::TempDir;

const SteadyTime t0 = SteadyTime(5000s);

TEST(Lease, WriteThenReadGivesTheSameLease) {
  TempDir tmp;
  Lease l{t0 + 2s, t0 + 3s, 2s};
  ASSERT_TRUE(WriteLeaseFile(tmp.Sub("lease"), l));
  auto r = ReadLeaseFile(tmp.Sub("lease"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->expires, l.expires);
  EXPECT_EQ(r->deadline, l.deadline);
  EXPECT_EQ(r->granted, 2s);
  EXPECT_FALSE(std::filesystem::exists(tmp.Sub("lease.tmp")));
}

TEST(Lease, AFileWithoutADeadlineAllowsNothingPastItsExpiry) {
  TempDir tmp;
  std::ofstream(tmp.Sub("lease")) << R"({"expires_ms": 5000000, "timeout_ms": 600})";
  auto r = ReadLeaseFile(tmp.Sub("lease"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->deadline, r->expires);
  EXPECT_EQ(r->KillAt(100ms), r->expires);
}

TEST(Lease, MissingOrBrokenFilesReadAsNone) {
  TempDir tmp;
  EXPECT_FALSE(ReadLeaseFile(tmp.Sub("none")));
  std::ofstream(tmp.Sub("garbage")) << "{not json";
  EXPECT_FALSE(ReadLeaseFile(tmp.Sub("garbage")));
  std::ofstream(tmp.Sub("early")) << R"({"expires_ms": 5000, "deadline_ms": 4000, "timeout_ms": 1})";
  EXPECT_FALSE(ReadLeaseFile(tmp.Sub("early"))) << "a deadline before the expiry is malformed";
}

TEST(Lease, UnwritablePathIsAnError) {
  auto r = WriteLeaseFile("/nonexistent-dir/lease", Lease{t0, t0, 0ms});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("/nonexistent-dir/lease"), std::string::npos) << r.error().message;
}

TEST(Lease, KillAtIsTheExpiryOnAnIdleNode) {
  Lease l{t0 + 600ms, t0 + 1000ms, 600ms};
  EXPECT_EQ(l.KillAt(0ms), l.expires);
}

TEST(Lease, KillAtForgivesWhatTheDelayExplainsWithinTheDeadline) {
  Lease l{t0 + 600ms, t0 + 1000ms, 600ms};  // margin 400 ms
  EXPECT_EQ(l.KillAt(50ms), l.expires + 200ms);
  for (Millis delay : {10ms, 80ms, 150ms, 199ms, 200ms, 2000ms}) {
    EXPECT_LE(l.KillAt(delay), l.deadline) << delay.count();
    EXPECT_GE(l.KillAt(delay), l.expires) << delay.count();
  }
  EXPECT_EQ(l.KillAt(2s), l.expires) << "so loaded that no margin is left: the expiry itself";
}

}  // namespace
}  // namespace cohort::agent
