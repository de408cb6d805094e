#include "head/core/agents.h"

#include <algorithm>
#include <map>

#include "common/clock.h"
#include "head/core/gpu_health.h"
#include "head/core/lifecycle.h"
#include "head/core/liveness.h"
#include "head/core/timing.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Job;
using api::NodeState;

namespace {

bool SameTask(const api::TaskReport& a, const api::TaskReport& b) {
  return a.job == b.job && a.attempt == b.attempt && a.rank == b.rank;
}

// A new agent process on a known node: the previous one's tasks are gone with it.
void ForgetPreviousAgent(Tx& tx, const api::Registration& reg) {
  FailJobsOnNode(tx, reg.name, fmt::format("node {} restarted: its agent's tasks are gone", reg.name));
  NodeRuntime& rt = tx.s.runtime[reg.name];
  rt.reported.clear();
  rt.reported_since_load = true;  // a new agent runs nothing yet
  rt.stopping.clear();  // they died with the previous agent process
  rt.applied_version = 0;
  // A new agent process counts health events from 0 again.
  rt.telemetry.clear();
  rt.health_seen.clear();
  rt.health_baseline = true;
  tx.fx.Info("node {} re-registered with a new agent (incarnation {})", reg.name, reg.incarnation);
}

// Heartbeat step: the node is alive now; a DOWN node comes back UP.
void MarkAlive(Tx& tx, api::Node& node, NodeRuntime& rt) {
  Heard(rt, tx.now);
  node.last_heartbeat_ms = tx.now.unix_ms;
  if (node.state != NodeState::kDown) return;
  node.state = NodeState::kUp;
  node.reason.clear();
  tx.fx.StoreNode(node);
  tx.RequestSchedule();
  tx.fx.Info("node {} is UP again", node.name);
}

// Heartbeat step: takes the reported tasks as the node's running set. A task of an ended
// attempt that stopped frees its GPUs, and so does a confirmed stopping attempt: schedule
// now, not at the next periodic pass.
void RecordReportedTasks(Tx& tx, NodeRuntime& rt, const api::Heartbeat& hb) {
  for (const auto& old : rt.reported) {
    if (!old.running) continue;
    bool current = CurrentAttempt(tx.s, old.job, old.attempt) != nullptr;
    bool still = std::any_of(hb.tasks.begin(), hb.tasks.end(),
                             [&](const api::TaskReport& t) { return t.running && SameTask(t, old); });
    if (!current && !still) {
      tx.RequestSchedule();
      break;
    }
  }
  rt.reported = hb.tasks;
  if (!rt.reported_since_load) {
    rt.reported_since_load = true;  // its tasks are known: the node may take work again
    tx.RequestSchedule();
  }
  if (!hb.free_ports.empty()) rt.free_ports = hb.free_ports;
  rt.applied_version = std::max(rt.applied_version, hb.applied_version);
  if (ConfirmStopped(rt)) tx.RequestSchedule();
}

// Heartbeat step: records the exit of each finished task of a current attempt placed on
// this node, and acknowledges every finished task (stored before the reply goes out).
void RecordExits(Tx& tx, const std::string& node, const api::Heartbeat& hb, api::HeartbeatReply& reply) {
  for (const auto& t : hb.tasks) {
    if (t.running) continue;
    Job* job = CurrentAttempt(tx.s, t.job, t.attempt);
    if (job && !job->HasExit(t.rank)) {
      bool here = std::any_of(job->allocation.nodes.begin(), job->allocation.nodes.end(),
                              [&](const api::NodeAllocation& na) {
                                return na.node == node && std::any_of(na.tasks.begin(), na.tasks.end(),
                                                                      [&](const auto& tp) { return tp.rank == t.rank; });
                              });
      if (here) RecordExit(tx, *job, node, t);
    }
    reply.acked.push_back({t.job, t.attempt, t.rank});
  }
}

// Heartbeat step: a task the agent has been told about (this heartbeat's applied version
// covers its allocation's) but neither runs nor reports finished is gone: its gang fails.
// This heartbeat's own version, not the highest seen: a heartbeat that was sent before the
// agent applied the allocation and reaches the head after a newer one (its client gave up
// on a slow reply and sent the next) lists what the agent ran then, not a lost task.
void FailMissingTasks(Tx& tx, const std::string& node, const api::Heartbeat& hb) {
  auto nj = tx.s.node_jobs.find(node);
  if (nj == tx.s.node_jobs.end()) return;
  std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
  for (api::JobId id : ids) {
    Job& job = tx.s.jobs.at(id);
    for (const auto& na : job.allocation.nodes) {
      if (na.node != node || na.version > hb.applied_version) continue;
      for (const auto& tp : na.tasks) {
        if (job.HasExit(tp.rank)) continue;
        bool seen = std::any_of(hb.tasks.begin(), hb.tasks.end(), [&](const api::TaskReport& r) {
          return r.job == id && r.attempt == job.attempt && r.rank == tp.rank;
        });
        if (seen) continue;
        FailGang(tx, job, fmt::format("rank {} on {} is gone (its agent no longer has the task)", tp.rank, node),
                 std::nullopt, /*may_restart=*/true);
        break;
      }
      break;
    }
  }
}

}  // namespace

