// Test harness: real `cohort head` and `cohort agent` processes on loopback.
//
// A LocalCluster owns a temporary directory, a head (bound to a port chosen by the
// kernel or a fixed one for restarts), and any number of agents with simulated GPUs.
// Everything is killed in the destructor. Waiting is always on a condition with a
// deadline (WaitUntil), never a bare sleep. Tests talk to the head over HTTP.
#pragma once

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "agent/lease.h"
#include "common/http.h"
#include "common/httplib_client.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "common/tls.h"

namespace cohort::testing {

#ifndef COHORT_BINARY
#error "COHORT_BINARY must name the cohort executable"
#endif

inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::milliseconds(50));
  }
  return pred();
}

inline bool ProcessAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return false;
  // A zombie is dead for our purposes.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// The file's content; empty if it cannot be read. A /proc file of a process that exits
// while it is read fails with ESRCH, which libstdc++ throws from the stream buffer.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  try {
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return std::string();
  }
}

// The head's liveness timing for a test cluster. The default keeps heartbeats fast (jobs
// start and end within a tenth of a second) and the fence timeout at the product's own
// default (2 s): on a loaded CI machine (two cores, a build and another test beside it) a
// process here can go 400-600 ms unscheduled, so a tighter fence kills the tasks of tests
// that are not about liveness at all. Tests of failure detection and fencing use
// LivenessTiming().
struct Timing {
  std::string heartbeat = "100ms";
  std::string failure = "3s";
  std::string fence = "2s";
  std::string kill_grace = "2s";
};

// Fast failure detection, for the tests that measure it: a node is DOWN after 1 s without a
// heartbeat, an agent that cannot reach the head kills its tasks after 600 ms.
inline Timing LivenessTiming() { return Timing{"100ms", "1s", "600ms", "2s"}; }

// The admin token of the running test head: its first start writes it to
// <dir>/head/admin.token (head/auth.h). SpawnTestHead sets it and exports it as
// COHORT_TOKEN, so the `cohort` commands a test runs use it too. The head serves HTTPS
// (head_tls.h) with a certificate authority it made in <dir>/head/tls: SpawnTestHead
// exports its file as COHORT_CA_FILE, which this process's clients, the `cohort` commands
// and the agents it starts trust.
inline std::string& TestToken() {
  static std::string token;
  return token;
}

// Starts a test head on `host`:`port` (0: the kernel picks) with its state and log in
// `dir`, waits for its port file and returns the port through `port_out`. Shared by
// LocalCluster and the fault suite's namespaced cluster; a failure is a fatal gtest failure.
// `extra` is appended to the head's arguments.
inline void SpawnTestHead(const std::string& dir, const std::string& host, int port, const Timing& timing,
                          Subprocess& head, int& port_out, const std::vector<std::string>& extra = {}) {
  const std::string port_file = dir + "/head.port";
  std::filesystem::remove(port_file);
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "head", "--host", host, "--port", std::to_string(port), "--state-dir", dir + "/head",
            "--port-file", port_file, "--heartbeat-interval", timing.heartbeat, "--failure-timeout",
            timing.failure, "--fence-timeout", timing.fence, "--kill-grace", timing.kill_grace,
            // Never the user's own client config.
            "--client-config", ""};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  o.stdout_path = dir + "/head.log";
  o.parent_death_signal = SIGKILL;
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  head = std::move(*p);
  ASSERT_TRUE(WaitUntil([&] {
    std::ifstream in(port_file);
    int v = 0;
    return bool(in >> v) && v > 0 && (port_out = v);
  }, std::chrono::seconds(10))) << "head did not start:\n" << ReadFile(dir + "/head.log");
  std::ifstream token_file(dir + "/head/admin.token");
  std::string token;
  ASSERT_TRUE(std::getline(token_file, token) && !token.empty())
      << "the head wrote no admin token:\n" << ReadFile(dir + "/head.log");
  TestToken() = token;
  setenv("COHORT_TOKEN", token.c_str(), 1);
  const std::string ca = dir + "/head/tls/ca.crt";
  // Absent with --insecure/--no-tls: then no earlier test's authority is left behind.
  if (std::filesystem::exists(ca)) {
    setenv("COHORT_CA_FILE", ca.c_str(), 1);
  } else {
    unsetenv("COHORT_CA_FILE");
  }
}

