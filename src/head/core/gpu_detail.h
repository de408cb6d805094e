// The head's side of issue 18: a node's devices as the scheduler sees them in detail
// (types, MIG instances, shares held, topology), a job's GPU request for the scheduler,
// and what a placed task gets (its slice, its MIG uuids). Pure functions over the state;
// called inside a transition like the rest of the core.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "api/types.h"
#include "sched/snapshot.h"

namespace cohort::head::core {

// Shares held on a node's GPUs by sharing tasks: GPU index -> (share units, memory MiB).
using SharedGpus = std::map<int, std::pair<int, int64_t>>;

// Adds the slices of `na`'s tasks (those that share a GPU) to `shared`; returns false if
// the allocation holds whole GPUs (its `gpus` are then busy whole).
bool AddSharedTasks(const api::NodeAllocation& na, SharedGpus& shared);

// The devices of `node`: its model's short name or MIG profile, memory, topology, and what
// is free given the GPUs held whole (`busy`, by index) and the shares in `shared`.
std::vector<sched::GpuView> DeviceViews(const api::Node& node, const std::vector<bool>& busy, const SharedGpus& shared);

// True if `g` may go to plain (untyped, whole-GPU) jobs: a whole GPU, not a MIG instance.
inline bool PlainGpu(const api::Gpu& g) { return g.mig_profile.empty(); }

// Copies the spec's type, share, memory and topology into a scheduler request.
void AddGpuRequest(const api::JobSpec& spec, sched::JobRequest& r);

// Names a task's GPUs by uuid (TaskPlacement::devices) on a node with MIG instances, which
// CUDA_VISIBLE_DEVICES can name only so (and whose device indices are not NVML's).
void AddMigDevices(const api::Node& node, api::TaskPlacement& task);

// Every device of `node` with all of it free: for submit-time feasibility of typed and
// sharing jobs.
std::vector<sched::GpuView> CapacityViews(const api::Node& node);

// The network switch the node sits under: its "switch" label (cohort agent --topology
// switch=s3); "" without one.
std::string NetworkSwitch(const api::Node& node);

}  // namespace cohort::head::core
