// Simulated agents for the head-at-scale benchmarks (head_scale, metrics_scale,
// dashboard_scale): many fake nodes that speak the real agent protocol to one head over
// HTTP, without any agent processes. Each node registers with 8 simulated 80 GB GPUs and
// 64 CPUs and then behaves as a real agent does: it heartbeats right away, then every
// interval the head's last reply asked for (the head scales it with the cluster's size),
// reports the tasks the head assigned it in the previous reply as running (and,
// optionally, the GPU telemetry and per-task resource use a real agent sends), and
// heartbeats at once when the head wakes it (POST /v1/wake) after its assignments changed.
//
// Wakes: every node advertises its own agent URL, http://127.A.B.C:PORT, one loopback
// address per node and one port for all (Linux routes all of 127/8 to lo); one HttpServer
// (the product's, as a real agent serves) on that port tells the nodes apart by the
// address the wake was sent to.
//
// With an https head (the benchmarks' default, COHORT_BENCH_SECURITY=tls) each node is
// what a real agent is under mutual TLS: it makes a key and a certificate request when it
// registers, heartbeats over connections of its own that present the certificate the head
// issued it (the head accepts a node's credential only with that node's certificate), and
// the wake server is HTTPS, answering each node's address with that node's certificate
// (the head checks it names the address it called). The head's authority comes from
// $COHORT_CA_FILE, which BenchCluster sets.
//
// `SimAgents` owns the heartbeat threads, the wake server and the nodes' state; Start(),
// WaitRegistered(), Stats() and Stop() are called from one thread (the benchmark's main
// thread). The `on_task` hook runs on the heartbeat threads and must do its own locking.
// Fatal errors (a registration the head refuses) exit the benchmark (BenchCluster::Die).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include "api/types.h"
#include "bench_cluster.h"
#include "common/clock.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/tls.h"