// The scheme of a test head started with `extra` arguments.
inline std::string TestHeadScheme(const std::vector<std::string>& extra) {
  for (const auto& a : extra) {
    if (a == "--insecure" || a == "--no-tls") return "http";
  }
  return "https";
}

// Shell for a task that calls the head with curl: writes the head's authority (COHORT_CA,
// PEM) to the file $ca, so that `curl --cacert "$ca" ...` trusts it; the file goes when the
// script exits.
inline constexpr char kTaskCaFile[] =
    "ca=$(mktemp); trap 'rm -f \"$ca\"' EXIT; printf '%s\\n' \"$COHORT_CA\" > \"$ca\"; ";

// An HTTP client of `url` that presents the test head's admin token.
inline HttpClient AdminClient(const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  HttpClient c(url, timeout);
  c.set_bearer_token(TestToken());
  return c;
}

// The argv of a test agent with simulated GPUs, its work directory and log in `dir`. Its
// tasks run as the test's own user, as under `cohort up`, whatever user a job names (extra
// arguments `--task-user job` make it switch users as a root agent on a shared node does).
inline std::vector<std::string> TestAgentArgv(const std::string& head_url, const std::string& dir,
                                              const std::string& name, const std::string& address, int gpus,
                                              int cpus) {
  return {COHORT_BINARY, "agent", "--head", head_url, "--name", name, "--address", address,
          "--simulated-gpus", std::to_string(gpus), "--cpus", std::to_string(cpus), "--work-dir",
          dir + "/" + name, "--head-down-grace", "30s", "--task-user", "agent", "--join-token-file",
          dir + "/head/join.token"};
}

// Agents killed by a test leave their lease directories on the tmpfs (agent/lease.h:
// named after the work directory, for a restarted agent to reuse): removed with the
// cluster, one for each directory under `cluster_dir` that was an agent's work directory.
inline void RemoveAgentLeases(const std::string& cluster_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cluster_dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    std::filesystem::remove_all(agent::LeaseDirectoryName(entry.path().string(), "/dev/shm"), ec);
  }
}

class LocalCluster {
 public:
  explicit LocalCluster(Timing timing = {}) : timing_(timing) {
    char tmpl[] = "/tmp/cohort-it-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~LocalCluster() {
    for (auto& [name, a] : agents_) {
      if (a.valid()) {
        a.Signal(SIGKILL);
        (void)a.Wait();
      }
    }
    KillHead();
    RemoveAgentLeases(dir_);
    // Tasks die with their agents (the shim's parent-death signal); give them a moment.
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }
  const std::string& url() const { return url_; }
  int port() const { return port_; }
  HttpClient client() const { return AdminClient(url_); }

  // Starts the head; `port` 0 lets the kernel choose (the same port is reused on restart).
  // `extra` is appended to its arguments.
  void StartHead(int port = 0, const std::vector<std::string>& extra = {}) {
    ASSERT_NO_FATAL_FAILURE(SpawnTestHead(dir_, "127.0.0.1", port ? port : port_, timing_, head_, port_, extra));
    url_ = TestHeadScheme(extra) + "://127.0.0.1:" + std::to_string(port_);
  }

  void KillHead(int sig = SIGKILL) {
    if (!head_.valid()) return;
    head_.Signal(sig);
    (void)head_.Wait();
  }
  Subprocess& head() { return head_; }

