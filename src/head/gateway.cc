#include "head/gateway.h"

#include <httplib.h>

#include <algorithm>
#include <deque>
#include <future>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/http_server.h"
#include "common/log.h"
#include "common/openai_error.h"
#include "head/cluster.h"
#include "head/router.h"
#include "head/services.h"

namespace cohort::head {

namespace {

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// How often the handler of an unstreamed request looks whether its client hung up.
constexpr auto kHangUpCheck = std::chrono::milliseconds(250);

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

void SendOpenAiError(httplib::Response& res, const Error& e, int retry_after_s) {
  res.status = HttpStatusFor(e.code);
  // 429 (overloaded) and 503 (no healthy replica: one is starting, or a canary is due):
  // when to try again, which OpenAI's SDKs and lm-evaluation-harness honour.
  if (e.code == ErrorCode::kResourceExhausted || e.code == ErrorCode::kUnavailable) {
    res.set_header("Retry-After", std::to_string(retry_after_s));
  }
  res.set_content(OpenAiErrorText(e), "application/json");
}

std::string NewRequestId(bool chat) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}-gw{:x}{:08x}", chat ? "chatcmpl" : "cmpl", salt & 0xffffff, ++counter);
}

// Tokens a request may occupy on a replica: max_tokens (when not sent, a replica's default:
// 16 for completions, 256 for chat, openai_api.h) and a rough count of its prompt (4 bytes
// a token), for least-loaded routing before the replica's own report catches up.
int64_t EstimateTokens(const json& body, bool chat) {
  int64_t out = chat ? 256 : 16;
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (auto it = body.find(k); it != body.end() && it->is_number_integer()) out = std::max<int64_t>(1, it->get<int64_t>());
  }
  int64_t prompt = 0;
  if (!chat) {
    if (auto it = body.find("prompt"); it != body.end()) {
      if (it->is_string()) prompt = static_cast<int64_t>(it->get_ref<const std::string&>().size() / 4);
      else if (it->is_array()) prompt = static_cast<int64_t>(it->size());
    }
  } else if (auto it = body.find("messages"); it != body.end() && it->is_array()) {
    for (const auto& m : *it) {
      if (m.is_object() && m.contains("content") && m["content"].is_string()) {
        prompt += static_cast<int64_t>(m["content"].get_ref<const std::string&>().size() / 4);
      }
    }
  }
  return out + prompt + 1;
}

// The choices a request asks for: n per prompt, and completions may send several prompts.
int64_t ChoicesOf(const json& body, bool chat) {
  int64_t n = 1;
  if (auto it = body.find("n"); it != body.end() && it->is_number_integer()) n = std::max<int64_t>(1, it->get<int64_t>());
  if (!chat) {
    if (auto it = body.find("prompt"); it != body.end() && it->is_array() && !it->empty() &&
                                       ((*it)[0].is_string() || (*it)[0].is_array())) {
      n *= static_cast<int64_t>(it->size());
    }
  }
  return n;
}

// The load that least-loaded routing compares: what the replica's last report holds
// beyond the gateway's own requests of that moment (other clients' requests, canaries),
// plus what the gateway has in progress there now (Envoy's and vLLM's least-request
// balancers count their own in-flight requests per upstream so). The report is up to a
// health interval old and still shows a burst that has since ended (a replica reported
// 3271 tokens in flight after its last stream ended): routed on max(report, the gateway's
// own outstanding tokens), the next burst all went to the other replica until the
// gateway's own count there passed that stale report. Called with the gateway's mutex held.
int64_t LoadOf(int64_t reported, int64_t at_report, int64_t outstanding) {
  return std::max<int64_t>(0, reported - at_report) + outstanding;
}

}  // namespace

// ---- replicas ---------------------------------------------------------------------------

struct Gateway::Replica {
  std::string key;  // "job.attempt"
  std::string service, model, node, site, host;
  int port = 0;
  api::ReplicaStatus status;  // load numbers, health, counters
  bool canaried = false;      // a canary passed since it was (re)marked unhealthy
  int ticks_since_canary = 0;
  // What the gateway has sent it and not seen end: requests, and their estimated tokens.
  int outstanding = 0;
  int64_t outstanding_tokens = 0;
  // outstanding_tokens when its last load report was asked for: the part of that report
  // that is the gateway's own requests (Load()).
  int64_t outstanding_tokens_at_report = 0;
  std::vector<std::unique_ptr<httplib::Client>> idle;  // keep-alive connections
};

struct Gateway::Lease {
  Gateway* gateway = nullptr;
  std::shared_ptr<Replica> replica;  // fields read under the gateway's mutex only
  std::string key, host, service;
  int port = 0;
  int64_t tokens = 0;
  ~Lease() {
    MutexLock l(gateway->mu_);
    replica->outstanding -= 1;
    replica->outstanding_tokens -= tokens;
    gateway->room_cv_.NotifyAll();
  }
};

Gateway::Gateway(Cluster& cluster, GatewayOptions options) : cluster_(cluster), options_(std::move(options)) {}

Gateway::~Gateway() { Stop(); }

void Gateway::Start() {
  health_thread_ = std::thread([this] { HealthLoop(); });
}

void Gateway::Stop() {
  {
    MutexLock l(stop_mu_);
    stopping_ = true;
    stop_cv_.NotifyAll();
  }
  if (health_thread_.joinable()) health_thread_.join();
  MutexLock l(mu_);
  room_cv_.NotifyAll();
}

void Gateway::HealthLoop() {
  while (!stopping_) {
    Tick();
    MutexLock l(stop_mu_);
    stop_cv_.WaitFor(stop_mu_, options_.health_interval, [&] { return stopping_.load(); });
  }
}

