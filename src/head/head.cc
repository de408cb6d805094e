#include "head/head.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <filesystem>
#include <fstream>
#include <thread>

#include <httplib.h>

#include "common/client_config.h"
#include "common/file_modes.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/signals.h"
#include "head/agent_clients.h"
#include "head/agent_waker.h"
#include "head/audit.h"
#include "head/auth.h"
#include "head/rate_limit.h"
#include "head/router.h"
#include "head/cluster.h"
#include "head/gateway.h"
#include "head/services.h"
#include "head/routes.h"
#include "store/state_store.h"

namespace cohort::head {

namespace fs = std::filesystem;

static const char* kVersion = "0.1.0";

namespace {

enum Pool : size_t { kApiPool = 0, kAgentPool = 1, kTaskPool = 2, kGatewayPool = 3, kExecPool = 4 };
// Exec sessions' calls (api/exec.h): a read of output holds its thread while it waits for
// some (up to api::kMaxExecWaitMs), so an interactive session holds one almost always.
constexpr int kExecHttpThreads = 32;

// Agents and tasks get threads of their own: no API traffic can delay a heartbeat (and so
// fail the node's jobs) or a rendezvous.
size_t ClassifyRequest(std::string_view, std::string_view path) {
  if (path.starts_with("/v1/agents/")) return kAgentPool;
  if (path.starts_with("/v1/rendezvous/") || path.starts_with("/v1/report/")) return kTaskPool;
  // Inference through the gateway: a stream holds its thread until its last token.
  if (path == api::routes::kCompletions || path == api::routes::kChatCompletions) return kGatewayPool;
  if (path.starts_with("/v1/jobs/") && path.find("/exec/") != std::string_view::npos) return kExecPool;
  return kApiPool;
}

HttpServerOptions HttpOptions(const HeadConfig& c) {
  HttpServerOptions o;
  o.host = c.listen_host;
  o.port = c.port;
  const int api_threads = c.http_threads > 0 ? c.http_threads
                                             : std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency()));
  o.pools = {{"api", api_threads, 4096, /*nice=*/5, c.api_requests_per_client},
             {"agents", c.agent_http_threads, 65536, 0, 0},
             {"tasks", c.task_http_threads, 65536, 0, 0},
             {"gateway", c.gateway_http_threads, 4096, 0, 0},
             {"exec", kExecHttpThreads, 4096, 0, c.api_requests_per_client}};
  o.classify = ClassifyRequest;
  o.request_timeout = Millis(c.request_timeout_ms);
  o.max_connections_per_client = c.max_connections_per_client;
  return o;
}

// The token book, with the secret of node credentials made on the store's first use.
Result<std::unique_ptr<TokenBook>> OpenTokenBook(Cluster& cluster) {
  auto node_secret = COHORT_TRY(cluster.GetMeta(kNodeSecretMeta));
  if (!node_secret) {
    node_secret = RandomHex(32);
    COHORT_TRY_VOID(cluster.PutMeta(kNodeSecretMeta, *node_secret));
  }
  return TokenBook::Open(
      COHORT_TRY(cluster.GetMeta(kTokensMeta)), *node_secret,
      [&cluster](const std::string& key, const std::string& value) { return cluster.PutMeta(key, value); },
      COHORT_TRY(cluster.GetMeta(kNodeGenerationsMeta)));
}

// Whether the head may write its URL, token and authority over the client config `existing`
// (nullopt: no file): when it names no head, this head, or no token, or when it is what a
// local cluster that is gone left behind: a loopback head whose authority file no longer
// exists (`cohort up --state-dir DIR` after DIR was removed, or a temporary cluster such as
// an old quickstart's). Such a config can reach nothing, and its head's own state dir held
// the only thing it kept (an admin token for that head). Any other head's config is the
// user's login and stays.
bool MayWriteClientConfig(const std::optional<ClientConfig>& existing, const std::string& url) {
  if (!existing || existing->head.empty() || existing->head == url || existing->token.empty()) return true;
  auto named = ParseHttpUrl(existing->head);
  if (!named || !named->tls || existing->ca.empty()) return false;
  const bool loopback = named->host == "localhost" || named->host == "::1" || named->host == "[::1]" ||
                        named->host.starts_with("127.");
  std::error_code ec;
  return loopback && !fs::exists(existing->ca, ec) && !ec;
}

