// /v1/agents: the agent protocol (registration and heartbeats).
#include "head/routes.h"

namespace cohort::head {

void RegisterAgentRoutes(Router& router, Cluster& cluster) {
  // A join token (or an admin's) registers a node; the reply carries the node's credential
  // (auth.h), which its heartbeats then present.
  router.Post(api::routes::kAgentRegister, Access::kAgentJoin, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto reg = api::RegistrationFromJson(*body);
    if (!reg) return SendError(res, reg.error());
    auto timing = cluster.Register(*reg);
    Reply(res, timing, [&](const api::AgentTiming& t) {
      json out = {{"timing", api::ToJson(t)}};
      if (!router.insecure() && router.tokens()) out["node_credential"] = router.tokens()->NodeCredential(reg->name);
      return out;
    });
  });

  // Only the node's own credential heartbeats for it.
  router.Post(api::routes::kAgentHeartbeatPattern, Access::kNode, [&](const Caller& caller, const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (caller.kind == Caller::Kind::kNode && caller.node != req.matches[1].str()) {
      return SendError(res, Error{ErrorCode::kPermissionDenied,
                                  fmt::format("{} may not heartbeat for node {}", caller.Describe(),
                                              req.matches[1].str().substr(0, 200))});
    }
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto hb = api::HeartbeatFromJson(*body);
    if (!hb) return SendError(res, hb.error());
    auto reply = cluster.Heartbeat(req.matches[1].str(), *hb);
    Reply(res, reply, [](const api::HeartbeatReply& r) { return api::ToJson(r); });
  });
}

}  // namespace cohort::head
