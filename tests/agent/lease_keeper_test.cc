// LeaseKeeper: its thread writes the lease file, Renew never waits for that write, and the
// allowance follows the lateness its ticks measure (on a skewed clock, not a loaded machine).
#include "agent/lease_keeper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::TempDir;
using agent_testing::WaitFor;

// A whole number of milliseconds in the future, so that the file's milliseconds compare equal.
SteadyTime Later(Millis ahead) {
  return SteadyTime(std::chrono::duration_cast<Millis>((SteadyClock::now() + ahead).time_since_epoch()));
}

// A lease writer that records every lease, can be held shut, and can fail on demand.
class FakeWriter {
 public:
  Result<void> Write(const std::string&, const Lease& l) {
    std::unique_lock lock(mu_);
    ++calls_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    if (failures_left_ > 0) {
      --failures_left_;
      return MakeError(ErrorCode::kInternal, "disk full");
    }
    written_.push_back(l);
    return {};
  }
  LeaseKeeper::Options Options() {
    LeaseKeeper::Options o;
    o.path = "unused";
    o.write = [this](const std::string& p, const Lease& l) { return Write(p, l); };
    return o;
  }
  void SetOpen(bool open) {
    std::lock_guard lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  void FailNext(int n) {
    std::lock_guard lock(mu_);
    failures_left_ = n;
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::vector<Lease> written() {
    std::lock_guard lock(mu_);
    return written_;
  }
  bool LastExpires(SteadyTime t) {
    auto w = written();
    return !w.empty() && w.back().expires == t;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int failures_left_ = 0;
  int calls_ = 0;
  std::vector<Lease> written_;
};

TEST(LeaseKeeper, StartWritesTheFirstLeaseFile) {
  TempDir tmp;
  LeaseKeeper::Options o;
  o.path = tmp.Sub("tasks.lease");
  auto before = SteadyClock::now();
  auto k = LeaseKeeper::Start(o, 2s, 1s);
  auto after = SteadyClock::now();
  ASSERT_TRUE(k) << k.error().message;
  auto l = ReadLeaseFile(tmp.Sub("tasks.lease"));
  ASSERT_TRUE(l);
  EXPECT_GE(l->expires, std::chrono::floor<Millis>(before + 2s));
  EXPECT_LE(l->expires, after + 2s);
  EXPECT_EQ(l->deadline - l->expires, 1s);
  EXPECT_EQ(l->granted, 2s);
}

TEST(LeaseKeeper, RenewReachesTheFile) {
  TempDir tmp;
  LeaseKeeper::Options o;
  o.path = tmp.Sub("tasks.lease");
  auto k = LeaseKeeper::Start(o, 2s, 1s);
  ASSERT_TRUE(k);
  SteadyTime from = Later(100s);
  (*k)->Renew(from, 600ms, 400ms);
  ASSERT_TRUE(WaitFor([&] {
    auto l = ReadLeaseFile(tmp.Sub("tasks.lease"));
    return l && l->expires == from + 600ms;
  }));
  auto l = ReadLeaseFile(tmp.Sub("tasks.lease"));
  EXPECT_EQ(l->deadline, from + 1000ms);
  EXPECT_EQ(l->granted, 600ms);
}

TEST(LeaseKeeper, AShorterGrantChangesNothing) {
  FakeWriter w;
  auto k = LeaseKeeper::Start(w.Options(), 2s, 1s);
  ASSERT_TRUE(k);
  SteadyTime far = Later(1000s);
  (*k)->Renew(far, 2s, 1s);
  (*k)->Renew(far - 500s, 2s, 1s);
  SteadyTime last = far + 1s;
  (*k)->Renew(last, 2s, 1s);
  ASSERT_TRUE(WaitFor([&] { return w.LastExpires(last + 2s); }));
  for (const Lease& l : w.written()) EXPECT_NE(l.expires, far - 500s + 2s);
}

TEST(LeaseKeeper, RenewDoesNotWaitForAStuckWrite) {
  FakeWriter w;
  auto k = LeaseKeeper::Start(w.Options(), 2s, 1s);
  ASSERT_TRUE(k);
  w.SetOpen(false);  // the next write blocks, as on a stalled disk
  SteadyTime from = Later(100s);
  (*k)->Renew(from, 2s, 1s);
  ASSERT_TRUE(WaitFor([&] { return w.calls() >= 2; })) << "the keeper's thread never wrote";
  std::atomic<bool> returned{false};
  std::thread renewer([&] {
    (*k)->Renew(from + 1s, 2s, 1s);
    (*k)->Renew(from + 2s, 2s, 1s);
    returned = true;
  });
  EXPECT_TRUE(WaitFor([&] { return returned.load(); })) << "Renew waited for the file to be written";
  w.SetOpen(true);
  renewer.join();
  EXPECT_TRUE(WaitFor([&] { return w.LastExpires(from + 2s + 2s); })) << "the newest grant was not written";
}

TEST(LeaseKeeper, AFailedWriteIsRetried) {
  FakeWriter w;
  LeaseKeeper::Options o = w.Options();
  o.tick = 10ms;
  auto k = LeaseKeeper::Start(o, 2s, 1s);
  ASSERT_TRUE(k);
  w.FailNext(3);
  SteadyTime from = Later(100s);
  (*k)->Renew(from, 2s, 1s);
  EXPECT_TRUE(WaitFor([&] { return w.LastExpires(from + 2s); }));
  EXPECT_GE(w.calls(), 1 + 3 + 1);
}

TEST(LeaseKeeper, StartFailsIfTheFirstLeaseCannotBeWritten) {
  FakeWriter w;
  w.FailNext(1);
  auto k = LeaseKeeper::Start(w.Options(), 2s, 1s);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message.find("disk full"), std::string::npos);
}

TEST(LeaseKeeper, AllowanceFollowsTheLatenessOfItsTicks) {
  // The keeper's clock jumps 300 ms ahead: its next tick looks 300 ms late, as after a
  // stretch in which the process was not scheduled.
  // The lateness it sees is the jump less what was left of the 20 ms tick.
  std::atomic<int64_t> skew_ms{0};
  std::atomic<int> clock_reads{0};
  TempDir tmp;
  LeaseKeeper::Options o;
  o.path = tmp.Sub("tasks.lease");
  o.tick = 20ms;
  o.lateness_window = std::chrono::hours(1);
  o.now = [&] {
    ++clock_reads;
    return SteadyClock::now() + Millis(skew_ms.load());
  };
  auto k = LeaseKeeper::Start(o, 2s, 1s);
  ASSERT_TRUE(k);
  ASSERT_TRUE(WaitFor([&] { return clock_reads >= 4; })) << "the keeper's thread does not tick";
  skew_ms = 300;
  ASSERT_TRUE(WaitFor([&] { return (*k)->Allowance(10s) >= kRenewalWakeups * 280ms; }))
      << "allowance " << (*k)->Allowance(10s).count() << " ms";
  EXPECT_EQ((*k)->Allowance(500ms), 0ms) << "2 × 300 ms of own lateness leaves nothing of a 500 ms margin";
  EXPECT_LE((*k)->Allowance(10s) + kOwnWakeupReserve * 300ms, 10s);
}

}  // namespace
}  // namespace cohort::agent