// An admin token for the user running the head, in state_dir/admin.token (0600) and the
// client config (unless that names another head: MayWriteClientConfig), so that the CLI on
// this machine works.
Result<TokenInfo> MakeLocalAdminToken(TokenBook& tokens, const HeadConfig& config, const std::string& url,
                                      const std::string& ca_path, const std::string& why) {
  std::string user = "admin";
  if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_name && api::ValidUserName(pw->pw_name)) {
    user = pw->pw_name;
  }
  auto admin = COHORT_TRY(tokens.Create(user, Role::kAdmin, 0, "head", why, NowUnixMs()));
  COHORT_TRY_VOID(WritePrivateFileAtomically(config.state_dir + "/admin.token", admin.token + "\n"));
  std::string wrote = "";
  if (!config.client_config_path.empty()) {
    auto existing = ReadClientConfig(config.client_config_path);
    if (existing && MayWriteClientConfig(*existing, url)) {
      if (auto w = WriteClientConfig(config.client_config_path, ClientConfig{url, admin.token, ca_path}); w) {
        wrote = ", and in " + config.client_config_path;
        if (*existing && !(*existing)->head.empty() && (*existing)->head != url && !(*existing)->token.empty()) {
          wrote += fmt::format(" (it named {}, a local head whose authority {} is gone)", (*existing)->head,
                               (*existing)->ca);
        }
      } else {
        LOG_WARN("cannot write the client config: {}", w.error().message);
      }
    } else {
      LOG_INFO("left {} alone: it names another head", config.client_config_path);
    }
  }
  LOG_INFO("{}: admin token {} for {} (in {}/admin.token{})", why, admin.info.id, user, config.state_dir, wrote);
  return admin.info;
}

// A join token for agents, in state_dir/join.token (0600).
Result<TokenInfo> MakeJoinToken(TokenBook& tokens, const HeadConfig& config, const std::string& why) {
  auto join = COHORT_TRY(tokens.Create("agents", Role::kAgent, 0, "head", why, NowUnixMs()));
  COHORT_TRY_VOID(WritePrivateFileAtomically(config.state_dir + "/join.token", join.token + "\n"));
  LOG_INFO("{}: join token {} for agents (in {}/join.token)", why, join.info.id, config.state_dir);
  return join.info;
}

