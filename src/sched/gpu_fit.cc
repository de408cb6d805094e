#include "sched/gpu_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "sched/gpu_units.h"

namespace cohort::sched {

namespace {

// A MIG profile ("1g.10gb"): its instances are not among a node's free whole GPUs.
bool IsMig(const std::string& type) {
  const size_t g = type.find("g.");
  return g != std::string::npos && g > 0 && type.find("gb", g) != std::string::npos;
}

// The share and memory one task of a sharing `job` takes on `d`; share 0 if it cannot.
GpuSlice SliceOn(const GpuView& d, const JobRequest& job) {
  GpuSlice s{d.index, job.gpu_share, job.gpu_memory_mib};
  if (s.share == 0) {
    // Memory only: the share is the memory's part of the device, rounded up to a unit.
    s.share = ShareForMemory(job.gpu_memory_mib, d.memory_mib);
    if (s.share == 0) return {d.index, 0, 0};
  }
  if (s.memory_mib == 0) s.memory_mib = d.memory_mib * s.share / kGpuShareUnits;
  return s;
}

bool Shares(const JobRequest& job) { return job.gpu_share > 0 || job.gpu_memory_mib > 0; }

std::string ShareText(const JobRequest& job) {
  std::string what = job.gpu_share > 0 ? fmt::format("{:g} of a free", double(job.gpu_share) / kGpuShareUnits)
                                       : std::string("a shareable");
  std::string out = fmt::format("{} {}GPU", what, job.gpu_type.empty() ? "" : job.gpu_type + " ");
  if (job.gpu_memory_mib > 0) {
    out += job.gpu_memory_mib % 1024 == 0 ? fmt::format(" with {}GiB of its memory", job.gpu_memory_mib / 1024)
                                          : fmt::format(" with {}MiB of its memory", job.gpu_memory_mib);
  }
  return out;
}

// "needs 2 nodes with 4 free h100 GPUs" / "... with 2 tasks each on 0.5 of a free GPU".
std::string NeedText(const JobRequest& job, const GangDemand& demand) {
  std::string out = fmt::format("needs {} {}", demand.nodes, demand.nodes == 1 ? "node" : "nodes");
  if (Shares(job)) {
    const int tasks = std::max(job.tasks_per_node, 1);
    out += tasks == 1 ? " with " + ShareText(job) : fmt::format(" with {} tasks each on {}", tasks, ShareText(job));
  } else if (demand.gpus > 0) {
    out += fmt::format(" with {} free {}{}", demand.gpus, job.gpu_type.empty() ? "" : job.gpu_type + " ",
                       job.gpu_type.empty() || !IsMig(job.gpu_type) ? (demand.gpus == 1 ? "GPU" : "GPUs")
                                                                      : (demand.gpus == 1 ? "MIG instance" : "MIG instances"));
    if (job.topology_required && demand.gpus > 1) out += " connected (topology required)";
  }
  return out;
}

}  // namespace

int64_t ConnectionDomain(const GpuView& d) {
  if (d.nvlink_island >= 0) return d.nvlink_island;
  if (d.pcie_switch >= 0) return (int64_t{1} << 32) + d.pcie_switch;
  return -1;
}

bool NeedsGpuDetail(const JobRequest& job) {
  return !job.gpu_type.empty() || Shares(job) || job.topology_required;
}

bool DeviceMatches(const GpuView& d, const std::string& type) {
  if (!d.healthy) return false;
  return type.empty() ? !d.mig : d.type == type;
}

std::optional<std::vector<int>> ChooseConnected(std::span<const GpuView> devices, std::span<const int> candidates,
                                                int k, Placement policy, bool required) {
  if (k <= 0) return std::vector<int>{};
  if (static_cast<int>(candidates.size()) < k) return std::nullopt;
  std::map<int64_t, std::vector<int>> domains;  // domain -> GPU indices, ascending
  for (int c : candidates) domains[ConnectionDomain(devices[c])].push_back(devices[c].index);
  std::vector<int> out;
  if (domains.size() == 1) return ChooseGpus(domains.begin()->second, k, policy);
  // The smallest domain that holds k (best fit), else the fewest domains, largest first.
  const std::vector<int>* best = nullptr;
  for (const auto& [domain, gpus] : domains) {
    if (domain < 0 || static_cast<int>(gpus.size()) < k) continue;
    if (!best || gpus.size() < best->size()) best = &gpus;
  }
  if (best) return ChooseGpus(*best, k, policy);
  if (required) return std::nullopt;
  std::vector<const std::vector<int>*> order;
  for (const auto& [domain, gpus] : domains) order.push_back(&gpus);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->size() > b->size(); });
  for (const auto* gpus : order) {
    for (int g : *gpus) {
      if (static_cast<int>(out.size()) == k) break;
      out.push_back(g);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> ChooseFreeGpus(const NodePool& pool, int node, int k, Placement policy) {
  const std::span<const int> free = pool.free_gpus(node);
  const std::span<const GpuView> devices = pool.devices(node);
  const bool topology = std::any_of(devices.begin(), devices.end(), [](const GpuView& d) { return ConnectionDomain(d) >= 0; });
  if (!topology || k <= 1) return ChooseGpus(free, k, policy);
  std::vector<int> candidates;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (std::binary_search(free.begin(), free.end(), devices[i].index)) candidates.push_back(static_cast<int>(i));
  }
  if (auto chosen = ChooseConnected(devices, candidates, k, policy, false)) return std::move(*chosen);
  return ChooseGpus(free, k, policy);
}

std::optional<MemberFit> FitMember(std::span<const GpuView> devices, const JobRequest& job, int gpus,
                                   Placement policy) {
  MemberFit fit;
  if (Shares(job) && job.tasks_per_node <= 1) {
    // One task: the best device, without copying the node's free shares (the hot path).
    const GpuView* best = nullptr;
    GpuSlice best_slice;
    for (const GpuView& d : devices) {
      if (d.free_share == 0 || !DeviceMatches(d, job.gpu_type)) continue;
      const GpuSlice sl = SliceOn(d, job);
      if (sl.share == 0 || d.free_share < sl.share || (sl.memory_mib > 0 && d.free_memory_mib < sl.memory_mib)) continue;
      if (!best || (policy == Placement::kPack ? d.free_share < best->free_share : d.free_share > best->free_share)) {
        best = &d;
        best_slice = sl;
      }
    }
    if (!best) return std::nullopt;
    fit.slices.push_back(best_slice);
    fit.gpus.push_back(best_slice.gpu);
    return fit;
  }
  if (Shares(job)) {
    // Each task takes a slice of one GPU; later tasks see the slices of earlier ones.
    std::vector<int> free_share;
    std::vector<int64_t> free_memory;
    for (const GpuView& d : devices) {
      free_share.push_back(d.free_share);
      free_memory.push_back(d.free_memory_mib);
    }
    for (int t = 0; t < std::max(job.tasks_per_node, 1); ++t) {
      int best = -1;
      GpuSlice best_slice;
      for (size_t i = 0; i < devices.size(); ++i) {
        const GpuView& d = devices[i];
        if (!DeviceMatches(d, job.gpu_type)) continue;
        const GpuSlice s = SliceOn(d, job);
        if (s.share == 0 || free_share[i] < s.share) continue;
        if (s.memory_mib > 0 && free_memory[i] < s.memory_mib) continue;
        const bool better = best < 0 || (policy == Placement::kPack ? free_share[i] < free_share[best]
                                                                     : free_share[i] > free_share[best]);
        if (better) {
          best = static_cast<int>(i);
          best_slice = s;
        }
      }
      if (best < 0) return std::nullopt;
      free_share[best] -= best_slice.share;
      free_memory[best] -= best_slice.memory_mib;
      fit.slices.push_back(best_slice);
      fit.gpus.push_back(best_slice.gpu);
    }
    return fit;
  }
  std::vector<int> candidates;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (DeviceMatches(devices[i], job.gpu_type) && devices[i].free_share == kGpuShareUnits) {
      candidates.push_back(static_cast<int>(i));
    }
  }
  if (static_cast<int>(candidates.size()) < gpus) return std::nullopt;
  auto chosen = ChooseConnected(devices, candidates, gpus, policy, job.topology_required);
  if (!chosen) return std::nullopt;
  fit.gpus = std::move(*chosen);
  return fit;
}

