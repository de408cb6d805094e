// `cohort cancel JOB [JOB...]`: cancel jobs, like scancel. Each job is tried on its own:
// a bad id or a job that already ended prints an error and the others still go ahead.
// 12_[3-5,9] cancels those elements of array 12 in one request (each that cannot be, one
// already ended, is named, and makes the exit code 1).
// The exit code is that of the first failure (1 for a job the head refused, 2 for a bad
// id), or 0; an unreachable head stops at once with 3.
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

int Run(const std::vector<std::string>& ids, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
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
  auto ids = std::make_shared<std::vector<std::string>>();
  auto* sub = ctx.app.add_subcommand("cancel", "Cancel jobs, like scancel");
  sub->add_option("JOB", *ids,
                  "Job ids; 12_7 is element 7 of array 12, 12_[3-5,9] those elements (12: the whole array)")
      ->required();
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [ids, &global] { return Run(*ids, global); });
}

}  // namespace cohort::cli