// On the first start (no tokens yet): an admin token and a join token; with
// --new-admin-token or --new-join-token, a new one of that kind (the old ones stay valid
// until revoked).
Result<void> BootstrapTokens(TokenBook& tokens, const HeadConfig& config, const std::string& url,
                             const std::string& ca_path) {
  const bool first = tokens.Empty();
  if (first || config.new_admin_token) {
    COHORT_TRY_VOID(MakeLocalAdminToken(tokens, config, url, ca_path,
                                        first ? "made at the head's first start" : "made by --new-admin-token"));
  }
  if (first || config.new_join_token) {
    COHORT_TRY_VOID(MakeJoinToken(tokens, config,
                                  first ? "agents' join token, made at the head's first start"
                                        : "agents' join token, made by --new-join-token"));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<HeadServer>> HeadServer::Start(HeadConfig config) {
  if (config.state_dir.empty()) return MakeError(ErrorCode::kInvalidArgument, "--state-dir is required", "state_dir");
  if (config.timing.fence_timeout_ms >= config.timing.failure_timeout_ms) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the fence timeout must be shorter than the failure timeout, so a partitioned agent "
                     "kills its tasks before the head places them again", "fence_timeout");
  }
  if (config.timing.heartbeat_interval_ms * 2 > config.timing.fence_timeout_ms) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the heartbeat interval must be at most half the fence timeout", "heartbeat_interval");
  }
  COHORT_TRY_VOID(RateLimiter::Validate(config.rate_limit, config.rate_burst));
  for (const auto& [limit, field] : {std::pair{config.max_jobs_per_user, "max_jobs_per_user"},
                                     std::pair{config.max_jobs, "max_jobs"}}) {
    if (limit < 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}: a number of jobs, 0 (no limit) or more, got {}", field, limit), field);
    }
  }
  if (config.audit_retention_ms < 0 || config.audit_max_rows < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "the audit log's retention and row cap must be 0 (none) or more",
                     "audit_retention");
  }
  if (config.insecure && (config.new_admin_token || config.new_join_token)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: with --insecure the head makes and asks for no tokens",
                                 config.new_admin_token ? "--new-admin-token" : "--new-join-token"),
                     config.new_admin_token ? "new_admin_token" : "new_join_token");
  }
  // The state directory holds the rendezvous secret (in state.db): only the head's user
  // may read it, and the database files are created private before SQLite opens them
  // (an older head's world-readable ones are closed on this start).
  if (auto r = MakePrivateDir(config.state_dir); !r) {
    return Errorf(ErrorCode::kInvalidArgument, "state directory: {}", r.error().message);
  }
  std::error_code ec;
  config.state_dir = fs::absolute(config.state_dir).string();
  if (config.checkpoint_root.empty()) config.checkpoint_root = config.state_dir + "/checkpoints";
  fs::create_directories(config.checkpoint_root, ec);
  if (ec) return Errorf(ErrorCode::kInvalidArgument, "cannot create checkpoint root {}: {}", config.checkpoint_root, ec.message());

  // One head per state directory: a second one would race the first on every write.
  std::string lock_path = config.state_dir + "/head.lock";
  int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return Errorf(ErrorCode::kUnavailable, "cannot open {}: {}", lock_path, strerror(errno));
  (void)fchmod(lock_fd, 0600);  // one an older head made 0644
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    (void)!read(lock_fd, pid, sizeof pid - 1);
    close(lock_fd);
    return Errorf(ErrorCode::kFailedPrecondition, "another head (pid {}) is using state directory {}",
                  std::string(pid).substr(0, std::string(pid).find('\n')), config.state_dir);
  }
  std::string pid_text = std::to_string(getpid()) + "\n";
  (void)!ftruncate(lock_fd, 0);
  (void)!pwrite(lock_fd, pid_text.data(), pid_text.size(), 0);

  std::unique_ptr<HeadServer> h(new HeadServer());
  h->lock_fd_ = lock_fd;  // released by ~HeadServer, also on the error paths below
  const std::string db = config.state_dir + "/state.db";
  // SQLite gives -wal and -shm the database file's mode when it creates them.
  COHORT_TRY_VOID(MakePrivateFile(db));
  for (const char* suffix : {"-wal", "-shm", "-journal"}) COHORT_TRY_VOID(RestrictFileIfPresent(db + suffix));
  auto store = COHORT_TRY(store::OpenSqliteStateStore(db));
  if (config.insecure) config.tls = false;
  h->server_ = std::make_unique<HttpServer>(HttpOptions(config));
  auto& srv = *h->server_;
  // The port now (the advertised URL and the certificate name it); connections only once
  // the state is loaded and every route registered (Listen, below): until then a
  // connecting agent is refused, which it reads as a head restarting and rides out, not
  // as a partition that fences its tasks.
  auto port = srv.Reserve();
  if (!port) return std::unexpected(port.error());
  h->port_ = *port;
  if (config.advertise_url.empty()) {
    std::string host = config.listen_host == "0.0.0.0" ? "127.0.0.1" : config.listen_host;
    config.advertise_url = fmt::format("{}://{}:{}", config.tls ? "https" : "http", host, h->port_);
  } else if (auto u = ParseHttpUrl(config.advertise_url); !u) {
    return Errorf(ErrorCode::kInvalidArgument, "--advertise-url: {}", u.error().message);
  } else if (u->tls != config.tls) {
    return Errorf(ErrorCode::kInvalidArgument, "--advertise-url {} must be {}:// for a head {} TLS",
                  config.advertise_url, config.tls ? "https" : "http", config.tls ? "with" : "without");
  }
  h->url_ = config.advertise_url;
  if (config.tls) {
    // The certificate names the advertised address, which needs the port: the server
    // binds first and gets its TLS before it serves.
    h->tls_ = COHORT_TRY(HeadTls::SetUp(config, h->url_));
    srv.set_tls(h->tls_->server());
    config.task_ca_pem = h->tls_->ca_pem();
  }
  h->config_ = config;

  h->cluster_ = COHORT_TRY(Cluster::Open(config, std::move(store)));
  h->agents_ = std::make_unique<AgentClients>(h->tls_ ? std::optional(h->tls_->client()) : std::nullopt);
  h->waker_ = std::make_unique<AgentWaker>(*h->agents_);
  h->cluster_->set_wake_agents([w = h->waker_.get()](std::vector<std::string> urls) { w->Wake(std::move(urls)); });

  Cluster& cluster = *h->cluster_;
  h->tokens_ = COHORT_TRY(OpenTokenBook(cluster));
  if (config.insecure) {
    LOG_WARN("--insecure: the head asks no one for credentials; anyone who can reach {} may run commands, "
             "cancel jobs and read their logs and secrets", h->url_);
  } else {
    COHORT_TRY_VOID(BootstrapTokens(*h->tokens_, config, h->url_, h->tls_ ? h->tls_->ca_path() : ""));
    if (!h->tls_) {
      LOG_WARN("--no-tls: the API, tokens included, and the agent protocol travel in clear text; use it only "
               "behind a proxy that terminates TLS, on a network nothing else reaches");
    }
  }
  h->router_ = std::make_unique<Router>(srv, h->tokens_.get(), config.insecure, h->tls_.get(), h->agents_.get());
  Router& router = *h->router_;
  RateLimiter::Options limits;
  limits.rate = config.rate_limit;
  limits.burst = config.rate_burst;
  h->limiter_ = std::make_unique<RateLimiter>(std::move(limits));
  router.set_rate_limiter(h->limiter_.get());
  // A task's COHORT_JOB_TOKEN: its own job, while its attempt runs (auth.h).
  router.set_job_tokens([&cluster](std::string_view token) -> Result<Caller> {
    auto owner = COHORT_TRY(cluster.JobTokenOwner(token));
    Caller job;
    job.kind = Caller::Kind::kJob;
    job.job = owner.scope.job;
    job.attempt = owner.scope.attempt;
    job.user = std::move(owner.owner);
    return job;
  });
  AuditLog::Options audit_options;
  audit_options.retention_ms = config.audit_retention_ms;
  audit_options.max_rows = config.audit_max_rows;
  h->audit_ = std::make_unique<AuditLog>(cluster.store(), std::move(audit_options));
  router.set_observer([audit = h->audit_.get()](const Router::Route& route, const Caller& caller,
                                                const httplib::Request& req, const httplib::Response& res) {
    if (auto entry = AuditEntryFor(route, caller, req, res, NowUnixMs())) audit->Record(std::move(*entry));
  });
  h->dashboard_ = std::make_unique<DashboardSnapshots>(cluster);
  router.Get(api::routes::kHealth, Access::kPublic,
             [&cluster, url = h->url_](const httplib::Request&, httplib::Response& res) {
               SendJson(res, json{{"status", "ok"}, {"version", kVersion}, {"url", url},
                                  {"nodes", cluster.NodeCount()},
                                  {"last_pass_ms", cluster.last_pass_duration().count()}});
             });
  // Public: a certificate authority is no secret, and a client pins it by its fingerprint.
  router.Get(api::routes::kCa, Access::kPublic,
             [pem = h->tls_ ? h->tls_->ca_pem() : std::string()](const httplib::Request&, httplib::Response& res) {
               if (pem.empty()) {
                 SendError(res, Error{ErrorCode::kNotFound,
                                      "this head serves plain HTTP (--no-tls or --insecure): it has no certificate "
                                      "authority"});
                 return;
               }
               res.status = 200;
               res.set_content(pem, "application/x-pem-file");
             });
  RegisterJobRoutes(router, cluster);
  RegisterJobControlRoutes(router, cluster);
  RegisterSweepRoutes(router, cluster);
  RegisterImageRoutes(router, cluster);
  RegisterNodeRoutes(router, cluster, *h->tokens_);
  RegisterAgentRoutes(router, cluster);
  RegisterLogRoutes(router, cluster);
  RegisterExecRoutes(router, cluster);
  RegisterRendezvousRoutes(router, cluster);
  RegisterProgressRoutes(router, cluster);
  h->gateway_ = std::make_unique<Gateway>(cluster);
  h->services_ = std::make_unique<Services>(cluster, *h->gateway_);
  RegisterMetricsRoutes(router, cluster, *h->audit_, h->gateway_.get());
  RegisterUsageRoutes(router, cluster);
  RegisterTeamRoutes(router, cluster);
  RegisterTokenRoutes(router, *h->tokens_);
  RegisterAuditRoutes(router, *h->audit_);
  RegisterDashboardRoutes(router, *h->dashboard_);
  h->gateway_->Register(router);
  RegisterServiceRoutes(router, *h->services_);
  RegisterWebRoutes(router);
  PreferGzipOverBrotli(srv);
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ErrorCode code = res.status == 404  ? ErrorCode::kNotFound
                     : res.status < 500 ? ErrorCode::kInvalidArgument
                                        : ErrorCode::kInternal;
    std::string msg = res.status == 404   ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                      : res.status == 413 ? BodyTooLargeMessage(kMaxRequestBodyBytes)
                      : res.status == 400 ? "the request could not be read: malformed, or its body past 4 MiB"
                                          : fmt::format("HTTP {}", res.status);
    int status = res.status;
    SendJson(res, ErrorToJson(Error{code, msg}), status);
  });
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    LOG_ERROR("handler threw: {}", what);
    SendError(res, Error{ErrorCode::kInternal, "internal error: " + what});
  });

  h->gateway_->Start();
  COHORT_TRY_VOID(srv.Listen());
  h->server_thread_ = std::thread([&srv] { srv.Serve(); });
  h->control_thread_ = std::thread([hp = h.get()] { hp->ControlLoop(); });
  if (!config.port_file.empty()) {
    std::string tmp = config.port_file + ".tmp";
    std::ofstream(tmp) << h->port_ << "\n";
    fs::rename(tmp, config.port_file, ec);
  }
  LOG_INFO("head listening on {} (state {})", h->url_, config.state_dir);
  return h;
}

