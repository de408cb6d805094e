// `cohort drain NODE... [--reason TEXT] [--now [--timeout DURATION]]` and `cohort resume
// NODE...`: stop placing new jobs on nodes (running jobs finish; with --now they are asked
// to checkpoint and moved to other nodes), and undo that. Each prints the node's new state;
// the exit code is that of the first node that failed, like `cancel`.
#include "cli/client.h"
#include "sched/constraints.h"

namespace cohort::cli {
namespace {

struct DrainFlags {
  std::vector<std::string> nodes;
  std::optional<std::string> reason;
  bool now = false;
  std::optional<std::string> timeout;  // with --now: how long to wait for a checkpoint
};

int Run(const DrainFlags& f, bool drain, const GlobalOptions& global) {
  auto nodes = ExpandNodeArgs(f.nodes);
  if (!nodes) return ReportError(nodes.error());
  HttpClient head = HeadClient(global);
  json body = json::object();
  if (f.reason) body["reason"] = *f.reason;
  if (f.timeout && !f.now) {
    return ReportError(Error{ErrorCode::kInvalidArgument, "--timeout needs --now (it bounds the wait for a checkpoint)"});
  }
  if (f.now) {
    body["now"] = true;
    if (f.timeout) {
      auto ms = ParseDurationMs(*f.timeout, "--timeout");
      if (!ms) return ReportError(ms.error());
      if (*ms < 1000) return ReportError(Error{ErrorCode::kInvalidArgument, "--timeout must be at least 1s"});
      body["timeout_s"] = *ms / 1000;
    }
  }
  json done = json::array();
  const int rc = ForEachName(
      *nodes,
      [&](const std::string& name) {
        return head.Post(drain ? api::routes::NodeDrain(name) : api::routes::NodeResume(name), body);
      },
      [&](const std::string&, json reply) {
        if (global.json) {
          done.push_back(std::move(reply));
          return 0;
        }
        auto node = FromHead(api::NodeStatusFromJson(reply), "node");
        if (!node) return ReportError(node.error());
        std::printf("%s\n", NodeStateLine(*node).c_str());
        std::fflush(stdout);
        return 0;
      });
  if (global.json) PrintJson(json{{"nodes", std::move(done)}});
  return rc;
}

}  // namespace

Result<std::vector<std::string>> ExpandNodeArgs(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& arg : args) {
    for (auto& name : COHORT_TRY(sched::ExpandHostList(arg, "NODE"))) {
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
    }
  }
  return out;
}

std::string NodeStateLine(const api::NodeStatus& v) {
  std::string line = fmt::format("Node {} is {}", v.node.name, v.display_state);
  if (!v.jobs.empty()) {
    std::vector<std::string> ids;
    for (auto id : v.jobs) ids.push_back(std::to_string(id));
    std::string list;
    for (size_t i = 0; i < ids.size(); ++i) list += (i ? ", " : "") + ids[i];
    line += v.display_state == "DRAINING"
                ? fmt::format(" ({} {} still running)", ids.size() == 1 ? "job" : "jobs", list)
                : fmt::format(" (running {} {})", ids.size() == 1 ? "job" : "jobs", list);
  }
  if (v.node.drain && !v.node.drain_reason.empty()) line += ": " + v.node.drain_reason;
  return line;
}

void AddDrainCommands(CommandContext& ctx) {
  GlobalOptions& global = ctx.global;
  {
    auto f = std::make_shared<DrainFlags>();
    auto* sub = ctx.app.add_subcommand("drain", "Stop placing new jobs on nodes; running jobs finish");
    sub->add_option("NODE", f->nodes, "Node names, or host lists as Slurm writes them: node[1-4,7]")->required();
    sub->add_option_function<std::string>("-r,--reason", [f](const std::string& r) { f->reason = r; },
                                          "Why (shown by `cohort nodes`)");
    sub->add_flag("--now", f->now,
                  "Also move the running jobs: ask each to checkpoint (its checkpoint_signal and the reply "
                  "to its progress reports), then requeue it onto other nodes");
    sub->add_option_function<std::string>("--timeout", [f](const std::string& t) { f->timeout = t; },
                                          "With --now: move a job that reports no new checkpoint within this "
                                          "long anyway (default 60s)");
    AddClientOptions(sub, ctx.global);
    ctx.on_run(sub, [f, &global] { return Run(*f, /*drain=*/true, global); });
  }
  {
    auto f = std::make_shared<DrainFlags>();
    auto* sub = ctx.app.add_subcommand(
        "resume", "Let drained nodes take new jobs again, and mark their unhealthy GPUs healthy (after your check)");
    sub->add_option("NODE", f->nodes, "Node names, or host lists as Slurm writes them: node[1-4,7]")->required();
    AddClientOptions(sub, ctx.global);
    ctx.on_run(sub, [f, &global] { return Run(*f, /*drain=*/false, global); });
  }
}

}  // namespace cohort::cli