Result<RegisterResult> Register(ClusterState& s, const Context& ctx, const api::Registration& reg, Now now) {
  Tx tx(s, ctx, now);
  auto it = s.nodes.find(reg.name);
  std::map<std::string, std::string> unhealthy;  // uuid → reason: marks survive a new agent
  if (it != s.nodes.end()) {
    const api::Node& n = it->second;
    if (n.incarnation != reg.incarnation) {
      const NodeRuntime& rt = s.runtime[reg.name];
      int64_t age = HeartbeatAgeMs(rt, now);
      if (n.state == NodeState::kUp && age < NodeFailureTimeoutMs(s, ctx, rt, now)) {
        return Errorf(ErrorCode::kAlreadyExists,
                      "node '{}' is already registered by a running agent (incarnation {}, last "
                      "heartbeat {} ago); stop that agent or choose another --name",
                      reg.name, n.incarnation, FormatDuration(age));
      }
      ForgetPreviousAgent(tx, reg);
    } else if (n.state == NodeState::kDown) {
      tx.fx.Info("node {} is back (same agent incarnation)", reg.name);
    }
    for (const auto& g : n.gpus) {
      if (!g.healthy) unhealthy[g.uuid] = g.health_reason;
    }
  } else {
    tx.fx.Info("node {} registered: {} GPU(s), {} CPU(s), address {}", reg.name, reg.gpus.size(), reg.cpus,
               reg.address);
    s.runtime[reg.name].health_baseline = true;
  }
  auto [node_it, is_new] = s.nodes.try_emplace(reg.name);
  api::Node& n = node_it->second;
  if (!is_new) NoteShape(s, n, -1);  // its GPUs or CPUs may differ now
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
  n.labels = reg.labels;
  n.features = reg.features;
  n.memory_bytes = reg.memory_bytes;
  n.gpu_sharing = reg.gpu_sharing;
  NoteShape(s, n, +1);
  n.state = NodeState::kUp;
  n.reason.clear();
  n.registered_ms = now.unix_ms;
  n.last_heartbeat_ms = n.registered_ms;
  NodeRuntime& rt = s.runtime[reg.name];
  Heard(rt, now);
  rt.free_ports = reg.free_ports;  // until its first heartbeat's
  tx.fx.StoreNode(n);
  tx.RequestSchedule();
  RegisterResult out;
  out.timing = CurrentTiming(s, ctx);  // with this node counted
  Grant(rt, out.timing, now);
  out.effects = std::move(tx.fx);
  return out;
}

Result<HeartbeatResult> Heartbeat(ClusterState& s, const Context& ctx, const std::string& name,
                                  const api::Heartbeat& hb, Now now) {
  auto it = s.nodes.find(name);
  if (it == s.nodes.end()) {
    return Errorf(ErrorCode::kNotFound, "node '{}' is not registered; register first", name);
  }
  api::Node& node = it->second;
  if (node.incarnation != hb.incarnation) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "agent incarnation {} is not the one registered for node '{}' ({}); register again",
                  hb.incarnation, name, node.incarnation);
  }
  Tx tx(s, ctx, now);
  NodeRuntime& rt = s.runtime[name];
  AccountUnheardTime(tx);
  ExcuseFencesAfterSilence(tx, name, rt);
  MarkAlive(tx, node, rt);
  RecordReportedTasks(tx, rt, hb);
  ++s.counters.heartbeats;
  ApplyGpuReports(tx, node, rt, hb.gpus);
  HeartbeatResult out;
  RecordExits(tx, name, hb, out.reply);
  FailMissingTasks(tx, name, hb);
  out.reply.version = rt.desired_version;
  out.reply.tasks = DesiredTasks(s, ctx, name, now, hb.tasks);
  out.reply.timing = CurrentTiming(s, ctx);
  Grant(rt, out.reply.timing, now);
  out.effects = std::move(tx.fx);
  return out;
}

}  // namespace cohort::head::core
