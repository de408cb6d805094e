// Fault-suite harness: a head and agents as separate hosts, and a training job on them.
//
// A FaultCluster starts a real `cohort head` and `cohort agent` processes like
// LocalCluster (harness.h), but, when the process may create network namespaces (root
// with `ip netns`), every agent runs in a namespace of its own, joined to the head's
// root namespace by a veth pair on a bridge, with a distinct address: cutting an agent's
// link (`ip link set <veth> down`) then cuts exactly that host off. Each namespace also
// gets /etc/netns/<ns>/hosts mapping this machine's host name to the agent's address, so
// Gloo (which binds the host name's address) listens on the agent's own interface.
// Without namespaces everything runs on loopback and netns() is false.
//
// Every namespace, veth, bridge and mount is removed in the destructor, also when a test
// fails; namespaces left by a killed test run (named after its pid) are removed by the
// next run. One test thread owns a FaultCluster; nothing here is thread-safe.
//
// The training helpers submit `cohort train` as a 2-node job with a loss record
// (log.file) and check the record the issue asks for: the job completes, each attempt
// continues from a checkpoint step, nothing recorded before a fault is lost, and no step
// is recorded twice.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/http.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "harness.h"

namespace cohort::testing {

// Heartbeats every 100 ms; a node is DOWN after 2 s without one, and an agent that cannot
// reach the head kills its tasks after 1.2 s. Wider than LivenessTiming (harness.h): two
// training ranks and a CI build share two cores here.
inline Timing FaultTiming() { return Timing{"100ms", "2s", "1200ms", "2s"}; }

// Runs argv to completion; output goes to `log` (appended). Returns true on exit 0.
inline bool RunCommand(const std::vector<std::string>& argv, const std::string& log) {
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = log;
  auto p = Subprocess::Spawn(o);
  if (!p) return false;
  auto st = p->Wait();
  return st && st->Success();
}

// Pids of the live processes whose command line contains `needle` and whose environment
// holds every "KEY=VALUE" of `env`.
inline std::vector<int> FindProcesses(const std::string& needle, const std::vector<std::string>& env) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    const std::string base = std::string("/proc/") + e->d_name;
    std::string cmd = ReadFile(base + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) == std::string::npos) continue;
    const std::string environ = '\0' + ReadFile(base + "/environ");
    bool all = true;
    for (const auto& kv : env) all = all && environ.find('\0' + kv + '\0') != std::string::npos;
    if (all && ProcessAlive(pid)) out.push_back(pid);
  }
  closedir(d);
  return out;
}


// A job predicate: a later attempt than 0 RUNNING (or already SUCCEEDED) on nodes other
// than `node`. (A peer's exit can requeue the gang before `node` is DOWN, and that
// attempt may land on `node` again; the one that counts avoids it.)
inline std::function<bool(const json&)> RunningWithout(const std::string& node) {
  return [node](const json& j) {
    const std::string state = j.value("state", "");
    if ((state != "RUNNING" && state != "SUCCEEDED") || j.value("attempt", 0) < 1) return false;
    for (const auto& n : j["allocation"].value("nodes", json::array())) {
      if (n.value("node", "") == node) return false;
    }
    return true;
  };
}

