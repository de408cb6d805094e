// `cohort node rm NODE... [--force]` (admins): forget nodes that have left the cluster
// (DELETE /v1/nodes/{name}, head/core/remove_node.h). A node must be DOWN (its agent
// stopped); --force also removes a dead node that still holds jobs, which are requeued as
// on a node that went down. Its credential stops working: the machine needs a join token
// to come back. The exit code is that of the first node that failed, like `drain`.
#include "cli/client.h"

namespace cohort::cli {
namespace {

struct NodeRmFlags {
  std::vector<std::string> nodes;
  bool force = false;
};

int RunRm(const NodeRmFlags& f, const GlobalOptions& global) {
  auto nodes = ExpandNodeArgs(f.nodes);  // node[1-4,7], as drain and resume take them
  if (!nodes) return ReportError(nodes.error());
  HttpClient head = HeadClient(global);
  std::vector<std::pair<std::string, std::string>> query;
  if (f.force) query.emplace_back("force", "true");
  json removed = json::array();
  const int rc = ForEachName(
      *nodes, [&](const std::string& name) { return head.Delete(api::routes::WithQuery(api::routes::Node(name), query)); },
      [&](const std::string& name, json reply) {
        if (global.json) {
          removed.push_back(std::move(reply));
        } else {
          std::printf("Removed node %s\n", name.c_str());
          std::fflush(stdout);
        }
        return 0;
      });
  if (global.json) PrintJson(json{{"nodes", std::move(removed)}});
  return rc;
}

}  // namespace

void AddNodeCommands(CommandContext& ctx) {
  GlobalOptions& global = ctx.global;
  auto* node = ctx.app.add_subcommand("node", "Manage nodes (admins): rm");
  node->require_subcommand(1);
  auto f = std::make_shared<NodeRmFlags>();
  auto* rm = node->add_subcommand(
      "rm", "Forget nodes that have left the cluster (DOWN: stop the agent first); their credentials stop working");
  rm->add_option("NODE", f->nodes, "Node names, or host lists as Slurm writes them: node[1-4,7]")->required();
  rm->add_flag("--force", f->force,
               "Also remove a dead node that still holds jobs (they are requeued, as on a node that went down)");
  AddClientOptions(rm, global);
  ctx.on_run(rm, [f, &global] { return RunRm(*f, global); });
}

}  // namespace cohort::cli
