#include "head/core/lifecycle.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "api/gpu_spec.h"
#include "api/job_env.h"
#include "common/clock.h"
#include "head/core/drain.h"
#include "head/core/gpu_detail.h"
#include "head/core/job_limits.h"
#include "head/core/liveness.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

namespace {

void CloseAttempt(Job& job, int64_t now, const std::string& reason) {
  if (!job.history.empty() && job.history.back().attempt == job.attempt && job.history.back().end_ms == 0) {
    job.history.back().end_ms = now;
    job.history.back().end_reason = reason;
  }
}

// Takes the job off its nodes: its rendezvous keys go, each node gets a new assignment
// version, and the attempt stays fenced on every UP node until its agent confirms the
// tasks gone (a DOWN node's tasks are already fenced; tasks that all exited need nothing).
void DetachJob(Tx& tx, const Job& job) {
  tx.fx.drop_rendezvous.push_back(job.id);
  for (const auto& na : job.allocation.nodes) {
    auto it = tx.s.node_jobs.find(na.node);
    if (it != tx.s.node_jobs.end()) {
      it->second.erase(job.id);
      if (it->second.empty()) tx.s.node_jobs.erase(it);
    }
    tx.BumpVersion(na.node);
    auto n = tx.s.nodes.find(na.node);
    bool all_exited = std::all_of(na.tasks.begin(), na.tasks.end(),
                                  [&](const api::TaskPlacement& t) { return job.HasExit(t.rank); });
    if (n == tx.s.nodes.end() || n->second.state != api::NodeState::kUp || all_exited) continue;
    NodeRuntime& rt = tx.s.runtime[na.node];
    rt.stopping.push_back({job.id, job.attempt, na.gpus, na.cpus, rt.desired_version});
  }
  tx.RequestSchedule();
}

}  // namespace

void StartJob(Tx& tx, Job& job, const std::vector<NodePlacement>& nodes) {
  const int64_t now = tx.now.unix_ms;
  const int tpn = job.spec.tasks_per_node;
  const int gpt = job.spec.gpus_per_task();
  // Queue wait: since submission, or since the previous attempt ended.
  int64_t queued_since = job.history.empty() ? job.submit_ms : job.history.back().end_ms;
  if (queued_since > 0 && now >= queued_since) tx.fx.queue_wait_seconds.push_back((now - queued_since) / 1000.0);
  tx.CountTransition(job.state, JobState::kRunning);
  job.state = JobState::kRunning;
  job.reason.clear();
  job.start_ms = now;
  job.end_ms = 0;
  job.exit_code.reset();
  job.exits.clear();
  job.allocation = {};
  api::AttemptRecord rec;
  rec.attempt = job.attempt;
  rec.start_ms = now;
  rec.gpus = 0;
  for (const auto& n : nodes) {
    rec.gpus += n.slices.empty() ? static_cast<int>(n.gpus.size()) : 0;
    for (const sched::GpuSlice& slice : n.slices) rec.gpu_share_units += slice.share;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodePlacement& p = nodes[i];
    tx.BumpVersion(p.node);
    api::NodeAllocation na;
    na.node = p.node;
    na.address = tx.s.nodes.at(p.node).address;
    na.node_rank = static_cast<int>(i);
    na.gpus = p.gpus;
    na.cpus = p.cpus;
    na.version = tx.s.runtime[p.node].desired_version;
    if (!p.slices.empty()) na.gpu_sharing = tx.s.nodes.at(p.node).gpu_sharing;
    for (int l = 0; l < tpn; ++l) {
      api::TaskPlacement t;
      t.rank = static_cast<int>(i) * tpn + l;
      t.local_rank = l;
      if (static_cast<size_t>(l) < p.slices.size()) {
        const sched::GpuSlice& slice = p.slices[static_cast<size_t>(l)];
        t.gpus.push_back(slice.gpu);
        t.gpu_share = slice.share;
        t.gpu_memory_mib = slice.memory_mib;
      } else {
        for (int g = 0; g < gpt; ++g) t.gpus.push_back(p.gpus[static_cast<size_t>(l * gpt + g)]);
      }
      AddMigDevices(tx.s.nodes.at(p.node), t);
      na.tasks.push_back(std::move(t));
    }
    job.allocation.nodes.push_back(std::move(na));
    tx.s.node_jobs[p.node].insert(job.id);
    rec.nodes.push_back(p.node);
  }
  // MASTER_PORT: a port the rank-0 node found free, else one derived from the job; never
  // the port of another running job whose rank 0 is on that node. Its program binds the
  // port only once it has started (seconds, for `import torch`), so a heartbeat sent in
  // between still lists that port as free.
  const std::string& master_node = nodes.front().node;
  auto taken = [&](int port) {
    for (api::JobId id : tx.s.node_jobs[master_node]) {
      auto it = tx.s.jobs.find(id);
      if (id == job.id || it == tx.s.jobs.end() || it->second.allocation.nodes.empty()) continue;
      const api::Allocation& other = it->second.allocation;
      if (other.master_port == port && other.nodes.front().node == master_node) return true;
    }
    return false;
  };
  auto& ports = tx.s.runtime[master_node].free_ports;
  job.allocation.master_addr = job.allocation.nodes.front().address;
  job.allocation.master_port = 0;
  while (!ports.empty() && job.allocation.master_port == 0) {
    if (!taken(ports.back())) job.allocation.master_port = ports.back();
    ports.pop_back();
  }
  for (int k = 0; job.allocation.master_port == 0; ++k) {
    int port = 20000 + static_cast<int>((job.id * 31 + job.attempt + k) % 10000);
    if (!taken(port) || k >= 10000) job.allocation.master_port = port;
  }
  job.history.push_back(std::move(rec));
  tx.s.pending.erase(job.id);
  tx.s.pending_reasons.erase(job.id);
  tx.fx.StoreJob(job);
  tx.fx.Info("job {} attempt {} started on {} node(s): {}", job.id, job.attempt, nodes.size(),
             fmt::join(job.history.back().nodes, ","));
}

