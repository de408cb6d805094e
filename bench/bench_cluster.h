// Starts real `cohort head` / `cohort agent` processes for benchmarks (no gtest), and
// kills them on destruction.
#pragma once

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/lease.h"
#include "common/http.h"
#include "common/subprocess.h"

namespace cohort::bench {

#ifndef COHORT_BINARY
#error "COHORT_BINARY must name the cohort executable"
#endif

// The cohort executable the cluster runs: this build's, or $COHORT_BENCH_BINARY (another
// build's, to compare two versions of the head with one benchmark binary).
inline const char* CohortBinary() {
  const char* e = std::getenv("COHORT_BENCH_BINARY");
  return e && *e ? e : COHORT_BINARY;
}

class BenchCluster {
 public:
  BenchCluster() {
    char tmpl[] = "/tmp/cohort-bench-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  // Removes the cluster's directory (logs, state, work dirs) unless COHORT_BENCH_KEEP is set.
  ~BenchCluster() {
    for (auto& p : procs_) {
      p.Signal(SIGKILL);
      (void)p.Wait();
    }
    std::error_code ec;
    // The killed agents' lease directories on the tmpfs (agent/lease.h).
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      if (entry.is_directory(ec)) std::filesystem::remove_all(agent::LeaseDirectoryName(entry.path().string(), "/dev/shm"), ec);
    }
    if (std::getenv("COHORT_BENCH_KEEP") == nullptr) std::filesystem::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }
  const std::string& url() const { return url_; }
  int head_pid() const { return head_pid_; }
  // Every process started (the head first, then the agents in start order).
  std::vector<int> pids() const {
    std::vector<int> out;
    for (const auto& p : procs_) out.push_back(p.pid());
    return out;
  }

  // Starts the head with `extra` flags; exits the benchmark on failure.
  void StartHead(std::vector<std::string> extra = {}) {
    std::string port_file = dir_ + "/head.port";
    SpawnOptions o;
    // --rate-limit 0: the benchmarks flood the API with one token on purpose, to measure
    // the head, not its per-caller limit.
    o.argv = {CohortBinary(), "head", "--port", "0", "--state-dir", dir_ + "/head", "--port-file", port_file,
              "--log-level", "warn", "--client-config", "", "--rate-limit", "0"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    // The cost of security: COHORT_BENCH_SECURITY=tls (the default: tokens, HTTPS, agents
    // with certificates), tokens (--no-tls) or insecure (--insecure; also
    // COHORT_BENCH_INSECURE=1). A benchmark whose simulated agents speak plain HTTP passes
    // --no-tls itself.
    std::string security = "tls";
    if (const char* e = std::getenv("COHORT_BENCH_SECURITY"); e && *e) security = e;
    if (const char* e = std::getenv("COHORT_BENCH_INSECURE"); e && std::string(e) == "1") security = "insecure";
    if (security != "tls" && security != "tokens" && security != "insecure") {
      Die("COHORT_BENCH_SECURITY must be tls, tokens or insecure, got " + security);
    }
    const bool no_tls = std::find(extra.begin(), extra.end(), "--no-tls") != extra.end();
    if (security == "insecure") o.argv.push_back("--insecure");
    if (security == "tokens" && !no_tls) o.argv.push_back("--no-tls");
    const bool https = security == "tls" && !no_tls;
    std::fprintf(stderr, "bench: head security: %s\n",
                 security == "insecure" ? "--insecure (no tokens, HTTP)"
                 : https               ? "tokens, HTTPS, agents with certificates (mTLS)"
                                       : "tokens over plain HTTP (--no-tls)");
    o.stdout_path = dir_ + "/head.log";
    o.parent_death_signal = SIGKILL;
    PinHead(o);
    auto p = Subprocess::Spawn(o);
    if (!p) Die("cannot start head: " + p.error().message);
    head_pid_ = p->pid();
    procs_.push_back(std::move(*p));
    int port = 0;
    for (int i = 0; i < 1000 && port == 0; ++i) {
      std::ifstream in(port_file);
      if (!(in >> port)) port = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (port == 0) Die("head did not start; see " + dir_ + "/head.log");
    url_ = (https ? "https" : "http") + std::string("://127.0.0.1:") + std::to_string(port);
    // This process's clients (and the agents it starts) trust the head's authority.
    if (https) setenv("COHORT_CA_FILE", (dir_ + "/head/tls/ca.crt").c_str(), 1);
    // The first start's tokens (head/auth.h); none with --insecure.
    std::ifstream(dir_ + "/head/admin.token") >> admin_token_;
    std::ifstream(dir_ + "/head/join.token") >> join_token_;
  }

  // COHORT_BENCH_HEAD_CPUS=LIST (e.g. "0"): the head runs on those CPUs only and this
  // process (its simulated agents, its clients, the agents it starts) on the others, as a
  // cluster's agents run on other machines than its head. Without it all share every CPU,
  // and on a 2-core machine the head's CPU per request then also carries what its
  // neighbours' work costs it (caches, migrations, preemptions). Called before the
  // benchmark starts any thread of its own, so they all inherit the rest.
  static void PinHead(SpawnOptions& o) {
    const char* e = std::getenv("COHORT_BENCH_HEAD_CPUS");
    if (e == nullptr || *e == '\0') return;
    cpu_set_t all;
    CPU_ZERO(&all);
    if (sched_getaffinity(0, sizeof all, &all) != 0) Die("sched_getaffinity failed");
    cpu_set_t rest = all;
    std::stringstream list(e);
    std::string item;
    while (std::getline(list, item, ',')) {
      char* end = nullptr;
      const long cpu = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &all)) {
        Die("COHORT_BENCH_HEAD_CPUS must list CPUs this process may use, comma-separated; got '" +
            std::string(e) + "'");
      }
      CPU_CLR(cpu, &rest);
    }
    if (CPU_COUNT(&rest) == 0) Die("COHORT_BENCH_HEAD_CPUS leaves no CPU for the benchmark's own work");
    if (sched_setaffinity(0, sizeof rest, &rest) != 0) Die("sched_setaffinity failed");
    o.argv.insert(o.argv.begin(), {"taskset", "-c", e});
    std::fprintf(stderr, "bench: head on CPUs %s, this process and its agents on the %d others\n", e,
                 CPU_COUNT(&rest));
  }

