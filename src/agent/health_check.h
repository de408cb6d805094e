// HealthChecker: runs an operator's GPU health check on the agent, periodically.
//
// `cohort agent --health-check CMD [--health-check-interval 60s]` runs `/bin/sh -c CMD`
// every interval (and once at start), with a timeout of the interval or 60 s, whichever
// is shorter. Exit 0 means healthy. Otherwise every output line "gpu N: TEXT" records a
// health event on GPU N with the reason "health check: TEXT"; a failure with no such line
// (or a timeout) records one on every GPU with the exit status and the first output line.
// The events go to the GpuMonitor, so the next heartbeat (sent at once: `wake` has the
// agent sample the GPUs now, then heartbeat) marks the GPUs unhealthy on the head. A check
// that keeps failing records an event each run, so a GPU resumed before it is fixed is
// marked again.
//
// Threads: one thread of its own; the constructor starts it, the destructor stops it
// (killing a running check). Construct and destroy it from one owning thread.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agent/gpu/gpu.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace cohort::agent {

// The events of one run: (GPU index, reason). Pure; exposed for tests.
std::vector<std::pair<int, std::string>> HealthCheckEvents(int exit_code, bool timed_out, std::string_view output,
                                                           int num_gpus);

class HealthChecker {
 public:
  HealthChecker(std::string command, Millis interval, std::string work_dir, int num_gpus, GpuMonitor* monitor,
                std::function<void()> wake);
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

 private:
  void Loop() EXCLUDES(mu_);     // the checker's thread
  void RunOnce() EXCLUDES(mu_);  // the checker's thread: one run of the command

  const std::string command_;
  const Millis interval_;
  const std::string output_path_;
  const int num_gpus_;
  GpuMonitor* const monitor_;
  const std::function<void()> wake_;
  Mutex mu_;
  CondVar cv_;                    // signalled with mu_ when stop_ is set
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cohort::agent
