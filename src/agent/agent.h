// Agent: the daemon on every worker node (`cohort agent --head URL`).
//
// It registers its node (GPU inventory from NVML, or simulated GPUs), then heartbeats:
// each heartbeat reports every task (running, and finished until the head acknowledges
// the exit) and receives the whole set of tasks the head wants here; the agent starts
// what is missing and stops everything else (level-triggered reconciliation). The head
// wakes it through POST /v1/wake when assignments change; task exits also trigger an
// immediate heartbeat.
//
// Fencing: if no heartbeat succeeds for the fence timeout (shorter than the head's
// failure timeout), the agent kills all its tasks at once, so that when the head declares
// the node DOWN and places the gang elsewhere the old tasks are already gone. Exception:
// while the head refuses connections outright (its process is down, so nobody can
// reschedule), tasks keep running for up to head_down_grace; the restarted head gives
// every node one failure timeout to report in.
//
// Leases: the agent can only fence while it runs. So that a stopped (SIGSTOP) or hung
// agent cannot leave a stale gang running while the head places it elsewhere, each task's
// shim holds a lease (executor.h) valid for the fence timeout, which the agent renews
// after every successful heartbeat (from its send time) and, while the head refuses
// connections, up to head_down_grace; an expired lease makes the shim stop its task.
//
// Telemetry: every heartbeat carries a sample of each GPU (GpuMonitor: NVML, or the
// simulated model driven by the tasks holding the GPUs) with its health-event counter,
// and each running task's CPU time and resident memory (proc_usage.h). The same samples
// are served at GET /metrics in the Prometheus text format (metrics.h).
//
// Fault injection (only with --simulated-gpus): POST /v1/simulate/xid with
// {"gpu": 0, "xid": 79} records a health event on that simulated GPU, as if the driver
// had reported the XID; the next heartbeat (sent at once) makes the head mark the GPU
// unhealthy. Without simulated GPUs the endpoint does not exist (404).
//
// Threads: Start/Stop/Wait from the owning thread; the heartbeat loop, the HTTP server
// and the executor run their own threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "agent/executor.h"
#include "agent/gpu/gpu.h"
#include "agent/health_check.h"
#include "agent/metrics.h"
#include "agent/proc_usage.h"
#include "api/types.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/http.h"

namespace httplib {
class Server;
}

namespace cohort::agent {

class Executor;

struct AgentConfig {
  std::string head_url;
  std::string name;             // default: the host name
  std::string address;          // default: 127.0.0.1 for a loopback head, else the route's source IP
  std::string listen_host;      // default: the address (0.0.0.0 when the address is not local)
  int port = 0;                 // the agent's HTTP port; 0 = any free port
  int simulated_gpus = -1;      // >= 0: present that many simulated GPUs instead of NVML
  int cpus = 0;                 // 0: the machine's hardware threads
  std::string work_dir;         // task logs and status files; default ~/.cohort/agent-<name>
  std::string shim_path;        // default: this executable
  int64_t head_down_grace_ms = 60'000;
  std::string health_check;               // a GPU health check command (health_check.h); empty: none
  int64_t health_check_interval_ms = 60'000;
};

class Agent {
 public:
  // Discovers GPUs, binds the HTTP server and starts the heartbeat loop. Registration
  // itself happens in the loop and is retried until it succeeds.
  static Result<std::unique_ptr<Agent>> Start(AgentConfig config);
  ~Agent();

  const std::string& name() const { return config_.name; }
  const std::string& url() const { return url_; }
  // Stops tasks (gracefully), reports their exits to the head, stops the threads.
  void Stop();
  void Wait();

 private:
  Agent() = default;
  void Loop();
  Result<void> RegisterOnce();
  Result<void> HeartbeatOnce();
  void Apply(const api::HeartbeatReply& reply);
  void Fence(const std::string& why);
  void Wake();
  api::Heartbeat BuildHeartbeat();
  Executor* executor() const;  // null until the first registration; any thread

  AgentConfig config_;
  api::Registration registration_;
  std::unique_ptr<HttpClient> head_;
  std::unique_ptr<httplib::Server> server_;
  // Created on the loop thread at the first registration (the kill grace comes from the
  // head), then never replaced; HTTP threads read it through executor().
  std::unique_ptr<Executor> executor_;
  std::thread server_thread_;
  std::thread loop_thread_;
  std::string url_;
  std::vector<GpuInfo> gpus_;
  std::unique_ptr<GpuMonitor> monitor_;  // null when the node has no GPUs; thread-safe
  std::unique_ptr<HealthChecker> health_checker_;  // with --health-check; reset by Stop

  mutable std::mutex mu_;
  std::vector<GpuReading> last_readings_;     // the latest heartbeat's sample; guarded by mu_
  std::vector<TaskUsageSample> last_tasks_;   // running tasks then; guarded by mu_
  std::condition_variable cv_;                // signalled with mu_
  bool wake_ = false;                         // guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  Executor* executor_published_ = nullptr;    // executor_.get() once created; guarded by mu_
  // Loop-thread only:
  bool registered_ = false;
  bool fenced_ = false;
  // Tasks that have received their checkpoint signal (loop thread only).
  std::set<TaskKey> checkpoint_signalled_;
  int64_t applied_version_ = 0;
  api::AgentTiming timing_;
  SteadyTime last_ok_send_;                   // send time of the last successful heartbeat
  SteadyTime last_conflict_log_;
  std::map<int, ProcUsage> usage_;  // the latest /proc read, by task session
  std::set<int> usage_sessions_;
  SteadyTime usage_read_;
};

// `cohort agent`: runs an agent until SIGINT or SIGTERM. Returns the process exit code.
int RunAgent(const AgentConfig& config);

}  // namespace cohort::agent
