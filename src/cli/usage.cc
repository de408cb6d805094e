// `cohort usage [--price-per-gpu-hour X] [--user U] [--since DURATION]`: GPU-hours (and
// their cost at a price) per user and per job, from GET /v1/usage. Running jobs count up
// to now.
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

struct UsageFlags {
  std::optional<double> price;
  std::string user;
  std::string since;  // a duration back from now ("24h"); empty: all time
};

std::string Hours(double gpu_seconds) { return fmt::format("{:.4f}", gpu_seconds / 3600.0); }

std::string Cost(double gpu_seconds, double price) { return fmt::format("{:.2f}", gpu_seconds / 3600.0 * price); }

int Run(const UsageFlags& f, const GlobalOptions& global) {
  std::string path = "/v1/usage";
  std::vector<std::string> query;
  if (!f.user.empty()) query.push_back("user=" + UrlEncode(f.user));
  if (!f.since.empty()) {
    auto ms = ParseDurationMs(f.since, "--since");
    if (!ms) return ReportError(ms.error());
    query.push_back(fmt::format("since={}", std::max<int64_t>(0, NowUnixMs() - *ms)));
  }
  for (size_t i = 0; i < query.size(); ++i) path += (i ? "&" : "?") + query[i];
  auto reply = HeadClient(global).Get(path);
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    json out = *reply;
    if (f.price) {
      out["price_per_gpu_hour"] = *f.price;
      out["total_cost"] = out.value("total_gpu_hours", 0.0) * *f.price;
      for (auto& u : out["users"]) u["cost"] = u.value("gpu_hours", 0.0) * *f.price;
      for (auto& j : out["jobs"]) j["cost"] = j.value("gpu_hours", 0.0) * *f.price;
    }
    PrintJson(out);
    return 0;
  }
  auto text = RenderUsage(*reply, f.price);
  if (!text) return ReportError(text.error());
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace

Result<std::string> RenderUsage(const json& report, std::optional<double> price) {
  try {
    std::vector<std::string> uh = {"USER", "JOBS", "GPU-HOURS"};
    std::vector<std::string> jh = {"JOBID", "NAME", "USER", "STATE", "GPUS", "ATTEMPTS", "GPU-HOURS"};
    if (price) {
      uh.push_back("COST");
      jh.push_back("COST");
    }
    Table users(uh);
    for (const auto& u : report.at("users")) {
      double s = u.at("gpu_seconds").get<double>();
      std::vector<std::string> row = {u.at("user").get<std::string>(), std::to_string(u.at("jobs").get<int>()), Hours(s)};
      if (price) row.push_back(Cost(s, *price));
      users.AddRow(std::move(row));
    }
    double total = report.at("total_gpu_seconds").get<double>();
    std::vector<std::string> total_row = {"TOTAL", std::to_string(report.at("jobs").size()), Hours(total)};
    if (price) total_row.push_back(Cost(total, *price));
    users.AddRow(std::move(total_row));
    Table jobs(jh);
    jobs.SetMaxWidth(1, 32);
    for (const auto& j : report.at("jobs")) {
      double s = j.at("gpu_seconds").get<double>();
      std::vector<std::string> row = {std::to_string(j.at("id").get<int64_t>()), j.at("name").get<std::string>(),
                                      j.at("user").get<std::string>(), j.at("state").get<std::string>(),
                                      std::to_string(j.at("gpus").get<int>()),
                                      std::to_string(j.at("attempts").get<int>()), Hours(s)};
      if (price) row.push_back(Cost(s, *price));
      jobs.AddRow(std::move(row));
    }
    int64_t since = report.value("since_ms", int64_t(0));
    std::string out = fmt::format("GPU usage {} to {}", since > 0 ? "from " + FormatTimestamp(since) : "from the start",
                                  report.at("until_ms").is_null() ? std::string("now")
                                                                  : FormatTimestamp(report["until_ms"].get<int64_t>()));
    if (price) out += fmt::format(", at {:.2f} per GPU-hour", *price);
    out += "\n\n" + users.Render();
    if (jobs.rows() > 0) out += "\n" + jobs.Render();
    return out;
  } catch (const json::exception& e) {
    return Errorf(ErrorCode::kInternal, "malformed usage report from the head: {}", e.what());
  }
}

void AddUsageCommand(CommandContext& ctx) {
  auto f = std::make_shared<UsageFlags>();
  auto* sub = ctx.app.add_subcommand("usage", "GPU-hours and their cost per user and per job");
  sub->add_option_function<double>("--price-per-gpu-hour", [f](double p) { f->price = p; },
                                   "Price of one GPU-hour: adds a COST column")
      ->check(CLI::Range(0.0, 1e9));
  sub->add_option("-u,--user", f->user, "Only this user's jobs");
  sub->add_option("--since", f->since, "Only usage in this much time before now (e.g. 24h, 30m)");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