  // A client of the head that presents the admin token.
  HttpClient Client(Millis timeout = Millis(10'000)) const {
    HttpClient c(url_, timeout);
    c.set_bearer_token(admin_token_);
    return c;
  }
  const std::string& join_token() const { return join_token_; }

  void StartAgent(const std::string& name, int gpus) {
    SpawnOptions o;
    o.argv = {CohortBinary(), "agent", "--head", url_, "--name", name, "--address", "127.0.0.1",
              "--simulated-gpus", std::to_string(gpus), "--cpus", "64", "--work-dir", dir_ + "/" + name,
              "--log-level", "warn",
              // One user's benchmark, as under `cohort up`: with --insecure jobs name no
              // account ("anonymous"), and a root agent would refuse to run them as it.
              "--task-user", "agent"};
    if (!join_token_.empty()) o.argv.insert(o.argv.end(), {"--join-token", join_token_});
    o.stdout_path = dir_ + "/" + name + ".log";
    o.parent_death_signal = SIGKILL;
    auto p = Subprocess::Spawn(o);
    if (!p) Die("cannot start agent: " + p.error().message);
    procs_.push_back(std::move(*p));
  }

  void WaitForNodes(size_t n) {
    HttpClient c = Client();
    for (int i = 0; i < 2000; ++i) {
      if (auto r = c.Get("/v1/nodes?limit=10000&fields=state"); r && (*r)["nodes"].size() == n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Die("agents did not register");
  }

  [[noreturn]] static void Die(const std::string& msg) {
    std::fprintf(stderr, "bench: %s\n", msg.c_str());
    std::exit(1);
  }

 private:
  std::string dir_;
  std::string admin_token_;
  std::string join_token_;
  std::string url_;
  int head_pid_ = 0;
  std::vector<Subprocess> procs_;
};

// Resident set size of a process in bytes (VmRSS), 0 if unknown.
inline int64_t RssBytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

// CPU time of a live process in seconds: its own (user + system) and that of its reaped
// children (an agent's task shims, and through them the tasks). {0, 0} if unknown.
struct CpuSeconds {
  double self = 0, children = 0;
};
inline CpuSeconds ProcessCpu(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) state ppid ...": fields from 3 on follow the last ')'.
  auto rp = text.rfind(')');
  if (rp == std::string::npos) return {};
  std::istringstream rest(text.substr(rp + 1));
  std::vector<std::string> f;
  for (std::string w; rest >> w;) f.push_back(w);
  if (f.size() < 15) return {};
  // f[0] is field 3 (state): utime, stime, cutime, cstime are fields 14..17.
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {(std::stod(f[11]) + std::stod(f[12])) / tick, (std::stod(f[13]) + std::stod(f[14])) / tick};
}

// Reads one unlabelled sample of a /metrics family ("name value") from `text`, or -1.
inline double Metric(const std::string& text, const std::string& name) {
  auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + at + name.size() + 2);
}

}  // namespace cohort::bench