void Gateway::Tick() {
  for (const auto& key : Discover()) {
    if (stopping_) return;
    Check(key);
  }
}

std::vector<std::string> Gateway::Discover() {
  JobFilter filter;
  filter.states = {api::JobState::kPending, api::JobState::kRunning};
  filter.services_only = true;
  const std::vector<api::Job> jobs = cluster_.ListJobs(filter);
  std::map<std::string, std::string> sites;
  if (!jobs.empty()) {
    for (const auto& n : cluster_.ListNodes()) {
      if (auto it = n.node.labels.find("site"); it != n.node.labels.end()) sites[n.node.name] = it->second;
    }
  }
  // Services scaled to 0 (services.h): their models exist, with no replica (503, not 404).
  const std::map<std::string, IdleService> idle = ScaledToZeroServices(cluster_);
  std::vector<std::string> keys;
  {
    MutexLock l(mu_);
    std::map<std::string, std::shared_ptr<Replica>> next;
    model_services_.clear();
    model_created_.clear();
    scaled_to_zero_.clear();
    for (const auto& [service, i] : idle) {
      model_services_[i.spec.service_model] = service;
      model_created_[i.spec.service_model] = i.created;
      scaled_to_zero_.insert(i.spec.service_model);
    }
    for (const auto& j : jobs) {
      model_services_[j.spec.service_model] = j.spec.service;
      const int64_t submitted = j.submit_ms / 1000;
      auto [created, fresh] = model_created_.try_emplace(j.spec.service_model, submitted);
      if (!fresh) created->second = std::min(created->second, submitted);
      if (j.state != api::JobState::kRunning || j.allocation.nodes.empty()) continue;
      const std::string key = fmt::format("{}.{}", j.id, j.attempt);
      auto it = replicas_.find(key);
      std::shared_ptr<Replica> r;
      if (it != replicas_.end()) {
        r = it->second;
      } else {
        r = std::make_shared<Replica>();
        r->key = key;
        r->service = j.spec.service;
        r->model = j.spec.service_model;
        r->node = j.allocation.nodes.front().node;
        r->host = j.allocation.master_addr;
        r->port = j.allocation.master_port;
        r->status.job = j.id;
        r->status.attempt = j.attempt;
        r->status.state = "RUNNING";
        r->status.node = r->node;
        r->status.endpoint = fmt::format("http://{}:{}", r->host, r->port);
        r->status.health = "starting: not checked yet";
      }
      auto s = sites.find(r->node);
      r->site = s == sites.end() ? "" : s->second;
      r->status.site = r->site;
      next[key] = r;
      keys.push_back(key);
    }
    replicas_.swap(next);
    // A plain loop: the lock analysis cannot see into a lambda that mu_ is held.
    for (auto it = latency_.begin(); it != latency_.end();) {
      bool served = false;
      for (const auto& [model, service] : model_services_) served = served || service == it->first;
      it = served ? std::next(it) : latency_.erase(it);
    }
  }
  return keys;
}

std::shared_ptr<Gateway::ServiceLatency> Gateway::LatencyOf(const std::string& model) {
  MutexLock l(mu_);
  auto it = model_services_.find(model);
  if (it == model_services_.end()) return nullptr;
  auto& latency = latency_[it->second];
  if (!latency) latency = std::make_shared<ServiceLatency>();
  return latency;
}

void Gateway::Check(const std::string& key) {
  std::string host, model;
  int port = 0;
  int64_t at_report = 0;  // the gateway's own outstanding tokens there as the report is asked for
  bool canary_due = false;
  {
    MutexLock l(mu_);
    auto it = replicas_.find(key);
    if (it == replicas_.end()) return;
    Replica& r = *it->second;
    host = r.host;
    port = r.port;
    model = r.model;
    at_report = r.outstanding_tokens;
    canary_due = !r.canaried || r.ticks_since_canary + 1 >= options_.canary_every;
  }
  httplib::Client c(host, port);
  c.set_tcp_nodelay(true);
  const auto t = options_.check_timeout;
  c.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  c.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  auto load = c.Get("/load");
  std::optional<json> report;
  std::string problem;
  if (!load) {
    problem = "load: " + httplib::to_string(load.error());
  } else if (load->status != 200) {
    problem = fmt::format("load: HTTP {}", load->status);
  } else if (auto j = ParseJson(load->body); j && j->is_object()) {
    report = std::move(*j);
  } else {
    problem = "load: not a JSON object";
  }
  int canary_status = 0;
  if (problem.empty() && canary_due) {
    c.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.canary_timeout));
    const json body = {{"model", model}, {"prompt", "Hi"}, {"max_tokens", 1}, {"temperature", 0}};
    // Marked, so that the replica leaves it out of its metrics (serve/server.h).
    auto r = c.Post("/v1/completions", httplib::Headers{{"X-Cohort-Canary", "1"}}, body.dump(), "application/json");
    if (!r) {
      problem = "canary: " + httplib::to_string(r.error());
    } else {
      canary_status = r->status;
      if (r->status != 200 && r->status != 429 && r->status != 503) {
        problem = fmt::format("canary: HTTP {}: {}", r->status, r->body.substr(0, 200));
      }
    }
  }
  MutexLock l(mu_);
  auto it = replicas_.find(key);
  if (it == replicas_.end()) return;
  Replica& r = *it->second;
  if (report) {
    api::ReplicaStatus& s = r.status;
    s.running = report->value("running", 0);
    s.waiting = report->value("waiting", 0);
    s.queued_tokens = report->value("queued_tokens", int64_t{0});
    s.inflight_tokens = report->value("inflight_tokens", int64_t{0});
    s.kv_blocks_used = report->value("kv_blocks_used", 0);
    s.kv_blocks_total = report->value("kv_blocks_total", 0);
    s.tokens_per_second = report->value("tokens_per_second", 0.0);
    s.ttft_p50_seconds = report->value("ttft_p50_seconds", 0.0);
    s.ttft_p99_seconds = report->value("ttft_p99_seconds", 0.0);
    s.itl_p50_seconds = report->value("itl_p50_seconds", 0.0);
    s.itl_p99_seconds = report->value("itl_p99_seconds", 0.0);
    r.outstanding_tokens_at_report = at_report;
  }
  if (!problem.empty()) {
    if (r.status.healthy) LOG_WARN("gateway: replica {} of {} is unhealthy: {}", key, r.service, problem);
    r.status.healthy = false;
    r.status.health = problem;
    r.canaried = false;
    return;
  }
  if (canary_due) {
    r.canaried = true;
    r.ticks_since_canary = 0;
    if (!r.status.healthy) LOG_INFO("gateway: replica {} of {} at {} is healthy", key, r.service, r.status.endpoint);
    r.status.healthy = true;
    r.status.health = canary_status == 200 ? "ok" : "ok (busy at the last canary)";
  } else {
    r.ticks_since_canary += 1;
  }
}

