// NodePool: the free resources of a snapshot's nodes during one scheduling pass.
//
// The pool copies each node's free GPU indices and free CPUs from the snapshot and shrinks
// them as the pass places jobs (`Take`); it never grows them. Schedulable nodes (those
// with `unavailable == ""`) are indexed by their number of free GPUs, and within that by
// (free CPUs, id rank), so that the nodes able to host one gang member can be counted in
// O(gpu-count buckets × log nodes) and visited in pack or spread order (see placement.h)
// without scanning every node. Nodes are named by their index in the snapshot's `nodes`.
// The snapshot's nodes must outlive the pool. Not thread-safe; one pass owns one pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sched/placement.h"
#include "sched/snapshot.h"

namespace cohort::sched {

class NodePool {
 public:
  explicit NodePool(std::span<const NodeView> nodes);

  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

  // Number of nodes in the snapshot, schedulable or not.
  int size() const { return static_cast<int>(nodes_.size()); }

  const std::string& id(int node) const { return nodes_[node].view->id; }
  bool schedulable(int node) const { return nodes_[node].schedulable; }
  std::span<const int> free_gpus(int node) const { return nodes_[node].free_gpus; }
  int free_cpus(int node) const { return nodes_[node].free_cpus; }
  // Free resources and id rank, as the placement order sees them.
  NodeFree free(int node) const;
  // What the node offers once every job on it has ended: its healthy GPUs and its CPUs
  // (never less than what is free now).
  int capacity_gpus(int node) const { return nodes_[node].capacity_gpus; }
  int capacity_cpus(int node) const { return nodes_[node].capacity_cpus; }

  // True if `node` is schedulable and has at least `gpus` free GPUs and `cpus` free CPUs.
  bool CanHost(int node, int gpus, int64_t cpus) const;

  // Number of schedulable nodes with at least `gpus` free GPUs and `cpus` free CPUs.
  int CountHosts(int gpus, int64_t cpus) const;

  // Calls `visit(node)` for every schedulable node with at least `gpus` free GPUs and
  // `cpus` free CPUs, most preferred first under `policy`, until `visit` returns false.
  // `visit` must not modify the pool.
  template <typename Visit>
  void VisitHosts(int gpus, int64_t cpus, Placement policy, Visit&& visit) const;

  // Takes `gpus` (indices, sorted, all free on `node`) and `cpus` (at most the free
  // CPUs) from a schedulable node. With `slices` (a sharing job), takes those parts of
  // their GPUs instead of whole GPUs: a GPU that any task shares is no longer free whole.
  void Take(int node, std::span<const int> gpus, int cpus, std::span<const GpuSlice> slices = {});

  // Issue 18: the node's devices in detail (the snapshot's, or its free GPUs as whole
  // untyped devices when it gave none), as this pass has left them; its switch label.
  std::span<const GpuView> devices(int node) const { return nodes_[node].devices; }
  const std::string& network_switch(int node) const { return nodes_[node].view->network_switch; }

 private:
  struct Node {
    const NodeView* view = nullptr;
    bool schedulable = false;
    int rank = 0;  // position of the id in string order
    std::vector<int> free_gpus;
    int free_cpus = 0;
    int capacity_gpus = 0;
    int capacity_cpus = 0;
    std::vector<GpuView> devices;  // sorted by index
  };

  // Bucket keys order by free CPUs, then id rank.
  static uint64_t Key(int64_t cpus, int rank) {
    return (static_cast<uint64_t>(cpus) << 32) | static_cast<uint32_t>(rank);
  }
  static int64_t KeyCpus(uint64_t key) { return static_cast<int64_t>(key >> 32); }
  int NodeOf(uint64_t key) const { return node_at_rank_[static_cast<uint32_t>(key)]; }
  // Clamps a demand to the bucket domain; false if no node can meet it.
  bool InDomain(int& gpus, int64_t& cpus) const;

  std::vector<Node> nodes_;
  std::vector<int> node_at_rank_;
  // [free GPU count] -> sorted Key(free CPUs, rank) of the schedulable nodes with that count.
  std::vector<std::vector<uint64_t>> buckets_;
};

template <typename Visit>
void NodePool::VisitHosts(int gpus, int64_t cpus, Placement policy, Visit&& visit) const {
  if (!InDomain(gpus, cpus)) return;
  const uint64_t floor = Key(cpus, 0);
  const int top = static_cast<int>(buckets_.size()) - 1;
  if (policy == Placement::kPack) {
    // Fewest free GPUs, then fewest free CPUs, then id.
    for (int b = gpus; b <= top; ++b) {
      const std::vector<uint64_t>& bucket = buckets_[b];
      for (auto it = std::lower_bound(bucket.begin(), bucket.end(), floor); it != bucket.end();
           ++it) {
        if (!visit(NodeOf(*it))) return;
      }
    }
    return;
  }
  // Most free GPUs, then most free CPUs, then id: walk each bucket's CPU groups from the
  // top down, each group in id order.
  for (int b = top; b >= gpus; --b) {
    const std::vector<uint64_t>& bucket = buckets_[b];
    const auto lo = std::lower_bound(bucket.begin(), bucket.end(), floor);
    auto hi = bucket.end();
    while (hi != lo) {
      const auto group = std::lower_bound(lo, hi, Key(KeyCpus(*(hi - 1)), 0));
      for (auto it = group; it != hi; ++it) {
        if (!visit(NodeOf(*it))) return;
      }
      hi = group;
    }
  }
}

}  // namespace cohort::sched
