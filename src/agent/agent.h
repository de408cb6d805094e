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
// agent cannot leave a stale gang running while the head places it elsewhere, its task
// shims hold a lease (lease.h, one file per agent) valid for the fence timeout, which the
// agent renews after every successful heartbeat (from its send time) and, while the head
// refuses connections, up to head_down_grace; an expired lease makes the shims stop their
// tasks. A LeaseKeeper thread writes the file, so a renewal waits for nothing else the
// loop does. On a loaded node the shims, and the agent's own fence check, allow past the
// fence timeout what their measured scheduling delay explains, never more than the
// failure timeout's margin over it (wakeup_lateness.h): a task is gone before the head may
// declare the node DOWN, and a stopped or dead agent's tasks are still fenced.
//
// Telemetry: every heartbeat carries a sample of each GPU (GpuMonitor: NVML, or the
// simulated model driven by the tasks holding the GPUs) with its health-event counter,
// and each running task's CPU time, resident memory (proc_usage.h) and GPU memory
// (gpu/task_memory.h: a task over its part of a shared GPU is reported, and stopped with
// gpu_memory_enforce: kill). The same samples are served at GET /metrics in the
// Prometheus text format (metrics.h).
//
// Sampling: those readings are slow on a loaded node (a /proc scan of every process, NVML
// queries; hundreds of ms at load 15 on two cores), so a sampler thread of their own takes
// them (a NodeSample, every heartbeat interval and at least 1 s apart, at once when a GPU
// health event is recorded) and the heartbeat loop sends the latest with the executor's
// own task list, which is always current. The heartbeat's cadence, and with it the tasks'
// lease, then never waits on a GPU query or a /proc scan; a task's usage and GPU memory
// appear from the first sample after it started. The free ports are still found as each
// heartbeat is built (four binds): the head hands one out per job, and a list repeated
// from an older sample would give two jobs the same MASTER_PORT. With simulated GPUs every task gets
// COHORT_SIMULATED_GPU_MEMORY_DIR, where it may register device memory (gpu/gpu.h).
//
// Fault injection (only with --simulated-gpus): POST /v1/simulate/xid with
// {"gpu": 0, "xid": 79} records a health event on that simulated GPU, as if the driver
// had reported the XID; the next heartbeat (sent at once) makes the head mark the GPU
// unhealthy. Without simulated GPUs the endpoint does not exist (404).
//
// Structure: Start runs named steps (resolve the config, discover GPUs, build the HTTP
// server, listen, build the registration, start the health checker, start the threads);
// the HTTP routes and their handlers live in agent_http.cc. The heartbeat loop
// (register, heartbeat, apply, fence) runs on the loop thread, the samples on the sampler
// thread.
//
// Threads: Start/Stop/Wait from the owning thread; the heartbeat loop, the sampler, the HTTP
// server, the executor and the lease keeper run their own threads. State shared between them is under mu_ (checked
// by Clang's thread-safety analysis, common/mutex.h); the rest belongs to the loop thread,
// or is set by Start before any other thread runs and read-only afterwards.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "agent/exec_session.h"
#include "agent/cpu_allocator.h"
#include "agent/executor.h"
#include "agent/gpu/gpu.h"
#include "agent/gpu/sharing.h"
#include "agent/gpu/task_memory.h"
#include "agent/health_check.h"
#include "agent/image_cache.h"
#include "agent/lease_keeper.h"
#include "agent/metrics.h"
#include "agent/proc_usage.h"
#include "agent/runtime_call.h"
#include "api/types.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/mutex.h"
#include "common/tls.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace cohort::agent {

class Executor;

// The version an agent reports at registration and on GET /v1/health.
inline constexpr char kAgentVersion[] = "0.1.0";