void FinishJob(Tx& tx, Job& job, JobState state, std::string reason, std::optional<int> exit_code,
               int64_t ended_ms) {
  const int64_t now = ended_ms > 0 ? ended_ms : tx.now.unix_ms;
  if (job.state == JobState::kRunning) DetachJob(tx, job);
  CloseAttempt(job, now, reason);
  job.move.reset();
  job.held = false;  // a held job ends only by cancel; the hold ends with it
  job.held_by.clear();
  tx.s.pending.erase(job.id);
  tx.s.pending_reasons.erase(job.id);
  tx.CountTransition(job.state, state);
  if (!api::IsTerminal(job.state)) CountOpenJob(tx.s, job.spec.user, -1);
  job.state = state;
  job.reason = std::move(reason);
  job.end_ms = now;
  job.exit_code = exit_code;
  tx.fx.StoreJob(job);
  tx.fx.Info("job {} {}: {}", job.id, api::JobStateName(state), job.reason);
}

void Requeue(Tx& tx, Job& job, const std::string& why, int64_t ended_ms) {
  if (job.state == JobState::kRunning) DetachJob(tx, job);
  CloseAttempt(job, ended_ms > 0 ? ended_ms : tx.now.unix_ms, why);
  job.move.reset();
  job.attempt += 1;
  tx.CountTransition(job.state, JobState::kPending);
  job.state = JobState::kPending;
  job.exits.clear();
  job.allocation = {};
  tx.s.pending.insert(job.id);
  tx.fx.StoreJob(job);
}

void MoveJob(Tx& tx, Job& job, const std::string& why) {
  Requeue(tx, job, why);
  job.moves += 1;
  job.reason = fmt::format("moved: {}", why);
  tx.fx.Info("job {} moved as attempt {}: {}", job.id, job.attempt, why);
}

void FoldOldestAttempts(const api::JobSpec& spec, std::vector<api::AttemptRecord>& history, size_t keep) {
  keep = std::max<size_t>(keep, 2);
  size_t folded = 0;  // records folded into history[0]
  while (history.size() - folded > keep) {
    api::AttemptRecord& first = history[0];
    const api::AttemptRecord& next = history[folded + 1];
    if (first.end_ms <= 0 || next.end_ms <= 0 || next.start_ms <= 0) break;  // never an open attempt
    const double first_gpus = api::AttemptGpuAmount(spec, first);
    const double next_gpus = api::AttemptGpuAmount(spec, next);
    int64_t ran = std::max<int64_t>(0, next.end_ms - next.start_ms);
    if (first_gpus > 0) {
      ran = std::llround(static_cast<double>(ran) * next_gpus / first_gpus);  // the same GPU-seconds
    } else if (next_gpus > 0) {
      first.gpus = next.gpus;  // a record of no GPU time takes the amount of the one that has some
      first.gpu_share_units = next.gpu_share_units;
      first.end_ms = first.start_ms;
    }
    first.end_ms += ran;
    first.end_reason = fmt::format("attempts {}-{}, folded into one record (the history keeps {}); the last ended: {}",
                                   first.attempt, next.attempt, keep, next.end_reason);
    ++folded;
  }
  history.erase(history.begin() + 1, history.begin() + 1 + static_cast<std::ptrdiff_t>(folded));
}

