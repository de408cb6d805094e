// `cohort cancel JOB [JOB...]`: cancel jobs, like scancel. Each job is tried on its own:
// a bad id or a job that already ended prints an error and the others still go ahead.
// As scancel's, filters pick the jobs instead (or narrow the ids given): -u USER, --me,
// -n NAME, -t STATE (PENDING or RUNNING); CancelTargets says how arrays go.
// 12_[3-5,9] cancels those elements of array 12 in one request (each that cannot be, one
// already ended, is named, and makes the exit code 1).
// The exit code is that of the first failure (1 for a job the head refused, 2 for a bad
// id), or 0; an unreachable head stops at once with 3.
#include <set>

#include "api/job_array.h"
#include "cli/client.h"

namespace cohort::cli {
namespace {

// "12_[3-5,7]" (Slurm's scancel syntax for some elements of array 12): the array's id and
// the indices as the head reads them ("3-5,7"); nullopt for any other text.
std::optional<std::pair<api::JobId, std::string>> ElementRange(const std::string& text) {
  const size_t open = text.find("_[");
  if (open == std::string::npos || !text.ends_with(']')) return std::nullopt;
  auto job = api::ParseJobRef(text.substr(0, open), "job id");
  if (!job || job->is_element()) return std::nullopt;
  return std::pair{job->job, text.substr(open + 2, text.size() - open - 3)};
}

}  // namespace

std::vector<std::string> CancelTargets(const std::vector<json>& jobs, bool running_included) {
  // An array's own record (not one of its elements, whose spec carries no array).
  auto array_record = [](const json& j) {
    return j.contains("spec") && !j["spec"].value("array", "").empty() && j.value("array_job_id", api::JobId{0}) == 0;
  };
  std::set<api::JobId> whole;  // arrays cancelled whole: their elements go with them
  std::vector<std::string> out;
  for (const json& j : jobs) {
    const api::JobId id = j.value("id", api::JobId{0});
    if (!array_record(j)) continue;
    if (running_included) {
      whole.insert(id);
      out.push_back(std::to_string(id));
    } else if (const std::string left = j.value("array_left", ""); !left.empty()) {
      out.push_back(fmt::format("{}_[{}]", id, left));
    }
  }
  for (const json& j : jobs) {
    const api::JobId id = j.value("id", api::JobId{0});
    if (array_record(j)) continue;  // above
    const api::JobId array = j.value("array_job_id", api::JobId{0});
    if (array == 0) {
      out.push_back(std::to_string(id));
    } else if (!whole.contains(array)) {
      out.push_back(fmt::format("{}_{}", array, j.value("array_task_id", int64_t{0})));
    }
  }
  return out;
}

namespace {

struct CancelFlags {
  std::vector<std::string> ids;
  std::string user;
  bool me = false;
  std::string name;
  std::vector<std::string> states;
  bool filtered() const { return !user.empty() || me || !name.empty() || !states.empty(); }
};

int CancelEach(const HttpClient& head, const std::vector<std::string>& ids, const GlobalOptions& global);

int Run(const CancelFlags& f, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  if (!f.filtered()) {
    if (f.ids.empty()) {
      return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                   "give job ids, or a filter: -u USER, --me, -n NAME, -t STATE (like scancel)")
                             .error());
    }
    return CancelEach(head, f.ids, global);
  }
  if (!f.user.empty() && f.me) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument, "give -u USER or --me, not both").error());
  }
  std::string states = "PENDING,RUNNING";
  if (!f.states.empty()) {
    auto parsed = ParseStateList(f.states, "--state");
    if (!parsed) return ReportError(parsed.error());
    for (const std::string& s : {std::string("SUCCEEDED"), std::string("FAILED"), std::string("CANCELLED"),
                                 std::string("TIMEOUT")}) {
      if (("," + *parsed + ",").find("," + s + ",") != std::string::npos) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                     fmt::format("--state: only PENDING and RUNNING jobs can be cancelled, got {}", s))
                               .error());
      }
    }
    states = *parsed;
  }
  auto refs = ParseJobRefs(f.ids);
  if (!refs) return ReportError(refs.error());
  std::string user = f.user;
  if (f.me) {
    auto mine = MyUserName(head);
    if (!mine) return ReportError(mine.error());
    user = *mine;
  }
  std::vector<std::pair<std::string, std::string>> params = {{"state", states}};
  if (!user.empty()) params.emplace_back("user", user);
  if (!refs->empty()) params.emplace_back("jobs", JobRefsQuery(*refs));
  auto listed = FetchAllPages(head, api::routes::WithQuery(api::routes::kJobs, params), "jobs");
  if (!listed) return ReportError(listed.error());
  std::vector<json> jobs;
  for (auto& j : (*listed)["jobs"]) {
    if (!refs->empty() && !JobMatchesRefs(j, *refs)) continue;
    if (!f.name.empty() && (!j.contains("spec") || j["spec"].value("name", "") != f.name)) continue;
    jobs.push_back(std::move(j));
  }
  const std::vector<std::string> targets = CancelTargets(jobs, states.find("RUNNING") != std::string::npos);
  if (targets.empty()) {
    std::fprintf(stderr, "cohort: no %s job matches\n", states == "PENDING,RUNNING" ? "pending or running"
                                                                                    : states.c_str());
    if (global.json) PrintJson(json{{"jobs", json::array()}});
    return 0;
  }
  return CancelEach(head, targets, global);
}