namespace {

std::vector<GpuView>::iterator FindDevice(std::vector<GpuView>& devices, int index) {
  return std::lower_bound(devices.begin(), devices.end(), index,
                          [](const GpuView& d, int i) { return d.index < i; });
}

}  // namespace

void ReturnDevices(std::vector<GpuView>& devices, std::span<const int> whole, std::span<const GpuSlice> slices) {
  for (int index : whole) {
    auto it = FindDevice(devices, index);
    if (it == devices.end() || it->index != index) {
      GpuView d;
      d.index = index;
      it = devices.insert(it, d);
    }
    it->free_share = kGpuShareUnits;
    it->free_memory_mib = it->memory_mib;
  }
  for (const GpuSlice& sl : slices) {
    auto it = FindDevice(devices, sl.gpu);
    if (it == devices.end() || it->index != sl.gpu) continue;
    it->free_share = std::min(kGpuShareUnits, it->free_share + sl.share);
    it->free_memory_mib = std::min(it->memory_mib, it->free_memory_mib + sl.memory_mib);
  }
}

void TakeDevices(std::vector<GpuView>& devices, std::span<const int> whole, std::span<const GpuSlice> slices) {
  if (slices.empty()) {
    for (int index : whole) {
      if (auto it = FindDevice(devices, index); it != devices.end() && it->index == index) it->free_share = 0;
    }
  }
  for (const GpuSlice& sl : slices) {
    if (auto it = FindDevice(devices, sl.gpu); it != devices.end() && it->index == sl.gpu) {
      it->free_share = std::max(it->free_share - sl.share, 0);
      it->free_memory_mib = std::max<int64_t>(it->free_memory_mib - sl.memory_mib, 0);
    }
  }
}