struct AgentConfig {
  std::string head_url;
  std::string name;             // default: the host name
  std::string address;          // default: 127.0.0.1 for a loopback head, else the route's source IP
  std::string listen_host;      // default: the address (0.0.0.0 when the address is not local)
  int port = 0;                 // the agent's HTTP port; 0 = any free port
  int simulated_gpus = -1;      // >= 0: present that many simulated GPUs instead of NVML
  SimulatedLayout simulated_layout;  // their model, NVLink islands, PCIe switches, MIG (gpu/gpu.h)
  int cpus = 0;                 // 0: the CPUs of this process's affinity mask
  // Whether tasks are bound to their CPUs (cpu_allocator.h: the pool is the first `cpus`
  // CPUs of the agent's mask; none when it advertises more). Off by default, as Slurm
  // without task/affinity and Kubernetes' default CPU manager policy: an agent cannot
  // know which CPUs other agents on the same machine bind (`cohort up`, the tests).
  CpuBind cpu_bind = CpuBind::kNone;
  std::map<std::string, std::string> labels;  // topology labels (--topology site=...)
  std::vector<std::string> features;  // node features for --constraint (--features a100,ib)
  int64_t memory_bytes = 0;           // memory offered to --mem jobs; 0: the machine's
  std::string work_dir;         // task logs and status files, mode 0700; default ~/.cohort/agent-<name>
  std::string shim_path;        // default: cohort-task-shim next to this executable, else this executable
  int64_t head_down_grace_ms = 60'000;
  std::string health_check;               // a GPU health check command (health_check.h); empty: none
  int64_t health_check_interval_ms = 60'000;
  // A query of the GPU monitor (NVML's processes or readings) that has not returned for this
  // long marks every GPU of the node unhealthy: one health event on each, and one more every
  // such interval while it hangs (as a failing --health-check does), so a GPU resumed
  // before the driver answers again is marked again. NVML hangs this way when a GPU falls
  // off the bus; an agent that cannot query its GPUs cannot vouch for them. The head treats
  // it as any GPU health event: no new work there, the jobs on them restarted elsewhere,
  // until `cohort resume`. 0: never.
  int64_t gpu_monitor_timeout_ms = 30'000;
  // Presented when registering (head/auth.h): a token of role agent (or admin). The head's
  // reply holds the node's credential, which heartbeats present and which the head shows
  // when it calls this agent. Empty: an --insecure head.
  std::string join_token;
  // The head's certificate authority (PEM file), for an https head: the agent trusts only
  // it, sends a certificate request when it registers, and serves HTTPS with the node's
  // certificate from then on. Empty: $COHORT_CA / $COHORT_CA_FILE.
  std::string head_ca_file;
  // Which account runs a task (task_user.h): its job's user (a root agent switches to it)
  // or, for a single-user cluster (`cohort up`), this agent's own.
  TaskUserPolicy task_user = TaskUserPolicy::kJobUser;
  // The container runtimes this node offers to jobs with `container:` (container.h): kind
  // (podman, docker) → the command that runs it. Empty: none (such jobs fail to start here,
  // saying so).
  std::map<std::string, std::string> container_runtimes = {{"podman", "podman"}, {"docker", "docker"}};
  // Where the agent writes the CDI spec of its real GPUs (cdi.h), a directory the container
  // runtimes read (Podman and Docker: /etc/cdi and /var/run/cdi). Empty: none is written
  // (container tasks then get no GPU devices).
  std::string cdi_spec_dir = "/var/run/cdi";
  // The image cache's policy (image_cache.h): images no task started in for this long are
  // removed (checked every image_prune_interval_ms). 0: kept until removed on request.
  int64_t image_max_unused_ms = 0;
  int64_t image_prune_interval_ms = 600'000;
  // Containers of this agent's tasks that no task runs any more are removed as the agent
  // starts and then this often (container_sweep.h); 0 or less: never (no sweep at all).
  int64_t container_sweep_interval_ms = 60'000;
  // Tests only: wraps the GPU monitor the agent found (simulated or NVML) before any thread
  // uses it, e.g. into one whose queries hang; null: the monitor as found.
  std::function<std::unique_ptr<GpuMonitor>(std::unique_ptr<GpuMonitor>)> wrap_gpu_monitor;
};

// `--container-runtime` values: "KIND=COMMAND" each (kind podman or docker), or the one
// word "none". kInvalidArgument naming the value that is wrong.
Result<std::map<std::string, std::string>> ParseContainerRuntimes(const std::vector<std::string>& values);

class Agent {
 public:
  // Discovers GPUs, binds the HTTP server and starts the heartbeat loop. Registration
  // itself happens in the loop and is retried until it succeeds. Fails if the head URL is
  // malformed, the work directory cannot be created or the port cannot be bound.
  static Result<std::unique_ptr<Agent>> Start(AgentConfig config);
  ~Agent();

  const std::string& name() const { return config_.name; }
  const std::string& url() const { return url_; }
  // Stops tasks (gracefully), reports their exits to the head, stops the threads.
  void Stop() EXCLUDES(mu_);
  void Wait();

