// LeaseKeeper: its thread writes the lease file, Renew never waits for that write, and the
// allowance follows the lateness its ticks measure (on a skewed clock, not a loaded machine).
// LeaseDirectory: the lease's private directory on a memory file system, and when it is not
// used.
#include "agent/lease_keeper.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
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

int ModeOf(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

TEST(LeaseDirectory, IsAPrivateDirectoryOfItsOwnUnderTheMemoryRootTheSameAfterARestart) {
  TempDir tmp;
  const std::string root = tmp.Sub("shm");
  std::filesystem::create_directories(root);
  const std::string dir = LeaseDirectory(tmp.Sub("agent-a"), root);
  EXPECT_EQ(std::filesystem::path(dir).parent_path(), std::filesystem::path(root));
  EXPECT_EQ(std::filesystem::path(dir).filename().string().rfind("cohort-agent-" + std::to_string(geteuid()) + "-", 0),
            0u)
      << dir;
  EXPECT_EQ(ModeOf(dir), 0700);
  // A restarted agent (same work directory) finds the lease its shims read; another agent
  // on the machine has its own.
  EXPECT_EQ(LeaseDirectory(tmp.Sub("agent-a"), root), dir);
  EXPECT_NE(LeaseDirectory(tmp.Sub("agent-b"), root), dir);
  // Without a memory root the work directory holds it, as before.
  EXPECT_EQ(LeaseDirectory(tmp.Sub("agent-a"), ""), tmp.Sub("agent-a"));
}

TEST(LeaseDirectory, ANameTakenByAnythingButAPrivateDirectoryLeavesTheLeaseInTheWorkDirectory) {
  TempDir tmp;
  const std::string root = tmp.Sub("shm");
  std::filesystem::create_directories(root);
  const std::string work = tmp.Sub("agent");
  const std::string name = LeaseDirectory(work, root);
  ASSERT_NE(name, work);
  const auto reset = [&] { std::filesystem::remove_all(name); };

  // Another user's file system objects at the name (the root is shared, like /dev/shm).
  reset();
  std::filesystem::create_directories(tmp.Sub("elsewhere"));
  std::filesystem::create_directory_symlink(tmp.Sub("elsewhere"), name);
  EXPECT_EQ(LeaseDirectory(work, root), work) << "a symbolic link is not followed";
  reset();
  { std::ofstream(name) << "x"; }
  EXPECT_EQ(LeaseDirectory(work, root), work) << "a file";
  reset();
  std::filesystem::create_directory(name);
  chmod(name.c_str(), 0777);
  EXPECT_EQ(LeaseDirectory(work, root), work) << "a directory others may write";
  if (geteuid() == 0) {
    chmod(name.c_str(), 0700);
    ASSERT_EQ(chown(name.c_str(), 65534, 65534), 0);
    EXPECT_EQ(LeaseDirectory(work, root), work) << "another user's directory";
  }
  // A root that cannot hold it.
  EXPECT_EQ(LeaseDirectory(work, tmp.Sub("no-such-root")), work);
}

TEST(LeaseDirectory, TheAgentsLeaseIsOnTheMachinesTmpfs) {
  if (!OnTmpfs("/dev/shm")) GTEST_SKIP() << "/dev/shm is not a tmpfs on this machine";
  TempDir tmp;
  const std::string path = AgentLeasePath(tmp.Sub("agent"));
  EXPECT_EQ(path.rfind("/dev/shm/cohort-agent-", 0), 0u) << path;
  EXPECT_TRUE(OnTmpfs(std::filesystem::path(path).parent_path()));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

}  // namespace
}  // namespace cohort::agent
