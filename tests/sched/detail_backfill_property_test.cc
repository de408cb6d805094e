// Property: backfilling never delays a head job that needs devices in detail or has node
// constraints (sched/detail_backfill.h). Over many random snapshots (fixed seeds) of a
// cluster in device detail (typed GPUs in NVLink islands, switches, features, memory, a
// draining node) with running jobs holding whole devices or slices until random ends, and
// a queue of random kinds (plain, typed, sharing a quarter or half a GPU or 30 GiB of one,
// connected GPUs required, gangs under one switch, --constraint, --mem, --nodelist,
// --exclude, random time limits), an independent oracle (per-device state, its own member
// fit) computes the reserved job's earliest start:
//   - on the state after the decision's non-backfilled starts, it equals the reservation's
//     start (the projection is exact) for a head job in detail or with constraints;
//   - on the state after every start, backfilled ones included, it is no later than the
//     reservation's start, for every head job (plain ones too);
// and the decision never gives a device more than its share units.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "detail_cluster.h"
#include "sched/constraints.h"
#include "sched/gpu_fit.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;
constexpr int64_t kT = 1'000 * kMinute;
constexpr int64_t kGib = 1024;

std::vector<DetailNode> Nodes() {
  std::vector<DetailNode> nodes;
  for (int n = 0; n < 6; ++n) {
    DetailNode d;
    d.id = "n" + std::to_string(n);
    d.devices = n < 4 ? Devs(8, "h100", 4) : Devs(8, "a100");
    d.network_switch = n < 3 ? "s1" : "s2";
    if (n % 2 == 0) d.features = {"ib"};
    d.memory_mb = 256 * kGib;
    d.cpus = 32;
    nodes.push_back(std::move(d));
  }
  return nodes;
}

// The oracle's cluster: every device's free share and memory, each node's CPUs and memory.
struct ODevice {
  std::string type;
  int island = -1;
  int64_t memory = 0;
  int share = kGpuShareUnits;
  int64_t free_memory = 0;
};
struct ONode {
  bool ok = true;
  std::string id, sw;
  std::vector<std::string> features;
  std::vector<ODevice> devices;  // by index
  int64_t cpus = 0, cap_cpus = 0, mem = 0, cap_mem = 0;
};
struct OEvent {
  int64_t end;
  size_t node;
  std::vector<int> whole;
  std::vector<GpuSlice> slices;
  int64_t cpus, mem;
};

void Give(ONode& n, const OEvent& e) {
  for (int g : e.whole) n.devices[static_cast<size_t>(g)].share = kGpuShareUnits;
  for (int g : e.whole) n.devices[static_cast<size_t>(g)].free_memory = n.devices[static_cast<size_t>(g)].memory;
  for (const GpuSlice& s : e.slices) {
    ODevice& d = n.devices[static_cast<size_t>(s.gpu)];
    d.share += s.share;
    d.free_memory += s.memory_mib;
  }
  n.cpus += e.cpus;
  n.mem += e.mem;
}

void TakeFrom(ONode& n, const OEvent& e) {
  for (int g : e.whole) n.devices[static_cast<size_t>(g)].share = 0;
  for (const GpuSlice& s : e.slices) {
    ODevice& d = n.devices[static_cast<size_t>(s.gpu)];
    d.share -= s.share;
    d.free_memory -= s.memory_mib;
  }
  n.cpus -= e.cpus;
  n.mem -= e.mem;
}

bool Matches(const ODevice& d, const std::string& type) { return type.empty() || d.type == type; }

// Does one member of `job` fit node `n` as it stands?
bool OracleMember(const ONode& n, const JobRequest& job) {
  if (!n.ok || n.cpus < int64_t{job.cpus_per_task} * job.tasks_per_node || n.mem < job.mem_per_node_mb) return false;
  if (!job.constraint.empty() &&
      std::find(n.features.begin(), n.features.end(), job.constraint) == n.features.end()) {
    return false;
  }
  if (!job.exclude.empty() && job.exclude == n.id) return false;
  if (job.gpu_share > 0 || job.gpu_memory_mib > 0) {
    for (const ODevice& d : n.devices) {
      if (!Matches(d, job.gpu_type)) continue;
      const int share = job.gpu_share > 0
                            ? job.gpu_share
                            : static_cast<int>((job.gpu_memory_mib * kGpuShareUnits + d.memory - 1) / d.memory);
      const int64_t memory = job.gpu_memory_mib > 0 ? job.gpu_memory_mib : d.memory * share / kGpuShareUnits;
      if (d.share >= share && d.free_memory >= memory) return true;
    }
    return false;
  }
  std::map<int, int> by_island;
  int free = 0;
  for (const ODevice& d : n.devices) {
    if (!Matches(d, job.gpu_type) || d.share != kGpuShareUnits) continue;
    ++free;
    ++by_island[d.island];
  }
  if (!job.topology_required || job.gpus_per_node <= 1) return free >= job.gpus_per_node;
  for (const auto& [island, count] : by_island) {
    if (count >= job.gpus_per_node) return true;
  }
  return false;
}