bool HasSwitches(const NodePool& pool) {
  for (int n = 0; n < pool.size(); ++n) {
    if (!pool.network_switch(n).empty()) return true;
  }
  return false;
}

std::optional<GangFit> FitDetailedGang(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                                       std::span<const int> excluded, std::string* why) {
  struct Candidate {
    int node;
    MemberFit fit;
  };
  std::vector<Candidate> candidates;
  // Whole GPUs of a model are among the node's free whole GPUs; MIG instances and shared
  // GPUs are not, so those visit every node with the CPUs.
  const bool by_count = !Shares(job) && !IsMig(job.gpu_type);
  const bool grouped = demand.nodes > 1 && HasSwitches(pool);
  pool.VisitHosts(by_count ? demand.gpus : 0, demand.cpus, job.placement, [&](int node) {
    if (std::find(excluded.begin(), excluded.end(), node) != excluded.end()) return true;
    if (auto m = FitMember(pool.devices(node), job, demand.gpus, job.placement)) {
      candidates.push_back({node, std::move(*m)});
    }
    // Without switches the first n in placement order are the gang.
    return grouped || static_cast<int>(candidates.size()) < demand.nodes;
  });
  const auto fail = [&](std::string text) -> std::optional<GangFit> {
    if (why) *why = std::move(text);
    return std::nullopt;
  };
  const int available = static_cast<int>(candidates.size());
  if (available < demand.nodes) return fail(fmt::format("{}; {} available", NeedText(job, demand), available));
  std::vector<const Candidate*> chosen;
  if (!grouped) {
    for (int i = 0; i < demand.nodes; ++i) chosen.push_back(&candidates[static_cast<size_t>(i)]);
  } else {
    std::map<std::string, std::vector<const Candidate*>> by_switch;  // in placement order within each
    for (const Candidate& c : candidates) by_switch[pool.network_switch(c.node)].push_back(&c);
    const std::vector<const Candidate*>* best = nullptr;
    size_t largest = 0;
    for (const auto& [sw, members] : by_switch) {
      largest = std::max(largest, sw.empty() ? size_t{1} : members.size());
      if (sw.empty() || static_cast<int>(members.size()) < demand.nodes) continue;
      if (!best || members.size() < best->size()) best = &members;
    }
    if (best) {
      chosen.assign(best->begin(), best->begin() + demand.nodes);
    } else if (job.topology_required) {
      JobRequest plain = job;  // the GPUs' own connection is not what it waits for here
      plain.topology_required = false;
      return fail(fmt::format("topology required: {} under one switch; at most {} under one switch now",
                              NeedText(plain, demand), largest));
    } else {
      std::vector<const std::vector<const Candidate*>*> order;
      for (const auto& [sw, members] : by_switch) order.push_back(&members);
      std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->size() > b->size(); });
      for (const auto* members : order) {
        for (const Candidate* c : *members) {
          if (static_cast<int>(chosen.size()) < demand.nodes) chosen.push_back(c);
        }
      }
    }
  }
  GangFit fit;
  for (const Candidate* c : chosen) {
    fit.nodes.push_back(c->node);
    fit.gpus.push_back(c->fit.gpus);
    if (Shares(job)) fit.slices.push_back(c->fit.slices);
  }
  return fit;
}