class FaultCluster {
 public:
  explicit FaultCluster(Timing timing = FaultTiming()) : timing_(timing) {
    char tmpl[] = "/tmp/cohort-faults-XXXXXX";
    dir_ = mkdtemp(tmpl);
    tag_ = std::to_string(getpid());
    RemoveStaleNamespaces();
    SetUpNetwork();
  }
  ~FaultCluster() {
    for (auto& [name, a] : agents_) {
      if (!a.valid()) continue;
      a.Signal(SIGCONT);
      a.Signal(SIGKILL);
      (void)a.Wait();
    }
    KillHead();
    // Tasks die with their agents (the shim's parent-death signal).
    WaitUntil([&] { return FindProcesses(dir_, {}).empty(); }, std::chrono::seconds(5));
    for (const auto& m : mounts_) RunCommand({"umount", "-l", m}, dir_ + "/net.log");
    TearDownNetwork();
    RemoveAgentLeases(dir_);
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir_, ec);
  }

  // True when agents run in network namespaces; otherwise why not.
  bool netns() const { return netns_; }
  const std::string& netns_unavailable() const { return netns_reason_; }
  std::string layout() const {
    return netns_ ? "agents in network namespaces on bridge " + bridge_ + " (" + HeadAddress() + ")"
                  : "loopback (" + netns_reason_ + ")";
  }

  const std::string& dir() const { return dir_; }
  const std::string& url() const { return url_; }
  HttpClient client() const { return AdminClient(url_); }
  std::string HeadLog() const { return ReadFile(dir_ + "/head.log"); }
  std::string AgentLog(const std::string& name) const { return ReadFile(dir_ + "/" + name + ".log"); }

  // Starts (or restarts, on the same port and state) the head; `extra` head flags are
  // kept for restarts.
  void StartHead(std::vector<std::string> extra = {}) {
    if (!extra.empty()) head_extra_ = std::move(extra);
    ASSERT_NO_FATAL_FAILURE(SpawnTestHead(dir_, HeadAddress(), port_, timing_, head_, port_, head_extra_));
    url_ = "https://" + HeadAddress() + ":" + std::to_string(port_);
  }
  void KillHead(int sig = SIGKILL) {
    if (!head_.valid()) return;
    head_.Signal(sig);
    (void)head_.Wait();
  }
  // Sends `sig` to the head without waiting for it to exit (SIGSTOP, SIGCONT).
  void SignalHead(int sig) { head_.Signal(sig); }

  // Starts agent `name` (its own namespace and address when netns()).
  void StartAgent(const std::string& name, int gpus = 1) {
    std::string address = "127.0.0.1";
    std::vector<std::string> argv;
    if (netns_) {
      // A restarted agent comes back on its host (namespace and address).
      if (!hosts_.contains(name)) {
        ASSERT_NO_FATAL_FAILURE(AddHost(name));
      }
      address = hosts_.at(name).address;
      argv = {"ip", "netns", "exec", hosts_.at(name).ns};  // execs the agent: same pid
    }
    const std::vector<std::string> agent = TestAgentArgv(url_, dir_, name, address, gpus, 16);
    argv.insert(argv.end(), agent.begin(), agent.end());
    SpawnOptions o;
    o.argv = argv;
    o.stdout_path = dir_ + "/" + name + ".log";
    o.parent_death_signal = SIGKILL;
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.has_value()) << p.error().message;
    agents_[name] = std::move(*p);
  }
  Subprocess& agent(const std::string& name) { return agents_.at(name); }

  // Takes agent `name`'s link down (true) or up again (false). Requires netns().
  void SetLink(const std::string& name, bool up) {
    ASSERT_TRUE(netns_);
    ASSERT_TRUE(RunCommand({"ip", "link", "set", hosts_.at(name).veth, up ? "up" : "down"}, dir_ + "/net.log"))
        << ReadFile(dir_ + "/net.log");
  }

  // Mounts a tmpfs of `mib` MiB at `path`; false (and why in `error`) when not permitted.
  bool MountTmpfs(const std::string& path, int mib, std::string* error) {
    std::filesystem::create_directories(path);
    const std::string log = dir_ + "/mount.log";
    if (!RunCommand({"mount", "-t", "tmpfs", "-o", "size=" + std::to_string(mib) + "m", "tmpfs", path}, log)) {
      *error = "cannot mount a tmpfs: " + ReadFile(log);
      return false;
    }
    mounts_.push_back(path);
    return true;
  }

  std::string NodeState(const std::string& name) {
    auto r = client().Get("/v1/nodes/" + name);
    return r ? r->value("state", "") : "";
  }
  // UP, DOWN, UNREACHABLE, DRAINING or DRAINED ("" if the head does not answer).
  std::string DisplayState(const std::string& name) {
    auto r = client().Get("/v1/nodes/" + name);
    return r ? r->value("display_state", "") : "";
  }
  void WaitForNodes(int n) {
    ASSERT_TRUE(WaitUntil([&] {
      auto r = client().Get("/v1/nodes");
      if (!r) return false;
      int up = 0;
      for (const auto& node : (*r)["nodes"]) up += node["state"] == "UP";
      return up == n;
    }, std::chrono::seconds(20))) << "nodes did not come up (" << layout() << "); head log:\n" << HeadLog();
  }
  bool WaitForNodeState(const std::string& name, const std::string& state, std::chrono::milliseconds timeout) {
    return WaitUntil([&] { return NodeState(name) == state; }, timeout);
  }
  bool WaitForDisplayState(const std::string& name, const std::string& state, std::chrono::milliseconds timeout) {
    return WaitUntil([&] { return DisplayState(name) == state; }, timeout);
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
  // Waits until `pred(job)`; returns the last job seen (checks it with EXPECT).
  json WaitForJob(int64_t id, const std::function<bool(const json&)>& pred, const std::string& what,
                  std::chrono::milliseconds timeout) {
    json last;
    bool ok = WaitUntil([&] {
      last = Job(id);
      return last.is_object() && pred(last);
    }, timeout);
    EXPECT_TRUE(ok) << "job " << id << ": " << what << " did not happen; last: " << last.dump(2) << "\nhead log:\n"
                    << HeadLog();
    return last;
  }
  json WaitForState(int64_t id, const std::string& state, std::chrono::milliseconds timeout) {
    return WaitForJob(id, [&](const json& j) { return j.value("state", "") == state; }, "state " + state, timeout);
  }
  // The node holding node rank `rank` of the job's current allocation ("" if none).
  std::string NodeOfRank(int64_t id, int rank) {
    json j = Job(id);
    if (!j.contains("allocation")) return "";
    for (const auto& n : j["allocation"].value("nodes", json::array())) {
      if (n.value("node_rank", -1) == rank) return n.value("node", "");
    }
    return "";
  }
  // One rank's output of the current attempt (or `attempt`).
  std::string Logs(int64_t id, int rank, int attempt = -1) {
    std::string path = "/v1/jobs/" + std::to_string(id) + "/logs?rank=" + std::to_string(rank);
    if (attempt >= 0) path += "&attempt=" + std::to_string(attempt);
    auto r = client().GetRaw(path);
    if (!r || r->status != 200) return "";
    return r->body;
  }
  // The job's checkpoint directory (the head's default for it).
  std::string CheckpointDir(int64_t id) const { return dir_ + "/head/checkpoints/job-" + std::to_string(id); }

 private:
  struct Host {
    std::string ns, veth, peer, address;
  };

  std::string HeadAddress() const { return netns_ ? subnet_ + ".1" : "127.0.0.1"; }
  std::string NetLog() const { return dir_ + "/net.log"; }
  bool Ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, NetLog());
  }

  void SetUpNetwork() {
    if (const char* e = std::getenv("COHORT_FAULTS_LOOPBACK"); e && *e && std::string(e) != "0") {
      netns_reason_ = "COHORT_FAULTS_LOOPBACK is set";
      return;
    }
    if (geteuid() != 0) {
      netns_reason_ = "not root";
      return;
    }
    // A /24 of 10.200-249.x per test process, derived from its pid; fault tests run side
    // by side, so one another test's bridge already holds is skipped.
    std::string in_use;
    if (FILE* p = popen("ip -4 -o addr show 2>/dev/null", "r")) {
      char buf[512];
      while (fgets(buf, sizeof(buf), p)) in_use += buf;
      pclose(p);
    }
    for (int n = getpid(), tries = 0; tries < 12800; ++n, ++tries) {
      subnet_ = "10." + std::to_string(200 + (n >> 8) % 50) + "." + std::to_string(n & 0xff);
      if (in_use.find(" " + subnet_ + ".") == std::string::npos) break;
    }
    bridge_ = "cfb" + tag_;
    const std::string probe = "cohort-f" + tag_ + "-probe";
    if (!Ip({"netns", "add", probe})) {
      netns_reason_ = "`ip netns add` failed: " + ReadFile(NetLog());
      return;
    }
    Ip({"netns", "del", probe});
    // The bridge gets an address of its own: otherwise Linux gives it the lowest of its
    // ports' addresses and changes it when a port with a lower one joins, and an agent that
    // resolved the head's address before that keeps sending to the old one, which the
    // bridge no longer takes as its own (the agent never registers: seen in CI, and 20 of
    // 120 side-by-side setups in a shell reproduction; 0 of 120 with a fixed address).
    const int pid = getpid();
    char mac[32];
    std::snprintf(mac, sizeof(mac), "02:c0:%02x:%02x:%02x:01", (pid >> 16) & 0xff, (pid >> 8) & 0xff, pid & 0xff);
    if (!Ip({"link", "add", bridge_, "address", mac, "type", "bridge"}) || !Ip({"addr", "add", subnet_ + ".1/24", "dev", bridge_}) ||
        !Ip({"link", "set", bridge_, "up"})) {
      netns_reason_ = "cannot create a bridge: " + ReadFile(NetLog());
      Ip({"link", "del", bridge_});
      return;
    }
    netns_ = true;
  }

  void AddHost(const std::string& name) {
    Host h;
    const int i = static_cast<int>(hosts_.size()) + 1;
    h.ns = "cohort-f" + tag_ + "-" + std::to_string(i);
    h.veth = "cfv" + tag_ + "n" + std::to_string(i);
    h.peer = "cfp" + tag_ + "n" + std::to_string(i);
    h.address = subnet_ + "." + std::to_string(10 + i);
    hosts_[name] = h;
    // Gloo binds the address of the host name: make it the agent's inside its namespace.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::filesystem::create_directories("/etc/netns/" + h.ns);
    std::ofstream("/etc/netns/" + h.ns + "/hosts") << "127.0.0.1 localhost\n" << h.address << " " << host << "\n";
    const bool ok = Ip({"netns", "add", h.ns}) && Ip({"link", "add", h.veth, "type", "veth", "peer", "name", h.peer}) &&
                    Ip({"link", "set", h.peer, "netns", h.ns}) && Ip({"link", "set", h.veth, "master", bridge_}) &&
                    Ip({"link", "set", h.veth, "up"}) &&
                    Ip({"-n", h.ns, "addr", "add", h.address + "/24", "dev", h.peer}) &&
                    Ip({"-n", h.ns, "link", "set", h.peer, "up"}) && Ip({"-n", h.ns, "link", "set", "lo", "up"});
    ASSERT_TRUE(ok) << "cannot set up namespace " << h.ns << ":\n" << ReadFile(NetLog());
  }

  void TearDownNetwork() {
    for (const auto& [name, h] : hosts_) {
      Ip({"link", "del", h.veth});
      Ip({"netns", "del", h.ns});
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + h.ns, ec);
    }
    if (netns_) Ip({"link", "del", bridge_});
  }

  // Namespaces, veths and bridges of earlier runs whose process is gone (a killed test).
  void RemoveStaleNamespaces() {
    std::error_code ec;
    if (!std::filesystem::exists("/run/netns", ec)) return;
    std::set<std::string> dead;
    for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("cohort-f", 0) != 0) continue;
      const std::string pid = n.substr(8, n.find('-', 8) - 8);
      if (pid == tag_ || kill(std::atoi(pid.c_str()), 0) == 0) continue;
      Ip({"netns", "del", n});
      std::filesystem::remove_all("/etc/netns/" + n, ec);
      dead.insert(pid);
    }
    for (const auto& pid : dead) {
      Ip({"link", "del", "cfb" + pid});
      for (int i = 1; i <= 8; ++i) Ip({"link", "del", "cfv" + pid + "n" + std::to_string(i)});
    }
  }

  Timing timing_;
  std::string dir_;
  std::string tag_;
  std::string url_;
  int port_ = 0;
  bool netns_ = false;
  std::string netns_reason_;
  std::string subnet_;  // "10.a.b": the head is .1, agents .11, .12, ...
  std::string bridge_;
  std::map<std::string, Host> hosts_;
  std::vector<std::string> mounts_;
  std::vector<std::string> head_extra_;
  Subprocess head_;
  std::map<std::string, Subprocess> agents_;
};