bool OracleGang(const std::vector<ONode>& nodes, const JobRequest& job) {
  std::vector<std::string> listed;
  for (size_t p = 0; p < job.nodelist.size();) {
    const size_t comma = std::min(job.nodelist.find(',', p), job.nodelist.size());
    listed.push_back(job.nodelist.substr(p, comma - p));
    p = comma + 1;
  }
  std::map<std::string, int> per_switch;
  int hosts = 0;
  for (const ONode& n : nodes) {
    const bool host = OracleMember(n, job);
    const bool named = std::find(listed.begin(), listed.end(), n.id) != listed.end();
    if (named && !host) return false;
    hosts += host;
    if (host) ++per_switch[n.sw];
  }
  if (hosts < job.nodes) return false;
  if (job.nodes > 1 && job.topology_required && listed.empty()) {
    return std::any_of(per_switch.begin(), per_switch.end(), [&](const auto& s) { return s.second >= job.nodes; });
  }
  return true;
}

// The earliest start of `head` once `events` (in any order) have ended; kNever when only
// jobs without a limit free enough, nullopt when not even all of them do.
std::optional<int64_t> Earliest(std::vector<ONode> nodes, std::vector<OEvent> events, const JobRequest& head,
                                int64_t now) {
  if (OracleGang(nodes, head)) return now;
  std::sort(events.begin(), events.end(), [](const OEvent& a, const OEvent& b) { return a.end < b.end; });
  for (size_t i = 0; i < events.size() && events[i].end != kNever;) {
    const int64_t t = std::max(events[i].end, now);
    for (; i < events.size() && std::max(events[i].end, now) == t; ++i) Give(nodes[events[i].node], events[i]);
    if (OracleGang(nodes, head)) return t;
  }
  for (ONode& n : nodes) {
    for (ODevice& d : n.devices) d.share = kGpuShareUnits, d.free_memory = d.memory;
    n.cpus = n.cap_cpus;
    n.mem = n.cap_mem;
  }
  if (OracleGang(nodes, head)) return kNever;
  return std::nullopt;
}

// The snapshot and decision, for a failure's message.
std::string Describe(const Snapshot& s, const Decision& d) {
  std::string out;
  for (const RunningJob& r : s.running) {
    out += "running " + std::to_string(r.id) + " end " +
           (r.end_ms == kNever ? std::string("never") : std::to_string((r.end_ms - kT) / kMinute) + "m") + ":";
    for (const Usage& u : r.usage) {
      out += " " + u.node + " cpus " + std::to_string(u.cpus) + " mem " + std::to_string(u.memory_mb / kGib) + "G";
      for (int g : u.devices) out += " d" + std::to_string(g);
      for (const GpuSlice& sl : u.slices) out += " s" + std::to_string(sl.gpu) + "/" + std::to_string(sl.share);
    }
    out += "\n";
  }
  for (const NodeView& n : s.nodes) {
    if (!n.unavailable.empty()) out += n.id + " " + n.unavailable + "\n";
  }
  for (const JobRequest& j : s.pending) {
    out += "pending " + std::to_string(j.id) + ": " + std::to_string(j.nodes) + "x" + std::to_string(j.gpus_per_node) +
           " type '" + j.gpu_type + "' share " + std::to_string(j.gpu_share) + " gmem " +
           std::to_string(j.gpu_memory_mib) + " topo " + std::to_string(j.topology_required) + " cpus " +
           std::to_string(j.cpus_per_task) + " mem " + std::to_string(j.mem_per_node_mb / kGib) + "G constraint '" +
           j.constraint + "' nodelist '" + j.nodelist + "' exclude '" + j.exclude + "' limit " +
           std::to_string(j.time_limit_ms / kMinute) + "m spread " + std::to_string(j.placement == Placement::kSpread) +
           " -> " + (Where(d, j.id).empty() ? Reason(d, j.id) : Where(d, j.id)) +
           (Find(d, j.id) && Find(d, j.id)->backfilled ? " (backfilled)" : "") + "\n";
  }
  return out;
}