void HeadServer::ControlLoop() {
  const Millis interval(config_.schedule_interval_ms);
  const Millis tick(config_.liveness_interval_ms);
  auto last_pass = SteadyClock::now();
  auto last_check = SteadyClock::time_point{};
  Millis pass_took{0};
  while (!stopping_) {
    auto now = SteadyClock::now();
    // Liveness once a tick, not after every pass: at 10,000 nodes a check walks them all.
    if (now - last_check >= tick) {
      cluster_->CheckLiveness();
      last_check = now;
    }
    // Passes that events ask for are paced by the last one's duration: while submissions
    // or heartbeats keep asking, the lock is free at least half the time for the API and
    // the agents, and a start waits at most one pass more. The periodic pass is not paced.
    const auto paced_until = last_pass + pass_took;
    now = SteadyClock::now();
    if ((cluster_->schedule_requested() && now >= paced_until) || now - last_pass >= interval + pass_took) {
      const auto t0 = SteadyClock::now();
      cluster_->Schedule();
      last_pass = SteadyClock::now();
      pass_took = std::chrono::duration_cast<Millis>(last_pass - t0);
    }
    // Until the next check (or the paced pass, if one is asked for), unless a pass is
    // asked for sooner. Lateness: how long after the planned wake-up the loop runs again
    // (a stopped or starved head). Woken early for a pass, it is on time.
    now = SteadyClock::now();
    auto planned = std::max(last_check + tick, now);
    if (cluster_->schedule_requested() && last_pass + pass_took > now) {
      planned = std::min(planned, last_pass + pass_took);
      std::this_thread::sleep_until(planned);
    } else {
      cluster_->WaitForWork(std::chrono::ceil<Millis>(planned - now));
    }
    const auto late = std::chrono::duration_cast<Millis>(SteadyClock::now() - planned);
    cluster_->ObserveControlLoopLateness(late > Millis(0) ? late : Millis(0));
  }
}

void HeadServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (server_) server_->Stop();
  if (dashboard_) dashboard_->Stop();
  if (gateway_) gateway_->Stop();
}

void HeadServer::Wait() {
  if (server_thread_.joinable()) server_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
}

HeadServer::~HeadServer() {
  Stop();
  Wait();
  if (lock_fd_ >= 0) close(lock_fd_);
}

int RunHead(const HeadConfig& config) {
  auto head = HeadServer::Start(config);
  if (!head) {
    LOG_ERROR("{}", head.error().message);
    return 1;
  }
  int sig = WaitForTerminationSignal();
  LOG_INFO("received {}, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*head)->Stop();
  (*head)->Wait();
  return 0;
}

}  // namespace cohort::head
