// GPU discovery: what GPUs this node has, as the agent reports them to the head.
//
// Two sources share one data model. DiscoverNvmlGpus asks the NVIDIA driver through NVML,
// which is loaded with dlopen("libnvidia-ml.so.1") at run time (never linked), so one
// cohort binary runs on machines with and without NVIDIA drivers. SimulatedGpus makes up
// GPUs for tests and demos on machines without any. Both are plain functions with no
// shared state; NVML itself is thread-safe, and DiscoverNvmlGpus initialises and shuts it
// down on each call, so any thread may call either at any time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::agent {

struct GpuInfo {
  int index = 0;             // NVML index; what CUDA_VISIBLE_DEVICES names on this node
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-8d9f0c1e-...": stable across reboots
  int64_t memory_bytes = 0;  // total device memory
  bool simulated = false;
};

// The GPUs the NVIDIA driver sees, in index order. Returns kUnavailable when the NVML
// library cannot be loaded or the driver does not answer (the message says which), and
// kInternal when a per-device query fails. An empty vector means a driver with no GPUs.
Result<std::vector<GpuInfo>> DiscoverNvmlGpus();

// `n` simulated GPUs: name "Cohort Simulated GPU 80GB", 80 GiB each, and UUIDs in NVML's
// format ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") derived from `node_name` and the
// index, so they are the same on every run and differ between nodes and indices.
std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name);

}  // namespace cohort::agent
