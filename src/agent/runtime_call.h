// One call of a container runtime's command line by the agent (image_cache.h,
// container_sweep.h): its output captured, bounded in time, and cut short when the agent
// stops.
//
// The runtime runs as the agent, in a child process; its stdout and stderr go to files in
// `scratch_dir` (removed after) so that a large answer never fills a pipe. A hung Docker
// or Podman daemon leaves its client waiting until the call's timeout (30 s and more);
// the agent's stop must not wait on that (issue 18), so every call may belong to a
// RuntimeCalls, whose CancelAll kills the calls in flight at once and refuses later ones.
// The kill goes through a pidfd, which names the runtime's process even once it has been
// reaped and its pid reused; where the kernel has no pidfd (before 5.3) a call cannot be
// cut short and ends at its timeout.
//
// Threads: RunRuntimeCommand on any thread, without the caller's locks (it waits up to
// `timeout`); RuntimeCalls' methods on any thread.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"

namespace cohort::agent {

class RuntimeCalls {
 public:
  RuntimeCalls() = default;
  ~RuntimeCalls();
  RuntimeCalls(const RuntimeCalls&) = delete;
  RuntimeCalls& operator=(const RuntimeCalls&) = delete;

  // SIGKILLs every call in flight; every call from now on is refused.
  void CancelAll() EXCLUDES(mu_);
  bool cancelled() const EXCLUDES(mu_);

  // For RunRuntimeCommand: holds the pidfd of a call's process until Remove; false (and
  // nothing held) once cancelled.
  bool Add(int pidfd) EXCLUDES(mu_);
  void Remove(int pidfd) EXCLUDES(mu_);  // and closes it

 private:
  mutable Mutex mu_;
  std::set<int> pidfds_ GUARDED_BY(mu_);
  bool cancelled_ GUARDED_BY(mu_) = false;
};

// Runs `argv` and returns its stdout. kNotFound when it cannot start (the runtime is not
// installed here); kUnavailable, naming the command, when it exits unsuccessfully (with
// the first line of its stderr), does not finish within `timeout` (it is then killed), or
// `calls` was cancelled before or during the call ("... cancelled: the agent is
// stopping").
Result<std::string> RunRuntimeCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                                      Millis timeout, RuntimeCalls* calls = nullptr);

}  // namespace cohort::agent
