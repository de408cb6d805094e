// /v1/agents: the agent protocol (registration and heartbeats).
#include "head/routes.h"

namespace cohort::head {

namespace {

// A node's credential acts only for its own node (an admin's token for any).
Result<void> CheckSameNode(const Caller& caller, const std::string& node, std::string_view what) {
  if (caller.kind != Caller::Kind::kNode || caller.node == node) return {};
  return Errorf(ErrorCode::kPermissionDenied, "{} may not {} for node {}", caller.Describe(), what,
                node.substr(0, 200));
}

}  // namespace

void RegisterAgentRoutes(Router& router, Cluster& cluster) {
  // A join token (or an admin's) registers a node; the reply carries the node's credential
  // (auth.h), which its heartbeats then present.
  router.Post(api::routes::kAgentRegister, Access::kAgentJoin, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto reg = api::RegistrationFromJson(*body);
    if (!reg) return SendError(res, reg.error());
    const std::string csr = std::move(reg->csr);
    reg->csr.clear();
    // A head with TLS issues the node its certificate (head_tls.h) and calls it over
    // HTTPS: the agent must ask for one and serve HTTPS itself.
    std::optional<HeadTls::Issued> cert;
    if (const HeadTls* tls = router.tls()) {
      if (csr.empty()) {
        return SendError(res, MakeError(ErrorCode::kInvalidArgument,
                                        "csr: this head uses TLS; the agent must send a certificate request (is it "
                                        "an older agent, or started with an http:// head URL?)",
                                        "csr").error());
      }
      if (!reg->agent_url.empty() && !reg->agent_url.starts_with("https://")) {
        return SendError(res, MakeError(ErrorCode::kInvalidArgument,
                                        "agent_url: must be https:// for a head with TLS, got " + reg->agent_url,
                                        "agent_url").error());
      }
      auto issued = tls->IssueNode(reg->name, reg->address, csr, NowUnixMs(), req.remote_addr);
      if (!issued) return SendError(res, issued.error());
      cert = std::move(*issued);
    }
    auto timing = cluster.Register(*reg);
    Reply(res, timing, [&](const api::AgentTiming& t) {
      json out = {{"timing", api::ToJson(t)}};
      if (!router.insecure() && router.tokens()) out["node_credential"] = router.tokens()->NodeCredential(reg->name);
      if (cert) {
        out["certificate"] = cert->cert_pem;
        out["certificate_expires_ms"] = cert->expires_ms;
      }
      return out;
    });
  });

  // Only the node's own credential heartbeats for it.
  router.Post(api::routes::kAgentHeartbeatPattern, Access::kNode, [&](const Caller& caller, const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (auto ok = CheckSameNode(caller, req.matches[1].str(), "heartbeat"); !ok) return SendError(res, ok.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto hb = api::HeartbeatFromJson(*body);
    if (!hb) return SendError(res, hb.error());
    std::string text;  // the reply as SendJson would write it, made by the Cluster
    auto reply = cluster.Heartbeat(req.matches[1].str(), *hb, &text);
    if (!reply) return SendError(res, reply.error());
    res.status = 200;
    res.set_content(std::move(text), "application/json");
  });

  // A node renews its certificate with its current one (the router checked it names the
  // node): the new one names the same node and the address it registered.
  router.Post(api::routes::kAgentCertificatePattern, Access::kNode,
              [&](const Caller& caller, const httplib::Request& req, httplib::Response& res) {
                const std::string node = req.matches[1].str();
                if (auto ok = CheckSameNode(caller, node, "renew the certificate"); !ok) return SendError(res, ok.error());
                const HeadTls* tls = router.tls();
                if (!tls) {
                  return SendError(res, Error{ErrorCode::kFailedPrecondition, "this head does not use TLS"});
                }
                auto body = BodyJson(req);
                if (!body) return SendError(res, body.error());
                auto r = ObjectReader::Open(*body);
                if (!r) return SendError(res, r.error());
                auto csr = r->String("csr", std::nullopt, 16 << 10);
                if (!csr) return SendError(res, csr.error());
                if (auto done = r->Finish(); !done) return SendError(res, done.error());
                auto status = cluster.GetNode(node);
                if (!status) return SendError(res, status.error());
                auto issued = tls->IssueNode(node, status->node.address, *csr, NowUnixMs(), req.remote_addr);
                if (!issued) return SendError(res, issued.error());
                SendJson(res, json{{"certificate", issued->cert_pem}, {"certificate_expires_ms", issued->expires_ms}});
              });
}

}  // namespace cohort::head
