// GPU units: how much of the GPU pool a job holds or asks for, counted in share units
// (kGpuShareUnits = 4 per GPU), so that quotas, borrowing, preemption and fair share count
// a job that shares GPUs by its parts of them (issue 17 over issue 18's sharing).
//
// A whole GPU is kGpuShareUnits units (a MIG instance, a device of its own, counts as a
// whole GPU). A sharing task holds the units of its slice: gpu_share when it asks for
// one; for a gpu_memory_mib-only task, what gpu_fit reserves for it on its device: the
// memory's part of the device, rounded up to a unit (ShareForMemory; 20 GiB of an 80 GiB
// GPU is 1 unit, 30 GiB is 2). Before such a job is placed its device is not known: it is
// counted at the fewest units it could take, on the largest device of its type in the
// snapshot (a lower bound, so no job is held back by an estimate); the scheduler checks
// its quota again with the units of the slices it is given.
//
// Quotas stay configured in whole GPUs; texts print units as GPUs with their fraction
// ("3.75"). Pure functions; RequestUnits is a plain value that one pass owns.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "sched/gang_fit.h"
#include "sched/snapshot.h"

namespace cohort::sched {

inline constexpr int64_t UnitsOfGpus(int64_t gpus) { return gpus * kGpuShareUnits; }

// The units a task asking for `memory_mib` of a device of `device_mib` takes there (at
// least 1); 0 if the device's memory is unknown or too small.
int ShareForMemory(int64_t memory_mib, int64_t device_mib);

// What a running job holds in all: its whole GPUs and its slices.
int64_t HeldUnits(const RunningJob& job);

// What a placed gang of `job` (`demand` per node) holds: its slices, else its whole GPUs.
int64_t PlacedUnits(const GangDemand& demand, const GangFit& fit);

// "4", "0.5", "3.75": `units` as GPUs.
std::string FormatGpus(int64_t units);

// The units pending jobs ask for, against the devices of one snapshot.
class RequestUnits {
 public:
  explicit RequestUnits(std::span<const NodeView> nodes) : nodes_(nodes) {}

  // Per gang member: gpus_per_node whole GPUs, or tasks_per_node slices (0 for a CPU-only
  // or invalid request).
  int64_t PerNode(const JobRequest& job) const;
  // For the whole gang (job.nodes members).
  int64_t Of(const JobRequest& job) const;

 private:
  // The largest memory of a device a `type` request may take (0: none known).
  int64_t LargestDevice(const std::string& type) const;

  std::span<const NodeView> nodes_;
  mutable std::map<std::string, int64_t, std::less<>> largest_;  // by type, filled on first use
};

}  // namespace cohort::sched
