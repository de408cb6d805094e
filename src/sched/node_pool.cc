#include "sched/node_pool.h"

#include <algorithm>
#include <numeric>

namespace cohort::sched {

NodePool::NodePool(std::span<const NodeView> nodes) {
  const int n = static_cast<int>(nodes.size());
  nodes_.resize(n);
  node_at_rank_.resize(n);
  std::iota(node_at_rank_.begin(), node_at_rank_.end(), 0);
  std::sort(node_at_rank_.begin(), node_at_rank_.end(), [&](int a, int b) {
    if (nodes[a].id != nodes[b].id) return nodes[a].id < nodes[b].id;
    return a < b;
  });

  int max_free = 0;
  for (int rank = 0; rank < n; ++rank) {
    const int i = node_at_rank_[rank];
    const NodeView& view = nodes[i];
    Node& node = nodes_[i];
    node.view = &view;
    node.schedulable = view.unavailable.empty();
    node.rank = rank;
    node.free_gpus = view.free_gpus;
    if (!std::is_sorted(node.free_gpus.begin(), node.free_gpus.end())) {
      std::sort(node.free_gpus.begin(), node.free_gpus.end());
    }
    node.free_gpus.erase(std::unique(node.free_gpus.begin(), node.free_gpus.end()),
                         node.free_gpus.end());
    node.free_cpus = std::max(view.free_cpus, 0);
    node.capacity_gpus = std::max(view.total_gpus, static_cast<int>(node.free_gpus.size()));
    node.capacity_cpus = std::max(view.total_cpus, node.free_cpus);
    node.devices = view.gpus;
    if (node.devices.empty()) {
      for (int g : node.free_gpus) {
        GpuView d;
        d.index = g;
        node.devices.push_back(std::move(d));
      }
    }
    std::sort(node.devices.begin(), node.devices.end(),
              [](const GpuView& a, const GpuView& b) { return a.index < b.index; });
    if (node.schedulable) max_free = std::max(max_free, static_cast<int>(node.free_gpus.size()));
  }

  buckets_.resize(max_free + 1);
  // Visiting in rank order with free CPUs as the major key needs a sort per bucket.
  for (int rank = 0; rank < n; ++rank) {
    const Node& node = nodes_[node_at_rank_[rank]];
    if (!node.schedulable) continue;
    buckets_[node.free_gpus.size()].push_back(Key(node.free_cpus, rank));
  }
  for (std::vector<uint64_t>& bucket : buckets_) std::sort(bucket.begin(), bucket.end());
}

NodeFree NodePool::free(int node) const {
  const Node& n = nodes_[node];
  return NodeFree{static_cast<int>(n.free_gpus.size()), n.free_cpus, n.rank};
}

bool NodePool::CanHost(int node, int gpus, int64_t cpus) const {
  const Node& n = nodes_[node];
  return n.schedulable && static_cast<int64_t>(n.free_gpus.size()) >= gpus && n.free_cpus >= cpus;
}

bool NodePool::InDomain(int& gpus, int64_t& cpus) const {
  gpus = std::max(gpus, 0);
  cpus = std::max<int64_t>(cpus, 0);
  return gpus < static_cast<int>(buckets_.size()) && cpus <= std::numeric_limits<int>::max();
}

int NodePool::CountHosts(int gpus, int64_t cpus) const {
  if (!InDomain(gpus, cpus)) return 0;
  const uint64_t floor = Key(cpus, 0);
  int count = 0;
  for (size_t b = gpus; b < buckets_.size(); ++b) {
    const std::vector<uint64_t>& bucket = buckets_[b];
    count += static_cast<int>(bucket.end() - std::lower_bound(bucket.begin(), bucket.end(), floor));
  }
  return count;
}

void NodePool::Take(int node, std::span<const int> gpus, int cpus, std::span<const GpuSlice> slices) {
  Node& n = nodes_[node];
  const auto device = [&](int index) -> GpuView* {
    auto it = std::lower_bound(n.devices.begin(), n.devices.end(), index,
                               [](const GpuView& d, int i) { return d.index < i; });
    return it != n.devices.end() && it->index == index ? &*it : nullptr;
  };
  if (slices.empty()) {
    for (int g : gpus) {
      if (GpuView* d = device(g)) d->free_share = 0;
    }
  }
  for (const GpuSlice& s : slices) {
    if (GpuView* d = device(s.gpu)) {
      d->free_share = std::max(d->free_share - s.share, 0);
      d->free_memory_mib = std::max<int64_t>(d->free_memory_mib - s.memory_mib, 0);
    }
  }
  const size_t old_count = n.free_gpus.size();
  const uint64_t old_key = Key(n.free_cpus, n.rank);

  if (!gpus.empty()) {
    // Both lists are sorted: keep the free indices that were not taken.
    size_t out = 0;
    size_t t = 0;
    for (size_t i = 0; i < n.free_gpus.size(); ++i) {
      while (t < gpus.size() && gpus[t] < n.free_gpus[i]) ++t;
      if (t < gpus.size() && gpus[t] == n.free_gpus[i]) continue;
      n.free_gpus[out++] = n.free_gpus[i];
    }
    n.free_gpus.resize(out);
  }
  n.free_cpus = std::max(n.free_cpus - cpus, 0);
  if (!n.schedulable) return;

  std::vector<uint64_t>& from = buckets_[old_count];
  from.erase(std::lower_bound(from.begin(), from.end(), old_key));
  std::vector<uint64_t>& to = buckets_[n.free_gpus.size()];
  const uint64_t new_key = Key(n.free_cpus, n.rank);
  to.insert(std::lower_bound(to.begin(), to.end(), new_key), new_key);
}

}  // namespace cohort::sched