// ---- The training job and its loss record ----

// How many steps a test needs: the job must still be training when the fault lands and
// through its window (a killed agent's gang ends at once; a stopped or cut-off one's tasks
// run on until their lease, the fence timeout, runs out; a drain or preemption waits for
// a checkpoint), and after the move only as long as it takes to show that the new attempt
// continues the record and completes. Steps take ~40 ms here (2 ranks, one thread each),
// so every step past the fault's window is CI time spent proving nothing more; each test
// says why its count covers its window.
struct TrainJobSpec {
  int steps = 120;
  int checkpoint_every = 10;
  std::string checkpoint_dir;  // empty: the head's default (COHORT_CHECKPOINT_DIR)
  int max_restarts = 3;
  int min_nodes = 0;              // elastic when > 0
  std::string checkpoint_signal = "";  // the job's checkpoint_signal ("": none)
  // True when checkpoints may also fall between the interval's steps (drain --now asks
  // for one): an attempt may then resume from any step.
  bool checkpoints_on_request = false;
  // Appended to the training config, e.g. "parallel: {pipeline: 2}" (a stage per node).
  std::string extra_config = "";
  // Checkpoints the job has written (and recorded) when StartTraining returns. A fault
  // after the third finds the job in its steady state with older checkpoints to fall back
  // on; a test with a long interval (drains, preemptions: the requested checkpoint must
  // not fall on a periodic one) needs only one, so that the fault comes after a recorded
  // step.
  int checkpoints_before_fault = 3;
};