void RestartReplica(Tx& tx, Job& job, const std::string& why) {
  Requeue(tx, job, why);
  FoldOldestAttempts(job.spec, job.history, kMaxReplicaHistory);  // stored with the requeue's record
  const ReplicaBackoff b = ReplicaBackoffOf(job);
  if (b.delay_ms > 0) {
    job.reason = fmt::format("replica restarting after: {} (attempt {}; crash loop: {} attempts in a row ended "
                             "within {} of starting, so it waits {} to start)",
                             why, job.attempt, b.QuickEndsText(), FormatDuration(kReplicaQuickEndMs),
                             FormatDuration(b.delay_ms));
  } else {
    job.reason = fmt::format("replica restarting after: {} (attempt {})", why, job.attempt);
  }
  tx.fx.Warn("service {} replica job {} requeued as attempt {}: {}", job.spec.service, job.id, job.attempt, why);
}

std::string ReplicaBackoff::QuickEndsText() const {
  return at_least ? fmt::format("at least {}", quick_ends) : std::to_string(quick_ends);
}

ReplicaBackoff ReplicaBackoffOf(const Job& job) {
  ReplicaBackoff b;
  const auto& h = job.history;
  for (size_t i = h.size(); i-- > 0;) {
    const api::AttemptRecord& r = h[i];
    if (r.end_ms == 0) continue;  // the current attempt (a RUNNING replica's)
    // The oldest record of a full history holds attempts r.attempt up to the next record's
    // when they were folded into it (FoldOldestAttempts), their run times added up.
    const bool folded = i == 0 && h.size() >= kMaxReplicaHistory && h[1].attempt - r.attempt > 1;
    const int held = folded ? h[1].attempt - r.attempt : 1;
    if (r.end_ms - r.start_ms >= kReplicaQuickEndMs) {
      b.at_least = held > 1 && b.quick_ends > 0;  // the loop may go on into them
      break;
    }
    if (b.quick_ends == 0) {
      b.start_after_ms = r.end_ms;
      b.last_end = r.end_reason;
    }
    b.quick_ends += held;
  }
  if (b.quick_ends >= 2) {
    const int doublings = std::min(b.quick_ends - 2, 30);
    b.delay_ms = std::min(kReplicaBackoffBaseMs << doublings, kReplicaBackoffMaxMs);
  }
  b.start_after_ms += b.delay_ms;
  return b;
}

void FailGang(Tx& tx, Job& job, const std::string& why, std::optional<int> exit_code, bool may_restart,
              int64_t ended_ms) {
  // A service replica is kept running: it restarts however it ended.
  if (job.spec.is_service()) return RestartReplica(tx, job, why);
  // Moves are not failures: only the attempts that failed count as restarts.
  if (may_restart && job.attempt - job.moves < job.spec.max_restarts) {
    Requeue(tx, job, why, ended_ms);
    job.reason = fmt::format("requeued after: {} (restart {} of {})", why, job.attempt - job.moves,
                             job.spec.max_restarts);
    tx.fx.Warn("job {} requeued as attempt {}: {}", job.id, job.attempt, why);
    return;
  }
  std::string reason = why;
  if (job.spec.max_restarts > 0) reason += fmt::format(" (no restarts left of {})", job.spec.max_restarts);
  FinishJob(tx, job, JobState::kFailed, std::move(reason), exit_code, ended_ms);
}

void FailJobsOnNode(Tx& tx, const std::string& node, const std::string& why) {
  auto nj = tx.s.node_jobs.find(node);
  if (nj == tx.s.node_jobs.end()) return;
  std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());  // FailGang edits the set
  for (api::JobId id : ids) FailGang(tx, tx.s.jobs.at(id), why, std::nullopt, /*may_restart=*/true);
}

