// `cohort shares` (like Slurm's sshare): each team's share, quota, borrowing, decayed
// usage and fair-share factor; and the table of `cohort queue --priority` (like sprio).
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {

namespace {

int Run(const GlobalOptions& global) {
  auto reply = HeadClient(global).Get(api::routes::kShares);
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  auto report = FromHead(api::SharesReportFromJson(*reply), "shares report");
  if (!report) return ReportError(report.error());
  std::fputs(RenderShares(*report).c_str(), stdout);
  return 0;
}

}  // namespace

std::string RenderShares(const api::SharesReport& report) {
  Table t({"TEAM", "WEIGHT", "SHARE", "QUOTA", "BORROW LIMIT", "GPUS", "BORROWED", "USAGE (GPU-h)", "USAGE",
           "FAIRSHARE", "RUNNING", "PENDING"});
  for (const auto& s : report.teams) {
    t.AddRow({s.implicit ? s.name + " (implicit)" : s.name, std::to_string(s.weight), fmt::format("{:.3f}", s.share),
              std::to_string(s.quota_gpus),
              s.borrow_limit_gpus ? std::to_string(*s.borrow_limit_gpus) : std::string("unlimited"),
              fmt::format("{:g}", s.gpus_in_use), fmt::format("{:g}", s.borrowed_gpus),
              fmt::format("{:.2f}", s.usage_gpu_hours), fmt::format("{:.3f}", s.usage_fraction),
              fmt::format("{:.3f}", s.fair_share_factor), std::to_string(s.running_jobs),
              std::to_string(s.pending_jobs)});
  }
  return fmt::format("usage decays with a half-life of {}; fair-share factor = 2^(-usage/share)\n",
                     FormatDuration(report.half_life_ms)) +
         t.Render();
}

std::string RenderPriorities(const api::PriorityReport& r) {
  Table t({"JOBID", "USER", "TEAM", "CLASS", "PRIORITY", "FAIRSHARE", "AGE", "JOBSIZE", "JOB"});
  const auto cell = [](double points, double factor) { return fmt::format("{:.0f} ({:.3f})", points, factor); };
  for (const auto& j : r.jobs) {
    t.AddRow({std::to_string(j.id), j.user, j.team, j.queue_class, fmt::format("{:.0f}", j.priority),
              cell(j.fair_share_points, j.fair_share), cell(j.age_points, j.age), cell(j.size_points, j.size),
              cell(j.job_points, j.job)});
  }
  return fmt::format("weights: fairshare {:.0f}, age {:.0f}, jobsize {:.0f}, job {:.0f}; points (factor); the "
                     "scheduler considers jobs in this order\n",
                     r.weight_fair_share, r.weight_age, r.weight_size, r.weight_job) +
         t.Render();
}

void AddSharesCommand(CommandContext& ctx) {
  auto* sub = ctx.app.add_subcommand("shares", "Each team's share, quota, usage and fair-share factor, like sshare");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [&global] { return Run(global); });
}

}  // namespace cohort::cli