struct TrainJob {
  int64_t id = 0;
  std::string record;  // log.file
  TrainJobSpec spec;
  // The head's COHORT_CHECKPOINT_DIR for the job: under this cluster's directory, so it
  // tells this test's tasks from those of a fault test running beside it (job ids repeat).
  std::string head_checkpoint_dir;
};

// The `cohort train` processes of one attempt of a job (optionally one rank).
inline std::vector<int> TrainPids(const TrainJob& t, int attempt, int rank = -1) {
  std::vector<std::string> env = {"COHORT_JOB_ID=" + std::to_string(t.id), "COHORT_ATTEMPT=" + std::to_string(attempt),
                                  "COHORT_CHECKPOINT_DIR=" + t.head_checkpoint_dir};
  if (rank >= 0) env.push_back("RANK=" + std::to_string(rank));
  return FindProcesses(" train --config ", env);
}

// Submits a small `cohort train` as a 2-node job (1 task, 1 GPU per node) with a loss
// record; steps take milliseconds, checkpoints every `checkpoint_every` steps. The job
// counts against `team` ("": its user's).
inline TrainJob SubmitTraining(FaultCluster& c, TrainJobSpec spec = {}, const std::string& team = "") {
  TrainJob t;
  t.spec = spec;
  t.record = c.dir() + "/losses.jsonl";
  const std::string cfg = c.dir() + "/train.yaml";
  {
    std::ofstream corpus(c.dir() + "/corpus.txt");
    for (int i = 0; i < 400; ++i) corpus << "every node trains the model and the loss falls " << i % 7 << ".\n";
    std::ofstream y(cfg);
    y << "model: {n_layer: 2, n_head: 2, n_embd: 64, seq_len: 64}\n"
         "data: {text: corpus.txt}\n"
         "train: {steps: " << spec.steps << ", micro_batch: 8, global_batch_tokens: 1024, lr: 3e-3, threads: 1}\n"
      << "checkpoint: {every: " << spec.checkpoint_every << ", keep: 3"
      << (spec.checkpoint_dir.empty() ? "" : ", dir: " + spec.checkpoint_dir) << "}\n"
      << "sample: {tokens: 0}\n"
         "log: {every: 5, file: " << t.record << "}\n"
      << spec.extra_config << "\n";
  }
  json job = c.Submit({{"command", {COHORT_BINARY, "train", "--config", cfg}},
                       {"nodes", 2},
                       {"min_nodes", spec.min_nodes},
                       {"checkpoint_signal", spec.checkpoint_signal},
                       {"tasks_per_node", 1},
                       {"gpus_per_node", 1},
                       {"max_restarts", spec.max_restarts},
                       {"env", {{"OMP_NUM_THREADS", "1"}}},
                       {"team", team}});
  t.id = job.value("id", int64_t{0});
  t.head_checkpoint_dir = c.CheckpointDir(t.id);
  return t;
}

