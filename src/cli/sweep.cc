// `cohort sweep show JOB`: a sweep's elements (api/sweep.h) ranked by the loss each last
// reported, best first, with their values; elements that reported no loss follow by index.
#include "cli/client.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

int RunShow(const std::string& id_text, const GlobalOptions& global) {
  auto id = ParseJobId(id_text);
  if (!id) return ReportError(id.error());
  auto reply = HeadClient(global).Get(api::routes::JobSweep(*id));
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  auto text = RenderSweep(*reply);
  if (!text) return ReportError(text.error());
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace

Result<std::string> RenderSweep(const json& reply) {
  if (!reply.is_object() || !reply.contains("elements") || !reply["elements"].is_array()) {
    return MakeError(ErrorCode::kInternal, "malformed sweep from the head: no 'elements' array");
  }
  std::vector<std::string> params;
  for (const auto& p : reply.value("params", json::array())) {
    if (p.is_string()) params.push_back(p.get<std::string>());
  }
  std::vector<std::string> header = {"RANK", "ELEMENT", "STATE", "STEP", "LOSS"};
  for (const auto& p : params) header.push_back(p);
  Table t(header, 0);
  const int64_t array = reply.value("array", int64_t{0});
  int rank = 0;
  for (const auto& e : reply["elements"]) {
    const bool has_loss = e.contains("loss") && e["loss"].is_number();
    std::vector<std::string> row = {has_loss ? std::to_string(++rank) : "-",
                                    fmt::format("{}_{}", array, e.value("task", int64_t{0})), e.value("state", ""),
                                    e.contains("step") ? std::to_string(e.value("step", int64_t{0})) : "-",
                                    has_loss ? fmt::format("{:.4f}", e["loss"].get<double>()) : "-"};
    const json values = e.value("values", json::object());
    for (const auto& p : params) row.push_back(values.value(p, "-"));
    t.AddRow(std::move(row));
  }
  std::string out = t.Render();
  const int64_t waiting = reply.value("waiting", int64_t{0});
  int64_t listed = 0;
  for (const auto& e : reply["elements"]) listed += !e.contains("id");
  if (waiting > listed) out += fmt::format("... and {} more points not started yet\n", waiting - listed);
  return out;
}

void AddSweepCommand(CommandContext& ctx) {
  auto* sweep = ctx.app.add_subcommand("sweep", "Hyperparameter sweeps (a job spec's sweep: section)");
  sweep->require_subcommand(1);
  auto id = std::make_shared<std::string>();
  auto* show = sweep->add_subcommand("show", "A sweep's elements ranked by their last reported loss");
  show->add_option("JOB", *id, "The sweep's job id")->required();
  AddClientOptions(show, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(show, [id, &global] { return RunShow(*id, global); });
}

}  // namespace cohort::cli