namespace cohort::bench {

// One simulated node: its identity and what it last heard from the head.
struct SimNode {
  std::string name;
  std::string incarnation;
  bool registered = false;
  std::string credential;                // from the registration reply
  int64_t applied = 0;
  int64_t interval_ms = 1000;            // from the head's last reply
  SteadyClock::time_point due{};         // the next heartbeat
  SteadyClock::time_point last_sent{};   // the last one
  std::vector<api::TaskReport> running;
  std::unique_ptr<HttpClient> client;    // the node's own (with TLS, presenting its certificate)
};

// The p-quantile (0..1) of `v` by nearest rank; 0 for an empty sample.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Milliseconds since `t0`.
inline double MillisSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

// The GPU part of a heartbeat: 8 GPUs, those used by a running task busy and hot.
inline std::vector<api::GpuReport> SimGpuReports(const SimNode& s) {
  std::vector<api::GpuReport> out;
  for (int g = 0; g < 8; ++g) {
    bool busy = std::any_of(s.running.begin(), s.running.end(), [&](const api::TaskReport& t) {
      return std::find(t.gpus.begin(), t.gpus.end(), g) != t.gpus.end();
    });
    api::GpuReport r;
    r.index = g;
    r.telemetry.utilization = busy ? 0.93 : 0.0;
    r.telemetry.memory_used_bytes = busy ? (int64_t{60} << 30) : (int64_t{1} << 29);
    r.telemetry.memory_total_bytes = int64_t{80} << 30;
    r.telemetry.temperature_celsius = busy ? 74 : 35;
    r.telemetry.power_watts = busy ? 650 : 70;
    r.telemetry.sm_clock_hz = busy ? 1.98e9 : 3.45e8;
    out.push_back(r);
  }
  return out;
}

// Node i's loopback address, 127.A.B.C with B and C in 1..250 (no .0 or .255).
inline std::string SimNodeAddress(int i) {
  return fmt::format("127.{}.{}.{}", 10 + i / (250 * 250), 1 + (i / 250) % 250, 1 + i % 250);
}

// The inverse of SimNodeAddress; -1 for any other address.
inline int SimNodeIndex(const std::string& addr) {
  int a = 0, b = 0, c = 0, d = 0;
  if (std::sscanf(addr.c_str(), "%d.%d.%d.%d", &a, &b, &c, &d) != 4 || a != 127) return -1;
  if (b < 10 || c < 1 || c > 250 || d < 1 || d > 250) return -1;
  return (b - 10) * 250 * 250 + (c - 1) * 250 + (d - 1);
}

// The registration of simulated node i: 8 GPUs, 64 CPUs, agent URL on `wake_port` (https
// when it carries a certificate request, `csr`).
inline api::Registration SimRegistration(const SimNode& s, int i, int wake_port, std::string csr = {}) {
  api::Registration reg;
  reg.csr = std::move(csr);
  reg.name = s.name;
  reg.address = SimNodeAddress(i);
  reg.agent_url = fmt::format("http{}://{}:{}", reg.csr.empty() ? "" : "s", reg.address, wake_port);
  reg.incarnation = s.incarnation;
  reg.cpus = 64;
  for (int g = 0; g < 8; ++g) {
    api::Gpu gpu;
    gpu.index = g;
    gpu.name = "Cohort Simulated GPU 80GB";
    gpu.uuid = fmt::format("GPU-{}-{}", i, g);
    gpu.memory_bytes = 80LL << 30;
    gpu.simulated = true;
    reg.gpus.push_back(gpu);
  }
  return reg;
}

// The gang shape of the i-th benchmark job, cycling 1x1, 1x2, 1x4, 1x8, 2x8, 4x8
// (nodes x GPUs per node): 63 GPUs per 6 jobs.
struct SimJobShape {
  int nodes;
  int gpus_per_node;
};
inline SimJobShape JobShape(int i) {
  constexpr SimJobShape kShapes[] = {{1, 1}, {1, 2}, {1, 4}, {1, 8}, {2, 8}, {4, 8}};
  return kShapes[i % 6];
}

// The plainest job spec of that shape: one task per node running "train.sh", priority i % 7.
inline json PlainJobSpec(int i) {
  auto [n, g] = JobShape(i);
  return {{"command", {"train.sh"}}, {"nodes", n}, {"gpus_per_node", g}, {"tasks_per_node", 1},
          {"priority", i % 7}};
}

// Submits jobs 0..jobs-1 with the specs `spec(i)`; exits the benchmark if one fails.
inline void SubmitJobs(HttpClient& client, int jobs, const std::function<json(int)>& spec) {
  for (int i = 0; i < jobs; ++i) {
    if (auto r = client.Post("/v1/jobs", spec(i)); !r) BenchCluster::Die(r.error().message);
  }
}

// Whether heartbeats carry GPU telemetry (SimGpuReports) and running tasks their CPU and
// RSS use, as a real agent's do, or only the task list.
enum class Telemetry { kOff, kOn };

// Heartbeat counters, cumulative since Start (Stats()).
struct SimStats {
  int64_t registered = 0;  // nodes registered
  int64_t sent = 0;        // heartbeats sent
  int64_t handled = 0;     // heartbeats the head answered with a reply
  int64_t errors = 0;      // heartbeats with no reply or an error status
  int64_t wakes = 0;       // POST /v1/wake received from the head
  int64_t tasks = 0;       // tasks the nodes run (as of their last replies)
  int64_t interval_ms = 0; // the newest interval the head asked for
  SteadyClock::time_point at;
};

// The simulated nodes "sim-0000", ..., spread over kThreads threads (thread t drives nodes
// t, t + kThreads, ...), each with its own HTTP client: it registers its nodes in order
// (each heartbeats right after), then heartbeats each when it is due or woken.
// `on_task`, if set, is called on a heartbeat thread for every task a reply assigns.
class SimAgents {
 public:
  static constexpr int kThreads = 8;
  using OnTask = std::function<void(const api::TaskLaunch&)>;

