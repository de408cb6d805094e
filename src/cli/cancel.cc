// `cohort cancel JOB [JOB...]`: cancel jobs, like scancel. Each job is tried on its own:
// a bad id or a job that already ended prints an error and the others still go ahead.
// The exit code is that of the first failure (1 for a job the head refused, 2 for a bad
// id), or 0; an unreachable head stops at once with 3.
#include "cli/client.h"

namespace cohort::cli {
namespace {

int Run(const std::vector<std::string>& ids, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  json cancelled = json::array();
  const int rc = ForEachName(
      ids,
      [&](const std::string& text) -> Result<json> {
        const api::JobId id = COHORT_TRY(ParseJobId(text));
        return head.Post(api::routes::JobCancel(id), json::object());
      },
      [&](const std::string&, json reply) {
        if (global.json) {
          cancelled.push_back(std::move(reply));
        } else {
          std::printf("Cancelled job %lld\n", static_cast<long long>(reply.value("id", int64_t{0})));
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
  sub->add_option("JOB", *ids, "Job ids")->required();
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [ids, &global] { return Run(*ids, global); });
}

}  // namespace cohort::cli
