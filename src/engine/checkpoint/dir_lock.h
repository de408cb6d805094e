// CheckpointDirLock: one run at a time writes a checkpoint directory.
//
// Two runs pointed at the same checkpoint.dir (a copied config, two sweep elements, a job
// and a local rerun) would each remove the other's temporary step directories while it
// writes them, replace each other's step directories and prune each other's by
// checkpoint.keep; the next resume would take whichever run wrote last. So the run's
// rank 0 holds an exclusive flock(2) on `<dir>/LOCK` from start to end, and a second run
// is refused before it reads or writes anything there (LevelDB's LOCK file). The kernel
// drops the lock when the process dies, however it dies, so a killed run never leaves the
// directory locked. The file holds the holder's description, for the refusal message.
// Move-only; destroying it removes LOCK and releases the lock.
#pragma once

#include <chrono>
#include <string>

#include "common/error.h"

namespace cohort::engine {

class CheckpointDirLock {
 public:
  // Creates `dir` (and its parents) when missing, then takes the lock, writing `owner`
  // (e.g. "pid 12 on host a, job 7 attempt 0") into LOCK. While another process holds it,
  // retries until `wait` has passed (a restarted job's previous attempt may still be
  // exiting), then fails with kFailedPrecondition naming the holder. kInvalidArgument when
  // `dir` cannot be a writable directory (it is a file, the file system is read-only, ...),
  // with the reason.
  static Result<CheckpointDirLock> Acquire(const std::string& dir, const std::string& owner,
                                           std::chrono::milliseconds wait = {});

  CheckpointDirLock(CheckpointDirLock&& o) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&&) = delete;
  ~CheckpointDirLock();

  const std::string& path() const { return path_; }  // <dir>/LOCK

 private:
  CheckpointDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace cohort::engine
