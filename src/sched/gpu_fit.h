// GPU fit (issue 18): typed devices, shared GPUs and topology, for one gang member and for
// a gang.
//
// A job needs the devices in detail (NeedsGpuDetail) when it names a GPU type ("h100", or
// a MIG profile "1g.10gb", whose instances are devices of their own), shares a GPU
// (gpu_share units of kGpuShareUnits and/or gpu_memory_mib per task), or requires
// topology. Such a job is placed here, not through the free-GPU-count buckets; a plain
// job's GPUs inside a node are still chosen by ChooseConnected.
//
// Inside a node, k whole GPUs are the best connected ones free: all in one NVLink island
// (else under one PCIe switch) when one has k free, the smallest such (best fit, keeping
// larger islands whole); otherwise, with topology preferred, the fewest islands (largest
// first); with topology required, the node cannot host the member. A node whose GPUs
// carry no topology is one domain. A sharing task takes a part of one GPU: the GPU of its
// type with the least free share that still has its share and memory free (packing
// fractions onto GPUs already shared), or the most free under spread. Whole-GPU jobs never
// take a GPU any task shares.
//
// Across nodes, a gang of n > 1 nodes whose nodes carry a switch label prefers the fewest
// switches (Slurm's topology/tree): one switch with n candidate nodes when there is one
// (the one with the fewest that fit), else, preferred, the largest switches first;
// required waits for one switch. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/snapshot.h"

namespace cohort::sched {

bool NeedsGpuDetail(const JobRequest& job);

// A device's connection domain: its NVLink island, else its PCIe switch (offset past the
// islands), else -1 (none known).
int64_t ConnectionDomain(const GpuView& device);

// True if `device` is one a request of `type` may take: "" takes healthy whole GPUs of
// any model, a type takes healthy devices of that type (model or MIG profile).
bool DeviceMatches(const GpuView& device, const std::string& type);

// The k best-connected devices among `candidates` (indices into `devices`, which is sorted
// by index), as GPU indices sorted ascending; nullopt if fewer than k, or if `required`
// and no domain has k.
std::optional<std::vector<int>> ChooseConnected(std::span<const GpuView> devices, std::span<const int> candidates,
                                                int k, Placement policy, bool required);

// A plain member's k GPUs among the node's free whole GPUs: ChooseConnected when the
// node's devices carry topology, else ChooseGpus. Requires k <= free GPUs.
std::vector<int> ChooseFreeGpus(const NodePool& pool, int node, int k, Placement policy);

// What a job gives back on one node's `devices` (sorted by index) when it stops: its
// `whole` devices (one the list lacks, as a node without device detail lists only its free
// GPUs, comes back as a whole untyped GPU) and its `slices` (share and memory, capped at
// the device's).
void ReturnDevices(std::vector<GpuView>& devices, std::span<const int> whole, std::span<const GpuSlice> slices);

// What a gang member takes of `devices`: its `whole` devices, or, for a sharing job, its
// `slices` (NodePool::Take's rule: a device any task shares is no longer free whole).
void TakeDevices(std::vector<GpuView>& devices, std::span<const int> whole, std::span<const GpuSlice> slices);

// What one gang member takes on a node: whole devices (`gpus`) or, for a sharing job, one
// slice per task (`slices`; `gpus` then lists their GPUs in task order).
struct MemberFit {
  std::vector<int> gpus;
  std::vector<GpuSlice> slices;
};

// The member of `job` (with `gpus` whole devices per node) on `devices`; nullopt if it
// does not fit.
std::optional<MemberFit> FitMember(std::span<const GpuView> devices, const JobRequest& job, int gpus,
                                   Placement policy);

// A gang for `job` on the free resources of `pool`, never on `excluded` nodes: node
// indices in node-rank order, the GPUs of each (and slices for a sharing job). nullopt if
// it does not fit now; `why` then says what it waits for ("needs 1 node with 0.5 of a free
// h100 GPU and 20GiB of its memory; 0 available", "topology required: needs 8 nodes under
// one switch; at most 5 under one switch now").
std::optional<GangFit> FitDetailedGang(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                                       std::span<const int> excluded, std::string* why);

// True if the pool's nodes carry switch labels, so that multi-node gangs are placed by
// FitDetailedGang (fewest switches) rather than by count buckets.
bool HasSwitches(const NodePool& pool);

// Submit-time check for a detailed job: can it ever run on `capacity` (every device free)?
// Unsatisfiable naming the type, share or memory no node has, e.g. "job asks for GPU
// type 'h200' but no node has it (the cluster has: h100 x 16, 1g.10gb x 14)",
// "job asks for 100GiB of GPU memory per task but the largest GPU has 80GiB", and a
// topology-required gang that no switch (NodeDevices::network_switch) has enough hosts
// for, when any node carries a switch label: "topology required: job needs 3 nodes with
// 1 free GPU under one switch, but at most 2 under one switch could host one (s1: 2, s2: 1)".
Result<void> CheckGpuFeasible(const std::vector<NodeDevices>& capacity, const JobRequest& job);

}  // namespace cohort::sched
