// `cohort usage [--price-per-gpu-hour X] [--user U] [--since DURATION]`: GPU-hours (and
// their cost at a price) per team, per user and per job, from GET /v1/usage (like Slurm's
// sreport by account and user). Running jobs count up to now.
#include <limits>

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
  std::vector<std::pair<std::string, std::string>> query;
  if (!f.user.empty()) query.emplace_back("user", f.user);
  if (!f.since.empty()) {
    auto ms = ParseDurationMs(f.since, "--since");
    if (!ms) return ReportError(ms.error());
    query.emplace_back("since", std::to_string(std::max<int64_t>(0, NowUnixMs() - *ms)));
  }
  auto reply = HeadClient(global).Get(api::routes::WithQuery(api::routes::kUsage, query));
  if (!reply) return ReportError(reply.error());
  auto report = FromHead(api::UsageReportFromJson(*reply), "usage report");
  if (!report) return ReportError(report.error());
  if (global.json) {
    json out = *reply;
    if (f.price) {
      out["price_per_gpu_hour"] = *f.price;
      out["total_cost"] = report->total_gpu_seconds / 3600.0 * *f.price;
      for (size_t i = 0; i < report->teams.size() && i < out["teams"].size(); ++i) {
        out["teams"][i]["cost"] = report->teams[i].gpu_seconds / 3600.0 * *f.price;
      }
      for (size_t i = 0; i < report->users.size(); ++i) {
        out["users"][i]["cost"] = report->users[i].gpu_seconds / 3600.0 * *f.price;
      }
      for (size_t i = 0; i < report->jobs.size(); ++i) {
        out["jobs"][i]["cost"] = report->jobs[i].gpu_seconds / 3600.0 * *f.price;
      }
    }
    PrintJson(out);
    return 0;
  }
  std::fputs(RenderUsage(*report, f.price).c_str(), stdout);
  return 0;
}

}  // namespace

std::string RenderUsage(const api::UsageReport& report, std::optional<double> price) {
  std::vector<std::string> th = {"TEAM", "JOBS", "GPU-HOURS"};
  std::vector<std::string> uh = {"USER", "JOBS", "GPU-HOURS"};
  std::vector<std::string> jh = {"JOBID", "NAME", "USER", "TEAM", "STATE", "GPUS", "ATTEMPTS", "GPU-HOURS"};
  if (price) {
    th.push_back("COST");
    uh.push_back("COST");
    jh.push_back("COST");
  }
  // Per team (an older head sends none): the teams' rows add up to the users' total.
  Table teams(th);
  for (const auto& t : report.teams) {
    std::vector<std::string> row = {t.team, std::to_string(t.jobs), Hours(t.gpu_seconds)};
    if (price) row.push_back(Cost(t.gpu_seconds, *price));
    teams.AddRow(std::move(row));
  }
  Table users(uh);
  for (const auto& u : report.users) {
    std::vector<std::string> row = {u.user, std::to_string(u.jobs), Hours(u.gpu_seconds)};
    if (price) row.push_back(Cost(u.gpu_seconds, *price));
    users.AddRow(std::move(row));
  }
  std::vector<std::string> total_row = {"TOTAL", std::to_string(report.jobs.size()), Hours(report.total_gpu_seconds)};
  if (price) total_row.push_back(Cost(report.total_gpu_seconds, *price));
  users.AddRow(std::move(total_row));
  Table jobs(jh);
  jobs.SetMaxWidth(1, 32);
  for (const auto& j : report.jobs) {
    std::vector<std::string> row = {std::to_string(j.id), j.name, j.user, j.team.empty() ? "-" : j.team,
                                    std::string(api::JobStateName(j.state)), fmt::format("{:g}", j.gpus),
                                    std::to_string(j.attempts), Hours(j.gpu_seconds)};
    if (price) row.push_back(Cost(j.gpu_seconds, *price));
    jobs.AddRow(std::move(row));
  }
  const api::UsageWindow& w = report.window;
  std::string out = fmt::format("GPU usage {} to {}", w.since_ms > 0 ? "from " + FormatTimestamp(w.since_ms) : "from the start",
                                w.until_ms == std::numeric_limits<int64_t>::max() ? std::string("now")
                                                                                  : FormatTimestamp(w.until_ms));
  if (price) out += fmt::format(", at {:.2f} per GPU-hour", *price);
  out += "\n\n";
  if (teams.rows() > 0) out += teams.Render() + "\n";
  out += users.Render();
  if (jobs.rows() > 0) out += "\n" + jobs.Render();
  return out;
}

void AddUsageCommand(CommandContext& ctx) {
  auto f = std::make_shared<UsageFlags>();
  auto* sub = ctx.app.add_subcommand("usage", "GPU-hours and their cost per team, per user and per job");
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
