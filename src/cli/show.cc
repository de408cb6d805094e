// `cohort show JOB`: everything about one job as a `key: value` report, like
// `scontrol show job`: spec, state and times, allocation per node, task exits and the
// history of attempts.
#include "api/job_array.h"
#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "api/output_pattern.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

// Lines of "key:  value" with the values aligned.
class Report {
 public:
  void Add(std::string key, std::string value) { lines_.emplace_back(std::move(key), std::move(value)); }
  std::string Render() const {
    size_t width = 0;
    for (const auto& [k, v] : lines_) width = std::max(width, k.size());
    std::string out;
    for (const auto& [k, v] : lines_) {
      out += k + ":" + std::string(width - k.size() + 1, ' ') + (v.empty() ? "-" : v) + "\n";
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

std::string ExitResult(const api::TaskExit& e) {
  if (e.signal != 0) return "killed by " + SignalName(e.signal);
  return fmt::format("exit {}", e.exit_code);
}

int Run(const std::string& id_text, bool script, const GlobalOptions& global) {
  auto ref = api::ParseJobRef(id_text, "job id");  // "12", or "12_7" for an array's element
  if (!ref) return ReportError(ref.error());
  auto reply = HeadClient(global).Get(ref->is_element() ? api::routes::JobByRef(id_text) : api::routes::Job(ref->job));
  if (!reply) return ReportError(reply.error());
  if (script) {
    // scontrol write batch_script JOB -: the text as submitted (hidden from other users).
    auto job = api::JobFromJson(*reply);
    if (!job) return ReportError(job.error());
    if (!job->spec.is_batch_script()) {
      return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                   fmt::format("job {} has no batch script (cohort batch submits one)", id_text))
                             .error());
    }
    std::fputs(job->spec.script.c_str(), stdout);
    return 0;
  }
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  auto job = api::JobFromJson(*reply);
  if (!job) return ReportError(job.error());
  std::fputs(RenderJob(*job, NowUnixMs()).c_str(), stdout);
  if (const auto& u = (*reply)["tasks_usage"]; u.is_array() && !u.empty()) {
    std::vector<api::TaskUsage> tasks;
    for (size_t i = 0; i < u.size(); ++i) {
      auto t = api::TaskUsageFromJson(u[i], fmt::format("tasks_usage[{}]", i));
      if (!t) return ReportError(t.error());
      tasks.push_back(std::move(*t));
    }
    std::fputs(("\n" + RenderTaskUsage(tasks)).c_str(), stdout);
  }
  if (const auto& p = (*reply)["progress"]; p.is_object()) {
    std::string line = fmt::format("\nprogress (attempt {}, rank {}, {} ago): step {}", p.value("attempt", 0),
                                   p.value("rank", 0), FormatDuration(NowUnixMs() - p.value("time_ms", int64_t(0))),
                                   p.value("step", int64_t(0)));
    if (p.contains("loss")) line += fmt::format(", loss {:.4f}", p["loss"].get<double>());
    if (p.contains("tokens_per_s")) line += fmt::format(", {:.0f} tokens/s", p["tokens_per_s"].get<double>());
    if (p.contains("samples_per_s")) line += fmt::format(", {:.1f} samples/s", p["samples_per_s"].get<double>());
    if (p.contains("val_loss")) line += fmt::format(", val loss {:.4f}", p["val_loss"].get<double>());
    std::printf("%s\n", line.c_str());
  }
  if (const auto& a = (*reply)["array_summary"]; a.is_object()) {
    std::string line = "\narray elements:";
    for (const auto& [state, n] : a.items()) {
      if (n.is_number_integer() && n.get<int64_t>() > 0) line += fmt::format(" {} {}", n.get<int64_t>(), state);
    }
    std::printf("%s\n", line.c_str());
    if (const auto& f = (*reply)["array_failed"]; f.is_string()) {
      std::string failed = "failed elements: " + f.get<std::string>();
      // A sweep's indices are its points, so only a plain array is resubmitted by index.
      if (!(*reply)["spec"].contains("sweep")) {
        failed += fmt::format(" (to run them again: cohort submit ... --array {})", f.get<std::string>());
      }
      std::printf("%s\n", failed.c_str());
    }
  }
  if (reply->contains("progress_eta")) {
    auto eta = api::ProgressEtaFromJson((*reply)["progress_eta"], "progress_eta");
    if (!eta) return ReportError(eta.error());
    std::printf("%s\n", RenderProgressEta(*eta).c_str());
  }
  return 0;
}

}  // namespace

