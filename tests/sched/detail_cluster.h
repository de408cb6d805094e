// A cluster in device detail for preemption tests: nodes with typed devices in NVLink
// islands, switch labels, features and memory; running jobs that hold whole devices or
// slices of them (Usage::devices / slices). The snapshot's free views (free_gpus, each
// device's free share and memory, free CPUs and memory) are derived from the running
// jobs, so that "the snapshot once these victims are gone" is the same build without them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sched/snapshot.h"

namespace cohort::sched::testing {

struct DetailNode {
  std::string id;
  std::vector<GpuView> devices;
  std::string network_switch = {};
  std::vector<std::string> features = {};
  int64_t memory_mb = 0;
  int cpus = 64;
};

// A device: whole GPU of `type` in NVLink `island` (-1: none), 80 GiB.
inline GpuView Dev(int index, std::string type, int island = -1, int64_t memory_mib = 81'920) {
  GpuView d;
  d.index = index;
  d.type = std::move(type);
  d.memory_mib = memory_mib;
  d.free_memory_mib = memory_mib;
  d.nvlink_island = island;
  return d;
}

// A MIG instance of `profile`.
inline GpuView Mig(int index, std::string profile, int64_t memory_mib = 10'240) {
  GpuView d = Dev(index, std::move(profile), -1, memory_mib);
  d.mig = true;
  return d;
}

// `n` GPUs of `type`, `per_island` to an island (0: no topology).
inline std::vector<GpuView> Devs(int n, const std::string& type, int per_island = 0) {
  std::vector<GpuView> out;
  for (int i = 0; i < n; ++i) out.push_back(Dev(i, type, per_island > 0 ? i / per_island : -1));
  return out;
}

inline NodeView ViewOf(const DetailNode& n, const std::vector<RunningJob>& running) {
  NodeView v;
  v.id = n.id;
  v.gpus = n.devices;
  v.total_cpus = n.cpus;
  v.free_cpus = n.cpus;
  v.features = n.features;
  v.memory_mb = n.memory_mb;
  v.free_memory_mb = n.memory_mb;
  v.network_switch = n.network_switch;
  const auto device = [&](int index) -> GpuView* {
    for (GpuView& d : v.gpus) {
      if (d.index == index) return &d;
    }
    return nullptr;
  };
  for (const RunningJob& r : running) {
    for (const Usage& u : r.usage) {
      if (u.node != n.id) continue;
      v.free_cpus -= u.cpus;
      v.free_memory_mb -= u.memory_mb;
      for (int g : u.devices) {
        if (GpuView* d = device(g)) d->free_share = 0, d->free_memory_mib = 0;
      }
      for (const GpuSlice& s : u.slices) {
        if (GpuView* d = device(s.gpu)) d->free_share -= s.share, d->free_memory_mib -= s.memory_mib;
      }
    }
  }
  for (const GpuView& d : v.gpus) {
    if (d.mig || !d.healthy) continue;
    ++v.total_gpus;
    if (d.free_share == kGpuShareUnits) v.free_gpus.push_back(d.index);
  }
  return v;
}

// A running job holding whole `devices` on `node` (with `cpus` there).
inline Usage Whole(std::string node, std::vector<int> devices, int cpus = 1, int64_t memory_mb = 0) {
  Usage u;
  u.node = std::move(node);
  u.gpus = static_cast<int>(devices.size());
  u.cpus = cpus;
  u.devices = std::move(devices);
  u.memory_mb = memory_mb;
  return u;
}

// A running sharing task: `share` units and `memory_mib` of GPU `gpu` on `node`.
inline Usage Slice(std::string node, int gpu, int share, int64_t memory_mib = 0, int cpus = 1) {
  Usage u;
  u.node = std::move(node);
  u.cpus = cpus;
  u.slices.push_back(GpuSlice{gpu, share, memory_mib});
  return u;
}

inline Snapshot DetailSnapshot(int64_t now, const std::vector<DetailNode>& nodes, std::vector<RunningJob> running) {
  Snapshot s;
  s.now_ms = now;
  for (const DetailNode& n : nodes) s.nodes.push_back(ViewOf(n, running));
  s.running = std::move(running);
  return s;
}

// `s` rebuilt over `nodes` without the running jobs `gone`.
inline Snapshot WithoutJobs(const Snapshot& s, const std::vector<DetailNode>& nodes, const std::vector<int64_t>& gone) {
  std::vector<RunningJob> left;
  for (const RunningJob& r : s.running) {
    if (std::find(gone.begin(), gone.end(), r.id) == gone.end()) left.push_back(r);
  }
  Snapshot out = DetailSnapshot(s.now_ms, nodes, std::move(left));
  out.pending = s.pending;
  out.shares = s.shares;
  return out;
}

}  // namespace cohort::sched::testing
