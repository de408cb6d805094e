// The head's side of the agent protocol: registration and heartbeats.
//
// Exactly-once exits: an agent repeats a finished task in every heartbeat until the head
// acknowledges it, and the head acknowledges only after the exit is stored. Lost tasks:
// every node allocation carries the node's assignment version; once an agent reports
// having applied that version, a task it neither runs nor reports finished is gone (the
// agent restarted, or the task never started), and its gang fails.
#include <algorithm>

#include "common/log.h"
#include "head/cluster.h"

namespace cohort::head {

using api::Job;
using api::JobState;
using api::NodeState;


Result<api::AgentTiming> Cluster::Register(const api::Registration& reg) {
  std::unique_lock lock(mu_);
  auto now = SteadyClock::now();
  auto it = nodes_.find(reg.name);
  if (it != nodes_.end()) {
    api::Node& n = it->second;
    NodeRuntime& rt = runtime_[reg.name];
    if (n.incarnation != reg.incarnation) {
      int64_t age = HeartbeatAgeMs(rt);
      if (n.state == NodeState::kUp && age < config_.timing.failure_timeout_ms) {
        return Errorf(ErrorCode::kAlreadyExists,
                      "node '{}' is already registered by a running agent (incarnation {}, last "
                      "heartbeat {} ago); stop that agent or choose another --name",
                      reg.name, n.incarnation, FormatDuration(age));
      }
      // The previous agent process is gone, and with it every task it ran.
      if (auto nj = node_jobs_.find(reg.name); nj != node_jobs_.end()) {
        std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
        for (api::JobId id : ids) {
          FailGangLocked(jobs_.at(id),
                         fmt::format("node {} restarted: its agent's tasks are gone", reg.name),
                         std::nullopt, /*may_restart=*/true);
        }
      }
      rt.reported.clear();
      rt.stopping.clear();  // they died with the previous agent process
      rt.applied_version = 0;
      // A new agent process counts health events from 0 again.
      rt.telemetry.clear();
      rt.health_seen.clear();
      rt.health_baseline = true;
      LOG_INFO("node {} re-registered with a new agent (incarnation {})", reg.name, reg.incarnation);
    } else if (n.state == NodeState::kDown) {
      LOG_INFO("node {} is back (same agent incarnation)", reg.name);
    }
  } else {
    LOG_INFO("node {} registered: {} GPU(s), {} CPU(s), address {}", reg.name, reg.gpus.size(),
             reg.cpus, reg.address);
    runtime_[reg.name].health_baseline = true;
  }
  // Unhealthy marks survive a new agent (the operator clears them with resume).
  std::map<std::string, std::string> unhealthy;  // uuid → reason
  if (it != nodes_.end()) {
    for (const auto& g : it->second.gpus) {
      if (!g.healthy) unhealthy[g.uuid] = g.health_reason;
    }
  }
  api::Node& n = nodes_[reg.name];
  n.name = reg.name;
  n.address = reg.address;
  n.agent_url = reg.agent_url;
  n.incarnation = reg.incarnation;
  n.version = reg.version;
  n.gpus = reg.gpus;
  for (auto& g : n.gpus) {
    if (auto u = unhealthy.find(g.uuid); u != unhealthy.end()) {
      g.healthy = false;
      g.health_reason = u->second;
    }
  }
  n.cpus = reg.cpus;
  n.state = NodeState::kUp;
  n.reason.clear();
  n.registered_ms = NowUnixMs();
  n.last_heartbeat_ms = n.registered_ms;
  runtime_[reg.name].last_seen = now;
  MarkDirtyLocked(n);
  auto flushed = FlushLocked();
  RequestScheduleLocked();
  UnlockAndWake(lock);
  if (!flushed) return MakeError(ErrorCode::kUnavailable, "cannot store the node: " + flushed.error().message);
  return config_.timing;
}

Result<api::HeartbeatReply> Cluster::Heartbeat(const std::string& name, const api::Heartbeat& hb) {
  std::unique_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return Errorf(ErrorCode::kNotFound, "node '{}' is not registered; register first", name);
  }
  api::Node& node = it->second;
  if (node.incarnation != hb.incarnation) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "agent incarnation {} is not the one registered for node '{}' ({}); register again",
                  hb.incarnation, name, node.incarnation);
  }
  NodeRuntime& rt = runtime_[name];
  rt.last_seen = SteadyClock::now();
  node.last_heartbeat_ms = NowUnixMs();
  if (node.state == NodeState::kDown) {
    node.state = NodeState::kUp;
    node.reason.clear();
    MarkDirtyLocked(node);
    RequestScheduleLocked();
    LOG_INFO("node {} is UP again", name);
  }
  // A task of an ended attempt that stopped frees its GPUs: schedule now, not at the next
  // periodic pass.
  for (const auto& old : rt.reported) {
    if (!old.running) continue;
    auto j = jobs_.find(old.job);
    bool current = j != jobs_.end() && j->second.state == JobState::kRunning && j->second.attempt == old.attempt;
    bool still = std::any_of(hb.tasks.begin(), hb.tasks.end(), [&](const api::TaskReport& t) {
      return t.running && t.job == old.job && t.attempt == old.attempt && t.rank == old.rank;
    });
    if (!current && !still) {
      RequestScheduleLocked();
      break;
    }
  }
  rt.reported = hb.tasks;
  if (!hb.free_ports.empty()) rt.free_ports = hb.free_ports;
  rt.applied_version = std::max(rt.applied_version, hb.applied_version);
  if (ConfirmStoppedLocked(rt)) RequestScheduleLocked();
  ++heartbeats_;
  ApplyGpuReportsLocked(node, rt, hb.gpus);

  api::HeartbeatReply reply;
  bool changed = false;
  for (const auto& t : hb.tasks) {
    if (t.running) continue;
    auto j = jobs_.find(t.job);
    if (j != jobs_.end() && j->second.state == JobState::kRunning && j->second.attempt == t.attempt &&
        !j->second.HasExit(t.rank)) {
      bool here = std::any_of(j->second.allocation.nodes.begin(), j->second.allocation.nodes.end(),
                              [&](const api::NodeAllocation& na) {
                                return na.node == name &&
                                       std::any_of(na.tasks.begin(), na.tasks.end(),
                                                   [&](const auto& tp) { return tp.rank == t.rank; });
                              });
      if (here) {
        RecordExitLocked(j->second, name, t);
        changed = true;
      }
    }
    reply.acked.push_back({t.job, t.attempt, t.rank});
  }

  // Tasks this agent has been told about but no longer has.
  if (auto nj = node_jobs_.find(name); nj != node_jobs_.end()) {
    std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
    for (api::JobId id : ids) {
      Job& job = jobs_.at(id);
      for (const auto& na : job.allocation.nodes) {
        if (na.node != name || na.version > rt.applied_version) continue;
        for (const auto& tp : na.tasks) {
          if (job.HasExit(tp.rank)) continue;
          bool seen = std::any_of(hb.tasks.begin(), hb.tasks.end(), [&](const api::TaskReport& r) {
            return r.job == id && r.attempt == job.attempt && r.rank == tp.rank;
          });
          if (seen) continue;
          FailGangLocked(job,
                         fmt::format("rank {} on {} is gone (its agent no longer has the task)", tp.rank, name),
                         std::nullopt, /*may_restart=*/true);
          changed = true;
          break;
        }
        break;
      }
    }
  }

  if (changed || !dirty_jobs_.empty() || !dirty_nodes_.empty()) {
    auto flushed = FlushLocked();
    if (!flushed) {
      UnlockAndWake(lock);
      return MakeError(ErrorCode::kUnavailable, "cannot store task exits: " + flushed.error().message);
    }
  }
  reply.version = rt.desired_version;
  reply.tasks = DesiredTasksLocked(name);
  reply.timing = config_.timing;
  UnlockAndWake(lock);
  return reply;
}

}  // namespace cohort::head
