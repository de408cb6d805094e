// /v1/nodes/{name}/images: the node's image cache (agent/image_cache.h), read from its
// agent: GET lists the images (viewers), POST .../remove {"image"} removes one and POST
// .../prune {"unused_for_s"} those unused for that long (admins). Replies are the agent's.
#include "head/routes.h"

namespace cohort::head {
namespace {

// Sends `method` `path` (with `body` for a POST) to node `name`'s agent and relays its reply.
void ToAgent(Router& router, Cluster& cluster, const std::string& name, const std::string& path, const json* body,
             httplib::Response& res) {
  auto node = cluster.GetNode(name);
  if (!node) return SendError(res, node.error());
  if (node->node.state != api::NodeState::kUp || node->node.agent_url.empty()) {
    return SendError(res, Error{ErrorCode::kUnavailable, fmt::format("node {} is {}: its images cannot be read now", name,
                                                                     api::NodeStateName(node->node.state))});
  }
  // Listing runs the runtime on the node (`podman images`), which may take a while.
  HttpClient agent = router.AgentClient(name, node->node.agent_url, Millis(90'000));
  auto r = body ? agent.Post(path, *body) : agent.Get(path);
  if (!r) {
    Error e = r.error();
    if (e.code == ErrorCode::kUnavailable) e.message = fmt::format("node {}: {}", name, e.message);
    return SendError(res, e);
  }
  SendJson(res, *r);
}

}  // namespace

void RegisterImageRoutes(Router& router, Cluster& cluster) {
  router.Get(api::routes::kNodeImagesPattern, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    ToAgent(router, cluster, req.matches[1].str(), api::routes::kAgentImages, nullptr, res);
  });
  router.Post(api::routes::kNodeImagesRemovePattern, Access::kAdmin,
              [&](const httplib::Request& req, httplib::Response& res) {
                auto body = BodyJson(req);
                if (!body) return SendError(res, body.error());
                ToAgent(router, cluster, req.matches[1].str(), api::routes::kAgentImagesRemove, &*body, res);
              });
  router.Post(api::routes::kNodeImagesPrunePattern, Access::kAdmin,
              [&](const httplib::Request& req, httplib::Response& res) {
                auto body = BodyJson(req);
                if (!body) return SendError(res, body.error());
                ToAgent(router, cluster, req.matches[1].str(), api::routes::kAgentImagesPrune, &*body, res);
              });
}

}  // namespace cohort::head