struct Case {
  int checked = 0;      // reservations checked
  int detailed = 0;     // ... of a head job in detail or with constraints
  int outlasting = 0;   // ... with a backfilled job that outlasts the reserved start
};

void RunSeed(uint64_t seed, Case* stats) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const std::vector<DetailNode> cluster = Nodes();

  // Running jobs: whole devices (1-4 in a row) or slices, each until a random end.
  std::vector<RunningJob> running;
  int64_t id = 1;
  for (const DetailNode& n : cluster) {
    int cpus_left = n.cpus;
    int64_t mem_left = n.memory_mb;
    for (int g = 0; g < 8;) {
      const int64_t roll = uniform(0, 9);
      if (roll < 4) {
        ++g;
        continue;
      }
      RunningJob r;
      r.id = id++;
      r.start_ms = kT - kMinute;
      r.end_ms = uniform(0, 4) == 0 ? kNever : kT + uniform(-1, 60) * kMinute;
      const int cpus = static_cast<int>(std::min<int64_t>(uniform(1, 4), cpus_left));
      const int64_t mem = std::min<int64_t>(uniform(0, 2) * 48 * kGib, mem_left);
      cpus_left -= cpus;
      mem_left -= mem;
      if (roll < 8) {
        const int k = static_cast<int>(std::min<int64_t>(uniform(1, 4), 8 - g));
        std::vector<int> devices;
        for (int i = 0; i < k; ++i) devices.push_back(g + i);
        r.usage.push_back(Whole(n.id, devices, cpus, mem));
        g += k;
      } else {
        Usage u = Slice(n.id, g, static_cast<int>(uniform(1, 2)), 0, cpus);
        u.slices[0].memory_mib = 81'920 * u.slices[0].share / kGpuShareUnits;
        u.memory_mb = mem;
        if (uniform(0, 1) == 0) {
          u.slices.push_back(GpuSlice{g, 1, 81'920 / kGpuShareUnits});  // a second task on the same GPU
        }
        r.usage.push_back(std::move(u));
        ++g;
      }
      running.push_back(std::move(r));
    }
  }
  Snapshot s = DetailSnapshot(kT, cluster, running);
  if (uniform(0, 9) == 0) s.nodes[static_cast<size_t>(uniform(0, 5))].unavailable = "draining";

  // The queue, in submit order.
  const int jobs = static_cast<int>(uniform(4, 14));
  for (int j = 0; j < jobs; ++j) {
    JobRequest job = GpuJob(1000 + j, 1, static_cast<int>(uniform(1, 8)));
    job.time_limit_ms = uniform(0, 3) == 0 ? 0 : uniform(1, 90) * kMinute;
    job.placement = uniform(0, 3) == 0 ? Placement::kSpread : Placement::kPack;
    switch (uniform(0, 10)) {
      case 0: break;  // plain
      case 1: job.gpu_type = uniform(0, 1) ? "h100" : "a100"; break;
      case 2:
        job.gpus_per_node = 0;
        job.gpu_share = static_cast<int>(uniform(1, 2));
        if (uniform(0, 1)) job.gpu_type = "h100";
        break;
      case 3:
        job.gpus_per_node = 0;
        job.gpu_memory_mib = 30 * kGib;
        break;
      case 4:
        job.gpus_per_node = uniform(0, 1) ? 2 : 4;
        job.topology_required = true;
        break;
      case 5:
        job.nodes = 2;
        job.gpus_per_node = static_cast<int>(uniform(4, 8));
        job.topology_required = true;
        break;
      case 6:
        job.constraint = "ib";
        if (uniform(0, 1)) job.mem_per_node_mb = uniform(1, 4) * 48 * kGib;
        break;
      case 7:
        job.nodes = static_cast<int>(uniform(1, 2));
        job.nodelist = "n" + std::to_string(uniform(0, 5));
        break;
      case 8: job.exclude = "n" + std::to_string(uniform(0, 5)); break;
      case 9:
        job.gpus_per_node = 0;
        job.cpus_per_task = static_cast<int>(uniform(1, 16));
        job.mem_per_node_mb = uniform(1, 5) * 48 * kGib;
        break;
      default:
        job.nodes = 2;  // a plain gang (over switches: placed in detail, preferring one)
        break;
    }
    s.pending.push_back(job);
  }

  const Decision d = Schedule(s);

  // No device over-given.
  std::map<std::pair<std::string, int>, int> units;
  for (const RunningJob& r : s.running) {
    for (const Usage& u : r.usage) {
      for (int g : u.devices) units[{u.node, g}] += kGpuShareUnits;
      for (const GpuSlice& sl : u.slices) units[{u.node, sl.gpu}] += sl.share;
    }
  }
  for (const JobPlacement& p : d.start) {
    for (const NodeAssignment& a : p.nodes) {
      if (a.slices.empty()) {
        for (int g : a.gpus) units[{a.node, g}] += kGpuShareUnits;
      }
      for (const GpuSlice& sl : a.slices) units[{a.node, sl.gpu}] += sl.share;
    }
  }
  for (const auto& [gpu, held] : units) ASSERT_LE(held, kGpuShareUnits) << gpu.first << ":" << gpu.second;

  if (!d.reservation) return;
  std::map<int64_t, const JobRequest*> by_id;
  for (const JobRequest& j : s.pending) by_id[j.id] = &j;
  const JobRequest& head = *by_id.at(d.reservation->job_id);

  // The oracle's view of now: the snapshot's nodes, less what the given starts take.
  std::vector<ONode> base;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < cluster.size(); ++i) {
    ONode n;
    n.ok = s.nodes[i].unavailable.empty();
    n.id = cluster[i].id;
    n.sw = cluster[i].network_switch;
    n.features = cluster[i].features;
    for (const GpuView& g : s.nodes[i].gpus) {
      n.devices.push_back(ODevice{g.type, g.nvlink_island, g.memory_mib, g.free_share, g.free_memory_mib});
    }
    n.cpus = s.nodes[i].free_cpus;
    n.cap_cpus = cluster[i].cpus;
    n.mem = s.nodes[i].free_memory_mb;
    n.cap_mem = cluster[i].memory_mb;
    index[n.id] = i;
    base.push_back(std::move(n));
  }
  std::vector<OEvent> events;
  for (const RunningJob& r : s.running) {
    for (const Usage& u : r.usage) events.push_back({r.end_ms, index.at(u.node), u.devices, u.slices, u.cpus, u.memory_mb});
  }
  const auto with_starts = [&](bool backfilled) {
    std::pair<std::vector<ONode>, std::vector<OEvent>> out{base, events};
    for (const JobPlacement& p : d.start) {
      if (p.backfilled && !backfilled) continue;
      const JobRequest& job = *by_id.at(p.job_id);
      const int64_t end = job.time_limit_ms > 0 ? kT + job.time_limit_ms : kNever;
      for (const NodeAssignment& a : p.nodes) {
        OEvent e{end, index.at(a.node), a.slices.empty() ? a.gpus : std::vector<int>{}, a.slices, a.cpus,
                 job.mem_per_node_mb};
        TakeFrom(out.first[e.node], e);
        out.second.push_back(std::move(e));
      }
    }
    return out;
  };
  const bool in_detail = NeedsGpuDetail(head) || IsConstrained(head);
  auto [before_nodes, before_events] = with_starts(false);
  const std::optional<int64_t> planned = Earliest(before_nodes, before_events, head, kT);
  ASSERT_TRUE(planned.has_value()) << "job " << head.id << " was reserved for but can never fit";
  if (in_detail) {
    EXPECT_EQ(*planned, d.reservation->start_ms) << "job " << head.id << ": the projection";
  }
  auto [after_nodes, after_events] = with_starts(true);
  const std::optional<int64_t> after = Earliest(after_nodes, after_events, head, kT);
  ASSERT_TRUE(after.has_value()) << "job " << head.id << " can never start once the backfilled jobs run";
  EXPECT_LE(*after, d.reservation->start_ms) << "job " << head.id << " delayed by a backfilled job\n"
                                             << Describe(s, d);
  ++stats->checked;
  stats->detailed += in_detail;
  for (const JobPlacement& p : d.start) {
    const JobRequest& job = *by_id.at(p.job_id);
    if (p.backfilled && (job.time_limit_ms == 0 || kT + job.time_limit_ms > d.reservation->start_ms)) {
      ++stats->outlasting;
      break;
    }
  }
}

TEST(DetailBackfillProperty, BackfilledJobsNeverDelayTheHeadJob) {
  Case stats;
  for (uint64_t seed = 1; seed <= 3000 && !::testing::Test::HasFailure(); ++seed) RunSeed(seed, &stats);
  // The traces must exercise the cases the property is about.
  EXPECT_GE(stats.detailed, 500) << "reservations for head jobs in detail or with constraints";
  EXPECT_GE(stats.outlasting, 300) << "reservations with a backfilled job that outlasts the start";
  RecordProperty("checked", stats.checked);
  std::printf("checked %d reservations, %d in detail or constrained, %d with an outlasting backfilled job\n",
              stats.checked, stats.detailed, stats.outlasting);
}

}  // namespace
}  // namespace cohort::sched
