#include "head/router.h"

#include "common/clock.h"
#include "common/openai_error.h"
#include "head/rendezvous.h"

namespace cohort::head {

namespace {

std::string_view HostOfOrigin(std::string_view origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string_view::npos) return {};
  std::string_view rest = origin.substr(scheme + 3);
  return rest.substr(0, rest.find('/'));
}

bool IsJson(const std::string& content_type) {
  std::string_view t = content_type;
  t = t.substr(0, t.find(';'));
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t == "application/json";
}

}  // namespace

bool SameOrigin(const httplib::Request& req) {
  if (!req.has_header("Origin")) return true;  // not a browser's cross-site request
  const std::string origin = req.get_header_value("Origin");
  const std::string host = req.get_header_value("Host");
  return !host.empty() && HostOfOrigin(origin) == host;
}

HttpClient Router::AgentClient(const std::string& node, const std::string& agent_url, Millis timeout) const {
  HttpClient client = agents_->For(agent_url, timeout, node);
  // The agent answers only the head: the node's credential proves it (auth.h).
  if (!insecure_ && tokens_) client.set_bearer_token(tokens_->NodeCredential(node));
  return client;
}

Result<Caller> Router::Identify(const httplib::Request& req) const {
  if (insecure_) {
    Caller anyone;
    anyone.kind = Caller::Kind::kInsecure;
    return anyone;
  }
  // One look-up of the header (httplib's map compares names case-blind, a tolower a
  // character), not has_header and then get_header_value; its value is not copied.
  const auto header = req.headers.find("Authorization");
  if (header == req.headers.end()) return Caller{};
  const std::string_view bearer = BearerOf(header->second);
  if (bearer.empty()) {
    return MakeError(ErrorCode::kUnauthenticated, "Authorization: expected \"Bearer <token>\"");
  }
  if (bearer.starts_with(RendezvousStore::kJobTokenPrefix)) {
    if (!job_tokens_) return MakeError(ErrorCode::kUnauthenticated, "this server accepts no job tokens");
    return job_tokens_(bearer);
  }
  if (tokens_ == nullptr) return MakeError(ErrorCode::kUnauthenticated, "this server accepts no tokens");
  auto caller = tokens_->Authenticate(bearer, NowUnixMs());
  if (caller && caller->kind == Caller::Kind::kNode && tls_) {
    // A node's credential is a bearer secret; over TLS it must also come from the node's
    // own certificate, so a leaked credential alone cannot act for the node.
    const auto peer = tls::PeerName(req.ssl);
    if (!peer || *peer != caller->node) {
      return Errorf(ErrorCode::kUnauthenticated, "node {}'s credential came over a connection {}", caller->node,
                    peer ? fmt::format("with node {}'s certificate", peer->substr(0, 64))
                         : std::string("without a client certificate"));
    }
  }
  return caller;
}

bool Router::RateLimited(const Route& route, const httplib::Request& req, const Caller& caller, bool identified,
                         httplib::Response& res) const {
  if (!limiter_ || route.access == Access::kAgentJoin || route.access == Access::kNode ||
      route.access == Access::kTask) {
    return false;
  }
  std::string key;
  std::string who;
  if (identified && caller.kind == Caller::Kind::kToken) {
    key = "token " + caller.token_id;
    who = caller.Describe();
  } else if (identified && caller.kind == Caller::Kind::kNode) {
    key = "node " + caller.node;
    who = caller.Describe();
  } else if (identified && caller.kind == Caller::Kind::kJob) {
    key = "job " + std::to_string(caller.job);
    who = caller.Describe();
  } else {
    key = "address " + req.remote_addr;
    who = req.remote_addr + (caller.kind == Caller::Kind::kInsecure ? "" : " (no accepted token)");
  }
  const RateLimiter::Decision d = limiter_->Admit(key);
  if (d.admitted) return false;
  const int64_t retry_s = (d.retry_after.count() + 999) / 1000;
  res.set_header("Retry-After", std::to_string(retry_s));
  Refuse(route, res,
         Error{ErrorCode::kResourceExhausted,
               fmt::format("too many requests from {}: at most {} a second, {} at once; retry in {}s", who,
                           limiter_->options().rate, limiter_->options().burst, retry_s)});
  return true;
}

void Router::Refuse(const Route& route, httplib::Response& res, const Error& e) const {
  if (!openai_errors_.contains(route.pattern)) return SendError(res, e);
  res.status = HttpStatusFor(e.code);
  res.set_content(OpenAiErrorText(e), "application/json");
}

Result<void> Router::Check(const Route& route, const httplib::Request& req, const Caller& caller) const {
  COHORT_TRY_VOID(Authorize(route.access, caller, route.job_scope));
  // Past Authorize, a job's token is on a public or task route, or on one of
  // JobScope::kOwnJob, whose first capture is a job id.
  if (caller.kind == Caller::Kind::kJob && route.job_scope == JobScope::kOwnJob &&
      (req.matches.size() < 2 || req.matches[1].str() != std::to_string(caller.job))) {
    return Errorf(ErrorCode::kPermissionDenied, "{} may not act on job {}: a job's token acts only on its own job",
                  caller.Describe(), req.matches.size() < 2 ? std::string() : req.matches[1].str().substr(0, 40));
  }
  if (route.method != "GET" && route.access != Access::kTask && !insecure_) {
    if (!SameOrigin(req)) {
      return Errorf(ErrorCode::kPermissionDenied, "cross-origin request refused: Origin {} does not match Host {}",
                    req.get_header_value("Origin").substr(0, 200), req.get_header_value("Host").substr(0, 200));
    }
    if (!req.body.empty() && !IsJson(req.get_header_value("Content-Type"))) {
      return Errorf(ErrorCode::kInvalidArgument, "Content-Type: a {} body must be application/json, got '{}'",
                    route.method, req.get_header_value("Content-Type").substr(0, 100));
    }
  }
  return {};
}

void Router::Add(const std::string& method, const std::string& pattern, Access access, Handler handler,
                 size_t max_body, JobScope scope) {
  routes_.push_back(Route{method, pattern, access, scope});
  const bool mutating = method != "GET";
  HttpHandler wrapped = [this, route = routes_.back(), mutating, handler = std::move(handler)](
                            const httplib::Request& req, httplib::Response& res) {
    Caller caller;
    Result<Caller> identified = Identify(req);
    if (identified) caller = *identified;
    if (RateLimited(route, req, caller, identified.has_value(), res)) return;
    Result<void> admitted = identified ? Check(route, req, caller) : std::unexpected(identified.error());
    if (admitted) {
      handler(caller, req, res);
    } else {
      Refuse(route, res, admitted.error());
    }
    if (mutating && observer_) observer_(route, caller, req, res);
  };
  // A body refused before the checks (too large, multipart, unreadable): observed too.
  RefusalObserver refused = [this, route = routes_.back()](const httplib::Request& req, const httplib::Response& res) {
    if (!observer_) return;
    Caller caller;
    if (auto identified = Identify(req)) caller = *identified;
    observer_(route, caller, req, res);
  };
  if (method == "GET") {
    server_.Get(pattern, std::move(wrapped));
  } else if (method == "POST") {
    PostWithBodyCap(server_, pattern, std::move(wrapped), max_body, std::move(refused));
  } else if (method == "PUT") {
    PutWithBodyCap(server_, pattern, std::move(wrapped), max_body, std::move(refused));
  } else {
    server_.Delete(pattern, std::move(wrapped));
  }
}

}  // namespace cohort::head