  // `extra` is appended to the agent's arguments; `env` is set over this process's
  // environment, which the agent inherits.
  void StartAgent(const std::string& name, int gpus, int cpus = 16, std::vector<std::string> extra = {},
                  std::map<std::string, std::string> env = {}) {
    SpawnOptions o;
    o.argv = TestAgentArgv(url_, dir_, name, "127.0.0.1", gpus, cpus);
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.env = std::move(env);
    o.stdout_path = dir_ + "/" + name + ".log";
    o.parent_death_signal = SIGKILL;
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.has_value()) << p.error().message;
    agents_[name] = std::move(*p);
  }
  Subprocess& agent(const std::string& name) { return agents_.at(name); }

  // Waits until `n` nodes are UP.
  void WaitForNodes(int n) {
    ASSERT_TRUE(WaitUntil([&] {
      auto r = client().Get("/v1/nodes");
      if (!r) return false;
      int up = 0;
      for (const auto& node : (*r)["nodes"]) up += node["state"] == "UP";
      return up == n;
    }, std::chrono::seconds(15))) << "nodes did not come up; head log:\n" << ReadFile(dir_ + "/head.log");
  }

  json Submit(const json& spec) {
    auto r = client().Post("/v1/jobs", spec);
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
    return r ? *r : json();
  }

  json Job(int64_t id) {
    auto r = client().Get("/v1/jobs/" + std::to_string(id));
    return r ? *r : json();
  }

  json Node(const std::string& name) {
    auto r = client().Get("/v1/nodes/" + name);
    return r ? *r : json();
  }

  // Waits until the job's state is `state`; returns the job.
  // Waits for the job to be in `state`; an ended job in another state stops the wait at
  // once (it will not change by itself), so a failure says why without the whole timeout.
  json WaitForState(int64_t id, const std::string& state, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    json last;
    bool ended_otherwise = false;
    WaitUntil([&] {
      last = Job(id);
      const std::string now = last.is_object() ? last.value("state", "") : "";
      ended_otherwise = now != state && (now == "SUCCEEDED" || now == "FAILED" || now == "CANCELLED" || now == "TIMEOUT");
      return now == state || ended_otherwise;
    }, timeout);
    const bool ok = last.is_object() && last.value("state", "") == state;
    EXPECT_TRUE(ok) << "job " << id << (ended_otherwise ? " ended " + last.value("state", "") + " instead of "
                                                        : std::string(" did not reach "))
                    << state << "; last: " << last.dump(2) << "\nhead log:\n" << ReadFile(dir_ + "/head.log");
    return last;
  }

  // The whole log of one task of the job's current attempt, through the head.
  std::string Logs(int64_t id, int rank) {
    auto r = client().GetRaw("/v1/jobs/" + std::to_string(id) + "/logs?rank=" + std::to_string(rank));
    if (!r || r->status != 200) return "";
    return r->body;
  }

 private:
  Timing timing_;
  std::string dir_;
  std::string url_;
  int port_ = 0;
  Subprocess head_;
  std::map<std::string, Subprocess> agents_;
};

// A raw httplib client of `base_url` ("http(s)://host:port"), for requests HttpClient would
// not send as they are; an https one trusts the test head's authority ($COHORT_CA_FILE).
// `identity`, if set, is the client certificate it presents.
inline std::unique_ptr<httplib::ClientImpl> RawClient(const std::string& base_url,
                                                      std::shared_ptr<tls::IdentitySlot> identity = nullptr) {
  auto url = ParseHttpUrl(base_url);
  EXPECT_TRUE(url.has_value()) << base_url;
  if (!url) return std::make_unique<httplib::ClientImpl>("127.0.0.1", 1);
  std::optional<tls::ClientOptions> trust;
  if (url->tls) {
    auto env = tls::ClientOptionsFromEnv();
    EXPECT_TRUE(env.has_value() && env->has_value()) << "no $COHORT_CA_FILE for " << base_url;
    if (env && *env) {
      trust = std::move(**env);
      trust->identity = std::move(identity);
    }
  }
  auto cli = NewHttplibClient(url->host, url->port, url->tls, trust ? &*trust : nullptr);
  EXPECT_TRUE(cli.has_value()) << (cli ? "" : cli.error().message);
  return cli ? std::move(*cli) : std::make_unique<httplib::ClientImpl>("127.0.0.1", 1);
}

