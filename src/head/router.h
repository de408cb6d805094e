// Router: how the head's routes are registered. Each route names the Access it asks
// (auth.h); the Router wraps its handler so that, before the handler runs, the request's
// caller is identified from its bearer credential (or is everyone, with --insecure), the
// caller's request rate is checked (rate_limit.h: 429 with Retry-After past it), the
// route's access is checked (401 without valid credentials, 403 when they are not
// enough), and a request that changes state must be JSON (when it has a body) and
// same-origin (an Origin header, when a browser sends one, must name the Host it was
// sent to), so a page of another site cannot submit jobs through a user's browser. It
// keeps the list of routes it registered, so that a test can walk every one and none is
// forgotten. A job's token (auth.h) passes only routes registered with JobScope::kOwnJob,
// and only for the job their path names. Register everything before the server starts; handlers run on the server's
// threads.
//
// The rate limit counts per caller: a token's id, a node's name, a job's id, and for a caller without
// accepted credentials (anonymous, a bad token, --insecure) its address, so that guessing
// tokens is slowed as well. The agent protocol and tasks (kAgentJoin, kNode, kTask: joins,
// heartbeats, rendezvous, progress reports) are exempt: their pools and the head's timing
// bound them, and a big job's ranks or a cluster's agents joining at once are not abuse.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/http.h"
#include "common/mutex.h"
#include "head/agent_clients.h"
#include "head/auth.h"
#include "head/head_tls.h"
#include "head/rate_limit.h"

namespace cohort::head {

class Router {
 public:
  using Handler = std::function<void(const Caller&, const httplib::Request&, httplib::Response&)>;

  // `tokens` authenticates bearer credentials; with `insecure`, every caller is
  // Caller::Kind::kInsecure and no check is made. With `tls` (the server is HTTPS), a node
  // credential counts only over a connection whose client certificate names its node.
  // `agents` (needed by AgentClient only) must outlive the router.
  Router(httplib::Server& server, const TokenBook* tokens, bool insecure, const HeadTls* tls = nullptr,
         AgentClients* agents = nullptr)
      : server_(server), tokens_(tokens), insecure_(insecure), tls_(tls), agents_(agents) {}

  // `handler` takes (const Caller&, req, res) or just (req, res).
  // `scope` kOwnJob: a job's token may also read this route for its own job (auth.h).
  template <typename F>
  void Get(const std::string& pattern, Access access, F&& handler, JobScope scope = JobScope::kNone) {
    Add("GET", pattern, access, Wrap(std::forward<F>(handler)), 0, scope);
  }
  template <typename F>
  void Post(const std::string& pattern, Access access, F&& handler, size_t max_body = kMaxRequestBodyBytes) {
    Add("POST", pattern, access, Wrap(std::forward<F>(handler)), max_body);
  }
  // `scope` kOwnJob: a job's token may also call this route for its own job (auth.h).
  template <typename F>
  void Post(const std::string& pattern, Access access, F&& handler, JobScope scope) {
    Add("POST", pattern, access, Wrap(std::forward<F>(handler)), kMaxRequestBodyBytes, scope);
  }
  template <typename F>
  void Put(const std::string& pattern, Access access, F&& handler, size_t max_body = kMaxRequestBodyBytes) {
    Add("PUT", pattern, access, Wrap(std::forward<F>(handler)), max_body);
  }
  template <typename F>
  void Delete(const std::string& pattern, Access access, F&& handler) {
    Add("DELETE", pattern, access, Wrap(std::forward<F>(handler)), 0);
  }

  struct Route {
    std::string method;
    std::string pattern;  // as registered (a regex for paths with segments)
    Access access;
    JobScope job_scope = JobScope::kNone;
  };
  const std::vector<Route>& routes() const { return routes_; }
  httplib::Server& server() const { return server_; }
  const TokenBook* tokens() const { return tokens_; }
  bool insecure() const { return insecure_; }
  const HeadTls* tls() const { return tls_; }

