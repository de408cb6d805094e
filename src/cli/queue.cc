// `cohort queue [--all] [--state S[,S...]] [--user U] [--limit N]`: the job list, like
// squeue. By default PENDING and RUNNING jobs, oldest first; --all adds ended ones.
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

struct QueueFlags {
  bool all = false;
  std::vector<std::string> states;
  std::string user;
  int limit = 0;
};

// "PENDING,RUNNING" for the query, after checking each name locally.
Result<std::string> StateQuery(const QueueFlags& f) {
  if (f.states.empty()) return f.all ? std::string("all") : std::string("PENDING,RUNNING");
  return ParseStateList(f.states, "--state");
}

int Run(const QueueFlags& f, const GlobalOptions& global) {
  auto states = StateQuery(f);
  if (!states) return ReportError(states.error());
  std::vector<std::pair<std::string, std::string>> params;
  if (!states->empty()) params.emplace_back("state", *states);
  if (!f.user.empty()) params.emplace_back("user", f.user);
  if (f.limit > 0) params.emplace_back("limit", std::to_string(f.limit));
  std::string path = api::routes::WithQuery(api::routes::kJobs, params);

  // --limit: the newest N, one page; otherwise every page.
  auto reply = f.limit > 0 ? HeadClient(global).Get(path) : FetchAllPages(HeadClient(global), path, "jobs");
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  std::vector<api::Job> jobs;
  if (!reply->is_object() || !reply->contains("jobs") || !(*reply)["jobs"].is_array()) {
    return ReportError(MakeError(ErrorCode::kInternal, "malformed job list from the head: no 'jobs' array").error());
  }
  for (const auto& j : (*reply)["jobs"]) {
    auto job = api::JobFromJson(j);
    if (!job) return ReportError(job.error());
    jobs.push_back(std::move(*job));
  }
  std::fputs(RenderQueue(jobs, NowUnixMs()).c_str(), stdout);
  return 0;
}

}  // namespace

std::string RenderQueue(const std::vector<api::Job>& jobs, int64_t now_ms) {
  Table t({"JOBID", "NAME", "USER", "STATE", "ATTEMPT", "NODES", "GPUS", "TIME", "NODELIST(REASON)"});
  t.SetMaxWidth(1, 24);
  t.SetMaxWidth(2, 16);
  t.SetMaxWidth(8, 80);
  for (const auto& job : jobs) {
    auto run = JobRunTimeMs(job, now_ms);
    std::vector<std::string> nodes;
    for (const auto& n : job.allocation.nodes) nodes.push_back(n.node);
    std::string where;
    if (job.state == api::JobState::kRunning || (api::IsTerminal(job.state) && !nodes.empty())) {
      where = FormatHostList(nodes);
    } else {
      where = "(" + (job.reason.empty() ? std::string("None") : job.reason) + ")";
    }
    std::string attempt = std::to_string(job.attempt);
    if (job.spec.max_restarts > 0) attempt += "/" + std::to_string(job.spec.max_restarts);
    t.AddRow({std::to_string(job.id), job.spec.name, job.spec.user, std::string(api::JobStateName(job.state)),
              attempt, std::to_string(job.spec.nodes),
              std::to_string(static_cast<int64_t>(job.spec.nodes) * job.spec.gpus_per_node),
              run ? FormatDuration(*run) : "-", where});
  }
  return t.Render();
}

void AddQueueCommand(CommandContext& ctx) {
  auto f = std::make_shared<QueueFlags>();
  auto* sub = ctx.app.add_subcommand("queue", "List jobs (pending and running by default), like squeue");
  sub->add_flag("-a,--all", f->all, "Include jobs that have ended");
  sub->add_option("-s,--state", f->states, "Only jobs in these states (PENDING,RUNNING,SUCCEEDED,FAILED,CANCELLED,TIMEOUT)")
      ->delimiter(',');
  sub->add_option("-u,--user", f->user, "Only this user's jobs");
  sub->add_option("--limit", f->limit, "At most this many jobs (the newest)")->check(CLI::Range(1, 10'000));
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