// POSTs `body` to the cluster's head exactly as written, so that malformed bodies reach it;
// returns the status (0: no reply) and the reply parsed as JSON (discarded if it is not).
// It presents `token` (default: the admin's; "" sends none).
inline std::pair<int, json> PostRaw(const LocalCluster& c, const std::string& path, const std::string& body,
                                    const std::string& token = TestToken(),
                                    std::shared_ptr<tls::IdentitySlot> identity = nullptr) {
  auto cli = RawClient(c.url(), std::move(identity));
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto r = cli->Post(path, headers, body, "application/json");
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

// A certificate request for a node registered by hand, and the identity its registration
// reply's certificate makes with the request's key.
struct NodeKey {
  std::string key_pem = tls::NewPrivateKeyPem().value();
  std::string csr = tls::MakeCsrPem(key_pem, "node").value();
  // The client certificate of a registration reply (empty slot without one).
  std::shared_ptr<tls::IdentitySlot> Identity(const json& reply) const {
    auto slot = std::make_shared<tls::IdentitySlot>();
    if (reply.is_object() && reply.contains("certificate")) {
      auto id = tls::Identity::Parse(reply["certificate"].get<std::string>(), key_pem);
      EXPECT_TRUE(id.has_value()) << id.error().message;
      if (id) slot->Set(*id);
    }
    return slot;
  }
};

struct CliResult {
  ExitStatus status;
  std::string output;  // standard output
  std::string errors;  // standard error
};

// Runs `argv` (a cohort command, or a shell that execs one) with its output in the
// cluster's directory; a command that does not finish in 30 s is killed and fails the test.
inline CliResult RunCli(const LocalCluster& c, const std::vector<std::string>& argv) {
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = c.dir() + "/cli.out";
  o.stderr_path = c.dir() + "/cli.err";
  std::filesystem::remove(o.stdout_path);
  std::filesystem::remove(o.stderr_path);
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.has_value());
  if (!p) return {};
  auto st = p->WaitFor(std::chrono::seconds(30));
  EXPECT_TRUE(st.has_value()) << argv[0] << " did not finish";
  if (!st) {
    p->Signal(SIGKILL);
    (void)p->Wait();
    return {};
  }
  return {*st, ReadFile(o.stdout_path), ReadFile(o.stderr_path)};
}

// Runs `cohort ARGS...` against the cluster's head.
inline CliResult Cohort(const LocalCluster& c, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {COHORT_BINARY, "--head", c.url()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCli(c, argv);
}

// Reads `master` (a pseudo-terminal's master side) until `want` has appeared or `timeout` passes; everything read.
inline std::string ReadUntil(int master, const std::string& want, std::chrono::milliseconds timeout, std::string& seen) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (seen.find(want) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
  }
  return seen;
}

// Starts `argv` (argv[0] a path) with a new pseudo-terminal as its controlling terminal
// and its standard streams, `env` set over this process's environment and the terminal
// `size` (null: the default). Returns the child's pid, or -1 when no terminal or process
// could be made; `master` is the terminal's master side, for the test to type and read.
inline pid_t SpawnOnTerminal(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& env,
                             const winsize* size, int& master) {
  int slave = -1;
  if (openpty(&master, &slave, nullptr, nullptr, size) != 0) return -1;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    close(master);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(args[0], args.data());
    _exit(127);
  }
  close(slave);
  return pid;
}

// Types `line` at the pseudo-terminal `master` (a command that ends the session, e.g.
// "exit 0\r"), then drains it until the child `pid` exits or `timeout` passes. The child's
// wait status, or nullopt when it did not exit in time (`seen` is left as it was).
inline std::optional<int> TypeAndWaitForExit(int master, pid_t pid, const std::string& line,
                                             std::chrono::milliseconds timeout) {
  if (write(master, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return std::nullopt;
  int st = 0;
  if (!WaitUntil([&] {
        char buf[4096];
        while (read(master, buf, sizeof buf) > 0) {
        }
        return waitpid(pid, &st, WNOHANG) == pid;
      }, timeout)) {
    return std::nullopt;
  }
  return st;
}

// Parses "KEY=VALUE" lines into a map.
inline std::map<std::string, std::string> ParseEnvLines(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (auto eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

}  // namespace cohort::testing
