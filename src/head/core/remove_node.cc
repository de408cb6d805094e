#include "head/core/remove_node.h"

#include "common/clock.h"
#include "head/core/lifecycle.h"
#include "head/core/timing.h"
#include "head/core/tx.h"

namespace cohort::head::core {

namespace {

// "jobs 3, 4" and "attempts not yet confirmed stopped" the node still holds; "" if none.
std::string WorkOn(const ClusterState& s, const std::string& node) {
  std::string out;
  if (auto nj = s.node_jobs.find(node); nj != s.node_jobs.end() && !nj->second.empty()) {
    out = nj->second.size() == 1 ? "job " : "jobs ";
    bool first = true;
    for (api::JobId id : nj->second) {
      out += fmt::format("{}{}", first ? "" : ", ", id);
      first = false;
    }
  }
  if (auto rt = s.runtime.find(node); rt != s.runtime.end() && !rt->second.stopping.empty()) {
    if (!out.empty()) out += " and ";
    out += fmt::format("{} ended attempt(s) its agent has not confirmed stopped", rt->second.stopping.size());
  }
  return out;
}

}  // namespace

Result<void> CanRemoveNode(const ClusterState& s, const Context& ctx, const std::string& node, bool force, Now now) {
  auto it = s.nodes.find(node);
  if (it == s.nodes.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", node);
  auto rt = s.runtime.find(node);
  const NodeRuntime fresh;
  const NodeRuntime& r = rt == s.runtime.end() ? fresh : rt->second;
  const int64_t age = HeartbeatAgeMs(r, now);
  const bool silent = it->second.state == api::NodeState::kDown || r.unreachable ||
                      age > NodeFailureTimeoutMs(s, ctx, r, now);
  if (!silent) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "node '{}' is alive (last heartbeat {} ago): stop its agent first (`cohort drain {}` lets its "
                  "jobs finish); a node can be removed once it is DOWN",
                  node, FormatDuration(age), node);
  }
  if (const std::string work = WorkOn(s, node); !work.empty() && !force) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "node '{}' still holds {}: --force removes it anyway, failing them as on a node that went down "
                  "(requeued when restarts remain)",
                  node, work);
  }
  return {};
}

Result<Effects> RemoveNode(ClusterState& s, const Context& ctx, const std::string& node, bool force, Now now) {
  COHORT_TRY_VOID(CanRemoveNode(s, ctx, node, force, now));
  Tx tx(s, ctx, now);
  const std::string work = WorkOn(s, node);
  FailJobsOnNode(tx, node, fmt::format("node {} was removed", node));
  NoteShape(s, s.nodes.at(node), -1);
  s.nodes.erase(node);
  s.runtime.erase(node);  // its stopping attempts with it: their agent is gone
  s.node_jobs.erase(node);
  tx.fx.nodes_to_store.erase(node);
  tx.fx.nodes_to_remove.insert(node);
  tx.RequestSchedule();
  tx.fx.Warn("node {} removed{}", node, work.empty() ? "" : " (forced; it held " + work + ")");
  return std::move(tx.fx);
}

}  // namespace cohort::head::core