void Gateway::MarkFailed(const std::string& key, const std::string& why) {
  MutexLock l(mu_);
  auto it = replicas_.find(key);
  if (it == replicas_.end()) return;
  Replica& r = *it->second;
  if (r.status.healthy) LOG_WARN("gateway: replica {} of {} failed a request: {}", key, r.service, why);
  r.status.healthy = false;
  r.status.health = "failed a request: " + why;
  r.canaried = false;
  r.idle.clear();
}

void Gateway::CountFailover(const std::string& key) {
  failovers_ += 1;
  MutexLock l(mu_);
  if (auto it = replicas_.find(key); it != replicas_.end()) it->second->status.failovers += 1;
}

Result<std::shared_ptr<Gateway::Lease>> Gateway::Pick(const std::string& model, const std::string& session,
                                                     const std::string& site,
                                                     const std::vector<std::string>& exclude, int64_t tokens) {
  MutexLock l(mu_);
  std::vector<Replica*> all, healthy;
  for (auto& [key, r] : replicas_) {
    if (r->model != model) continue;
    all.push_back(r.get());
    if (r->status.healthy && std::find(exclude.begin(), exclude.end(), key) == exclude.end()) healthy.push_back(r.get());
  }
  if (all.empty() && !model_services_.contains(model)) {
    std::vector<std::string> names;
    for (const auto& [m, s] : model_services_) names.push_back(m);
    return std::unexpected(Error(ErrorCode::kNotFound,
                                 fmt::format("model '{}' does not exist; the cluster serves: {}", model,
                                             names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", "))),
                                 "model"));
  }
  if (healthy.empty()) {
    std::string why = all.empty() ? "no replica is running yet" : "";
    if (all.empty() && scaled_to_zero_.contains(model)) {
      why = fmt::format("service '{}' is scaled to 0 replicas: cohort serve scale {} N", model_services_[model],
                        model_services_[model]);
    }
    for (Replica* r : all) why += fmt::format("{}{} on {}: {}", why.empty() ? "" : "; ", r->key, r->node, r->status.health);
    return Errorf(ErrorCode::kUnavailable, "no healthy replica of model '{}' ({})", model, why);
  }
  if (!site.empty()) {
    std::vector<Replica*> near;
    for (Replica* r : healthy) {
      if (r->site == site) near.push_back(r);
    }
    if (!near.empty()) healthy.swap(near);
  }
  Replica* chosen = nullptr;
  if (!session.empty()) {
    uint64_t best = 0;
    for (Replica* r : healthy) {
      const uint64_t h = Fnv1a(fmt::format("{}/{}", session, r->status.job));
      if (!chosen || h > best) {
        chosen = r;
        best = h;
      }
    }
  } else {
    const size_t start = round_robin_++;
    int64_t best = 0;
    for (size_t i = 0; i < healthy.size(); ++i) {
      Replica* r = healthy[(start + i) % healthy.size()];
      const int64_t load = LoadOf(r->status.queued_tokens + r->status.inflight_tokens,
                                  r->outstanding_tokens_at_report, r->outstanding_tokens);
      if (!chosen || load < best) {
        chosen = r;
        best = load;
      }
    }
  }
  chosen->outstanding += 1;
  chosen->outstanding_tokens += tokens;
  chosen->status.requests += 1;
  auto lease = std::make_shared<Lease>();
  lease->gateway = this;
  lease->replica = replicas_.at(chosen->key);
  lease->key = chosen->key;
  lease->host = chosen->host;
  lease->port = chosen->port;
  lease->service = chosen->service;
  lease->tokens = tokens;
  return lease;
}

std::unique_ptr<httplib::Client> Gateway::TakeClient(const Lease& lease) {
  {
    MutexLock l(mu_);
    auto& idle = lease.replica->idle;
    if (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<httplib::Client>(lease.host, lease.port);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // httplib writes a request's head and body apart
  c->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.connect_timeout));
  c->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.read_timeout));
  c->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.connect_timeout));
  return c;
}

void Gateway::ReturnClient(const Lease& lease, std::unique_ptr<httplib::Client> client) {
  MutexLock l(mu_);
  if (lease.replica->idle.size() < 64) lease.replica->idle.push_back(std::move(client));
}

