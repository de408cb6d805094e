// /v1/agents: the agent protocol (registration and heartbeats).
#include "head/routes.h"

namespace cohort::head {

void RegisterAgentRoutes(httplib::Server& server, Cluster& cluster) {
  PostWithBodyCap(server, api::routes::kAgentRegister, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto reg = api::RegistrationFromJson(*body);
    if (!reg) return SendError(res, reg.error());
    auto timing = cluster.Register(*reg);
    Reply(res, timing, [](const api::AgentTiming& t) { return json{{"timing", api::ToJson(t)}}; });
  });

  PostWithBodyCap(server, api::routes::kAgentHeartbeatPattern, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto hb = api::HeartbeatFromJson(*body);
    if (!hb) return SendError(res, hb.error());
    auto reply = cluster.Heartbeat(req.matches[1].str(), *hb);
    Reply(res, reply, [](const api::HeartbeatReply& r) { return api::ToJson(r); });
  });
}

}  // namespace cohort::head
