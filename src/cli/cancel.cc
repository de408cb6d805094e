// `cohort cancel JOB [JOB...]`: cancel jobs, like scancel. Each job is tried on its own:
// a bad id or a job that already ended prints an error and the others still go ahead.
// The exit code is that of the first failure (1 for a job the head refused, 2 for a bad
// id), or 0; an unreachable head stops at once with 3.
#include "api/job_array.h"
#include "cli/client.h"

namespace cohort::cli {
namespace {

int Run(const std::vector<std::string>& ids, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  json cancelled = json::array();
  const int rc = ForEachName(
      ids,
      [&](const std::string& text) -> Result<json> {
        // "12", or "12_7": one element of array 12 (started or not).
        const api::JobRef ref = COHORT_TRY(api::ParseJobRef(text, "job id"));
        return head.Post(ref.is_element() ? api::routes::JobCancelByRef(text) : api::routes::JobCancel(ref.job),
                         json::object());
      },
      [&](const std::string& text, json reply) {
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
  return rc;
}

}  // namespace

void AddCancelCommand(CommandContext& ctx) {
  auto ids = std::make_shared<std::vector<std::string>>();
  auto* sub = ctx.app.add_subcommand("cancel", "Cancel jobs, like scancel");
  sub->add_option("JOB", *ids, "Job ids; 12_7 is element 7 of array 12 (12: the whole array)")->required();
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [ids, &global] { return Run(*ids, global); });
}

}  // namespace cohort::cli
