// bench_http_server: the cost of TLS in the HTTP layer alone (common/http_server.h), as the
// head serves its agents' heartbeats, without the head's own work around it. One server
// (this process) with a handler that answers a heartbeat-sized reply; a client process
// keeps `connections` connections (HttpClient, each its own, as agents do) and posts a
// heartbeat-sized request on each in turn at `rate` requests per second in all. Rounds
// alternate plain HTTP and HTTPS with client certificates (mTLS, the head's default) and
// print the server's CPU per request (getrusage of this process over the window, which
// holds nothing but the server's threads).
//
// It tells how much of bench_head_scale's mTLS difference the HTTP layer explains.
//
// Usage: bench_http_server [connections=1000] [rate=1000] [seconds=10] [rounds=3]
// BENCH_HTTP_MODES=plain or =mtls runs only that mode (to profile it: the client process's
// threads are named bench-clients, so `perf report --comms bench_http_serv` is the server).
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/json.h"
#include "common/tls.h"

using namespace cohort;

namespace {

constexpr size_t kRequestBytes = 624;  // a simulated agent's heartbeat, as measured under strace
constexpr size_t kReplyBytes = 347;    // the head's reply to it
constexpr int64_t kDay = 24LL * 3600 * 1000;

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Context switches of this process's threads so far (voluntary + involuntary).
long ContextSwitches() {
  long total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.starts_with("voluntary_ctxt_switches:") || line.starts_with("nonvoluntary_ctxt_switches:")) {
        total += std::atol(line.c_str() + line.find(':') + 1);
      }
    }
  }
  return total;
}

struct Certs {
  std::string ca_pem;
  std::shared_ptr<const tls::Identity> server, client;
};

Certs MakeCerts() {
  auto ca = tls::NewAuthority("bench-ca", kDay, NowUnixMs()).value();
  auto leaf = [&](const std::string& name) {
    const std::string key = tls::NewPrivateKeyPem().value();
    tls::LeafProfile p;
    p.common_name = name;
    p.ip_addresses = {"127.0.0.1"};
    p.lifetime_ms = kDay;
    return tls::Identity::Parse(tls::IssueForKey(ca, key, p, NowUnixMs()).value(), key).value();
  };
  return Certs{ca.cert_pem, leaf("server"), leaf("node-1")};
}

// The client process: `connections` clients over `threads` threads, paced to `rate` in all
// for `seconds`; exits 0 when every request succeeded.
[[noreturn]] void RunClients(const std::string& url, const Certs* certs, int connections, int rate, int seconds) {
  prctl(PR_SET_NAME, "bench-clients");  // apart from the server's threads in a profile
  const int threads = 4;
  std::atomic<long> failed{0};
  json body = {{"node", "node-1"}, {"pad", std::string(kRequestBytes - 30, 'x')}};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<HttpClient> clients;
      for (int i = t; i < connections; i += threads) {
        HttpClient c(url, Millis(5000));
        if (certs != nullptr) {
          auto slot = std::make_shared<tls::IdentitySlot>();
          slot->Set(certs->client);
          c.set_tls(tls::ClientOptions{certs->ca_pem, slot});
        }
        clients.push_back(std::move(c));
      }
      // Connect every client first (handshakes stay out of the window).
      for (auto& c : clients) {
        if (!c.Post("/hb", body)) ++failed;
      }
      const auto period = std::chrono::duration<double>(double(threads) / rate);
      const auto start = SteadyClock::now();
      const auto end = start + std::chrono::seconds(seconds + 2);
      for (long n = 0; SteadyClock::now() < end; ++n) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<SteadyClock::duration>(period * n));
        if (!clients[n % clients.size()].Post("/hb", body)) ++failed;
      }
    });
  }
  for (auto& th : pool) th.join();
  std::_Exit(failed.load() == 0 ? 0 : 1);
}

struct RoundResult {
  double us_per_request = 0;
  double switches_per_request = 0;  // the server threads' context switches
  long requests = 0;
  bool ok = false;
};

RoundResult Round(bool tls, const Certs& certs, int connections, int rate, int seconds) {
  HttpServerOptions o;
  o.idle_timeout = Millis(120'000);
  std::shared_ptr<tls::ServerContext> ctx;
  if (tls) {
    ctx = tls::ServerContext::Create(certs.ca_pem).value();
    ctx->SetIdentity(certs.server);
    o.tls = ctx;
  }
  // Bound and listening before the fork; no server thread exists yet, so the child
  // inherits no lock held by one.
  auto server = std::make_unique<HttpServer>(o);
  std::atomic<long> handled{0};
  const std::string reply = json{{"ok", true}, {"pad", std::string(kReplyBytes - 22, 'y')}}.dump();
  server->Post("/hb", [&](const httplib::Request&, httplib::Response& res) {
    ++handled;
    res.set_content(reply, "application/json");
  });
  const int port = server->Bind().value();
  const std::string url = std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port);
  const pid_t child = fork();
  if (child == 0) RunClients(url, tls ? &certs : nullptr, connections, rate, seconds);
  std::thread serve([&] { server->Serve(); });
  // Every client has connected once before the window (the first `connections` requests).
  while (handled.load() < connections) std::this_thread::sleep_for(Millis(10));
  std::this_thread::sleep_for(Millis(1000));
  std::fprintf(stderr, "window of %d s starts (server pid %d)\n", seconds, getpid());
  const long before = handled.load();
  const long switches0 = ContextSwitches();
  const double cpu0 = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double cpu = ProcessCpuSeconds() - cpu0;
  const long requests = handled.load() - before;
  const long switches = ContextSwitches() - switches0;
  int status = 0;
  waitpid(child, &status, 0);
  server->Stop();
  serve.join();
  RoundResult r;
  r.requests = requests;
  r.us_per_request = requests > 0 ? cpu / double(requests) * 1e6 : 0;
  r.switches_per_request = requests > 0 ? double(switches) / double(requests) : 0;
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int connections = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rate = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 10;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  if (connections < 1 || rate < 1 || seconds < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: bench_http_server [connections>=1] [rate>=1] [seconds>=1] [rounds>=1]\n");
    return 2;
  }
  const Certs certs = MakeCerts();
  std::printf("HTTP layer alone: %d kept connections, %d requests/s of %zu B with %zu B replies, %d s windows\n",
              connections, rate, kRequestBytes, kReplyBytes, seconds);
  std::vector<double> plain, tls;
  bool ok = true;
  for (int r = 0; r < rounds; ++r) {
    for (bool use_tls : {false, true}) {
      if (const char* only = std::getenv("BENCH_HTTP_MODES"); only && std::string(only) != (use_tls ? "mtls" : "plain")) {
        continue;
      }
      const RoundResult res = Round(use_tls, certs, connections, rate, seconds);
      ok = ok && res.ok;
      (use_tls ? tls : plain).push_back(res.us_per_request);
      std::printf("  round %d %-5s %6ld requests, server CPU %.1f us and %.2f context switches per request%s\n",
                  r + 1, use_tls ? "mTLS" : "plain", res.requests, res.us_per_request, res.switches_per_request,
                  res.ok ? "" : " (client errors)");
      std::fflush(stdout);
    }
  }
  const double p = Median(plain), t = Median(tls);
  std::printf("median server CPU per request: plain %.1f us, mTLS %.1f us (+%.1f us, +%.0f%%)%s\n", p, t, t - p,
              p > 0 ? (t / p - 1) * 100 : 0, ok ? "" : "   (some client requests failed)");
  return ok ? 0 : 1;
}
