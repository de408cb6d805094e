// GpuSharing: how tasks that hold parts of one GPU share it on this node (issue 18).
//
// With NVIDIA MPS (the `nvidia-cuda-mps-control` binary on PATH and real GPUs), the agent
// runs one MPS control daemon per shared GPU, started when the first sharing task of that
// GPU launches and quit when no sharing task is left on it (Reconcile); each task gets the
// daemon's pipe and log directories, and the head's limits (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) apply to it as an MPS client. Without MPS (no binary,
// or simulated GPUs) the GPU is time-sliced: the limits are passed on but the GPU does not
// enforce them. Either way the task's COHORT_GPU_SHARING says which ("mps" or
// "time-slicing"), and every task's limits are recorded (Records), so that tests and
// `cohort show` can read what a task was given.
//
// Threads: one thread at a time (the agent's heartbeat loop, which launches tasks).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu/gpu.h"
#include "common/error.h"

namespace cohort::agent {

// What one sharing task was given.
struct SharingRecord {
  std::string task;      // "job.attempt.rank"
  int gpu = 0;
  std::string mode;      // "mps" or "time-slicing"
  std::string thread_percentage;  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
  std::string memory_limit;       // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
};

class GpuSharing {
 public:
  // `mps_control`: the control binary's name or path ("" : never MPS); MPS is used only
  // where it is found and the GPUs are real. `work_dir` holds the daemons' directories.
  GpuSharing(const std::vector<GpuInfo>& gpus, std::string work_dir, std::string mps_control = "nvidia-cuda-mps-control");
  ~GpuSharing();  // quits every daemon it started

  const std::string& mode() const { return mode_; }  // "mps" or "time-slicing"

  // For a sharing task (its env has COHORT_GPU_SHARE) on GPU `gpu`: starts that GPU's MPS
  // daemon if needed, adds the sharing variables to `env`, records the limits. Does
  // nothing for other tasks. An MPS daemon that fails to start is an error (the task
  // would otherwise run without its limits).
  Result<void> Prepare(const std::string& task, int gpu, std::map<std::string, std::string>& env);

  // Quits the daemons of GPUs not in `shared` (the GPUs that running sharing tasks hold).
  void Reconcile(const std::set<int>& shared);

  const std::vector<SharingRecord>& records() const { return records_; }

 private:
  std::string Dir(int gpu) const;
  void Quit(int gpu);

  std::vector<GpuInfo> gpus_;
  std::string work_dir_;
  std::string mps_control_;
  std::string mode_;
  std::set<int> daemons_;  // GPUs with a running MPS daemon
  std::vector<SharingRecord> records_;
};

}  // namespace cohort::agent