  // A client for node `node`'s agent at `agent_url`, as the head calls an agent: the
  // agent's kept client (AgentClients, given at construction: required for this call) with
  // the node's credential (unless insecure) and `timeout`. Any thread.
  HttpClient AgentClient(const std::string& node, const std::string& agent_url, Millis timeout) const;

  // The caller `req` names: kInsecure with --insecure; kAnonymous without an
  // Authorization header; kUnauthenticated for credentials the head does not accept.
  Result<Caller> Identify(const httplib::Request& req) const;

  // Checks a job's token (COHORT_JOB_TOKEN: RendezvousStore::kJobTokenPrefix) and names
  // its caller (Caller::Kind::kJob), or says why not (kUnauthenticated). Unset: job tokens
  // are refused. Set before the server starts.
  using JobTokens = std::function<Result<Caller>(std::string_view token)>;
  void set_job_tokens(JobTokens f) { job_tokens_ = std::move(f); }

  // Limits each caller's requests (see above); null (the default): no limit. Set before
  // the server starts; `limiter` must outlive the server.
  void set_rate_limiter(RateLimiter* limiter) { limiter_ = limiter; }
  // Requests refused by the rate limit so far.
  uint64_t rate_limited() const { return limiter_ ? limiter_->refused() : 0; }

  // Called after every request that would change state (POST, PUT, DELETE) with its
  // route, its caller and its answer: the handler's, or the refusal of a check before it
  // (401, 403, 400 ..., and a body refused as too large, 413, or multipart, 415). The caller is who the request named once identified: anonymous
  // when it brought no credentials or ones the head does not accept, the token's user when
  // only the access or a later check refused it. For the audit log (audit.h). Set before
  // the server starts; runs on the handler's thread, after the response is complete. Not
  // called for requests the rate limit refused (cohort_http_rate_limited_total counts
  // them), so that a flood cannot crowd the audit log.
  using Observer =
      std::function<void(const Route&, const Caller&, const httplib::Request&, const httplib::Response&)>;
  void set_observer(Observer o) { observer_ = std::move(o); }
  // The refusals of the route registered as `pattern` (401, 403, 429, a wrong Content-Type:
  // before its handler runs) are in OpenAI's error shape (common/openai_error.h) rather
  // than Cohort's: for the gateway's OpenAI-compatible routes, whose clients (the OpenAI
  // SDKs, lm-evaluation-harness) read error.type and error.param. Call before the server
  // starts.
  void UseOpenAiErrors(const std::string& pattern) { openai_errors_.insert(pattern); }

 private:
  template <typename F>
  static Handler Wrap(F&& f) {
    if constexpr (std::is_invocable_v<F&, const Caller&, const httplib::Request&, httplib::Response&>) {
      return Handler(std::forward<F>(f));
    } else {
      return [f = std::forward<F>(f)](const Caller&, const httplib::Request& req, httplib::Response& res) {
        f(req, res);
      };
    }
  }
  void Add(const std::string& method, const std::string& pattern, Access access, Handler handler, size_t max_body,
           JobScope scope = JobScope::kNone);
  // The checks before a handler once the caller is identified: access, content type and
  // origin.
  Result<void> Check(const Route& route, const httplib::Request& req, const Caller& caller) const;
  // True, after answering 429, when `route` is rate-limited and the caller is past its
  // limit. `identified`: the caller's credentials were accepted.
  bool RateLimited(const Route& route, const httplib::Request& req, const Caller& caller, bool identified,
                   httplib::Response& res) const;

  httplib::Server& server_;
  const TokenBook* tokens_;
  const bool insecure_;
  const HeadTls* tls_;
  std::vector<Route> routes_;
  Observer observer_;
  JobTokens job_tokens_;
  RateLimiter* limiter_ = nullptr;
  AgentClients* agents_;
  std::set<std::string> openai_errors_;  // route patterns (UseOpenAiErrors)
  // Answers a refusal of `route` in its error shape.
  void Refuse(const Route& route, httplib::Response& res, const Error& e) const;
};

// True if the request's Origin header (when present) names the host it was sent to.
bool SameOrigin(const httplib::Request& req);

}  // namespace cohort::head