bool Gateway::WaitForRoom() {
  MutexLock l(mu_);
  if (queued_ >= options_.max_queued) return false;
  queued_ += 1;
  const bool woken = room_cv_.WaitFor(mu_, options_.queue_timeout);
  queued_ -= 1;
  return woken && !stopping_;
}

Gateway::Counters Gateway::counters() const {
  return Counters{requests_.load(), retries_.load(), failovers_.load(), overloaded_.load(), unavailable_.load()};
}

// ---- a streamed reply from one replica ---------------------------------------------------

// One POST to a replica on a thread of its own, its server-sent events queued for the
// gateway's handler: the handler can wait for the status first (to relay a 4xx as such)
// and then for each event, and see the connection end. The connection comes from the
// replica's kept-alive ones and goes back there when the reply ended whole (a stream cut
// short leaves its connection mid-reply: it is closed): a connection per stream would
// leave a socket in TIME_WAIT per stream, and at some hundreds of streams a second the
// head's ephemeral ports to one replica run out.
class Gateway::Upstream {
 public:
  Upstream(Gateway* gateway, std::shared_ptr<Lease> lease, std::string path, std::string body,
           httplib::Headers headers) {
    thread_ = std::thread([this, gateway, lease = std::move(lease), path = std::move(path), body = std::move(body),
                           headers = std::move(headers)]() mutable {
      std::unique_ptr<httplib::Client> cli = gateway->TakeClient(*lease);
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.headers = std::move(headers);
      req.body = std::move(body);
      req.set_header("Content-Type", "application/json");
      req.response_handler = [this](const httplib::Response& r) {
        MutexLock l(mu_);
        status_ = r.status;
        cv_.NotifyAll();
        return !aborted_;
      };
      req.content_receiver = [this](const char* d, size_t n, uint64_t, uint64_t) { return Receive(d, n); };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      const bool ok = cli->send(req, res, err);
      bool whole = false;
      {
        MutexLock l(mu_);
        if (!ok) transport_error_ = httplib::to_string(err);
        if (status_ == 0) status_ = -1;
        whole = ok && !aborted_;
      }
      // Back in the pool before the handler hears of the end, so that a client's next
      // request finds it there.
      if (whole) gateway->ReturnClient(*lease, std::move(cli));
      MutexLock l(mu_);
      done_ = true;
      cv_.NotifyAll();
    });
  }
  ~Upstream() {
    Abort();
    thread_.join();
  }
  // The reply's status: -1 when the request failed before one came, 0 on timeout.
  int WaitStatus(Millis timeout) {
    MutexLock l(mu_);
    cv_.WaitFor(mu_, timeout, [&] {
      mu_.AssertHeld();
      return status_ != 0 || done_;
    });
    return status_;
  }
  // The next event's payload (what follows "data: "), or nullopt after `timeout`.
  std::optional<std::string> Next(Millis timeout) {
    MutexLock l(mu_);
    cv_.WaitFor(mu_, timeout, [&] {
      mu_.AssertHeld();
      return !events_.empty() || done_;
    });
    if (events_.empty()) return std::nullopt;
    std::string e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  // Waits (at most `timeout`) for the reply to end; true if it did.
  bool WaitEnd(Millis timeout) {
    MutexLock l(mu_);
    return cv_.WaitFor(mu_, timeout, [&] {
      mu_.AssertHeld();
      return done_;
    });
  }
  // The connection is over and every event was taken.
  bool ended() {
    MutexLock l(mu_);
    return done_ && events_.empty();
  }
  // The whole body of a reply that was not 200 (after WaitStatus; waits for its end).
  std::string ErrorBody(Millis timeout) {
    MutexLock l(mu_);
    cv_.WaitFor(mu_, timeout, [&] {
      mu_.AssertHeld();
      return done_;
    });
    return error_body_;
  }
  std::string transport_error() {
    MutexLock l(mu_);
    return transport_error_;
  }
  void Abort() {
    MutexLock l(mu_);
    aborted_ = true;
  }

 private:
  bool Receive(const char* d, size_t n) {
    MutexLock l(mu_);
    if (aborted_) return false;
    if (status_ != 200) {
      if (error_body_.size() < (64 << 10)) error_body_.append(d, n);
      return true;
    }
    buf_.append(d, n);
    size_t start = 0;
    for (;;) {
      const size_t end = buf_.find("\n\n", start);
      if (end == std::string::npos) break;
      std::string_view block(buf_.data() + start, end - start);
      // One event: its data lines joined; comments (": keep-alive") carry none.
      std::string data;
      size_t pos = 0;
      while (pos <= block.size()) {
        size_t nl = block.find('\n', pos);
        if (nl == std::string_view::npos) nl = block.size();
        std::string_view line = block.substr(pos, nl - pos);
        if (line.starts_with("data:")) {
          line.remove_prefix(5);
          if (line.starts_with(' ')) line.remove_prefix(1);
          if (!data.empty()) data += '\n';
          data += line;
        }
        pos = nl + 1;
      }
      if (!data.empty()) events_.push_back(std::move(data));
      start = end + 2;
    }
    buf_.erase(0, start);
    cv_.NotifyAll();
    return true;
  }

  Mutex mu_;
  CondVar cv_;
  int status_ GUARDED_BY(mu_) = 0;
  bool done_ GUARDED_BY(mu_) = false;
  bool aborted_ GUARDED_BY(mu_) = false;
  std::string buf_ GUARDED_BY(mu_);
  std::deque<std::string> events_ GUARDED_BY(mu_);
  std::string error_body_ GUARDED_BY(mu_);
  std::string transport_error_ GUARDED_BY(mu_);
  std::thread thread_;
};

// ---- requests ----------------------------------------------------------------------------

struct Gateway::StreamState {
  std::string path, model, session, site;
  json body;  // with its seed
  httplib::Headers headers;
  int64_t tokens = 0;
  std::shared_ptr<Lease> lease;
  std::unique_ptr<Upstream> up;
  std::vector<int64_t> sent;  // token ids relayed
  // A chunk was relayed: an echoed prompt (completions' echo, its first chunk) went out and
  // is not asked for again on a move.
  bool relayed = false;
  // One choice: a failed replica's stream moves. Several (n, several prompts) interleave
  // their tokens, which one resumed generation cannot continue: the stream ends in an error.
  bool movable = true;
  std::vector<std::string> failed;
  int moves = 0;
  bool finished = false;   // the last token's chunk (with a finish_reason) was relayed
  bool done = false;
  SteadyTime started = SteadyClock::now();
  bool first_token = false;
  SteadyTime last_token_at;
  std::optional<SteadyTime> moved_at;  // a failover under way since
  std::shared_ptr<ServiceLatency> latency;  // the service's (nullptr: it went away)
};

void Gateway::Handle(bool chat, const std::string& path, const httplib::Request& req, httplib::Response& res) {
  requests_ += 1;
  if (inflight_.fetch_add(1) >= options_.max_inflight) {
    inflight_ -= 1;
    overloaded_ += 1;
    return SendOpenAiError(res, Error(ErrorCode::kResourceExhausted,
                                      fmt::format("the gateway has {} requests in progress; retry later",
                                                  options_.max_inflight)),
                           options_.retry_after_s);
  }
  struct InflightGuard {
    std::atomic<int>& n;
    ~InflightGuard() { n -= 1; }
  } guard{inflight_};

  auto parsed = ParseJson(req.body);
  if (!parsed) return SendOpenAiError(res, parsed.error(), options_.retry_after_s);
  json body = std::move(*parsed);
  if (!body.is_object()) {
    return SendOpenAiError(res, Error(ErrorCode::kInvalidArgument, "body: must be a JSON object", "body"),
                           options_.retry_after_s);
  }
  auto model_it = body.find("model");
  if (model_it == body.end() || !model_it->is_string()) {
    return SendOpenAiError(res, Error(ErrorCode::kInvalidArgument, "model: is required (a string)", "model"),
                           options_.retry_after_s);
  }
  const std::string model = *model_it;
  // OpenAI clients send null for a field they leave unset, as the replica reads it.
  for (auto it = body.begin(); it != body.end();) it = it->is_null() ? body.erase(it) : std::next(it);
  if (auto it = body.find("stream"); it != body.end() && !it->is_boolean()) {
    return SendOpenAiError(res, Error(ErrorCode::kInvalidArgument,
                                      fmt::format("stream: must be true or false, got {}", JsonTypeName(*it)), "stream"),
                           options_.retry_after_s);
  }
  const bool stream = body.value("stream", false);
  const int64_t choices = std::min<int64_t>(ChoicesOf(body, chat), 1024);
  const int64_t tokens = EstimateTokens(body, chat) * choices;
  const std::string session = req.get_header_value(options_.session_header);
  const std::string site = req.get_header_value(options_.site_header);
  httplib::Headers headers = {{"X-Cohort-Request-Id", NewRequestId(chat)}};

  if (!stream) {
    std::vector<std::string> exclude, busy;
    int failures = 0;
    std::string last_failure;
    for (;;) {
      auto lease = Pick(model, session, site, exclude, tokens);
      if (!lease) {
        if (lease.error().code == ErrorCode::kUnavailable && !busy.empty()) {
          // Every replica left is overloaded: wait (bounded) for room, then try them again.
          if (!WaitForRoom()) {
            overloaded_ += 1;
            return SendOpenAiError(res, Error(ErrorCode::kResourceExhausted,
                                              fmt::format("every replica of '{}' is busy; retry later", model)),
                                   options_.retry_after_s);
          }
          for (const auto& b : busy) std::erase(exclude, b);
          busy.clear();
          continue;
        }
        if (lease.error().code == ErrorCode::kUnavailable) unavailable_ += 1;
        Error e = lease.error();
        if (!last_failure.empty()) e.message += "; last failure: " + last_failure;
        return SendOpenAiError(res, e, options_.retry_after_s);
      }
      auto client = TakeClient(**lease);
      // The request runs on a thread of its own while this one watches the client: one
      // that hangs up is given up (closing the replica's connection makes the replica
      // cancel it) rather than waited for, up to read_timeout, for nobody.
      auto call = std::async(std::launch::async,
                             [&] { return client->Post(path, headers, req.body, "application/json"); });
      bool hung_up = false;
      while (call.wait_for(kHangUpCheck) != std::future_status::ready) {
        if (!hung_up && HttpServer::ClientGone()) {
          hung_up = true;
          client->stop();
        }
      }
      auto r = call.get();
      if (hung_up) return;
      if (!r || (r->status >= 500 && r->status != 503)) {
        last_failure = r ? fmt::format("HTTP {}", r->status) : httplib::to_string(r.error());
        MarkFailed((*lease)->key, last_failure);
        exclude.push_back((*lease)->key);
        retries_ += 1;
        if (++failures >= options_.max_attempts) {
          unavailable_ += 1;
          return SendOpenAiError(res, Error(ErrorCode::kUnavailable,
                                            fmt::format("{} replicas of '{}' failed; last: {}", failures, model,
                                                        last_failure)),
                                 options_.retry_after_s);
        }
        continue;
      }
      ReturnClient(**lease, std::move(client));
      if (r->status == 429 || r->status == 503) {
        exclude.push_back((*lease)->key);
        busy.push_back((*lease)->key);
        continue;
      }
      res.status = r->status;
      res.set_header("X-Cohort-Replica", (*lease)->key);
      if (r->has_header("Retry-After")) res.set_header("Retry-After", r->get_header_value("Retry-After"));
      const std::string type = r->get_header_value("Content-Type");
      res.set_content(std::move(r->body), type.empty() ? "application/json" : type);
      return;
    }
  }

  // Streamed: a seed makes sampling reproducible across a failover.
  const bool greedy = body.contains("temperature") && body["temperature"].is_number() && body["temperature"] == 0;
  if (!greedy && !body.contains("seed")) {
    body["seed"] = static_cast<int64_t>(std::random_device{}() >> 1);
  }
  auto st = std::make_shared<StreamState>();
  st->latency = LatencyOf(model);
  st->path = path;
  st->model = model;
  st->session = session;
  st->site = site;
  st->body = std::move(body);
  st->headers = std::move(headers);
  st->tokens = tokens;
  st->movable = choices == 1;

  // Starts the stream on some replica: true with st->up streaming (status 200); false
  // with `res` answered (an error before any token).
  auto start = [this, st](httplib::Response* res_or_null, std::string* error_event) -> bool {
    std::vector<std::string> busy;
    int failures = 0;
    std::string last_failure;
    json body = st->body;
    // Anything relayed (tokens, an echoed prompt, a chat's opening role chunk) is not sent
    // again; the next replica rebuilds the text the client has from the tokens and the
    // echo, so that logprobs.text_offset goes on after it.
    if (st->relayed) {
      const auto echo = body.find("echo");
      const bool echoed = echo != body.end() && echo->is_boolean() && echo->get<bool>();
      body["cohort_resume"] = {{"tokens", st->sent}};
      if (echoed) body["cohort_resume"]["echoed"] = true;
      body.erase("echo");
    }
    const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
    auto fail = [&](const Error& e) {
      if (res_or_null) SendOpenAiError(*res_or_null, e, options_.retry_after_s);
      if (error_event) *error_event = "data: " + OpenAiErrorText(e) + "\n\n";
      return false;
    };
    for (;;) {
      std::vector<std::string> exclude = st->failed;
      exclude.insert(exclude.end(), busy.begin(), busy.end());
      auto lease = Pick(st->model, st->session, st->site, exclude, st->tokens);
      if (!lease) {
        if (lease.error().code == ErrorCode::kUnavailable && !busy.empty()) {
          if (!WaitForRoom()) {
            overloaded_ += 1;
            return fail(Error(ErrorCode::kResourceExhausted, fmt::format("every replica of '{}' is busy", st->model)));
          }
          busy.clear();
          continue;
        }
        if (lease.error().code == ErrorCode::kUnavailable) unavailable_ += 1;
        Error e = lease.error();
        if (!last_failure.empty()) e.message += "; last failure: " + last_failure;
        return fail(e);
      }
      auto up = std::make_unique<Upstream>(this, *lease, st->path, text, st->headers);
      const int status = up->WaitStatus(options_.read_timeout);
      if (status == 200) {
        st->lease = std::move(*lease);
        st->up = std::move(up);
        return true;
      }
      if (status == 429 || status == 503) {
        busy.push_back((*lease)->key);
        continue;
      }
      if (status <= 0 || status >= 500) {
        last_failure = status <= 0 ? up->transport_error() : fmt::format("HTTP {}", status);
        MarkFailed((*lease)->key, last_failure);
        st->failed.push_back((*lease)->key);
        retries_ += 1;
        if (++failures >= options_.max_attempts) {
          unavailable_ += 1;
          return fail(Error(ErrorCode::kUnavailable,
                            fmt::format("{} replicas of '{}' failed; last: {}", failures, st->model, last_failure)));
        }
        continue;
      }
      // A 4xx: the request itself is at fault; relay it.
      const std::string err = up->ErrorBody(options_.read_timeout);
      if (res_or_null) {
        res_or_null->status = status;
        res_or_null->set_content(err, "application/json");
      }
      if (error_event) *error_event = "data: " + err + "\n\n";
      return false;
    }
  };
  if (!start(&res, nullptr)) return;

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Cohort-Replica", st->lease->key);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, start](size_t, httplib::DataSink& sink) {
        HttpServer::StreamResponse();
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto finish = [&](const std::string& last) {
          st->done = true;
          if (!last.empty()) write(last);
          sink.done();
          return true;
        };
        if (st->done) {
          sink.done();
          return true;
        }
        std::optional<std::string> ev = st->up->Next(Millis(1000));
        bool broken = false;
        if (ev) {
          if (*ev == "[DONE]") {
            // The reply's end follows [DONE] at once; waiting for it (at most a second, for
            // a replica that keeps its reply open) returns the connection to the pool
            // before the client can send its next request.
            st->up->WaitEnd(Millis(1000));
            return finish("data: [DONE]\n\n");
          }
          auto j = ParseJson(*ev);
          if (j && j->is_object() && j->contains("error")) {
            broken = true;  // the replica failed the generation (it is stopping): move it
          } else {
            if (j && j->is_object()) {
              const json& choices = j->value("choices", json::array());
              if (!choices.empty() && choices[0].is_object()) {
                const json& c = choices[0];
                if (auto ids = c.find("token_ids"); ids != c.end() && ids->is_array()) {
                  for (const auto& id : *ids) {
                    if (id.is_number_integer()) st->sent.push_back(id.get<int64_t>());
                  }
                  const SteadyTime now = SteadyClock::now();
                  if (!st->first_token) {
                    st->first_token = true;
                    ttft_seconds_.Observe(Seconds(now - st->started));
                    if (st->latency) st->latency->ttft.Observe(Seconds(now - st->started));
                  } else if (st->latency) {
                    st->latency->itl.Observe(Seconds(now - st->last_token_at));
                  }
                  st->last_token_at = now;
                  if (st->moved_at) {
                    moved_extra_seconds_.Observe(Seconds(SteadyClock::now() - *st->moved_at));
                    st->moved_at.reset();
                  }
                }
                if (auto fr = c.find("finish_reason"); fr != c.end() && fr->is_string()) st->finished = true;
              }
            }
            if (!write("data: " + *ev + "\n\n")) {
              st->up->Abort();
              return false;
            }
            st->relayed = true;
            return true;
          }
        }
        if (!broken && !st->up->ended()) {
          if (!sink.is_writable()) {
            st->up->Abort();
            return false;
          }
          return true;
        }
        // The replica is gone mid-stream (or failed it): move the stream.
        const std::string why = broken ? "sent an error event" : "the stream broke: " + st->up->transport_error();
        MarkFailed(st->lease->key, why);
        if (!st->movable) {
          return finish("data: " +
                        OpenAiErrorText(Error(ErrorCode::kUnavailable,
                                              fmt::format("the replica serving this stream failed ({}); a stream of "
                                                          "several choices (n, or several prompts) does not move to "
                                                          "another replica: send the request again",
                                                          why))) +
                        "\n\n");
        }
        CountFailover(st->lease->key);
        st->failed.push_back(st->lease->key);
        st->up.reset();
        st->lease.reset();
        if (st->finished) return finish("data: [DONE]\n\n");  // only the end was lost
        if (++st->moves > options_.max_moves) {
          return finish("data: " +
                        OpenAiErrorText(Error(ErrorCode::kUnavailable,
                                              fmt::format("the stream moved {} times; giving up", options_.max_moves))) +
                        "\n\n");
        }
        st->moved_at = SteadyClock::now();
        LOG_WARN("gateway: moving a stream of '{}' after {} tokens: {}", st->model, st->sent.size(), why);
        std::string error_event;
        if (!start(nullptr, &error_event)) return finish(error_event);
        return true;
      },
      [st](bool) {
        if (st->up) st->up->Abort();
      });
}