struct RecordLine {
  int64_t step = 0;
  int attempt = 0;
  double loss = 0;
};

// Only whole lines: a test that polls the record (LastRecordedStep) can read it while the
// trainer is appending, and a line without its newline yet is not a bad line (seen under
// load with 100 lines flushed at a checkpoint). A finished job's record ends in a newline.
inline std::vector<RecordLine> ReadRecord(const std::string& path) {
  std::vector<RecordLine> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // the last line had no newline: still being written
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) {
      ADD_FAILURE() << "bad line in the loss record: " << line;
      continue;
    }
    out.push_back({j["step"].get<int64_t>(), j.value("attempt", -1), j.value("loss", NAN)});
  }
  return out;
}

inline int64_t LastRecordedStep(const std::string& path) {
  auto r = ReadRecord(path);
  return r.empty() ? 0 : r.back().step;
}

// Waits until the record holds step `step` (a checkpoint covers it).
inline void WaitForRecordedStep(FaultCluster& c, const TrainJob& t, int64_t step) {
  ASSERT_TRUE(WaitUntil([&] { return LastRecordedStep(t.record) >= step; }, std::chrono::seconds(90)))
      << "the record did not reach step " << step << "; job: " << c.Job(t.id).dump(2) << "\nrank 0:\n"
      << c.Logs(t.id, 0);
}

