// Checkpoint faults under a running 2-node training job: the newest checkpoint damaged
// before a restart (the job resumes from the one before, saying why), and the checkpoint
// file system full (a clear error, training goes on, older checkpoints are kept, and
// checkpoints succeed again once there is space).
#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "fault_cluster.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> CheckpointSteps(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Flips bytes in the middle of the largest file of a checkpoint directory.
void Damage(const std::string& step_dir) {
  fs::path largest;
  uintmax_t size = 0;
  for (const auto& e : fs::directory_iterator(step_dir)) {
    if (e.is_regular_file() && e.file_size() > size) size = e.file_size(), largest = e.path();
  }
  ASSERT_GT(size, 64u) << step_dir;
  std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
  std::string buf(32, '\0');
  f.seekg(static_cast<std::streamoff>(size / 2));
  f.read(buf.data(), buf.size());
  for (char& ch : buf) ch = static_cast<char>(~ch);
  f.seekp(static_cast<std::streamoff>(size / 2));
  f.write(buf.data(), buf.size());
  ASSERT_TRUE(f.good()) << largest;
}

// Kills rank 0's node (rank 0 writes the checkpoints), damages the newest checkpoint
// before the head restarts the gang, and waits for the job to complete. Returns the
// newest checkpoint's step. Steps: TrainJobSpec's 120, as for AgentFaults' kill (the gang
// ends at the fault).
void RunDamagedCheckpointJob(FaultCluster& c, TrainJob& t, int64_t& newest) {
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t));
  const std::string victim = c.NodeOfRank(t.id, 0);
  ASSERT_FALSE(victim.empty());
  c.agent(victim).Signal(SIGKILL);
  (void)c.agent(victim).Wait();
  ASSERT_TRUE(WaitUntil([&] { return TrainPids(t, 0, 0).empty(); }, std::chrono::seconds(10)));
  const auto steps = CheckpointSteps(c.CheckpointDir(t.id));
  ASSERT_GE(steps.size(), 2u) << c.CheckpointDir(t.id);
  newest = std::stoll(steps.back().substr(5));
  ASSERT_NO_FATAL_FAILURE(Damage(c.CheckpointDir(t.id) + "/" + steps.back()));

  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  const int attempt = done.value("attempt", -1);
  EXPECT_GE(attempt, 1);
  const std::string log = c.Logs(t.id, 0, attempt);
  EXPECT_NE(log.find(steps.back() + " is damaged"), std::string::npos) << log;
  ExpectResumedFrom(c, t, attempt, newest - t.spec.checkpoint_every);
}

TEST(CheckpointFaults, DamagedNewestCheckpointResumesFromTheOneBefore) {
  FaultCluster c;
  TrainJob t;
  int64_t newest = 0;
  ASSERT_NO_FATAL_FAILURE(RunDamagedCheckpointJob(c, t, newest));
  // Nothing lost, each attempt from a checkpoint step; the steps between the two
  // checkpoints are recorded again by attempt 1 (see the disabled test below).
  ExpectConsistentRecord(t, 2, newest - t.spec.checkpoint_every, /*rerecorded_ok=*/true);
}

// Attempt 0 appended the steps up to the newest checkpoint's when it wrote it; attempt 1
// skips that damaged checkpoint and resumes from the one before, so the trainer drops the
// record's lines past that step before training them again: every step once, in order.
TEST(CheckpointFaults, DamagedNewestCheckpointRecordsNoStepTwice) {
  FaultCluster c;
  TrainJob t;
  int64_t newest = 0;
  ASSERT_NO_FATAL_FAILURE(RunDamagedCheckpointJob(c, t, newest));
  ExpectConsistentRecord(t, 2, newest - t.spec.checkpoint_every);
}

// Appends to `path` until the file system says ENOSPC; returns whether it did.
bool FillUp(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return false;
  std::string block(64 << 10, 'x');
  bool full = false;
  while (!full) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n < 0) full = errno == ENOSPC;
    if (n <= 0) break;
  }
  close(fd);
  return full;
}

TEST(CheckpointFaults, FullCheckpointFileSystemKeepsOlderCheckpointsAndRecovers) {
  FaultCluster c;
  const std::string ckfs = c.dir() + "/ckfs";
  std::string why;
  if (!c.MountTmpfs(ckfs, 8, &why)) GTEST_SKIP() << why;
  TrainJob t;
  // Steps: the job must train on past the failed checkpoints (to failed_at + 30, about
  // step 60) until the test frees the space (a few requests later); 150 leave it ~90 steps.
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, TrainJobSpec{150, 10, ckfs, 3}));
  const std::string filler = ckfs + "/filler";
  // Fill the file system until a checkpoint fails (a checkpoint finishing meanwhile may
  // free space by removing an older one: top up until the trainer reports the failure).
  std::string log;
  ASSERT_TRUE(WaitUntil([&] {
    FillUp(filler);
    log = c.Logs(t.id, 0);
    return log.find("FAILED") != std::string::npos;
  }, std::chrono::seconds(30))) << log;
  const auto kept = CheckpointSteps(ckfs);
  const int64_t failed_at = LastRecordedStep(t.record);
  EXPECT_NE(log.find("no space left on device"), std::string::npos) << log;
  EXPECT_NE(log.find("older checkpoints kept"), std::string::npos) << log;

  // Training goes on past more failed checkpoints; the older ones stay, intact.
  ASSERT_TRUE(WaitUntil([&] {
    auto p = c.client().Get("/v1/jobs/" + std::to_string(t.id) + "/progress");
    return p && !(*p)["points"].empty() && (*p)["points"].back().value("step", 0) >= failed_at + 3 * t.spec.checkpoint_every;
  }, std::chrono::seconds(60))) << c.Logs(t.id, 0);
  EXPECT_EQ(c.Job(t.id).value("state", ""), "RUNNING");
  EXPECT_EQ(CheckpointSteps(ckfs), kept);
  EXPECT_FALSE(kept.empty());
  for (const auto& s : kept) EXPECT_TRUE(fs::exists(ckfs + "/" + s + "/MANIFEST")) << s;
  for (const auto& e : fs::directory_iterator(ckfs)) {
    const std::string n = e.path().filename().string();
    // (LOCK: the running job's hold on the directory, engine/checkpoint/dir_lock.h.)
    EXPECT_TRUE(n == "filler" || n == "LOCK" || n.rfind("step_", 0) == 0) << "left behind: " << n;
  }

  // Space again: later checkpoints succeed and the job completes, nothing lost.
  fs::remove(filler);
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(done.value("attempt", -1), 0);
  const auto after = CheckpointSteps(ckfs);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.back(), "step_00000150");
  ExpectConsistentRecord(t, 1);
}

}  // namespace
}  // namespace cohort::testing
