// Task GPU memory (issue 18): how much device memory each task's processes hold, and
// whether a task that shares a GPU is over its part of that GPU's memory.
//
// The agent samples GpuMonitor::Processes (NVML's compute processes, or the simulated
// registrations: the same path after the source), maps each pid to its task (its shim's
// session or tree, or its Docker container's init's: proc_usage.h, TasksOf), and measures each
// running task here. A sharing task carries its part in its environment (api/job_env.cc):
// COHORT_GPU_MEMORY_MIB (its gpu_memory, or the fraction's part of the GPU's memory) and
// COHORT_GPU_MEMORY_ENFORCE ("report" or "kill"). A task over its part on any of its GPUs
// is reported (the warning travels in its heartbeat report to `cohort show` and the
// agent's metrics); with "kill" the agent stops it with the message as the reason, and the
// job fails like any task that was killed (restarted under max_restarts, like an OOM).
// Whole-GPU tasks have no part: they are measured, never over.
//
// Plain functions, no state; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/gpu/gpu.h"
#include "common/error.h"

namespace cohort::agent {

// A task's part of its GPU's memory; share_bytes 0: whole GPUs (no limit).
struct GpuMemoryLimit {
  int64_t share_bytes = 0;
  bool kill = false;  // gpu_memory_enforce: kill
};

// The limit in a task's environment: none without COHORT_GPU_MEMORY_MIB (or with 0).
// kInvalidArgument naming the variable for a value that is not a count of MiB below
// 2^40, or an enforce mode other than "report" and "kill".
Result<GpuMemoryLimit> GpuMemoryLimitFromEnv(const std::map<std::string, std::string>& env);

struct TaskGpuMemory {
  int64_t bytes = 0;                 // all of the task's processes on all GPUs
  std::map<int, int64_t> by_gpu;     // node GPU index -> bytes
  // Non-empty when over the share: "task 0 used 23.1 GiB of GPU 2, over its share of
  // 20 GiB (gpu_memory_enforce: kill)" (the first GPU over it).
  std::string over;
};

// The memory of the processes of the task whose shim is `task` (`task_of` maps pid ->
// task, proc_usage.h's TaskProcesses::task_of; pids absent from it belong to no task) on
// the task's `gpus`, checked against `limit`. Memory on GPUs not in `gpus` is counted in
// `bytes` but never judged.
TaskGpuMemory MeasureTaskGpuMemory(int rank, int task, const std::vector<int>& gpus, const GpuMemoryLimit& limit,
                                   const std::vector<GpuProcess>& processes, const std::map<int, int>& task_of);

// "23.1 GiB"; whole GiB without a decimal ("20 GiB").
std::string FormatGib(int64_t bytes);

}  // namespace cohort::agent