// The issue's checks on a finished job's loss record:
//  - every step 1..steps is recorded exactly once, in order (nothing lost, nothing
//    recorded twice by different attempts);
//  - attempts only grow, and each new attempt continues from a checkpoint step;
//  - at least `min_attempts` attempts recorded steps;
//  - a fault after step `recorded_before_fault` was in the record loses none of it: the
//    first attempt after the fault resumes at or after that step.

// Returns the first step of each attempt.
//  `rerecorded_ok` reads the record as a reader that lets a later attempt's line for a
//  step replace the earlier ones would (for a known product bug: see the damaged
//  checkpoint test); without it a step recorded twice is a failure.
inline std::map<int, int64_t> ExpectConsistentRecord(const TrainJob& t, int min_attempts,
                                                     int64_t recorded_before_fault = 0,
                                                     bool rerecorded_ok = false) {
  std::map<int, int64_t> first_step;
  auto lines = ReadRecord(t.record);
  if (rerecorded_ok) {
    std::vector<RecordLine> kept;
    for (const auto& l : lines) {
      while (!kept.empty() && kept.back().step >= l.step && kept.back().attempt < l.attempt) kept.pop_back();
      kept.push_back(l);
    }
    lines = std::move(kept);
  }
  std::ostringstream dump;
  for (const auto& l : lines) dump << "  step " << l.step << " attempt " << l.attempt << "\n";
  if (lines.empty()) {
    ADD_FAILURE() << "empty loss record " << t.record;
    return first_step;
  }
  EXPECT_EQ(lines.front().step, 1) << dump.str();
  EXPECT_EQ(lines.back().step, t.spec.steps) << "the record does not end at the last step:\n" << dump.str();
  first_step[lines.front().attempt] = lines.front().step;
  int bad = 0;
  for (size_t i = 1; i < lines.size() && bad < 5; ++i) {
    const auto &prev = lines[i - 1], &cur = lines[i];
    if (cur.step != prev.step + 1) {
      ++bad;
      ADD_FAILURE() << "step " << cur.step << " (attempt " << cur.attempt << ") follows step " << prev.step
                    << " (attempt " << prev.attempt << ")"
                    << (cur.step <= prev.step ? ": a step recorded twice" : ": steps lost");
    }
    if (cur.attempt < prev.attempt) {
      ++bad;
      ADD_FAILURE() << "attempt " << cur.attempt << " recorded step " << cur.step << " after attempt "
                    << prev.attempt;
    }
    if (cur.attempt != prev.attempt) {
      first_step[cur.attempt] = cur.step;
      if (!t.spec.checkpoints_on_request) {
        EXPECT_EQ((cur.step - 1) % t.spec.checkpoint_every, 0)
            << "attempt " << cur.attempt << " does not continue from a checkpoint step (first step " << cur.step
            << ")";
      }
      EXPECT_GE(cur.step - 1, recorded_before_fault)
          << "attempt " << cur.attempt << " resumed before step " << recorded_before_fault
          << ", which was already recorded";
    }
  }
  for (const auto& l : lines) EXPECT_TRUE(std::isfinite(l.loss)) << "step " << l.step;
  EXPECT_GE(static_cast<int>(first_step.size()), min_attempts) << "attempts in the record:\n" << dump.str();
  if (::testing::Test::HasFailure()) ADD_FAILURE() << "the record:\n" << dump.str();
  return first_step;
}