std::string RenderProgressEta(const api::ProgressEta& e) {
  std::string line = "progress: " + api::FormatProgressEta(e);
  if (e.total_steps) line += fmt::format(" (step {} of {})", e.step, *e.total_steps);
  return line;
}

std::string RenderTaskUsage(const std::vector<api::TaskUsage>& tasks) {
  std::string out = "tasks (running):\n";
  Table t({"RANK", "NODE", "CPUS", "CPU TIME", "RSS", "GPU MEMORY", "WARNING"});
  t.SetMaxWidth(6, 100);
  for (const auto& u : tasks) {
    // CPUS: the CPUs the task is bound to; "-" when its agent does not bind it.
    t.AddRow({std::to_string(u.rank), u.node, u.cpu_list.empty() ? "-" : u.cpu_list,
              fmt::format("{:.1f}s", u.cpu_seconds), FormatGiB(u.rss_bytes), FormatGiB(u.gpu_memory_bytes),
              u.gpu_memory_warning.empty() ? "-" : u.gpu_memory_warning});
  }
  return out + t.Render(2);
}

std::string RenderJob(const api::Job& job, int64_t now_ms) {
  const api::JobSpec& s = job.spec;
  Report r;
  r.Add("id", std::to_string(job.id));
  if (job.is_array_element()) r.Add("array element", api::DisplayJobId(job));
  if (s.is_array()) {
    r.Add("array", fmt::format("{} (not started yet: {})", s.array, job.array_left.empty() ? "none" : job.array_left));
  }
  if (s.sweep.is_object() && !s.sweep.empty()) {
    // The section's own words; `cohort sweep show` ranks its elements.
    r.Add("sweep", fmt::format("{} (cohort sweep show {})", s.sweep.dump(), job.id));
  }
  if (!job.sweep_values.empty()) {
    // The hyperparameters this element ran with (COHORT_SWEEP_*, and --set for cohort train).
    std::string values;
    for (const auto& [name, value] : job.sweep_values) values += (values.empty() ? "" : " ") + name + "=" + value;
    r.Add("sweep values", values);
  }
  r.Add("name", s.name);
  r.Add("user", s.user);
  r.Add("state", std::string(api::JobStateName(job.state)));
  r.Add("reason", job.reason);
  r.Add("exit code", job.exit_code ? std::to_string(*job.exit_code) : "");
  if (s.is_batch_script()) {
    r.Add("kind", fmt::format("batch script (cohort batch): runs once on the first node; its steps (cohort run) "
                              "run in its allocation ({} so far)",
                              job.steps.empty() ? 0 : job.steps.back().id));
  } else if (s.is_allocation()) {
    r.Add("kind", fmt::format("allocation (cohort alloc): holds its nodes and GPUs; its steps run in it ({} so far)",
                              job.steps.empty() ? 0 : job.steps.back().id));
  }
  if (s.is_service()) {
    r.Add("service", fmt::format("replica of {} (model {}); kept running until removed", s.service, s.service_model));
    r.Add("attempt", fmt::format("{} (restarts without limit)", job.attempt));
  } else {
    std::string limit = s.max_restarts > 0 ? fmt::format("max_restarts {}", s.max_restarts) : "no restarts";
    // Moves (preemptions, drain --now) make attempts too, but spend no restart: say how
    // many of each, or "attempt 2 (no restarts)" reads as a contradiction.
    if (job.moves > 0) {
      if (s.max_restarts > 0) limit += fmt::format(", {} used", job.attempt - job.moves);
      limit += fmt::format("; {} move{} (preempted or drained), not counted", job.moves, job.moves == 1 ? "" : "s");
    }
    r.Add("attempt", fmt::format("{} ({})", job.attempt, limit));
  }
  if (job.move) {
    const api::MoveRequest& m = *job.move;
    const std::string at = m.baseline_checkpoint >= 0
                               ? fmt::format("its first checkpoint after step {}", m.baseline_checkpoint)
                               : std::string("its first checkpoint");
    if (m.grow) {
      r.Add("move", fmt::format("growing back to {} nodes at {}", s.nodes, at));
    } else if (m.preempted_for != 0) {
      r.Add("move", fmt::format("preempted for job {} at {}; asked {} ago, stops without one in {}", m.preempted_for,
                                at, FormatDuration(std::max<int64_t>(0, now_ms - m.requested_ms)),
                                FormatDuration(std::max<int64_t>(0, m.deadline_ms - now_ms))));
    } else {
      r.Add("move", fmt::format("leaving {} (drain --now) at {}; asked {} ago, moves without one in {}", m.node, at,
                                FormatDuration(std::max<int64_t>(0, now_ms - m.requested_ms)),
                                FormatDuration(std::max<int64_t>(0, m.deadline_ms - now_ms))));
    }
  }
  if (job.nomination) {
    r.Add("nominated", fmt::format("preempted job(s) for it {} ago; waits for their GPUs on {} (held for it)",
                                   FormatDuration(std::max<int64_t>(0, now_ms - job.nomination->since_ms)),
                                   Join(job.nomination->nodes, ",", "any node")));
  }
  // An older attempt's mark means this attempt has reported none.
  if (job.last_checkpoint && job.last_checkpoint->attempt == job.attempt) {
    // While the job runs, what a preemption or a lost node would cost; after, only the mark.
    r.Add("checkpoint", fmt::format("step {}, reported {} ago{}", job.last_checkpoint->step,
                                    FormatDuration(std::max<int64_t>(0, now_ms - job.last_checkpoint->reported_ms)),
                                    api::IsTerminal(job.state) ? "" : " (a preemption loses the work since)"));
  }
  r.Add("submitted", FormatTimestamp(job.submit_ms));
  if (s.begin_ms > 0) {
    r.Add("begin", s.begin_ms > now_ms ? fmt::format("{} (in {})", FormatTimestamp(s.begin_ms),
                                                     FormatDuration(s.begin_ms - now_ms))
                                       : FormatTimestamp(s.begin_ms));
  }
  r.Add("started", FormatTimestamp(job.start_ms));
  r.Add("ended", FormatTimestamp(job.end_ms));
  auto run = JobRunTimeMs(job, now_ms);
  r.Add("run time", run ? FormatDuration(*run) : "");
  r.Add("time limit", FormatTimeLimit(s.time_limit_s));
  if (!s.checkpoint_signal.empty() || s.checkpoint_before_limit_s > 0) {
    std::string when = "on drain --now or a preemption";
    if (s.checkpoint_before_limit_s > 0) {
      when += fmt::format(", and {} before the time limit", FormatDuration(s.checkpoint_before_limit_s * 1000));
    }
    r.Add("checkpoint request",
          fmt::format("{} ({})", s.checkpoint_signal.empty() ? "in progress-report replies only"
                                                             : "SIG" + s.checkpoint_signal + " and progress-report replies",
                      when));
  }
  if (s.progress_timeout_s > 0) {
    r.Add("progress timeout", fmt::format("{}s (the gang fails without a progress report for that long)",
                                          s.progress_timeout_s));
  }
  if (s.is_batch_script()) {
    r.Add("command", fmt::format("the batch script ({} bytes; cohort show --script {} prints it){}", s.script.size(),
                                 job.id, s.command.empty() ? "" : ", with arguments " + ShellJoin(s.command)));
  } else {
    r.Add("command", s.is_allocation() ? "(none: an allocation)" : ShellJoin(s.command));
  }
  if (s.container.enabled()) r.Add("container", fmt::format("{} ({})", s.container.image, s.container.runtime));
  r.Add("workdir", s.workdir.empty() ? "(the agent's work directory)" : s.workdir);
  if (!s.output.empty() || !s.error.empty()) {
    // What is known here expanded; %N, %n and %t (and an array's %a) differ per task.
    api::OutputPatternValues v;
    v.job_id = job.id;
    v.array_job_id = job.array_job_id;
    if (job.is_array_element()) {
      v.array_task_id = job.array_task_id;
    } else if (s.is_array()) {
      v.array_task_id = std::nullopt;
    }
    v.job_name = s.name;
    v.user = s.user;
    auto path = [&](const std::string& pattern) {
      std::string p = api::ExpandOutputPattern(pattern, v);
      return p.starts_with('/') || s.workdir.empty() ? p : s.workdir + (s.workdir.ends_with('/') ? "" : "/") + p;
    };
    r.Add("output", s.output.empty() ? "(none: the log only, cohort logs)" : path(s.output));
    r.Add("error", s.error.empty() ? "(with the output)" : path(s.error));
    r.Add("open mode", s.open_mode == "append" ? "append" : "truncate (a requeue or restart appends)");
  }
  r.Add("nodes", fmt::format("{} x {} task{} per node (world size {})", s.nodes, s.tasks_per_node,
                             s.tasks_per_node == 1 ? "" : "s", s.world_size()));
  if (!s.gpu_type.empty() || s.shares_gpu()) {
    r.Add("gpus", api::GpuSpecText(s));  // issue 18: a type, MIG instances or a shared part
    if (s.shares_gpu()) r.Add("gpu memory over share", s.gpu_memory_enforce == "kill" ? "killed" : "reported");
  } else {
    r.Add("gpus per node", s.gpus_per_node == 0 ? "0 (CPU only)"
                                                : fmt::format("{} ({} per task)", s.gpus_per_node, s.gpus_per_task()));
  }
  if (s.topology == api::Topology::kRequired) r.Add("topology", "required (one NVLink island per node, one switch)");
  r.Add("cpus per task", std::to_string(s.cpus_per_task));
  r.Add("placement", std::string(api::PlacementName(s.placement)));
  r.Add("priority", std::to_string(s.priority));
  r.Add("team", s.team.empty() ? std::string(api::kDefaultTeam) : s.team);
  std::vector<std::string> env;
  for (const auto& [k, v] : s.env) env.push_back(k + "=" + v);
  r.Add("env", Truncate(ShellJoin(env), 200));
  if (!job.allocation.master_addr.empty()) {
    r.Add(s.is_service() ? "endpoint" : "master",
          fmt::format("{}{}:{}", s.is_service() ? "http://" : "", job.allocation.master_addr, job.allocation.master_port));
  }
  std::string out = r.Render();

  if (!job.allocation.nodes.empty()) {
    out += job.state == api::JobState::kRunning ? "\nallocation:\n" : "\nlast allocation:\n";
    Table t({"NODE_RANK", "NODE", "ADDRESS", "GPUS", "CPUS", "RANKS", "TASK GPUS"});
    t.SetMaxWidth(6, 60);
    for (const auto& n : job.allocation.nodes) {
      std::vector<int> ranks;
      std::vector<std::string> task_gpus;
      for (const auto& task : n.tasks) {
        ranks.push_back(task.rank);
        if (task.gpus.empty()) continue;
        std::string gpus = FormatIndexList(task.gpus);
        // A shared part: "0:3(0.5, 40GiB)"; the sharing mode follows the table.
        if (task.gpu_share > 0) {
          gpus += fmt::format("({}, {})", api::GpuShareText(task.gpu_share), api::MemoryMibText(task.gpu_memory_mib));
        }
        task_gpus.push_back(fmt::format("{}:{}", task.rank, gpus));
      }
      t.AddRow({std::to_string(n.node_rank), n.node, n.address, FormatIndexList(n.gpus), std::to_string(n.cpus),
                FormatIndexList(ranks), Join(task_gpus, " ")});
    }
    out += t.Render(2);
    for (const auto& n : job.allocation.nodes) {
      if (n.gpu_sharing.empty()) continue;
      out += fmt::format("  GPU sharing on {}: {}\n", n.node,
                         n.gpu_sharing == "mps" ? "NVIDIA MPS (limits per task: thread percentage, pinned memory)"
                                                : "time-slicing (no MPS on this node: limits are not enforced by the GPU)");
    }
  }
  if (!job.exits.empty()) {
    out += "\nexits (attempt " + std::to_string(job.attempt) + "):\n";
    Table t({"RANK", "NODE", "RESULT", "FINISHED", "ERROR"});
    t.SetMaxWidth(4, 80);
    auto exits = job.exits;
    std::sort(exits.begin(), exits.end(), [](const api::TaskExit& a, const api::TaskExit& b) { return a.rank < b.rank; });
    for (const auto& e : exits) {
      t.AddRow({std::to_string(e.rank), e.node, ExitResult(e), FormatTimestamp(e.finished_ms),
                e.error.empty() ? "-" : e.error});
    }
    out += t.Render(2);
  }
  if (!job.preemptions.empty()) out += "\n" + RenderPreemptions(job);
  if (!job.steps.empty()) out += "\n" + RenderSteps(job, now_ms);
  if (!job.history.empty()) {
    out += "\nattempts:\n";
    Table t({"ATTEMPT", "STARTED", "ENDED", "DURATION", "NODES", "END REASON"});
    t.SetMaxWidth(5, 80);
    for (const auto& h : job.history) {
      std::string duration = "-";
      if (h.start_ms > 0) duration = FormatDuration((h.end_ms > 0 ? h.end_ms : now_ms) - h.start_ms);
      std::string reason = h.end_reason.empty() ? (h.end_ms > 0 ? "-" : "(running)") : h.end_reason;
      t.AddRow({std::to_string(h.attempt), FormatTimestamp(h.start_ms), FormatTimestamp(h.end_ms), duration,
                FormatHostList(h.nodes), reason});
    }
    out += t.Render(2);
  }
  return out;
}