int CancelEach(const HttpClient& head, const std::vector<std::string>& ids, const GlobalOptions& global) {
  json cancelled = json::array();
  bool some_not_cancelled = false;  // an element of a range: the others still go ahead
  int rc = ForEachName(
      ids,
      [&](const std::string& text) -> Result<json> {
        if (auto range = ElementRange(text)) {
          // Checked here first, so a typo is exit 2 with the syntax's own message.
          COHORT_TRY_VOID(api::ArrayIndexSet::Parse(range->second, text));
          return head.Post(api::routes::JobCancel(range->first), json{{"tasks", range->second}});
        }
        // "12", or "12_7": one element of array 12 (started or not).
        const api::JobRef ref = COHORT_TRY(api::ParseJobRef(text, "job id"));
        return head.Post(ref.is_element() ? api::routes::JobCancelByRef(text) : api::routes::JobCancel(ref.job),
                         json::object());
      },
      [&](const std::string& text, json reply) {
        if (auto range = ElementRange(text); range && reply.contains("cancelled_tasks")) {
          // Each element that could not be cancelled (already ended, no such index) is named.
          for (const auto& f : reply.value("not_cancelled", json::array())) {
            std::fprintf(stderr, "cohort: error: %lld_%lld: %s\n", static_cast<long long>(range->first),
                         static_cast<long long>(f.value("task", int64_t{0})), f.value("error", "").c_str());
            some_not_cancelled = true;
          }
          if (global.json) {
            cancelled.push_back(std::move(reply));
          } else if (const std::string done = reply.value("cancelled_tasks", ""); !done.empty()) {
            std::printf("Cancelled job %lld_[%s]\n", static_cast<long long>(range->first), done.c_str());
            std::fflush(stdout);
          }
          return 0;
        }
        if (global.json) {
          cancelled.push_back(std::move(reply));
        } else {
          // As typed when it names an element ("12_7"), else the id the head cancelled.
          const bool element = text.find('_') != std::string::npos;
          std::printf("Cancelled job %s\n",
                      element ? text.c_str() : std::to_string(reply.value("id", int64_t{0})).c_str());
          std::fflush(stdout);
        }
        return 0;
      });
  if (global.json) PrintJson(json{{"jobs", std::move(cancelled)}});
  if (rc == 0 && some_not_cancelled) rc = 1;
  return rc;
}

}  // namespace

void AddCancelCommand(CommandContext& ctx) {
  auto f = std::make_shared<CancelFlags>();
  auto* sub = ctx.app.add_subcommand("cancel", "Cancel jobs, like scancel: by id, or every job a filter picks");
  sub->add_option("JOB", f->ids,
                  "Job ids; 12_7 is element 7 of array 12, 12_[3-5,9] those elements (12: the whole array); with "
                  "a filter, only those of them it picks");
  sub->add_option("-u,--user", f->user, "Every pending or running job of this user (scancel -u)");
  sub->add_flag("--me", f->me, "Every pending or running job of yours (as the head knows you: cohort whoami)");
  sub->add_option("-n,--name,--jobname", f->name, "Only jobs of this name (scancel -n)");
  sub->add_option("-t,--state", f->states,
                  "Only jobs in this state: PENDING or RUNNING (scancel -t); a pending array's indices not yet "
                  "started go with PENDING, its running elements with RUNNING");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
