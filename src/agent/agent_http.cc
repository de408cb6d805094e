// The agent's HTTP server: its routes and their handlers (Agent's methods, agent.h).
// Handlers run on the server's threads; what they share with the heartbeat loop is read
// under Agent::mu_ (the sample of the last heartbeat, the executor pointer).
//
// The bodies the head sends (exec sessions, the image cache) are read as the agent
// protocol is (docs/ARCHITECTURE.md, "Wire compatibility"): fields a newer head added are
// ignored (UnknownFields::kIgnore), so an older agent keeps serving it during a rolling
// upgrade; wrong types and missing fields are refused, naming the field. Fault injection,
// which people call, stays strict.
#include <httplib.h>

#include "agent/agent.h"
#include "agent/executor.h"
#include "agent/metrics.h"
#include "api/exec.h"
#include "api/routes.h"
#include "common/http_server.h"
#include "common/log.h"

namespace cohort::agent {

namespace routes = api::routes;

namespace {

// The agent's API is small (wake-ups, logs, metrics): one pool of four threads, behind
// HttpServer's limits on headers, bodies, slow and idle clients. Exec sessions' calls
// (/v1/exec...) have a pool of their own: a read of output waits up to
// api::kMaxExecWaitMs for some, and must not hold the threads that wake-ups need.
HttpServerOptions AgentHttpOptions(const AgentConfig& c) {
  HttpServerOptions o;
  o.host = c.listen_host;
  o.port = c.port;
  o.pools = {{"agent", 4, 1024}, {"exec", 16, 1024}};
  o.classify = [](std::string_view, std::string_view path) -> size_t {
    return path.starts_with(routes::kAgentExec) ? 1 : 0;
  };
  return o;
}

// The task an exec call names: ?job=&attempt=&rank=.
Result<TaskKey> ExecTaskKey(const httplib::Request& req) {
  auto job = COHORT_TRY(QueryIntParam(req, "job", std::nullopt, 1, INT64_MAX));
  auto attempt = COHORT_TRY(QueryIntParam(req, "attempt", std::nullopt, 0, INT32_MAX));
  auto rank = COHORT_TRY(QueryIntParam(req, "rank", std::nullopt, 0, INT32_MAX));
  return TaskKey{job, static_cast<int>(attempt), static_cast<int>(rank)};
}

// Over TLS (`tls`), OK only for a connection with the head's certificate; always OK
// without TLS.
Result<void> FromHeadCertificate(bool tls, const httplib::Request& req) {
  if (!tls || tls::PeerName(req.ssl) == tls::kHeadName) return {};
  return MakeError(ErrorCode::kUnauthenticated, "only the head may call this (with its certificate)");
}

}  // namespace

void Agent::BuildServer() {
  server_ = std::make_unique<HttpServer>(AgentHttpOptions(config_));
  auto& srv = *server_;
  PostWithBodyCap(srv, routes::kAgentWake, [this](const httplib::Request& req, httplib::Response& res) {
    // Over TLS only the head (its certificate) may wake the agent.
    if (auto ok = FromHeadCertificate(tls_.has_value(), req); !ok) return SendError(res, ok.error());
    Wake();
    SendJson(res, json{{"ok", true}});
  });
  srv.Get(routes::kHealth, [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, json{{"status", "ok"}, {"node", config_.name}, {"version", kAgentVersion}});
  });
  srv.Get(routes::kMetrics,
          [this](const httplib::Request& req, httplib::Response& res) { ServeMetrics(req, res); });
  if (config_.simulated_gpus >= 0) {
    // Simulated GPUs only (tests and demos): open to anyone who reaches the agent.
    PostWithBodyCap(srv, routes::kAgentSimulateXid,
                    [this](const httplib::Request& req, httplib::Response& res) { ServeSimulateXid(req, res); });
  }
  srv.Get(routes::kAgentLogs, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeLogs(req, res);
  });
  // Exec sessions (exec_session.h): only the head, which authorizes the user, calls them.
  PostWithBodyCap(srv, routes::kAgentExec, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeExecStart(req, res);
  });
  srv.Get(routes::kAgentExecOutputPattern, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeExecOutput(req, res);
  });
  PostWithBodyCap(srv, routes::kAgentExecInputPattern, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeExecInput(req, res);
  });
  srv.Get(routes::kAgentImages, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeImages(req, res);
  });
  PostWithBodyCap(srv, routes::kAgentImagesRemove, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeImageRemove(req, res);
  });
  PostWithBodyCap(srv, routes::kAgentImagesPrune, [this](const httplib::Request& req, httplib::Response& res) {
    if (auto ok = CheckHeadCredential(req); !ok) return SendError(res, ok.error());
    ServeImagePrune(req, res);
  });
}