// Checks rank 0's log of `attempt` says it resumed from the checkpoint at `step`.
inline void ExpectResumedFrom(FaultCluster& c, const TrainJob& t, int attempt, int64_t step) {
  const std::string log = c.Logs(t.id, 0, attempt);
  char want[64];
  std::snprintf(want, sizeof(want), "step_%08lld (step %lld)", static_cast<long long>(step),
                static_cast<long long>(step));
  EXPECT_NE(log.find(std::string("resuming from ")), std::string::npos) << log;
  EXPECT_NE(log.find(want), std::string::npos) << "attempt " << attempt << " did not resume from step " << step
                                               << ":\n" << log;
}

// The step in "checkpoint at step N" of the attempt that ended with a move (a drain or a
// preemption), or -1.
inline int64_t MovedAtStep(const json& job, int attempt) {
  for (const auto& h : job.value("history", json::array())) {
    if (h.value("attempt", -1) != attempt) continue;
    std::smatch m;
    const std::string why = h.value("end_reason", "");
    if (std::regex_search(why, m, std::regex("checkpoint at step ([0-9]+)"))) return std::stoll(m[1]);
  }
  return -1;
}

// After a move or preemption that waited for the checkpoint at `requested` (a checkpoint
// taken on request, not a periodic one): `attempt` resumed from it, or from a later one
// also taken for the request (it can reach the trainer both ways, the reply to a progress
// report and then the agent's signal, before the stop lands: seen under load), and its
// record starts right after. Returns the step it resumed from (-1 if the log has none).
inline int64_t ExpectResumedFromTheRequestedCheckpoint(FaultCluster& c, const TrainJob& t, int attempt,
                                                       int64_t requested, const std::map<int, int64_t>& first_step) {
  const std::string log = c.Logs(t.id, 0, attempt);
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(R"(resuming from \S+ \(step ([0-9]+)\))"))) {
    ADD_FAILURE() << "attempt " << attempt << " did not resume from a checkpoint:\n" << log;
    return -1;
  }
  const int64_t resumed = std::stoll(m[1]);
  EXPECT_GE(resumed, requested) << "attempt " << attempt << " resumed from a checkpoint older than the requested one";
  EXPECT_NE(resumed % t.spec.checkpoint_every, 0) << "attempt " << attempt << " resumed from a periodic checkpoint";
  auto it = first_step.find(attempt);
  EXPECT_TRUE(it != first_step.end() && it->second == resumed + 1)
      << "attempt " << attempt << " must record from the step after the checkpoint it resumed from (" << resumed << ")";
  return resumed;
}

// ExpectConsistentRecord, and each attempt after the first resumed from the checkpoint
// before its first step.
inline void ExpectRecordResumedFromCheckpoints(FaultCluster& c, const TrainJob& t, int min_attempts,
                                               int64_t recorded_before_fault) {
  auto first = ExpectConsistentRecord(t, min_attempts, recorded_before_fault);
  for (const auto& [attempt, step] : first) {
    if (attempt > 0) ExpectResumedFrom(c, t, attempt, step - 1);
  }
}

// Head + `agents` agents node-a, node-b, ... (1 GPU each) + the training job, running and
// past its spec.checkpoints_before_fault-th checkpoint.
inline void StartTraining(FaultCluster& c, TrainJob& t, TrainJobSpec spec = {}, int agents = 3) {
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  for (int i = 0; i < agents; ++i) ASSERT_NO_FATAL_FAILURE(c.StartAgent(std::string("node-") + char('a' + i)));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(agents));
  ::testing::Test::RecordProperty("layout", c.layout());
  std::printf("cluster: %s\n", c.layout().c_str());
  t = SubmitTraining(c, spec);
  ASSERT_GT(t.id, 0);
  ASSERT_NO_FATAL_FAILURE(WaitForRecordedStep(c, t, spec.checkpoints_before_fault * spec.checkpoint_every));
}

}  // namespace cohort::testing
