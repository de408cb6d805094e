// `cohort history` (also `cohort sacct`): finished jobs, like Slurm's sacct: state, exit
// code, elapsed time and GPU-hours, filtered by user, state and a time window (jobs in the
// cluster during it). The newest --limit jobs, oldest first.
#include "api/job_array.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

int Run(const HistoryFlags& f, const GlobalOptions& global) {
  auto query = HistoryQueryFor(f, NowUnixMs());
  if (!query) return ReportError(query.error());
  auto refs = ParseJobRefs(f.jobs);
  if (!refs) return ReportError(refs.error());
  auto reply = HeadClient(global).Get(api::routes::WithQuery(api::routes::kJobs, *query));
  if (!reply) return ReportError(reply.error());
  KeepJobsMatchingRefs(*reply, *refs);
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  if (!reply->is_object() || !reply->contains("jobs") || !(*reply)["jobs"].is_array()) {
    return ReportError(Error{ErrorCode::kInternal, "malformed job list from the head: no 'jobs' array"});
  }
  std::vector<api::JobStatus> jobs;
  for (size_t i = 0; i < (*reply)["jobs"].size(); ++i) {
    auto job = FromHead(api::JobStatusFromJson((*reply)["jobs"][i], fmt::format("jobs[{}]", i)), "job list");
    if (!job) return ReportError(job.error());
    jobs.push_back(std::move(*job));
  }
  std::fputs(RenderHistory(jobs, NowUnixMs()).c_str(), stdout);
  if (reply->contains("next_cursor")) {
    std::fprintf(stderr, "(older jobs match too: raise --limit or narrow --since)\n");
  }
  return 0;
}

// Slurm's "code:signal" of a job: its exit code and the signal of the rank that ended it.
std::string ExitColumn(const api::Job& job) {
  if (!job.exit_code && job.exits.empty()) return "-";
  int signal = 0;
  for (const auto& e : job.exits) {
    if (e.exit_code != 0 || e.signal != 0) {
      signal = e.signal;
      break;
    }
  }
  return fmt::format("{}:{}", job.exit_code.value_or(0), signal);
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> HistoryQueryFor(const HistoryFlags& f, int64_t now_ms) {
  std::vector<std::pair<std::string, std::string>> query;
  std::string states = f.states.empty() ? "SUCCEEDED,FAILED,CANCELLED,TIMEOUT"
                                        : COHORT_TRY(ParseStateList(f.states, "--state"));
  query.emplace_back("state", states.empty() ? "all" : states);
  const auto [since, until] = COHORT_TRY(ParseUserAndWindow(f.user, f.since, f.until, now_ms));
  if (!f.user.empty()) query.emplace_back("user", f.user);
  if (since && *since > 0) query.emplace_back("since", std::to_string(*since));
  if (until && *until > 0) query.emplace_back("until", std::to_string(*until));
  if (f.limit < 1 || f.limit > 10000) return FieldError("--limit", "must be between 1 and 10000, got {}", f.limit);
  query.emplace_back("limit", std::to_string(f.limit));
  if (!f.jobs.empty()) query.emplace_back("jobs", JobRefsQuery(COHORT_TRY(ParseJobRefs(f.jobs))));
  return query;
}

std::string RenderHistory(const std::vector<api::JobStatus>& jobs, int64_t now_ms) {
  Table t({"JOBID", "NAME", "USER", "STATE", "EXIT", "ELAPSED", "GPU-HOURS", "SUBMITTED", "ENDED", "REASON"});
  t.SetMaxWidth(1, 24);
  t.SetMaxWidth(2, 16);
  t.SetMaxWidth(9, 60);
  for (const auto& s : jobs) {
    const api::Job& job = s.job;
    auto run = JobRunTimeMs(job, now_ms);
    // As `cohort queue` names it (an array's element: 12_7), as sacct does.
    t.AddRow({api::DisplayJobId(job), job.spec.name, job.spec.user, std::string(api::JobStateName(job.state)),
              ExitColumn(job), run ? FormatDuration(*run) : "-", fmt::format("{:.4f}", s.gpu_seconds / 3600.0),
              FormatTimestamp(job.submit_ms), api::IsTerminal(job.state) ? FormatTimestamp(job.end_ms) : "-",
              job.state == api::JobState::kSucceeded ? "" : job.reason});
  }
  return t.Render();
}

void AddHistoryCommand(CommandContext& ctx) {
  auto f = std::make_shared<HistoryFlags>();
  auto* sub = ctx.app.add_subcommand("history", "Finished jobs with exit codes, elapsed time and GPU-hours, like sacct");
  sub->alias("sacct");
  sub->add_option("-u,--user", f->user, "Only this user's jobs");
  sub->add_option("-s,--state", f->states,
                  "Only jobs in these states (default SUCCEEDED,FAILED,CANCELLED,TIMEOUT; 'all' is not a state: "
                  "name them)")
      ->delimiter(',');
  sub->add_option("-S,--since", f->since, "Jobs in the cluster since then: a duration back (2h, 7d) or RFC 3339");
  sub->add_option("-E,--until", f->until, "Jobs in the cluster before then: a duration back or RFC 3339");
  sub->add_option("-n,--limit", f->limit, "At most this many jobs, the newest (1-10000; default 100)");
  sub->add_option("-j,--jobs", f->jobs,
                  "Only these jobs, comma-separated: 12 (an array: its elements too), 12_7 (one element), like "
                  "sacct -j (with -j, --limit defaults to 10000: an array's elements)")
      ->delimiter(',');
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, sub, &global] {
    if (!f->jobs.empty() && sub->count("--limit") == 0) f->limit = 10'000;
    return Run(*f, global);
  });
}

}  // namespace cohort::cli