void Gateway::Register(Router& router) {
  for (const char* pattern : {"/v1/completions", "/v1/chat/completions", "/v1/models", R"(/v1/models/(.+))"}) {
    router.UseOpenAiErrors(pattern);
  }
  router.Post("/v1/completions", Access::kUser,
              [this](const httplib::Request& req, httplib::Response& res) { Handle(false, "/v1/completions", req, res); });
  router.Post("/v1/chat/completions", Access::kUser, [this](const httplib::Request& req, httplib::Response& res) {
    Handle(true, "/v1/chat/completions", req, res);
  });
  router.Get("/v1/models", Access::kViewer, [this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    {
      MutexLock l(mu_);
      for (const auto& [model, service] : model_services_) {
        data.push_back({{"id", model}, {"object", "model"}, {"created", model_created_[model]}, {"owned_by", service}});
      }
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  // The OpenAI SDKs' models.retrieve.
  router.Get(R"(/v1/models/(.+))", Access::kViewer, [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1].str();
    std::string service;
    int64_t created = 0;
    {
      MutexLock l(mu_);
      if (auto it = model_services_.find(id); it != model_services_.end()) {
        service = it->second;
        created = model_created_[id];
      }
    }
    if (service.empty()) {
      return SendOpenAiError(res, Error(ErrorCode::kNotFound, fmt::format("model '{}' does not exist", id), "model"),
                             options_.retry_after_s);
    }
    res.set_content(json{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", service}}.dump(),
                    "application/json");
  });
}

std::vector<api::ReplicaStatus> Gateway::Replicas(const std::string& service) const {
  MutexLock l(mu_);
  std::vector<api::ReplicaStatus> out;
  for (const auto& [key, r] : replicas_) {
    if (r->service == service) out.push_back(r->status);
  }
  return out;
}

void Gateway::WriteMetrics(prom::TextWriter& w) const {
  using prom::MetricType;
  w.Family("cohort_gateway_requests_total", MetricType::kCounter, "Inference requests the gateway received");
  w.Sample({}, static_cast<double>(requests_.load()));
  w.Family("cohort_gateway_retries_total", MetricType::kCounter,
           "Requests sent to another replica after one failed before streaming");
  w.Sample({}, static_cast<double>(retries_.load()));
  w.Family("cohort_gateway_failovers_total", MetricType::kCounter,
           "Streams moved to another replica after theirs died mid-stream");
  w.Sample({}, static_cast<double>(failovers_.load()));
  w.Family("cohort_gateway_overloaded_total", MetricType::kCounter, "Requests answered 429: every replica busy");
  w.Sample({}, static_cast<double>(overloaded_.load()));
  w.Family("cohort_gateway_unavailable_total", MetricType::kCounter, "Requests answered 503: no healthy replica");
  w.Sample({}, static_cast<double>(unavailable_.load()));
  w.Family("cohort_gateway_inflight_requests", MetricType::kGauge, "Inference requests in progress at the gateway");
  w.Sample({}, inflight_.load());
  w.Family("cohort_gateway_time_to_first_token_seconds", MetricType::kHistogram,
           "From a streamed request's arrival at the gateway to its first token");
  w.Histogram({}, ttft_seconds_.Snapshot());
  w.Family("cohort_gateway_failover_delay_seconds", MetricType::kHistogram,
           "From a stream's replica failing to its first token from the next replica");
  w.Histogram({}, moved_extra_seconds_.Snapshot());

  MutexLock l(mu_);
  w.Family("cohort_gateway_queued_requests", MetricType::kGauge, "Requests waiting for a replica with room");
  w.Sample({}, queued_);
  struct Agg {
    int replicas = 0, healthy = 0, waiting = 0, running = 0;
    double tps = 0;
    int kv_used = 0, kv_total = 0;
  };
  std::map<std::string, Agg> services;
  for (const auto& [model, service] : model_services_) services[service];
  using Get = double (*)(const api::ReplicaStatus&);
  const std::tuple<const char*, const char*, Get> gauges[] = {
      {"cohort_replica_healthy", "1 while the gateway routes to the replica",
       [](const api::ReplicaStatus& s) { return s.healthy ? 1.0 : 0.0; }},
      {"cohort_replica_running_requests", "Sequences in the replica's batch",
       [](const api::ReplicaStatus& s) { return double(s.running); }},
      {"cohort_replica_queued_requests", "Requests waiting in the replica's queue",
       [](const api::ReplicaStatus& s) { return double(s.waiting); }},
      {"cohort_replica_queued_tokens", "Prompt and max_tokens of the replica's waiting requests",
       [](const api::ReplicaStatus& s) { return double(s.queued_tokens); }},
      {"cohort_replica_inflight_tokens", "Tokens still to read or generate in the replica's batch",
       [](const api::ReplicaStatus& s) { return double(s.inflight_tokens); }},
      {"cohort_replica_kv_cache_usage_ratio", "KV-cache blocks held / in all",
       [](const api::ReplicaStatus& s) {
         return s.kv_blocks_total ? double(s.kv_blocks_used) / s.kv_blocks_total : 0.0;
       }},
      {"cohort_replica_output_tokens_per_second", "Tokens the replica generated per second (last 10 s)",
       [](const api::ReplicaStatus& s) { return s.tokens_per_second; }},
      {"cohort_replica_time_to_first_token_p50_seconds", "Median time to first token at the replica",
       [](const api::ReplicaStatus& s) { return s.ttft_p50_seconds; }},
      {"cohort_replica_time_to_first_token_p99_seconds", "99th percentile time to first token at the replica",
       [](const api::ReplicaStatus& s) { return s.ttft_p99_seconds; }},
      {"cohort_replica_inter_token_latency_p50_seconds", "Median inter-token latency at the replica",
       [](const api::ReplicaStatus& s) { return s.itl_p50_seconds; }},
      {"cohort_replica_inter_token_latency_p99_seconds", "99th percentile inter-token latency at the replica",
       [](const api::ReplicaStatus& s) { return s.itl_p99_seconds; }},
  };
  for (const auto& [name, help, get] : gauges) {
    w.Family(name, MetricType::kGauge, help);
    for (const auto& [key, r] : replicas_) {
      w.Sample({{"service", r->service}, {"job", std::to_string(r->status.job)}, {"node", r->node}}, get(r->status));
    }
  }
  // The gateway's own count, exact at every moment (the replica's report is up to a health
  // interval old): which replicas a burst went to, which streams a replica's loss moves.
  w.Family("cohort_replica_gateway_inflight_requests", MetricType::kGauge,
           "Requests (streams included) the gateway has sent to the replica and not yet seen end");
  for (const auto& [key, r] : replicas_) {
    w.Sample({{"service", r->service}, {"job", std::to_string(r->status.job)}, {"node", r->node}}, r->outstanding);
  }
  for (const auto& [key, r] : replicas_) {
    Agg& a = services[r->service];
    a.replicas += 1;
    a.healthy += r->status.healthy ? 1 : 0;
    a.waiting += r->status.waiting;
    a.running += r->status.running;
    a.tps += r->status.tokens_per_second;
    a.kv_used += r->status.kv_blocks_used;
    a.kv_total += r->status.kv_blocks_total;
  }
  const std::tuple<const char*, const char*, double (*)(const Agg&)> per_service[] = {
      {"cohort_service_running_replicas", "Replicas of the service running", [](const Agg& a) { return double(a.replicas); }},
      {"cohort_service_healthy_replicas", "Replicas of the service the gateway routes to",
       [](const Agg& a) { return double(a.healthy); }},
      {"cohort_service_queued_requests", "Requests waiting in the service's replicas",
       [](const Agg& a) { return double(a.waiting); }},
      {"cohort_service_running_requests", "Sequences in the service's batches", [](const Agg& a) { return double(a.running); }},
      {"cohort_service_output_tokens_per_second", "Tokens the service generated per second (last 10 s)",
       [](const Agg& a) { return a.tps; }},
      {"cohort_service_kv_cache_usage_ratio", "KV-cache blocks held / in all, over the service's replicas",
       [](const Agg& a) { return a.kv_total ? double(a.kv_used) / a.kv_total : 0.0; }},
  };
  for (const auto& [name, help, get] : per_service) {
    w.Family(name, MetricType::kGauge, help);
    for (const auto& [service, a] : services) w.Sample({{"service", service}}, get(a));
  }
  w.Family("cohort_service_time_to_first_token_seconds", MetricType::kHistogram,
           "From a streamed request's arrival at the gateway to its first token, per service");
  for (const auto& [service, l] : latency_) w.Histogram({{"service", service}}, l->ttft.Snapshot());
  w.Family("cohort_service_inter_token_latency_seconds", MetricType::kHistogram,
           "Between a stream's tokens as the gateway relays them (a failover's gap included), per service");
  for (const auto& [service, l] : latency_) w.Histogram({{"service", service}}, l->itl.Snapshot());
}

}  // namespace cohort::head