Result<void> CheckGpuFeasible(const std::vector<NodeDevices>& capacity, const JobRequest& job) {
  if (!NeedsGpuDetail(job)) return {};
  std::map<std::string, int> types;  // what the cluster has, for the message
  int64_t largest_mib = 0;
  int hosts = 0;
  int most = 0;  // the most matching devices on one node
  bool switches = false;                  // any node carries a switch label
  std::map<std::string, int> by_switch;   // hosts under each labelled switch
  for (const NodeDevices& node : capacity) {
    switches = switches || !node.network_switch.empty();
    std::vector<GpuView> devices = node.devices;
    int matching = 0;
    for (GpuView& d : devices) {
      if (!d.type.empty()) ++types[d.type];
      if (!DeviceMatches(d, job.gpu_type)) continue;
      ++matching;
      largest_mib = std::max(largest_mib, d.memory_mib);
      d.free_share = kGpuShareUnits;
      d.free_memory_mib = d.memory_mib;
    }
    most = std::max(most, matching);
    if (node.cpus < int64_t{job.cpus_per_task} * job.tasks_per_node) continue;
    if (FitMember(devices, job, job.gpus_per_node, Placement::kPack)) {
      ++hosts;
      if (!node.network_switch.empty()) ++by_switch[node.network_switch];
    }
  }
  const int needed = std::max(job.min_nodes > 0 ? std::min(job.min_nodes, job.nodes) : job.nodes, 1);
  if (hosts >= needed && job.topology_required && needed > 1 && switches) {
    // FitDetailedGang waits for one switch with the gang's nodes (a node without a switch
    // label is a switch of its own): never, if no switch has that many hosts.
    int largest = std::min(hosts, 1);
    std::string where;
    for (const auto& [sw, n] : by_switch) {
      largest = std::max(largest, n);
      where += fmt::format("{}{}: {}", where.empty() ? "" : ", ", sw, n);
    }
    if (largest >= needed) return {};
    JobRequest plain = job;  // what one node needs, as the pending reason words it
    plain.topology_required = false;
    GangDemand d{needed, job.gpus_per_node, int64_t{job.cpus_per_task} * job.tasks_per_node};
    return Errorf(ErrorCode::kUnsatisfiable,
                  "topology required: job {} under one switch, but at most {} under one switch could host one "
                  "({})",
                  NeedText(plain, d), largest, where.empty() ? "no node under a switch could" : where);
  }
  if (hosts >= needed) return {};
  if (!job.gpu_type.empty() && most == 0) {
    std::string have;
    for (const auto& [t, n] : types) have += fmt::format("{}{} x {}", have.empty() ? "" : ", ", t, n);
    return Errorf(ErrorCode::kUnsatisfiable, "job asks for GPU type '{}' but no node has it (the cluster has: {})",
                  job.gpu_type, have.empty() ? "no typed GPUs" : have);
  }
  if (job.gpu_memory_mib > 0 && job.gpu_memory_mib > largest_mib) {
    return Errorf(ErrorCode::kUnsatisfiable,
                  "job asks for {}MiB of GPU memory per task but the largest {}GPU has {}MiB", job.gpu_memory_mib,
                  job.gpu_type.empty() ? "" : job.gpu_type + " ", largest_mib);
  }
  if (!Shares(job) && job.gpus_per_node > most) {
    return Errorf(ErrorCode::kUnsatisfiable, "job needs {} {}GPUs on one node but the most any node has is {}",
                  job.gpus_per_node, job.gpu_type.empty() ? "" : job.gpu_type + " ", most);
  }
  GangDemand d{job.nodes, job.gpus_per_node, int64_t{job.cpus_per_task} * job.tasks_per_node};
  return Errorf(ErrorCode::kUnsatisfiable, "job {} but only {} {} in the cluster could host one",
                NeedText(job, d), hosts, hosts == 1 ? "node" : "nodes");
}

}  // namespace cohort::sched
