// /v1/nodes: list, show, drain, resume, remove; each node as the api::NodeStatus view.
#include "head/list_page.h"
#include "head/routes.h"

namespace cohort::head {

// How long `drain --now` waits for a job's checkpoint before moving it anyway.
constexpr int64_t kDefaultDrainTimeoutS = 60;

void RegisterNodeRoutes(Router& router, Cluster& cluster, TokenBook& tokens) {
  auto to_json = [](const NodeStatus& s) { return api::ToJson(s); };

  router.Get(api::routes::kNodes, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    static const std::set<std::string> known = KeysOf(api::ToJson(NodeStatus{}));
    auto page = ParsePageParams(req, known);
    if (!page) return SendError(res, page.error());
    // One more than the page: whether a next page exists.
    auto nodes = cluster.ListNodes(page->cursor, page->limit + 1);
    json out = json::object();
    if (nodes.size() > page->limit) {
      nodes.pop_back();
      out["next_cursor"] = nodes.back().node.name;
    }
    json list = json::array();
    for (const auto& n : nodes) list.push_back(Project(api::ToJson(n), page->fields, "name"));
    out["nodes"] = std::move(list);
    SendJson(res, out);
  });

  router.Get(api::routes::kNodePattern, Access::kViewer, [&, to_json](const httplib::Request& req, httplib::Response& res) {
    Reply(res, cluster.GetNode(req.matches[1].str()), to_json);
  });

  router.Post(api::routes::kNodeDrainPattern, Access::kAdmin, [&, to_json](const httplib::Request& req, httplib::Response& res) {
    // Body (optional): {"reason": text, "now": bool, "timeout_s": N}. With now, the jobs on
    // the node are asked to checkpoint and moved (after a new checkpoint, or timeout_s).
    std::string reason;
    bool now = false;
    int64_t timeout_s = kDefaultDrainTimeoutS;
    if (!req.body.empty()) {
      auto body = BodyJson(req);
      if (!body) return SendError(res, body.error());
      auto r = ObjectReader::Open(*body);
      if (!r) return SendError(res, r.error());
      auto why = r->String("reason", "");
      if (!why) return SendError(res, why.error());
      auto want_now = r->Bool("now", false);
      if (!want_now) return SendError(res, want_now.error());
      auto timeout = r->Int("timeout_s", kDefaultDrainTimeoutS, 1, 7 * 24 * 3600);
      if (!timeout) return SendError(res, timeout.error());
      if (auto fin = r->Finish(); !fin) return SendError(res, fin.error());
      if (why->size() > 1024) return SendError(res, Error{ErrorCode::kInvalidArgument, "reason: at most 1024 characters", "reason"});
      reason = *why;
      now = *want_now;
      timeout_s = *timeout;
    }
    Reply(res, cluster.Drain(req.matches[1].str(), reason, now, timeout_s * 1000), to_json);
  });

  router.Post(api::routes::kNodeResumePattern, Access::kAdmin, [&, to_json](const httplib::Request& req, httplib::Response& res) {
    Reply(res, cluster.Resume(req.matches[1].str()), to_json);
  });

  // ?force=true: also a dead node that still holds work (core/remove_node.h). Replies with
  // the node as it was. Its credentials are retired before it is removed, so that a
  // removal that fails halfway leaves a node that must register again, never a removed
  // node whose agent could still heartbeat.
  router.Delete(api::routes::kNodePattern, Access::kAdmin, [&, to_json](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    bool force = false;
    if (req.has_param("force")) {
      const std::string f = req.get_param_value("force");
      if (f != "true" && f != "false") {
        return SendError(res, Error{ErrorCode::kInvalidArgument,
                                    fmt::format("force: must be true or false, got '{}'", f.substr(0, 40)), "force"});
      }
      force = f == "true";
    }
    if (auto ok = cluster.CheckRemovable(name, force); !ok) return SendError(res, ok.error());
    if (auto retired = tokens.RetireNodeCredentials(name); !retired) {
      return SendError(res, WithContext(retired.error(), fmt::format("cannot retire node {}'s credentials", name)));
    }
    Reply(res, cluster.RemoveNode(name, force), to_json);
  });
}

}  // namespace cohort::head