void RecordExit(Tx& tx, Job& job, const std::string& node, const api::TaskReport& t) {
  api::TaskExit e;
  e.rank = t.rank;
  e.node = node;
  e.exit_code = t.exit_code;
  e.signal = t.signal;
  e.error = t.error;
  e.finished_ms = t.finished_ms ? t.finished_ms : tx.now.unix_ms;
  job.exits.push_back(e);
  // When the attempt ended: as its agents saw it, within [its start, now] (their clocks
  // are not the head's).
  const int64_t started = std::min(job.history.empty() ? int64_t{0} : job.history.back().start_ms, tx.now.unix_ms);
  const auto ended_at = [&](int64_t finished) { return std::clamp(finished, started, tx.now.unix_ms); };
  tx.fx.StoreJob(job);
  if (e.signal != 0 || e.exit_code != 0) {
    std::string how = e.signal ? fmt::format("was killed by signal {}", e.signal)
                               : fmt::format("exited with code {}", e.exit_code);
    std::string why = fmt::format("rank {} on {} {}", e.rank, node, how);
    if (!e.error.empty()) why += ": " + e.error;
    if (FencedByTheHead(tx, job)) return RequeueFenced(tx, job, why);
    // Asked to checkpoint and move: a task that ends now (on its checkpoint signal, say)
    // ends the attempt as that move, not as a failure of the job.
    if (job.move && !job.move->grow) return MoveOnFailedExit(tx, job, why);
    if (job.spec.is_batch_script() && e.rank == 0) {
      return FinishJob(tx, job, JobState::kFailed,
                       e.signal ? fmt::format("the batch script on {} was killed by signal {}", node, e.signal)
                                : fmt::format("the batch script on {} exited with code {}", node, e.exit_code),
                       e.signal ? 128 + e.signal : e.exit_code, ended_at(e.finished_ms));
    }
    FailGang(tx, job, why, e.signal ? 128 + e.signal : e.exit_code, /*may_restart=*/true, ended_at(e.finished_ms));
    return;
  }
  if (job.spec.is_batch_script() && e.rank == 0) {
    // The script is the job: its end ends the allocation (its holding tasks are stopped).
    return FinishJob(tx, job, JobState::kSucceeded, "the batch script exited 0", 0, ended_at(e.finished_ms));
  }
  if (static_cast<int>(job.exits.size()) == job.world_size()) {
    // A service never succeeds: a replica that exits 0 is started again.
    if (job.spec.is_service()) return RestartReplica(tx, job, fmt::format("rank {} on {} exited 0", e.rank, node));
    int64_t last = 0;
    for (const api::TaskExit& x : job.exits) last = std::max(last, x.finished_ms);
    FinishJob(tx, job, JobState::kSucceeded, "all ranks exited 0", 0, ended_at(last));
  }
}

bool ConfirmStopped(NodeRuntime& rt) {
  auto confirmed = [&](const StoppingAttempt& s) {
    if (rt.applied_version < s.version) return false;
    return std::none_of(rt.reported.begin(), rt.reported.end(), [&](const api::TaskReport& t) {
      return t.running && t.job == s.job && t.attempt == s.attempt;
    });
  };
  return std::erase_if(rt.stopping, confirmed) > 0;
}

std::vector<api::TaskLaunch> DesiredTasks(const ClusterState& s, const Context& ctx, const std::string& node, Now now,
                                          const std::vector<api::TaskReport>& held) {
  std::vector<api::TaskLaunch> out;
  auto it = s.node_jobs.find(node);
  if (it == s.node_jobs.end()) return out;
  const auto is_held = [&](const Job& job, int rank) {
    return std::any_of(held.begin(), held.end(), [&](const api::TaskReport& r) {
      return r.job == job.id && r.attempt == job.attempt && r.rank == rank;
    });
  };
  for (api::JobId id : it->second) {
    const Job& job = s.jobs.at(id);
    const bool checkpoint = (job.move && !job.move->grow) || LimitCheckpointDue(job, now.unix_ms);
    const int64_t checkpoint_requested_ms = checkpoint ? CheckpointRequestedMs(job, now.unix_ms) : 0;
    for (const auto& na : job.allocation.nodes) {
      if (na.node != node) continue;
      for (const auto& t : na.tasks) {
        if (job.HasExit(t.rank)) continue;
        api::TaskLaunch l;
        l.job = job.id;
        l.attempt = job.attempt;
        l.rank = t.rank;
        l.gpus = t.gpus;
        if (checkpoint) {
          l.checkpoint_requested = true;
          l.checkpoint_requested_ms = checkpoint_requested_ms;
          l.checkpoint_signal = api::CheckpointSignalNumber(job.spec.checkpoint_signal);
        }
        if (!is_held(job, t.rank)) {
          // A batch script's first task runs it (with `command` as its arguments); an
          // allocation's other tasks hold their resources for its steps.
          const bool runs_script = job.spec.is_batch_script() && t.rank == 0;
          l.hold = job.spec.is_allocation() && !runs_script;
          if (!l.hold) l.command = job.spec.command;
          if (runs_script) l.script = job.spec.script;
          api::TaskEnvOptions options = api::ClusterTaskEnvOptions(
              ctx.head_url, ctx.rendezvous_token(job.id, job.attempt), ctx.checkpoint_root, job.id, ctx.ca_pem);
          if (ctx.job_token) options.job_token = ctx.job_token(job.id, job.attempt);
          if (job.is_array_element()) {
            if (auto a = s.jobs.find(job.array_job_id); a != s.jobs.end()) options.array = a->second.spec.array;
          }
          l.env = api::TaskEnvironment(job, na, t, options);
          l.workdir = job.spec.workdir;
          if (!l.hold) {  // a holding task writes nothing
            l.output = job.spec.output;
            l.error = job.spec.error;
            l.open_mode = job.spec.open_mode;
          }
          l.cpus = job.spec.cpus_per_task;
          l.user = job.spec.user;
          l.container = job.spec.container;
        }
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

}  // namespace cohort::head::core