  // `join_token` registers the nodes (head/auth.h); each then heartbeats with the node
  // credential its registration reply carries.
  SimAgents(std::string url, std::string join_token, int nodes, Telemetry telemetry, OnTask on_task = {})
      : url_(std::move(url)), join_token_(std::move(join_token)), sims_(nodes), telemetry_(telemetry == Telemetry::kOn), on_task_(std::move(on_task)),
        lanes_(kThreads) {
    https_ = url_.rfind("https://", 0) == 0;
    if (https_) {
      auto trust = tls::ClientOptionsFromEnv();
      if (!trust || !trust->has_value()) BenchCluster::Die("an https head, but no $COHORT_CA_FILE to trust it by");
      ca_pem_ = (*trust)->ca_pem;
    }
    for (int i = 0; i < nodes; ++i) identities_.push_back(std::make_shared<tls::IdentitySlot>());
    for (int i = 0; i < nodes; ++i) {
      sims_[i].name = fmt::format("sim-{:04d}", i);
      sims_[i].incarnation = fmt::format("inc{}", i);
    }
  }
  SimAgents(const SimAgents&) = delete;
  SimAgents& operator=(const SimAgents&) = delete;
  ~SimAgents() { Stop(); }

  // Starts the wake server and the threads; registration begins now.
  void Start() {
    start_ = SteadyClock::now();
    // The product's HTTP front end, as a real agent serves (agent_http.cc): an idle kept
    // connection holds no thread, and stays open 75 s (httplib's own server holds a
    // thread per connection and closes it after 5 s: the head's wake-ups then queued
    // behind idle connections, timed out and reconnected).
    HttpServerOptions o;
    o.host = "0.0.0.0";
    o.max_connections_per_client = o.max_connections;  // the head keeps one to each node
    if (https_) {
      auto ctx = tls::ServerContext::Create(ca_pem_);
      if (!ctx) BenchCluster::Die("wake server TLS: " + ctx.error().message);
      (*ctx)->SetIdentityChooser([this](SSL* ssl) { return IdentityOfAddress(ssl); });
      o.tls = std::move(*ctx);
    }
    wake_server_ = std::make_unique<HttpServer>(o);
    wake_server_->Post("/v1/wake", [this](const httplib::Request& req, httplib::Response& res) {
      int i = SimNodeIndex(req.local_addr);
      if (i >= 0 && i < static_cast<int>(sims_.size())) {
        ++wakes_;
        Lane& lane = lanes_[i % kThreads];
        {
          std::lock_guard lock(lane.mu);
          lane.woken.push_back(i);
        }
        lane.cv.notify_one();
      }
      res.set_content("{}", "application/json");
    });
    auto port = wake_server_->Bind();
    if (!port) BenchCluster::Die("cannot bind the simulated agents' wake server: " + port.error().message);
    wake_port_ = *port;
    wake_thread_ = std::thread([this] { wake_server_->Serve(); });
    for (int t = 0; t < kThreads; ++t) workers_.emplace_back([this, t] { Run(t); });
  }