std::string RenderSteps(const api::Job& job, int64_t now_ms) {
  std::string out = "steps:\n";
  Table t({"STEP", "STARTED", "DURATION", "TASKS", "EXIT CODES", "COMMAND"});
  t.SetMaxWidth(4, 60);
  t.SetMaxWidth(5, 80);
  for (const auto& st : job.steps) {
    std::vector<std::string> codes;
    for (const auto& task : st.tasks) {
      codes.push_back(fmt::format("{}:{}", task.rank, task.exit_code ? std::to_string(*task.exit_code) : "-"));
    }
    std::string duration;
    if (st.end_ms > 0) {
      duration = FormatDuration(st.end_ms - st.start_ms);
    } else if (api::IsTerminal(job.state)) {
      duration = "(no exit seen)";
    } else {
      duration = FormatDuration(std::max<int64_t>(0, now_ms - st.start_ms)) + " (running)";
    }
    t.AddRow({std::to_string(st.id), FormatTimestamp(st.start_ms), duration, std::to_string(st.tasks.size()),
              Join(codes, " "), ShellJoin(st.command)});
  }
  return out + t.Render(2);
}

std::string RenderPreemptions(const api::Job& job) {
  std::string out = "preemptions:\n";
  Table t({"ATTEMPT", "ASKED", "FOR JOB", "TEAM", "KIND", "AT RISK", "ENDED", "OUTCOME", "REASON"});
  t.SetMaxWidth(7, 60);
  t.SetMaxWidth(8, 100);
  for (const auto& p : job.preemptions) {
    std::string outcome = p.outcome;
    if (p.ended_ms == 0) {
      // A record closes when the attempt moves; an attempt that ended otherwise meanwhile
      // (it failed, finished, was cancelled) leaves it open.
      const bool open = job.state == api::JobState::kRunning && job.attempt == p.attempt;
      outcome = open ? "(checkpointing)" : "(the attempt ended before it was moved)";
    }
    t.AddRow({std::to_string(p.attempt), FormatTimestamp(p.requested_ms), std::to_string(p.by_job), p.by_team, p.kind,
              fmt::format("{:.0f} GPU-s", p.work_at_risk_gpu_s), FormatTimestamp(p.ended_ms), outcome, p.reason});
  }
  return out + t.Render(2);
}

void AddShowCommand(CommandContext& ctx) {
  auto id = std::make_shared<std::string>();
  auto script = std::make_shared<bool>(false);
  auto* sub = ctx.app.add_subcommand("show", "Show one job in detail, like scontrol show job");
  sub->add_option("JOB", *id, "Job id; 12_7 is element 7 of array 12")->required();
  sub->add_flag("--script", *script,
                "Print the job's batch script as submitted (cohort batch), like scontrol write batch_script JOB -");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [id, script, &global] { return Run(*id, *script, global); });
}

}  // namespace cohort::cli