 private:
  Agent() = default;

  // ---- Start's steps, in order (the owning thread, before the agent's threads run).
  void DiscoverGpus();         // fills gpus_ and monitor_: simulated GPUs, else NVML, else none
  void BuildServer();          // creates server_ with every route (agent_http.cc)
  Result<void> Listen();       // binds server_, sets url_; kUnavailable if it cannot bind
  void BuildRegistration();    // fills registration_: identity, a fresh incarnation, GPUs
  void StartHealthChecker();   // with --health-check on a node with GPUs; else logs why not
  void StartThreads();         // starts the HTTP server thread and the heartbeat loop

  // ---- HTTP handlers (HTTP server threads; agent_http.cc).
  void ServeMetrics(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  void ServeSimulateXid(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  void ServeExecStart(const httplib::Request& req, httplib::Response& res);
  void ServeExecOutput(const httplib::Request& req, httplib::Response& res);
  void ServeExecInput(const httplib::Request& req, httplib::Response& res);
  void ServeLogs(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  // The image cache (image_cache.h): GET images, POST images/remove {"image"}, POST
  // images/prune {"unused_for_s"}; the head's calls only.
  void ServeImages(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  void ServeImageRemove(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  void ServeImagePrune(const httplib::Request& req, httplib::Response& res) EXCLUDES(mu_);
  // (runtime, image) of every container task running now; any thread.
  std::vector<std::pair<std::string, std::string>> RunningImages() const EXCLUDES(mu_);
  // With --image-max-unused: prunes the image cache every image_prune_interval_ms until Stop.
  void PruneLoop() EXCLUDES(mu_);
  // With a container runtime and container_sweep_interval_ms > 0: removes the containers
  // left behind (container_sweep.h) at once and then every container_sweep_interval_ms
  // until Stop.
  void SweepLoop() EXCLUDES(mu_);
  // ContainerName of every task running now; any thread.
  std::set<std::string> RunningContainerNames() const EXCLUDES(mu_);

  // ---- The heartbeat loop (loop thread; Stop calls HeartbeatOnce after joining it).
  void Loop() EXCLUDES(mu_);
  Result<void> RegisterOnce() EXCLUDES(mu_);
  // On success: renews the lease from the send time, then applies the reply.
  Result<void> HeartbeatOnce() EXCLUDES(mu_);
  // After a failed registration or heartbeat: re-register if the head forgot us, renew the
  // lease while the head's process is down, fence once silent for too long.
  void OnFailure(const Error& e);
  void StartLeaseKeeper();  // at the first registration; leaves leases_ null if it fails
  // The --device values of a container task's GPUs: with real GPUs and a container runtime,
  // writes the node's CDI spec (cdi.h) and returns its names; null otherwise or on failure
  // (logged).
  std::function<std::vector<std::string>(const std::vector<int>&)> ContainerDevices() const;
  void Apply(const api::HeartbeatReply& reply);
  // The client for the head: presents `credential`, gives up on a request after
  // RequestTimeout() (a heartbeat: HeartbeatTimeout). Remade at registration and whenever
  // the head changes the interval. Loop thread.
  std::unique_ptr<HttpClient> MakeHeadClient(const std::string& credential) const;
  // How long a request to the head may take: the heartbeat interval, at least 500 ms.
  Millis RequestTimeout() const;
  // How long a heartbeat sent at `sent` waits for its answer: as long as the tasks' lease
  // it would renew still runs (an answer renews it from the send, however late it comes;
  // giving up and sending again only starts the wait over), and at least RequestTimeout().
  // Giving up after the interval alone (500 ms in the fault tests) twice in a row,
  // on a CI machine running three tests per core, let a node's 1.2 s lease lapse.
  Millis HeartbeatTimeout(SteadyTime sent) const;
  void Fence(const std::string& why);
  // From the executor's snapshot (now) and the latest NodeSample; finds the free ports.
  api::Heartbeat BuildHeartbeat() EXCLUDES(mu_);

  // ---- The sampler (sampler thread): the readings too slow for the heartbeat loop.
  struct NodeSample {
    uint64_t seq = 0;                       // 1, 2, ...: which sample this is
    SteadyTime taken{};                     // when it was complete
    std::map<int, ProcUsage> usage;         // each running task's use, by its shim's pid (proc_usage.h)
    std::map<int, int> task_of;             // pid -> its task's shim pid, as /proc was read
    std::vector<GpuProcess> gpu_processes;  // read after /proc: a newer process counts next time
    std::vector<GpuReading> gpus;           // the monitor's readings, health-event counters with them
  };
  // Takes samples until Stop: every sample_period_, and at once after WakeSampler. Wakes the
  // heartbeat loop when a GPU's health-event counter grew, so that the event reaches the
  // head with the next heartbeat (sent at once), as it did when the loop sampled itself.
  void SampleLoop() EXCLUDES(mu_);
  NodeSample TakeSample() EXCLUDES(mu_);
  // Runs a GPU monitor call with gpu_query_since_ set around it (sampler thread).
  template <typename Query>
  auto QueryGpus(Query query) -> decltype(query());
  // Counts a GPU query that has not returned for AgentConfig::gpu_monitor_timeout_ms into
  // hang_events_ (one event per interval it has hung) and returns the health event's
  // reason while it hangs, "" when no query is stuck (loop thread, BuildHeartbeat).
  std::string CountGpuQueryHang(SteadyTime now);
  void WakeSampler() EXCLUDES(mu_);            // any thread: sample now (a GPU health event)

  void Wake() EXCLUDES(mu_);                   // any thread: heartbeat now
  Executor* executor() const EXCLUDES(mu_);   // null until the first registration; any thread
  // OK if `req` carries the node credential (or the head gave none); kUnauthenticated else.
  Result<void> CheckHeadCredential(const httplib::Request& req) const EXCLUDES(mu_);
  // ---- TLS (an https head): the CA, the node's key, its certificate and its renewal.
  Result<void> SetUpTls();           // Start, before Listen
  Result<void> TakeCertificate(const json& reply, const std::string& key_pem);  // loop thread
  void RenewCertificateIfDue();      // loop thread, after a good heartbeat

  // Set by Start, then read-only.
  AgentConfig config_;
  std::unique_ptr<HttpServer> server_;
  std::string url_;
  std::vector<GpuInfo> gpus_;
  std::unique_ptr<GpuMonitor> monitor_;  // null when the node has no GPUs; thread-safe
  std::unique_ptr<GpuSharing> sharing_;  // MPS or time-slicing for sharing tasks (gpu/sharing.h)
  std::thread server_thread_;
  std::thread loop_thread_;
  std::thread sample_thread_;
  std::unique_ptr<HealthChecker> health_checker_;  // with --health-check; reset by Stop
  // The container runtime calls of the image cache and the sweep, cancelled by Stop so
  // that a hung Docker or Podman daemon never holds the stop (runtime_call.h).
  RuntimeCalls runtime_calls_;
  std::unique_ptr<ImageCache> images_;  // set by Start; thread-safe
  std::thread prune_thread_;            // with --image-max-unused; joined by Stop
  std::thread sweep_thread_;            // with a container runtime; joined by Stop
  // Loop thread (built by Start; the head client is replaced at each registration and
  // when the heartbeat interval changes).
  api::Registration registration_;
  std::unique_ptr<HttpClient> head_;
  // TLS, with an https head (set by Start, then read-only but for the slot's contents):
  // what the agent trusts, and the node's certificate (empty until it registers), shared
  // by its server and its client of the head.
  std::optional<tls::ClientOptions> tls_;
  std::shared_ptr<tls::ServerContext> server_tls_;
  std::string pending_key_pem_;      // loop thread: the key of the request sent at registration
  int64_t cert_renew_at_ms_ = 0;     // loop thread: Unix ms; 0: nothing to renew
  SteadyTime last_renew_try_{};      // loop thread
  // Created on the loop thread at the first registration (the fence timeout comes from the
  // head), then never replaced; thread-safe. Declared before executor_, so it outlives it.
  std::unique_ptr<LeaseKeeper> leases_;
  // Created on the loop thread at the first registration (the kill grace comes from the
  // head), then never replaced; HTTP threads read it through executor().
  std::unique_ptr<Executor> executor_;
  // Exec sessions beside the tasks (exec_session.h); set by Start, thread-safe, reset by
  // Stop once the server no longer calls it. Declared after executor_, so it goes first.
  std::unique_ptr<ExecSessions> exec_sessions_;

  mutable Mutex mu_;
  CondVar cv_;                                                 // signalled with mu_
  std::vector<GpuReading> last_readings_ GUARDED_BY(mu_);      // the latest heartbeat's sample
  std::vector<TaskUsageSample> last_tasks_ GUARDED_BY(mu_);    // running tasks then
  // The sampler's latest (null before its first); replaced whole, never changed in place, so
  // the heartbeat loop reads it without the lock once it holds the pointer.
  std::shared_ptr<const NodeSample> sample_ GUARDED_BY(mu_);
  bool sample_wake_ GUARDED_BY(mu_) = false;
  // The heartbeat interval, at least 1 s: /proc is scanned no more often than the loop did
  // when it sampled itself (once a second at most, and once a heartbeat on large clusters).
  Millis sample_period_ GUARDED_BY(mu_){1000};
  bool wake_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  // The image each container task runs in (runtime, reference), for the image cache's
  // in-use marks (with the executor's running tasks); Apply drops those the head no longer wants.
  std::map<TaskKey, std::pair<std::string, std::string>> container_tasks_ GUARDED_BY(mu_);
  Executor* executor_published_ GUARDED_BY(mu_) = nullptr;   // executor_.get() once created
  // The node credential from the last registration ("" from an --insecure head): the head
  // presents it on the requests it makes here; nothing else may read logs.
  std::string node_credential_ GUARDED_BY(mu_);
  // Loop-thread only:
  bool registered_ = false;
  bool fenced_ = false;
  // Tasks that have received their checkpoint signal, with the request it answered
  // (TaskLaunch::checkpoint_requested_ms; loop thread only).
  std::map<TaskKey, int64_t> checkpoint_signalled_;
  // Launched sharing tasks: their GPU and their part of it (COHORT_GPU_SHARE, 0.25-0.75),
  // which /metrics reports as the task's GPUs (heartbeat thread).
  struct SharingTask {
    int gpu = 0;
    double share = 0;
  };
  std::map<TaskKey, SharingTask> sharing_tasks_;
  int64_t applied_version_ = 0;
  api::AgentTiming timing_;
  SteadyTime last_ok_send_;                   // send time of the last successful heartbeat
  SteadyTime last_slow_log_;                  // the last "heartbeats sent ... apart" warning
  SteadyTime last_beat_end_;                  // when the last successful heartbeat was applied
  SteadyClock::duration last_apply_{};        // how long applying its reply took
  SteadyTime last_error_log_;                 // when a failure was last logged (rate limit)
  uint64_t measured_seq_ = 0;  // the sample MeasureGpuMemory last measured
  SteadyTime last_stale_log_;  // the last "the latest sample is ... old" warning
  // When the sampler's GPU query in progress began (SteadyClock ticks), 0 when none is:
  // written by the sampler around each monitor call, read by BuildHeartbeat.
  std::atomic<SteadyClock::rep> gpu_query_since_{0};
  // Health events the agent added to every GPU for queries that did not return
  // (AgentConfig::gpu_monitor_timeout_ms), and those of hangs before the current one
  // (loop thread).
  int64_t hang_events_ = 0, hang_events_before_ = 0;
  SteadyClock::rep hang_query_ = 0;  // the query hang_events_ counts for (its start), 0: none
  // GPU memory (gpu/task_memory.h), loop thread: each sharing task's part (from its
  // launch), the latest measurement, the warning of a task once over its part (kept for
  // the task's life), and the tasks stopped for it. Dropped with the head's assignment.
  std::map<TaskKey, GpuMemoryLimit> gpu_limits_;
  std::map<TaskKey, TaskGpuMemory> gpu_memory_;
  std::map<TaskKey, std::string> gpu_over_;
  std::set<TaskKey> gpu_killed_;
  // With simulated GPUs: where tasks register their device memory (gpu/gpu.h); set by Start.
  std::string simulated_memory_dir_;
  // Measures every running task's GPU memory from `sample` and acts on the over (warns,
  // kills with gpu_memory_enforce: kill); loop thread, once per sample. A task started
  // after the sample counts from the next one.
  void MeasureGpuMemory(const std::vector<TaskStatus>& snapshot, const NodeSample& sample);
};

// Two successful heartbeats sent further apart than this are logged with where the time
// went: past half the room between the interval `t` asks for and the fence timeout (a
// beat on time, `heartbeat_interval_ms` after the last, is not slow, however small that
// room), or past half the fence timeout when the interval leaves none.
Millis SlowHeartbeatGap(const api::AgentTiming& t);

// `cohort agent`: runs an agent until SIGINT or SIGTERM. Returns the process exit code.
int RunAgent(const AgentConfig& config);

}  // namespace cohort::agent