  // Waits until every node has registered (the benchmark dies if one cannot).
  void WaitRegistered() {
    while (registered_.load() < static_cast<int64_t>(sims_.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Stops and joins the threads (each finishes its request in flight). Idempotent.
  void Stop() {
    if (stop_.exchange(true)) return;
    for (auto& lane : lanes_) lane.cv.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    if (wake_server_) wake_server_->Stop();
    if (wake_thread_.joinable()) wake_thread_.join();
  }

  SteadyClock::time_point start() const { return start_; }

  // The counters now (any time after Start).
  SimStats Stats() const {
    SimStats s;
    s.registered = registered_;
    s.sent = sent_;
    s.handled = handled_;
    s.errors = errors_;
    s.wakes = wakes_;
    s.tasks = tasks_;
    s.interval_ms = interval_ms_;
    s.at = SteadyClock::now();
    return s;
  }

  // Latencies (ms, to the last byte of the reply) of the heartbeats sent from `from` on;
  // call after Stop().
  std::vector<double> HeartbeatMillisSince(SteadyClock::time_point from) const {
    std::vector<double> out;
    for (const auto& lane : lanes_) {
      for (const auto& b : lane.latency) {
        if (b.sent >= from) out.push_back(b.ms);
      }
    }
    return out;
  }

  // The longest time (ms) a node went between two heartbeats sent, the second from
  // `from` on; call after Stop().
  double LongestGapMillisSince(SteadyClock::time_point from) const {
    double out = 0;
    for (const auto& lane : lanes_) {
      for (const auto& b : lane.latency) {
        if (b.sent >= from) out = std::max(out, b.gap_ms);
      }
    }
    return out;
  }

 private:
  // A thread's share of the nodes: its wake-ups (from the wake server) and its samples.
  struct Lane {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> woken;  // guarded by mu
    struct Sample {
      SteadyClock::time_point sent;
      double ms;      // to the last byte of the reply
      double gap_ms;  // since the node's previous heartbeat (0 for its first)
    };
    std::vector<Sample> latency;  // the thread's own until Stop
  };

  using Due = std::pair<SteadyClock::time_point, int>;  // (when, node)

  // The wake server's certificate for a handshake: that of the node whose address the head
  // connected to (null fails the handshake).
  std::shared_ptr<const tls::Identity> IdentityOfAddress(SSL* ssl) const {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(SSL_get_fd(ssl), reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) == nullptr) {
      return nullptr;
    }
    const int i = SimNodeIndex(text);
    if (i < 0 || i >= static_cast<int>(identities_.size())) return nullptr;
    return identities_[i]->Get();
  }

  // Registers node i as a real agent does (with TLS: a key, a certificate request, and the
  // certificate the reply carries, presented from then on); dies on a refusal.
  void Register(HttpClient& join, int i) {
    SimNode& s = sims_[i];
    std::string key, csr;
    if (https_) {
      auto k = tls::NewPrivateKeyPem();
      auto c = k ? tls::MakeCsrPem(*k, s.name) : std::unexpected(k.error());
      if (!c) BenchCluster::Die("cannot make " + s.name + "'s certificate request: " + c.error().message);
      key = std::move(*k);
      csr = std::move(*c);
    }
    auto r = join.Post("/v1/agents/register", api::ToJson(SimRegistration(s, i, wake_port_, std::move(csr))));
    if (!r) BenchCluster::Die("registration of " + s.name + " failed: " + r.error().message);
    if (auto timing = api::AgentTimingFromJson((*r)["timing"])) s.interval_ms = timing->heartbeat_interval_ms;
    s.credential = r->value("node_credential", "");
    if (https_) {
      auto id = tls::Identity::Parse(r->value("certificate", ""), key);
      if (!id) BenchCluster::Die("the head's certificate for " + s.name + ": " + id.error().message);
      identities_[i]->Set(std::move(*id));
    }
    // The node's own client and connection, as each real agent has, whatever the security
    // mode: 1,000 agents are 1,000 connections to the head (its sweeps, epoll and socket
    // buffers), never a few shared ones.
    s.client = std::make_unique<HttpClient>(url_, Millis(30'000));
    if (https_) s.client->set_tls(tls::ClientOptions{ca_pem_, identities_[i]});
    s.client->set_bearer_token(s.credential);
  }

  void Run(int t) {
    const int nodes = static_cast<int>(sims_.size());
    Lane& lane = lanes_[t];
    HttpClient join(url_, Millis(30'000));
    join.set_bearer_token(join_token_);
    std::priority_queue<Due, std::vector<Due>, std::greater<>> due;
    for (int i = t; i < nodes && !stop_; i += kThreads) {
      SimNode& s = sims_[i];
      Register(join, i);
      s.registered = true;
      ++registered_;
      Beat(lane, s);  // a real agent heartbeats right after registering
      due.emplace(s.due, i);
    }
    while (!stop_) {
      std::vector<int> woken;
      {
        std::unique_lock lock(lane.mu);
        auto until = due.empty() ? SteadyClock::now() + std::chrono::seconds(1) : due.top().first;
        lane.cv.wait_until(lock, until, [&] { return stop_ || !lane.woken.empty(); });
        woken.swap(lane.woken);
      }
      if (stop_) break;
      for (int i : woken) {
        Beat(lane, sims_[i]);
        due.emplace(sims_[i].due, i);
      }
      const auto now = SteadyClock::now();
      while (!due.empty() && due.top().first <= now && !stop_) {
        auto [when, i] = due.top();
        due.pop();
        if (when != sims_[i].due) continue;  // superseded by a woken heartbeat
        Beat(lane, sims_[i]);
        due.emplace(sims_[i].due, i);
      }
    }
  }

  // One heartbeat of `s`; sets its next due time from the reply's interval.
  void Beat(Lane& lane, SimNode& s) {
    api::Heartbeat hb;
    hb.incarnation = s.incarnation;
    hb.applied_version = s.applied;
    hb.tasks = s.running;
    if (telemetry_) hb.gpus = SimGpuReports(s);
    const auto t0 = SteadyClock::now();
    ++sent_;
    auto r = s.client->Post("/v1/agents/" + s.name + "/heartbeat", api::ToJson(hb));
    const double gap = s.last_sent == SteadyClock::time_point{}
                           ? 0
                           : std::chrono::duration<double, std::milli>(t0 - s.last_sent).count();
    s.last_sent = t0;
    lane.latency.push_back({t0, MillisSince(t0), gap});
    s.due = t0 + std::chrono::milliseconds(s.interval_ms);
    if (!r) {
      ++errors_;
      s.due = t0 + std::chrono::milliseconds(std::min<int64_t>(200, s.interval_ms));  // as an agent retries
      return;
    }
    auto reply = api::HeartbeatReplyFromJson(*r);
    if (!reply) {
      ++errors_;
      return;
    }
    ++handled_;
    s.interval_ms = reply->timing.heartbeat_interval_ms;
    interval_ms_ = s.interval_ms;
    s.due = t0 + std::chrono::milliseconds(s.interval_ms);
    s.applied = reply->version;
    tasks_ += static_cast<int64_t>(reply->tasks.size()) - static_cast<int64_t>(s.running.size());
    s.running.clear();
    for (const auto& l : reply->tasks) {
      api::TaskReport tr;
      tr.job = l.job;
      tr.attempt = l.attempt;
      tr.rank = l.rank;
      tr.running = true;
      tr.gpus = l.gpus;
      if (telemetry_) {
        tr.cpu_seconds = 12.5;
        tr.rss_bytes = int64_t{2} << 30;
      }
      s.running.push_back(tr);
      if (on_task_) on_task_(l);
    }
  }

  const std::string url_;
  const std::string join_token_;
  std::vector<SimNode> sims_;  // sims_[i] is touched only by thread i % kThreads
  const bool telemetry_;
  const OnTask on_task_;
  std::vector<Lane> lanes_;
  bool https_ = false;
  std::string ca_pem_;  // the head's authority, with https
  // Node i's certificate and key (with https), set by its registration.
  std::vector<std::shared_ptr<tls::IdentitySlot>> identities_;
  std::unique_ptr<HttpServer> wake_server_;
  int wake_port_ = 0;
  std::thread wake_thread_;
  SteadyClock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> registered_{0}, sent_{0}, handled_{0}, errors_{0}, wakes_{0}, tasks_{0}, interval_ms_{0};
  std::vector<std::thread> workers_;
};

}  // namespace cohort::bench