Result<void> Agent::CheckHeadCredential(const httplib::Request& req) const {
  COHORT_TRY_VOID(FromHeadCertificate(tls_.has_value(), req));
  std::string want;
  {
    MutexLock lock(mu_);
    want = node_credential_;
  }
  if (want.empty()) return {};
  const std::string got = req.get_header_value("Authorization");
  const std::string expected = "Bearer " + want;
  // Constant time in the credential's length.
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) diff |= static_cast<unsigned char>(expected[i] ^ (i < got.size() ? got[i] : 0));
  if (diff == 0) return {};
  return MakeError(ErrorCode::kUnauthenticated, "only the head may call this (with the node's credential)");
}

Result<void> Agent::Listen() {
  auto port = server_->Bind();
  if (!port) return std::unexpected(port.error());
  url_ = fmt::format("{}://{}:{}", tls_ ? "https" : "http", config_.address, *port);
  return {};
}

// GET routes::kMetrics: the last heartbeat's GPU and task samples, in the Prometheus text
// format.
void Agent::ServeMetrics(const httplib::Request&, httplib::Response& res) {
  std::vector<GpuReading> readings;
  std::vector<TaskUsageSample> tasks;
  {
    MutexLock lock(mu_);
    readings = last_readings_;
    tasks = last_tasks_;
  }
  auto text = RenderAgentMetrics(config_.name, gpus_, readings, tasks);
  if (!text) return SendError(res, text.error());
  res.set_content(std::move(*text), "text/plain; version=0.0.4; charset=utf-8");
}

// POST routes::kAgentSimulateXid {"gpu": N, "xid": X}: records a health event on a
// simulated GPU and heartbeats at once.
void Agent::ServeSimulateXid(const httplib::Request& req, httplib::Response& res) {
  auto body = ParseJson(req.body, "request body");
  if (!body) return SendError(res, body.error());
  auto r = ObjectReader::Open(*body);
  if (!r) return SendError(res, r.error());
  auto gpu = r->Int("gpu", std::nullopt, 0, 1 << 20);
  if (!gpu) return SendError(res, gpu.error());
  auto xid = r->Int("xid", 79, 1, 1000);
  if (!xid) return SendError(res, xid.error());
  if (auto fin = r->Finish(); !fin) return SendError(res, fin.error());
  if (auto ok = monitor_->InjectXid(static_cast<int>(*gpu), static_cast<int>(*xid)); !ok) {
    return SendError(res, ok.error());
  }
  LOG_WARN("fault injection: {} on simulated GPU {}", DescribeXid(static_cast<int>(*xid)), *gpu);
  WakeSampler();  // which wakes the heartbeat once the sample holds the event
  SendJson(res, json{{"ok", true}, {"gpu", *gpu}, {"event", DescribeXid(static_cast<int>(*xid))}});
}

// GET routes::kAgentLogs?job=&attempt=&rank=&offset=&limit=: a chunk of one task's log,
// with its position in the X-Cohort-* headers; kNotFound before the agent has run any task.
void Agent::ServeLogs(const httplib::Request& req, httplib::Response& res) {
  auto job = QueryIntParam(req, "job", std::nullopt, 1, INT64_MAX);
  auto attempt = QueryIntParam(req, "attempt", std::nullopt, 0, INT32_MAX);
  auto rank = QueryIntParam(req, "rank", std::nullopt, 0, INT32_MAX);
  auto offset = QueryIntParam(req, "offset", std::nullopt, 0, INT64_MAX);
  auto limit = QueryIntParam(req, "limit", std::nullopt, 1, 16 << 20);
  for (auto* r : {&job, &attempt, &rank, &offset, &limit}) {
    if (!*r) return SendError(res, r->error());
  }
  Executor* executor = this->executor();
  if (!executor) return SendError(res, Error{ErrorCode::kNotFound, "this agent has run no tasks"});
  TaskKey key{*job, static_cast<int>(*attempt), static_cast<int>(*rank)};
  auto chunk = executor->ReadLog(key, *offset, *limit);
  if (!chunk) return SendError(res, chunk.error());
  res.set_header("X-Cohort-Next-Offset", std::to_string(chunk->next_offset));
  res.set_header("X-Cohort-Size", std::to_string(chunk->size));
  res.set_header("X-Cohort-Done", chunk->done ? "1" : "0");
  res.set_content(std::move(chunk->data), "application/octet-stream");
}

// POST routes::kAgentExec?job=&attempt=&rank= (api::ExecRequest): {"session": ID}, a
// command started beside that running task.
void Agent::ServeExecStart(const httplib::Request& req, httplib::Response& res) {
  auto key = ExecTaskKey(req);
  if (!key) return SendError(res, key.error());
  auto body = ParseJson(req.body, "request body");
  if (!body) return SendError(res, body.error());
  auto exec = api::ExecRequestFromJson(*body, UnknownFields::kIgnore);
  if (!exec) return SendError(res, exec.error());
  Executor* executor = this->executor();
  if (!executor) return SendError(res, Error{ErrorCode::kNotFound, "this agent runs no tasks"});
  auto target = executor->ExecTargetOf(*key);
  if (!target) return SendError(res, target.error());
  auto id = exec_sessions_->Start(*target, *exec);
  if (!id) return SendError(res, id.error());
  SendJson(res, json{{"session", *id}});
}

// GET routes::kAgentExecOutputPattern?job=&attempt=&rank=&offset=&wait_ms=: the session's
// frames from `offset` (api/exec.h), with X-Cohort-Next-Offset, and X-Cohort-Done and
// X-Cohort-Exit-Code once the command has exited and this reply holds the rest.
void Agent::ServeExecOutput(const httplib::Request& req, httplib::Response& res) {
  auto key = ExecTaskKey(req);
  if (!key) return SendError(res, key.error());
  auto offset = QueryIntParam(req, "offset", 0, 0, INT64_MAX);
  if (!offset) return SendError(res, offset.error());
  auto wait = QueryIntParam(req, "wait_ms", 0, 0, api::kMaxExecWaitMs);
  if (!wait) return SendError(res, wait.error());
  auto out = exec_sessions_->Read(req.matches[1].str(), *key, *offset, Millis(*wait));
  if (!out) return SendError(res, out.error());
  res.set_header("X-Cohort-Next-Offset", std::to_string(out->next_offset));
  res.set_header("X-Cohort-Done", out->done ? "1" : "0");
  if (out->done) res.set_header("X-Cohort-Exit-Code", std::to_string(out->exit_code));
  res.set_content(std::move(out->frames), "application/octet-stream");
}

// POST routes::kAgentExecInputPattern?job=&attempt=&rank= (api::ExecInput): {"ok": true}.
void Agent::ServeExecInput(const httplib::Request& req, httplib::Response& res) {
  auto key = ExecTaskKey(req);
  if (!key) return SendError(res, key.error());
  auto body = ParseJson(req.body, "request body");
  if (!body) return SendError(res, body.error());
  auto in = api::ExecInputFromJson(*body, UnknownFields::kIgnore);
  if (!in) return SendError(res, in.error());
  if (auto ok = exec_sessions_->Write(req.matches[1].str(), *key, *in); !ok) return SendError(res, ok.error());
  SendJson(res, json{{"ok", true}});
}

namespace {

json ImagesJson(const std::vector<NodeImage>& images) {
  json list = json::array();
  for (const auto& i : images) list.push_back(ToJson(i));
  return list;
}

}  // namespace

// GET routes::kAgentImages: {"images": [...]}, every runtime's images with their use.
void Agent::ServeImages(const httplib::Request&, httplib::Response& res) {
  auto images = images_->List(RunningImages());
  if (!images) return SendError(res, images.error());
  SendJson(res, json{{"images", ImagesJson(*images)}});
}

// POST routes::kAgentImagesRemove {"image": REF}: {"removed": [...]}.
void Agent::ServeImageRemove(const httplib::Request& req, httplib::Response& res) {
  auto body = ParseJson(req.body, "request body");
  if (!body) return SendError(res, body.error());
  auto r = ObjectReader::Open(*body);
  if (!r) return SendError(res, r.error());
  auto image = r->String("image", std::nullopt, 1024);
  if (!image) return SendError(res, image.error());
  if (auto done = r->Finish(UnknownFields::kIgnore); !done) return SendError(res, done.error());
  auto removed = images_->Remove(*image, RunningImages());
  if (!removed) return SendError(res, removed.error());
  SendJson(res, json{{"removed", ImagesJson(*removed)}});
}

// POST routes::kAgentImagesPrune {"unused_for_s": N}: {"removed": [...]}.
void Agent::ServeImagePrune(const httplib::Request& req, httplib::Response& res) {
  auto body = ParseJson(req.body, "request body");
  if (!body) return SendError(res, body.error());
  auto r = ObjectReader::Open(*body);
  if (!r) return SendError(res, r.error());
  auto unused_for = r->Int("unused_for_s", 0, 0, api::kMaxTimeLimitS * 10);
  if (!unused_for) return SendError(res, unused_for.error());
  if (auto done = r->Finish(UnknownFields::kIgnore); !done) return SendError(res, done.error());
  auto removed = images_->Prune(*unused_for * 1000, NowUnixMs(), RunningImages());
  if (!removed) return SendError(res, removed.error());
  SendJson(res, json{{"removed", ImagesJson(*removed)}});
}

}  // namespace cohort::agent
