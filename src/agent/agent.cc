#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <httplib.h>

#include "agent/cdi.h"
#include "agent/container.h"
#include "agent/container_root.h"
#include "agent/container_sweep.h"
#include "agent/executor.h"
#include "agent/gpu/gpu.h"
#include "agent/net.h"
#include "agent/proc_usage.h"
#include "api/container_spec.h"
#include "api/output_pattern.h"
#include "api/routes.h"
#include "common/cpu_set.h"
#include "common/file_modes.h"
#include "common/log.h"
#include "common/signals.h"

namespace cohort::agent {

namespace fs = std::filesystem;

namespace {

// The task's output and error files (api/output_pattern.h): the job's patterns expanded
// with the launch's ids, its node and rank, and whether this attempt empties them (once,
// marked as its own: api::OutputTruncationMarker).
void SetTaskOutput(const api::TaskLaunch& t, const std::string& node_name, TaskSpec& spec) {
  if (t.output.empty() && t.error.empty()) return;
  auto number = [&](const char* name, int64_t def) {
    int64_t v = def;
    if (auto it = t.env.find(name); it != t.env.end()) {
      std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    }
    return v;
  };
  api::OutputPatternValues v;
  v.job_id = t.job;
  v.array_job_id = number("COHORT_ARRAY_JOB_ID", 0);
  v.array_task_id = number("COHORT_ARRAY_TASK_ID", api::kNoArrayIndex);
  if (auto it = t.env.find("COHORT_JOB_NAME"); it != t.env.end()) v.job_name = it->second;
  v.user = t.user.empty() ? "anonymous" : t.user;
  v.node = node_name;
  v.node_index = number("NODE_RANK", 0);
  v.rank = t.rank;
  for (auto [pattern, path, truncate] : {std::tuple{&t.output, &spec.output, &spec.truncate_output},
                                         std::tuple{&t.error, &spec.error, &spec.truncate_error}}) {
    if (pattern->empty()) continue;
    *path = api::ExpandOutputPattern(*pattern, v);
    *truncate = api::OutputTruncates(t.open_mode, t.attempt);
  }
  if (spec.truncate_output || spec.truncate_error) {
    auto url = t.env.find("COHORT_RENDEZVOUS");
    spec.truncate_marker =
        api::OutputTruncationMarker(url == t.env.end() ? std::string_view() : url->second, t.job, t.attempt);
  }
}


std::string RandomToken() {
  std::random_device rd;
  std::mt19937_64 rng((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(NowUnixMs()) ^ uint64_t(getpid()));
  return fmt::format("{:016x}", rng());
}

TaskKey KeyOf(api::JobId job, int attempt, int rank) { return TaskKey{job, attempt, rank}; }

// The time between a lease's expiry and the earliest moment the head may declare the node
// DOWN (lease.h): failure timeout - fence timeout.
Millis FenceMargin(const api::AgentTiming& t) {
  return Millis(std::max<int64_t>(0, t.failure_timeout_ms - t.fence_timeout_ms));
}

// Fills in the defaults of `config` (name, address, listen host, CPUs, work directory) and
// creates the work directory; an error if the head URL is malformed, the address cannot
// be found or the work directory cannot be created.
Result<AgentConfig> ResolveConfig(AgentConfig config) {
  auto head = COHORT_TRY(ParseHttpUrl(config.head_url));
  if (config.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    config.name = host;
  }
  if (config.address.empty()) config.address = COHORT_TRY(LocalAddressToward(head.host, head.port));
  if (config.listen_host.empty()) config.listen_host = config.address;
  if (config.cpus <= 0) {
    // The CPUs this agent may run on (a cpuset, taskset, a container's limit), which its
    // tasks can use, rather than the machine's.
    auto mask = AffinityCpus();
    config.cpus = mask && !mask->empty() ? static_cast<int>(mask->size())
                                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (config.memory_bytes <= 0) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) config.memory_bytes = static_cast<int64_t>(pages) * page;
  }
  if (config.work_dir.empty()) {
    const char* home = std::getenv("HOME");
    config.work_dir = fmt::format("{}/.cohort/agent-{}", home ? home : "/tmp", config.name);
  }
  // Private: it holds every task's log, and the tasks of a multi-user node must not read
  // each other's (task logs are their own users' too, but the tree is the agent's).
  if (auto r = MakePrivateDir(config.work_dir); !r) {
    return Errorf(ErrorCode::kInvalidArgument, "work directory: {}", r.error().message);
  }
  config.work_dir = fs::absolute(config.work_dir).string();
  return config;
}

// The CPUs tasks are bound to under --cpu-bind cores, with their places; empty (tasks
// unbound) when the agent's mask cannot be read or it advertises more CPUs than the mask
// holds (CpuPoolOf), which it logs.
std::vector<CpuPlace> BindingPool(const AgentConfig& config) {
  auto usable = AffinityCpus();
  if (!usable || usable->empty()) {
    LOG_WARN("--cpu-bind cores: cannot read this agent's CPUs ({}); tasks run unbound",
             usable ? "empty mask" : usable.error().message);
    return {};
  }
  if (config.cpus > static_cast<int>(usable->size())) {
    LOG_INFO("this agent offers {} CPUs but may run on {} ({}): a simulated node sharing the machine; tasks run "
             "unbound (and without OMP_NUM_THREADS)",
             config.cpus, usable->size(), FormatCpuList(*usable));
    return {};
  }
  return ReadCpuTopology(CpuPoolOf(*usable, config.cpus));
}

}  // namespace

Result<std::map<std::string, std::string>> ParseContainerRuntimes(const std::vector<std::string>& values) {
  std::map<std::string, std::string> out;
  for (const auto& v : values) {
    if (v == "none" && values.size() == 1) return out;
    const auto eq = v.find('=');
    const std::string kind = v.substr(0, eq);
    if (eq == std::string::npos || eq + 1 == v.size() ||
        std::find(std::begin(api::kContainerRuntimes), std::end(api::kContainerRuntimes), kind) ==
            std::end(api::kContainerRuntimes)) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "--container-runtime '{}': expected KIND=COMMAND with KIND podman or docker (e.g. "
                    "podman=/usr/bin/podman), or 'none' alone",
                    v);
    }
    out[kind] = v.substr(eq + 1);
  }
  return out;
}

Result<std::unique_ptr<Agent>> Agent::Start(AgentConfig config) {
  AgentConfig resolved = COHORT_TRY(ResolveConfig(std::move(config)));
  std::unique_ptr<Agent> a(new Agent());
  a->config_ = std::move(resolved);
  a->DiscoverGpus();
  a->sharing_ = std::make_unique<GpuSharing>(a->gpus_, a->config_.work_dir);
  a->head_ = std::make_unique<HttpClient>(a->config_.head_url, Millis(2000));
  a->BuildServer();
  COHORT_TRY_VOID(a->SetUpTls());
  COHORT_TRY_VOID(a->Listen());
  a->BuildRegistration();
  a->images_ = std::make_unique<ImageCache>(a->config_.container_runtimes, a->config_.work_dir + "/images",
                                           &a->runtime_calls_);
  ExecSessions::Options exec_options;
  exec_options.task_running = [agent = a.get()](const TaskKey& key) {
    Executor* executor = agent->executor();
    return executor && executor->IsRunning(key);
  };
  a->exec_sessions_ = std::make_unique<ExecSessions>(std::move(exec_options));
  a->StartHealthChecker();
  a->StartThreads();
  return a;
}

void Agent::DiscoverGpus() {
  if (config_.simulated_gpus >= 0) {
    gpus_ = SimulatedGpus(config_.simulated_gpus, config_.name, config_.simulated_layout);
    simulated_memory_dir_ = config_.work_dir + "/simulated-gpu-memory";
    std::error_code ec;
    std::filesystem::create_directories(simulated_memory_dir_, ec);
    if (ec) {
      LOG_WARN("simulated GPUs without process memory: cannot create {}: {}", simulated_memory_dir_, ec.message());
      simulated_memory_dir_.clear();
    }
    monitor_ = MakeSimulatedGpuMonitor(gpus_, simulated_memory_dir_);
  } else if (auto found = DiscoverNvmlGpus(); found) {
    gpus_ = std::move(*found);
    if (!gpus_.empty()) {
      if (auto m = OpenNvmlGpuMonitor(); m) {
        monitor_ = std::move(*m);
      } else {
        LOG_WARN("no GPU telemetry: {}", m.error().message);
      }
    }
  } else {
    LOG_WARN("no NVIDIA GPUs: {}; this node offers CPUs only (use --simulated-gpus N to simulate GPUs)",
             found.error().message);
  }
  if (monitor_ && config_.wrap_gpu_monitor) monitor_ = config_.wrap_gpu_monitor(std::move(monitor_));
}

void Agent::BuildRegistration() {
  registration_.name = config_.name;
  registration_.address = config_.address;
  registration_.agent_url = url_;
  registration_.incarnation = RandomToken();
  registration_.version = kAgentVersion;
  registration_.cpus = config_.cpus;
  registration_.labels = config_.labels;
  registration_.features = config_.features;
  registration_.memory_bytes = config_.memory_bytes;
  if (!gpus_.empty()) registration_.gpu_sharing = sharing_->mode();
  for (const auto& g : gpus_) {
    api::Gpu gpu;
    gpu.index = g.index;
    gpu.name = g.name;
    gpu.uuid = g.uuid;
    gpu.memory_bytes = g.memory_bytes;
    gpu.simulated = g.simulated;
    gpu.mig_profile = g.mig_profile;
    gpu.mig_parent = g.mig_parent;
    gpu.nvlink_island = g.nvlink_island;
    gpu.pcie_switch = g.pcie_switch;
    registration_.gpus.push_back(std::move(gpu));
  }
}

void Agent::StartHealthChecker() {
  if (!config_.health_check.empty() && monitor_ && !gpus_.empty()) {
    health_checker_ = std::make_unique<HealthChecker>(config_.health_check, Millis(config_.health_check_interval_ms),
                                                      config_.work_dir, static_cast<int>(gpus_.size()),
                                                      monitor_.get(), [this] { WakeSampler(); });
  } else if (!config_.health_check.empty()) {
    LOG_WARN("--health-check ignored: this node has no GPUs");
  }
}

void Agent::StartThreads() {
  server_thread_ = std::thread([this] { server_->Serve(); });
  last_ok_send_ = SteadyClock::now();
  sample_thread_ = std::thread([this] { SampleLoop(); });
  loop_thread_ = std::thread([this] { Loop(); });
  if (config_.image_max_unused_ms > 0 && !config_.container_runtimes.empty()) {
    prune_thread_ = std::thread([this] { PruneLoop(); });
  }
  if (!config_.container_runtimes.empty() && config_.container_sweep_interval_ms > 0) {
    sweep_thread_ = std::thread([this] { SweepLoop(); });
  }
  LOG_INFO("agent {} ({} GPU(s), {} CPU(s)) serving {}, head {}", config_.name, gpus_.size(), config_.cpus, url_,
           config_.head_url);
}

Agent::~Agent() {
  Stop();
  Wait();
}

Executor* Agent::executor() const {
  MutexLock lock(mu_);
  return executor_published_;
}

void Agent::Wake() {
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  cv_.NotifyAll();
}

void Agent::WakeSampler() {
  {
    MutexLock lock(mu_);
    sample_wake_ = true;
  }
  cv_.NotifyAll();
}

Result<void> Agent::SetUpTls() {
  auto head = COHORT_TRY(ParseHttpUrl(config_.head_url));
  if (!head.tls) return {};
  std::string ca;
  if (!config_.head_ca_file.empty()) {
    ca = COHORT_TRY(tls::ReadCaFile(config_.head_ca_file));
  } else if (auto env = COHORT_TRY(tls::ClientOptionsFromEnv())) {
    ca = env->ca_pem;
  } else {
    return Errorf(ErrorCode::kInvalidArgument,
                  "the head {} uses TLS: give its certificate authority with --head-ca FILE (the head's "
                  "state_dir/tls/ca.crt) or $COHORT_CA_FILE", config_.head_url);
  }
  tls_ = tls::ClientOptions{ca, std::make_shared<tls::IdentitySlot>()};
  // Until it registers the node has no certificate: the server completes no handshake
  // (the head calls it only after), and then presents the node's.
  server_tls_ = COHORT_TRY(tls::ServerContext::Create(ca));
  server_->set_tls(server_tls_);
  head_->set_tls(*tls_);
  return {};
}

Result<void> Agent::TakeCertificate(const json& reply, const std::string& key_pem) {
  auto it = reply.find("certificate");
  if (it == reply.end() || !it->is_string() || it->get<std::string>().size() > (64 << 10)) {
    return MakeError(ErrorCode::kInternal, "the head's reply has no certificate for this node");
  }
  if (auto ok = tls::VerifyIssuedBy(tls_->ca_pem, it->get<std::string>(), NowUnixMs()); !ok) {
    return Errorf(ErrorCode::kInternal, "the head sent a certificate that {}", ok.error().message);
  }
  auto id = COHORT_TRY(tls::Identity::Parse(it->get<std::string>(), key_pem));
  if (id->info().common_name != config_.name) {
    return Errorf(ErrorCode::kInternal, "the head sent a certificate for node '{}', not {}", id->info().common_name,
                  config_.name);
  }
  tls_->identity->Set(id);
  server_tls_->SetIdentity(id);
  // Renewed with a third of its life left (from now: the clocks may differ).
  const int64_t now = NowUnixMs();
  cert_renew_at_ms_ = now + (id->info().not_after_ms - now) * 2 / 3;
  LOG_INFO("node certificate {} until {} (renewed from {})", tls::Fingerprint(id->info()),
           FormatTimestamp(id->info().not_after_ms), FormatTimestamp(cert_renew_at_ms_));
  return {};
}

void Agent::RenewCertificateIfDue() {
  if (!tls_ || cert_renew_at_ms_ == 0 || NowUnixMs() < cert_renew_at_ms_) return;
  if (SteadyClock::now() - last_renew_try_ < std::chrono::seconds(5)) return;
  last_renew_try_ = SteadyClock::now();
  auto renewed = [&]() -> Result<void> {
    std::string key = COHORT_TRY(tls::NewPrivateKeyPem());
    std::string csr = COHORT_TRY(tls::MakeCsrPem(key, config_.name));
    auto reply = COHORT_TRY(head_->Post(api::routes::AgentCertificate(config_.name), json{{"csr", csr}}));
    return TakeCertificate(reply, key);
  }();
  // The old one is still good for a third of its life: try again after a while.
  if (!renewed) LOG_WARN("cannot renew the node's certificate: {}", renewed.error().message);
}

Result<void> Agent::RegisterOnce() {
  // Registration presents the join token; everything after it, the node's credential.
  HttpClient join(config_.head_url, Millis(2000));
  join.set_bearer_token(config_.join_token);
  std::string key_pem;
  if (tls_) {
    // A fresh key at every registration: the head issues the node a certificate for it.
    join.set_tls(tls::ClientOptions{tls_->ca_pem, nullptr});
    key_pem = COHORT_TRY(tls::NewPrivateKeyPem());
    registration_.csr = COHORT_TRY(tls::MakeCsrPem(key_pem, config_.name));
  }
  registration_.free_ports = FindFreePorts(4);  // a job placed before the first heartbeat
  auto reply = COHORT_TRY(join.Post(api::routes::kAgentRegister, api::ToJson(registration_)));
  if (!reply.is_object() || !reply.contains("timing")) {
    return MakeError(ErrorCode::kInternal, "registration reply has no timing");
  }
  if (tls_) COHORT_TRY_VOID(TakeCertificate(reply, key_pem));
  timing_ = COHORT_TRY(api::AgentTimingFromJson(reply["timing"]));
  std::string credential;
  if (auto it = reply.find("node_credential"); it != reply.end()) {
    if (!it->is_string() || it->get<std::string>().empty() || it->get<std::string>().size() > 1024) {
      return MakeError(ErrorCode::kInternal, "registration reply: node_credential is not a credential");
    }
    credential = it->get<std::string>();
  }
  {
    MutexLock lock(mu_);
    node_credential_ = credential;
  }
  head_ = MakeHeadClient(credential);
  if (!executor_) {
    StartLeaseKeeper();
    Executor::Options opts;
    opts.work_dir = config_.work_dir;
    opts.shim_path = config_.shim_path;
    opts.kill_grace = Millis(timing_.kill_grace_ms);
    opts.task_user = config_.task_user;
    opts.node_name = config_.name;
    opts.container_runtimes = config_.container_runtimes;
    opts.container_devices = ContainerDevices();
    if (config_.cpu_bind == CpuBind::kCores) opts.cpu_pool = BindingPool(config_);
    if (leases_) opts.lease_path = leases_->path();
    opts.on_task_exit = [this] { Wake(); };
    executor_ = std::make_unique<Executor>(std::move(opts));
    MutexLock lock(mu_);
    executor_published_ = executor_.get();
  }
  LOG_INFO("registered with {} as {} (heartbeat {} ms, fence after {} ms)", config_.head_url, config_.name,
           timing_.heartbeat_interval_ms, timing_.fence_timeout_ms);
  return {};
}

std::function<std::vector<std::string>(const std::vector<int>&)> Agent::ContainerDevices() const {
  const bool real = std::any_of(gpus_.begin(), gpus_.end(), [](const GpuInfo& g) { return !g.simulated; });
  if (!real || config_.container_runtimes.empty() || config_.cdi_spec_dir.empty()) return nullptr;
  auto spec = MakeCdiSpec(gpus_, DiscoverCdiHostFiles());
  auto written = spec ? WriteCdiSpec(config_.cdi_spec_dir, *spec) : Result<std::string>(std::unexpected(spec.error()));
  if (!written) {
    LOG_WARN("container tasks get no GPUs on this node: cannot write its CDI spec: {}", written.error().message);
    return nullptr;
  }
  LOG_INFO("wrote the CDI spec of {} GPU(s) to {} (container tasks get --device {}=INDEX)", gpus_.size(), *written,
           kCdiKind);
  return [](const std::vector<int>& gpus) { return CdiDeviceNames(gpus); };
}

std::vector<std::pair<std::string, std::string>> Agent::RunningImages() const {
  std::set<TaskKey> running;
  if (Executor* e = executor()) {
    for (const auto& t : e->Snapshot()) {
      if (t.running) running.insert(t.key);
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  MutexLock lock(mu_);
  for (const auto& [key, image] : container_tasks_) {
    if (running.contains(key)) out.push_back(image);
  }
  return out;
}

void Agent::PruneLoop() {
  while (true) {
    {
      MutexLock lock(mu_);
      cv_.WaitFor(mu_, Millis(config_.image_prune_interval_ms), [this] {
        mu_.AssertHeld();
        return stopping_;
      });
      if (stopping_) return;
    }
    auto removed = images_->Prune(config_.image_max_unused_ms, NowUnixMs(), RunningImages());
    if (!removed) {
      LOG_WARN("image cache: {}", removed.error().message);
      continue;
    }
    for (const auto& i : *removed) {
      LOG_INFO("image cache: removed {} ({}, {:.1f} MB), unused for {} or more", fmt::join(i.names, ","),
               i.id.substr(0, 12), i.size_bytes / 1e6, FormatDuration(config_.image_max_unused_ms));
    }
  }
}

std::set<std::string> Agent::RunningContainerNames() const {
  std::set<std::string> out;
  if (Executor* ex = executor()) {
    for (const auto& t : ex->Snapshot()) {
      if (t.running) out.insert(ContainerName(config_.work_dir, t.key.job_id, t.key.attempt, t.key.rank));
    }
  }
  return out;
}

void Agent::SweepLoop() {
  ContainerSweeper::Options opts;
  opts.runtimes = config_.container_runtimes;
  opts.work_dir = config_.work_dir;
  opts.running = [this] { return RunningContainerNames(); };
  opts.timeout = Millis(30'000);
  opts.calls = &runtime_calls_;  // Stop cuts a call under way short
  ContainerSweeper sweeper(std::move(opts));
  const int64_t interval = config_.container_sweep_interval_ms;
  for (;;) {
    auto swept = sweeper.Sweep();
    for (const auto& p : swept.problems) LOG_WARN("container sweep: {}", p);
    for (const auto& r : swept.removed) {
      LOG_INFO("container sweep: removed {}: no task of this agent runs in it (its shim died with an earlier run)", r);
    }
    MutexLock lock(mu_);
    cv_.WaitFor(mu_, Millis(interval), [this] {
      mu_.AssertHeld();
      return stopping_;
    });
    if (stopping_) return;
  }
}

void Agent::StartLeaseKeeper() {
  LeaseKeeper::Options opts;
  // On a tmpfs when the machine has one (lease.h, LeaseDirectory: the work directory's file
  // system can stall a rename long enough to let the lease lapse).
  opts.path = AgentLeasePath(config_.work_dir);
  auto keeper = LeaseKeeper::Start(std::move(opts), Millis(timing_.fence_timeout_ms), FenceMargin(timing_));
  if (!keeper) {
    LOG_WARN("tasks run without a lease (only this agent can fence them): {}", keeper.error().message);
    return;
  }
  leases_ = std::move(*keeper);
}

api::Heartbeat Agent::BuildHeartbeat() {
  api::Heartbeat hb;
  hb.incarnation = registration_.incarnation;
  hb.applied_version = applied_version_;
  std::shared_ptr<const NodeSample> sample;
  Millis period{0};
  {
    MutexLock lock(mu_);
    sample = sample_;
    period = sample_period_;
  }
  // A sampler that stopped coming back (a GPU query stuck in the driver) leaves the
  // heartbeats going with its last readings, and no new GPU health event is seen: say so,
  // at most every 30 s.
  const auto now = SteadyClock::now();
  const SteadyClock::duration stale_after = std::max<SteadyClock::duration>(Millis(10'000), 3 * period);
  if (sample && now - sample->taken > stale_after && now - last_stale_log_ > std::chrono::seconds(30)) {
    last_stale_log_ = now;
    LOG_WARN("the latest GPU and /proc sample is {} old (one is due every {}): the sampler is stuck in a GPU "
             "query or a /proc read; heartbeats go on with its last readings",
             FormatDuration(now - sample->taken), FormatDuration(period));
  }
  static const NodeSample kNoSample;  // Stop's last heartbeat may come before any sample
  const NodeSample& latest = sample ? *sample : kNoSample;
  const std::string hung = CountGpuQueryHang(now);
  std::vector<TaskUsageSample> usage_samples;
  if (executor_) {
    // The executor's list is now's: a task started or exited since the sample is reported
    // as it is, its usage from the next sample.
    auto snapshot = executor_->Snapshot();
    if (sample && sample->seq != measured_seq_) {
      MeasureGpuMemory(snapshot, *sample);
      measured_seq_ = sample->seq;
    }
    for (const auto& s : snapshot) {
      api::TaskReport t;
      t.job = s.key.job_id;
      t.attempt = s.key.attempt;
      t.rank = s.key.rank;
      t.running = s.running;
      t.pid = s.pid;
      t.gpus = s.gpus;
      t.cpus = s.cpus;
      t.cpu_list = FormatCpuList(s.cpu_list);
      t.exit_code = std::clamp(s.exit_code, -1, 255);
      t.signal = s.signal;
      t.error = s.error;
      t.finished_ms = s.finished_ms;
      if (s.running) {
        if (auto u = latest.usage.find(s.pid); u != latest.usage.end()) {
          t.cpu_seconds = u->second.cpu_seconds;
          t.rss_bytes = u->second.rss_bytes;
        }
        if (auto m = gpu_memory_.find(s.key); m != gpu_memory_.end()) t.gpu_memory_bytes = m->second.bytes;
        if (auto w = gpu_over_.find(s.key); w != gpu_over_.end()) t.gpu_memory_warning = w->second;
        // A task sharing a GPU holds its part of it, not the whole GPU.
        auto sharing = sharing_tasks_.find(s.key);
        const double gpus = sharing != sharing_tasks_.end() ? sharing->second.share : static_cast<double>(s.gpus.size());
        usage_samples.push_back({t.job, t.attempt, t.rank, gpus, t.cpu_seconds, t.rss_bytes, t.gpu_memory_bytes,
                                 !t.gpu_memory_warning.empty()});
      }
      hb.tasks.push_back(std::move(t));
    }
  }
  // MIG instances are parts of one physical GPU: a health event on one (a GPU fallen off
  // the bus, an uncorrectable ECC error) is one on all of them, or the head would keep
  // placing jobs on, and restart them onto, the sick GPU's other instances.
  std::map<int, int64_t> parent_events;                // physical GPU -> its instances' events
  std::map<int, const GpuReading*> parent_worst;       // the instance with the most of them
  std::map<int, int> parent_of;                        // node index -> physical GPU (MIG only)
  for (const auto& info : gpus_) {
    if (info.mig_parent >= 0) parent_of[info.index] = info.mig_parent;
  }
  for (const auto& r : latest.gpus) {
    auto p = parent_of.find(r.index);
    if (p == parent_of.end() || r.health_events == 0) continue;
    parent_events[p->second] += r.health_events;
    const GpuReading*& worst = parent_worst[p->second];
    if (!worst || r.health_events > worst->health_events) worst = &r;
  }
  for (const auto& r : latest.gpus) {
    api::GpuReport g;
    g.index = r.index;
    int64_t events = r.health_events;
    std::string event = r.health_event;
    if (auto p = parent_of.find(r.index); p != parent_of.end() && parent_events.contains(p->second)) {
      events = parent_events[p->second];
      const GpuReading* worst = parent_worst[p->second];
      if (r.health_events == 0) {
        event = fmt::format("{} (on MIG instance {} of the same GPU {})", worst->health_event, worst->index, p->second);
      }
    }
    g.telemetry.utilization = r.utilization;
    g.telemetry.memory_used_bytes = r.memory_used_bytes;
    g.telemetry.memory_total_bytes = r.memory_total_bytes;
    g.telemetry.temperature_celsius = r.temperature_celsius;
    g.telemetry.power_watts = r.power_watts;
    g.telemetry.sm_clock_hz = r.sm_clock_hz;
    g.health_events = events + hang_events_;
    g.health_event = (hung.empty() ? event : hung).substr(0, 1024);
    hb.gpus.push_back(std::move(g));
  }
  if (latest.gpus.empty() && hang_events_ > 0) {
    // The first query never returned: no readings, but the GPUs are still this node's.
    for (const auto& info : gpus_) {
      api::GpuReport g;
      g.index = info.index;
      g.health_events = hang_events_;
      g.health_event = hung;
      hb.gpus.push_back(std::move(g));
    }
  }
  {
    MutexLock lock(mu_);
    last_readings_ = latest.gpus;
    last_tasks_ = std::move(usage_samples);
  }
  // Fresh at every heartbeat, not from the sample: the head hands one port to each job it
  // starts here and keeps the rest, and a list sent twice would hand a port out twice.
  hb.free_ports = FindFreePorts(4);
  return hb;
}

template <typename Query>
auto Agent::QueryGpus(Query query) -> decltype(query()) {
  gpu_query_since_.store(SteadyClock::now().time_since_epoch().count());
  auto result = query();
  gpu_query_since_.store(0);
  return result;
}

std::string Agent::CountGpuQueryHang(SteadyTime now) {
  const SteadyClock::rep since = gpu_query_since_.load();
  if (since != hang_query_) {
    // Another query (or none): what the last one added stays, and this one counts anew.
    hang_events_before_ = hang_events_;
    hang_query_ = since;
  }
  if (since == 0 || config_.gpu_monitor_timeout_ms <= 0) return "";
  const SteadyClock::duration stuck = now - SteadyTime(SteadyClock::duration(since));
  const int64_t intervals = stuck / Millis(config_.gpu_monitor_timeout_ms);
  if (intervals <= 0) return "";
  if (hang_events_before_ + intervals > hang_events_) {
    hang_events_ = hang_events_before_ + intervals;
    LOG_WARN("a GPU query has not returned for {}: every GPU of this node is reported unhealthy (the head places "
             "no new work on them and restarts the jobs on them elsewhere) until `cohort resume` once the driver "
             "answers again",
             FormatDuration(stuck));
  }
  return fmt::format("the GPU monitor's query has not returned for {} (a GPU or its driver stopped answering; NVML "
                     "hangs so when a GPU falls off the bus)",
                     FormatDuration(stuck));
}

Agent::NodeSample Agent::TakeSample() {
  NodeSample out;
  std::vector<bool> busy(gpus_.size(), false);
  if (Executor* executor = this->executor()) {
    auto snapshot = executor->Snapshot();
    // Each task by its shim's pid, and a container task's init as its second root, whose
    // PID namespace is the task's (proc_usage.h, container_root.h). The init's file is
    // read with /proc below.
    TaskRoots roots;
    std::map<TaskKey, int> shim_of;
    for (const auto& s : snapshot) {
      if (!s.running) continue;
      for (int g : s.gpus) {
        if (g >= 0 && static_cast<size_t>(g) < busy.size()) busy[static_cast<size_t>(g)] = true;
      }
      if (s.pid <= 0) continue;
      roots[s.pid] = {s.pid, 0};
      shim_of[s.key] = s.pid;
      if (s.container_root_path.empty()) continue;
      if (auto init = ReadContainerRoot(s.container_root_path); init && !roots.contains(init->pid)) {
        roots[init->pid] = {s.pid, init->start_ticks, /*namespace_init=*/true};
      }
    }
    // Each running `cohort exec` command is a root of its task (exec_session.h).
    if (exec_sessions_) {
      for (const ExecRoot& r : exec_sessions_->Roots()) {
        if (auto it = shim_of.find(r.key); it != shim_of.end() && !roots.contains(r.pid)) {
          roots[r.pid] = {it->second, r.start_ticks, /*namespace_init=*/false, r.cgroup};
        }
      }
    }
    TaskProcesses procs = ReadTaskProcesses(roots);
    out.usage = std::move(procs.usage);
    out.task_of = std::move(procs.task_of);
    if (monitor_) out.gpu_processes = QueryGpus([&] { return monitor_->Processes(); });
  }
  if (monitor_) out.gpus = QueryGpus([&] { return monitor_->Sample(busy, SteadyClock::now()); });
  out.taken = SteadyClock::now();
  return out;
}

void Agent::SampleLoop() {
  std::vector<int64_t> health_seen;  // each GPU's health-event counter in the last sample
  uint64_t seq = 0;
  while (true) {
    auto sample = std::make_shared<NodeSample>(TakeSample());
    sample->seq = ++seq;
    bool new_event = false;
    for (const auto& r : sample->gpus) {
      const size_t i = static_cast<size_t>(std::max(0, r.index));
      if (i >= health_seen.size()) health_seen.resize(i + 1, 0);
      new_event |= r.health_events > health_seen[i];
      health_seen[i] = r.health_events;
    }
    MutexLock lock(mu_);
    sample_ = std::move(sample);
    if (new_event) wake_ = true;
    cv_.NotifyAll();  // the loop waits for the first sample, and for wake_
    cv_.WaitFor(mu_, sample_period_, [this] {
      mu_.AssertHeld();
      return sample_wake_ || stopping_;
    });
    if (stopping_) return;
    sample_wake_ = false;  // a wake-up while the next sample is taken brings one more
  }
}

void Agent::MeasureGpuMemory(const std::vector<TaskStatus>& snapshot, const NodeSample& sample) {
  gpu_memory_.clear();
  if (!monitor_) return;
  const std::vector<GpuProcess>& processes = sample.gpu_processes;
  const std::map<int, int>& task_of = sample.task_of;
  for (const auto& s : snapshot) {
    if (!s.running || s.pid <= 0) continue;
    auto limit = gpu_limits_.find(s.key);
    TaskGpuMemory m = MeasureTaskGpuMemory(s.key.rank, s.pid, s.gpus,
                                           limit != gpu_limits_.end() ? limit->second : GpuMemoryLimit{}, processes,
                                           task_of);
    if (!m.over.empty()) {
      if (!gpu_over_.contains(s.key)) {
        LOG_WARN("job {} attempt {} rank {}: {}", s.key.job_id, s.key.attempt, s.key.rank, m.over);
        gpu_over_[s.key] = m.over;
      }
      if (limit != gpu_limits_.end() && limit->second.kill && gpu_killed_.insert(s.key).second) {
        LOG_WARN("stopping job {} attempt {} rank {}: over its GPU memory share", s.key.job_id, s.key.attempt,
                 s.key.rank);
        executor_->Stop(s.key, /*immediate=*/true, m.over);
      }
    }
    gpu_memory_[s.key] = std::move(m);
  }
}

Result<void> Agent::HeartbeatOnce() {
  // The send time is taken after the heartbeat is built (the executor's snapshot, the
  // latest sample, free ports): that time is the agent's, not the head's, and must not
  // shorten the tasks' lease.
  const auto start = SteadyClock::now();
  json body = api::ToJson(BuildHeartbeat());
  auto sent = SteadyClock::now();
  head_->set_timeout(HeartbeatTimeout(sent));
  auto reply_json = COHORT_TRY(head_->Post(api::routes::AgentHeartbeat(config_.name), body));
  auto reply = COHORT_TRY(api::HeartbeatReplyFromJson(reply_json));
  // Successful sends that came late enough to eat half the lease's room beyond the
  // interval leave the tasks little: say where the time went (the last reply's Apply, the wait for this beat, building
  // it, the head's answer), at most every 5 s.
  const auto answered = SteadyClock::now();
  if (last_beat_end_ != SteadyTime{} && sent - last_ok_send_ > SlowHeartbeatGap(timing_) &&
      answered - last_slow_log_ > std::chrono::seconds(5)) {
    last_slow_log_ = answered;
    LOG_WARN("heartbeats sent {} apart, answered after {} (the last reply applied in {}, then {} until this "
             "one, built in {}; the fence timeout is {})",
             FormatDuration(sent - last_ok_send_), FormatDuration(answered - sent), FormatDuration(last_apply_),
             FormatDuration(start - last_beat_end_), FormatDuration(sent - start),
             FormatDuration(timing_.fence_timeout_ms));
  }
  // The head has heard from us: the tasks may run for one more fence timeout, counted from
  // the send (a reply that arrives late grants no more). The lease keeper writes it on its
  // own thread, before Apply starts anything.
  last_ok_send_ = sent;
  if (leases_) leases_->Renew(sent, Millis(reply.timing.fence_timeout_ms), FenceMargin(reply.timing));
  Apply(reply);
  last_beat_end_ = SteadyClock::now();
  last_apply_ = last_beat_end_ - answered;
  return {};
}

void Agent::Apply(const api::HeartbeatReply& reply) {
  std::map<TaskKey, bool> known;  // key → running
  for (const auto& s : executor_->Snapshot()) known[s.key] = s.running;
  std::set<TaskKey> desired;
  for (const auto& t : reply.tasks) {
    TaskKey key = KeyOf(t.job, t.attempt, t.rank);
    desired.insert(key);
    if (known.contains(key)) continue;
    if (!t.has_details()) {
      // The head believed this node runs it (a heartbeat reported it) and left out its
      // launch: the next heartbeat does not report it, and the reply to that one has it.
      LOG_WARN("job {} attempt {} rank {}: no launch details in the head's reply; starting it on the next one",
               t.job, t.attempt, t.rank);
      continue;
    }
    TaskSpec spec;
    // The executor creates the checkpoint directory and gives it to the task's user.
    if (auto it = t.env.find("COHORT_CHECKPOINT_DIR"); it != t.env.end()) spec.owned_dirs.push_back(it->second);
    spec.key = key;
    spec.command = t.command;
    spec.hold = t.hold;
    spec.script = t.script;
    spec.env = t.env;
    spec.workdir = t.workdir;
    SetTaskOutput(t, config_.name, spec);
    spec.gpus = t.gpus;
    spec.cpus = t.cpus;
    spec.user = t.user;
    spec.container_image = t.container.image;
    spec.container_runtime = t.container.runtime;
    if (!simulated_memory_dir_.empty()) spec.env["COHORT_SIMULATED_GPU_MEMORY_DIR"] = simulated_memory_dir_;
    if (auto limit = GpuMemoryLimitFromEnv(t.env); !limit) {
      LOG_WARN("job {} rank {}: its GPU memory is not checked: {}", t.job, t.rank, limit.error().message);
    } else if (limit->share_bytes > 0) {
      gpu_limits_[key] = *limit;
    }
    if (t.env.contains("COHORT_GPU_SHARE") && !t.gpus.empty()) {
      // A part of one GPU: its MPS daemon, or time-slicing (gpu/sharing.h).
      const std::string task = fmt::format("{}.{}.{}", t.job, t.attempt, t.rank);
      if (auto r = sharing_->Prepare(task, t.gpus.front(), spec.env); !r) {
        LOG_WARN("job {} rank {}: {}; the GPU is time-sliced for it", t.job, t.rank, r.error().message);
        spec.env["COHORT_GPU_SHARING"] = "time-slicing";
      }
      // The part as the head wrote it ("0.5"); /metrics counts the task's GPUs by it.
      const std::string& share = t.env.at("COHORT_GPU_SHARE");
      char* end = nullptr;
      const double part = std::strtod(share.c_str(), &end);
      sharing_tasks_[key] = {t.gpus.front(), end != share.c_str() && part > 0 && part < 1 ? part : 1.0};
    }
    if (auto r = executor_->Launch(spec); !r) {
      LOG_WARN("cannot launch job {} rank {}: {}", t.job, t.rank, r.error().message);
    } else {
      if (!spec.container_image.empty()) {
        images_->NoteStarted(spec.container_runtime, spec.container_image, NowUnixMs());
        MutexLock lock(mu_);
        container_tasks_[key] = {spec.container_runtime, spec.container_image};
      }
      LOG_INFO("started job {} attempt {} rank {} (GPUs [{}])", t.job, t.attempt, t.rank, fmt::join(t.gpus, ","));
    }
  }
  // Checkpoint requests (cohort drain --now, a preemption, a time limit near): the job's
  // signal, once per task and request. A request is new when its time differs from the one
  // signalled: a drain's made right after the time limit's was answered reaches this agent
  // as a reply that asks for a checkpoint like the one before it did, with no reply between
  // them that asked for none. A request the head no longer makes is forgotten too (a head
  // that sends no request time: a later one signals again only then).
  for (const auto& t : reply.tasks) {
    TaskKey key = KeyOf(t.job, t.attempt, t.rank);
    if (!t.checkpoint_requested) checkpoint_signalled_.erase(key);
    if (!t.checkpoint_requested || t.checkpoint_signal <= 0) continue;
    auto signalled = checkpoint_signalled_.find(key);
    if (signalled != checkpoint_signalled_.end() && signalled->second == t.checkpoint_requested_ms) continue;
    if (executor_->Signal(key, t.checkpoint_signal)) {
      checkpoint_signalled_[key] = t.checkpoint_requested_ms;
      LOG_INFO("job {} attempt {} rank {}: sent signal {} (checkpoint requested{})", t.job, t.attempt, t.rank,
               t.checkpoint_signal,
               t.checkpoint_requested_ms > 0 ? " at " + FormatTimestamp(t.checkpoint_requested_ms) : std::string());
    }
  }
  std::erase_if(checkpoint_signalled_, [&](const auto& e) { return !desired.contains(e.first); });
  {
    MutexLock lock(mu_);
    std::erase_if(container_tasks_, [&](const auto& e) { return !desired.contains(e.first); });
  }
  std::erase_if(sharing_tasks_, [&](const auto& e) { return !desired.contains(e.first); });
  std::erase_if(gpu_limits_, [&](const auto& e) { return !desired.contains(e.first); });
  std::erase_if(gpu_over_, [&](const auto& e) { return !desired.contains(e.first); });
  std::erase_if(gpu_killed_, [&](const TaskKey& k) { return !desired.contains(k); });
  std::set<int> shared;
  for (const auto& [key, task] : sharing_tasks_) shared.insert(task.gpu);
  sharing_->Reconcile(shared);
  for (const auto& [key, running] : known) {
    if (running && !desired.contains(key)) {
      LOG_INFO("stopping job {} attempt {} rank {}: no longer assigned here", key.job_id, key.attempt, key.rank);
      executor_->Stop(key, /*immediate=*/false);
    }
  }
  for (const auto& a : reply.acked) executor_->Forget(KeyOf(a.job, a.attempt, a.rank));
  applied_version_ = std::max(applied_version_, reply.version);
  // The head scales the interval and the timeouts with the cluster's size (its
  // --heartbeat-rate-target): the newest reply's timing is the one to keep. The lease was
  // renewed with it already (HeartbeatOnce); a lease granted under a longer fence timeout
  // still runs to its end, which the head allows for (head/core/timing.h).
  const bool interval_changed = reply.timing.heartbeat_interval_ms != timing_.heartbeat_interval_ms;
  if (interval_changed || reply.timing.fence_timeout_ms != timing_.fence_timeout_ms) {
    LOG_INFO("the head asks for a heartbeat every {} (fence after {}, failure timeout {})",
             FormatDuration(reply.timing.heartbeat_interval_ms), FormatDuration(reply.timing.fence_timeout_ms),
             FormatDuration(reply.timing.failure_timeout_ms));
  }
  timing_ = reply.timing;
  // A request to the head may take as long as the new interval (MakeHeadClient): a client
  // made under a 1 s interval would give up after 1 s on a 10,000-node cluster's 10 s one.
  if (interval_changed && head_) head_ = MakeHeadClient(head_->bearer_token());
}

Millis Agent::RequestTimeout() const { return std::max(Millis(timing_.heartbeat_interval_ms), Millis(500)); }

Millis Agent::HeartbeatTimeout(SteadyTime sent) const {
  const auto lease_left =
      std::chrono::duration_cast<Millis>(last_ok_send_ + Millis(timing_.fence_timeout_ms) - sent);
  return std::max(RequestTimeout(), lease_left);
}

std::unique_ptr<HttpClient> Agent::MakeHeadClient(const std::string& credential) const {
  auto client = std::make_unique<HttpClient>(config_.head_url, RequestTimeout());
  client->set_bearer_token(credential);
  if (tls_) client->set_tls(*tls_);
  return client;
}

void Agent::Fence(const std::string& why) {
  if (!executor_) return;
  bool any = false;
  for (const auto& s : executor_->Snapshot()) any |= s.running;
  if (!any) return;
  LOG_WARN("fencing: killing every task on this node: {}", why);
  executor_->StopAll(/*immediate=*/true);
  fenced_ = true;
}

void Agent::Loop() {
  while (true) {
    {
      MutexLock lock(mu_);
      // The first heartbeat carries the first sample: the head takes the GPUs' health-event
      // counters of a node's first report as its baseline (head/core/gpu_health.cc), and
      // no task runs here before that heartbeat's reply. Later ones never wait for one.
      while (registered_ && !sample_ && !stopping_) cv_.Wait(mu_);
      if (stopping_) return;
      wake_ = false;
    }
    Result<void> r = registered_ ? HeartbeatOnce() : RegisterOnce();
    bool ok = r.has_value();
    if (ok && !registered_) {
      registered_ = true;
      continue;  // heartbeat right away
    }
    if (ok) {
      fenced_ = false;
      RenewCertificateIfDue();
    } else {
      OnFailure(r.error());
    }
    MutexLock lock(mu_);
    sample_period_ = Millis(std::max<int64_t>(1000, timing_.heartbeat_interval_ms));
    Millis wait = ok ? Millis(timing_.heartbeat_interval_ms) : Millis(std::min<int64_t>(200, timing_.heartbeat_interval_ms));
    cv_.WaitFor(mu_, wait, [this] {
      mu_.AssertHeld();
      return wake_ || stopping_;
    });
  }
}

void Agent::OnFailure(const Error& e) {
  if (registered_ && (e.code == ErrorCode::kNotFound || e.code == ErrorCode::kFailedPrecondition)) {
    LOG_WARN("head no longer knows this agent ({}); registering again", e.message);
    registered_ = false;
  }
  if (SteadyClock::now() - last_error_log_ > std::chrono::seconds(5)) {
    LOG_WARN("{} failed: {}", registered_ ? "heartbeat" : "registration", e.message);
    last_error_log_ = SteadyClock::now();
  }
  auto now = SteadyClock::now();
  int64_t silent = std::chrono::duration_cast<Millis>(now - last_ok_send_).count();
  // Checked on every failure, not only past the fence timeout, so that the task lease is
  // renewed before it runs out.
  auto head = ParseHttpUrl(config_.head_url);
  bool head_process_down = head && e.code == ErrorCode::kUnavailable && ConnectionRefused(head->host, head->port);
  if (head_process_down && silent < config_.head_down_grace_ms) {
    // Nobody can reschedule while the head is down: the tasks keep running, up to the
    // grace, and their lease with it (a stopped agent stops renewing it). The restarted
    // head gives every node a failure timeout from its start, later than `now`, so the
    // lease's deadline (`margin` past its expiry) is safe too.
    auto grace_end = last_ok_send_ + Millis(config_.head_down_grace_ms);
    auto until = std::min(now + Millis(timing_.fence_timeout_ms), grace_end);
    if (leases_) leases_->Renew(now, std::chrono::duration_cast<Millis>(until - now), FenceMargin(timing_));
    return;  // keep running and keep trying
  }
  // Past the fence timeout, as much more as this process's own scheduling delay explains
  // (LeaseKeeper::Allowance; bounded by the margin before the head may declare the node
  // DOWN, like the shims' leases).
  Millis allowance = leases_ ? leases_->Allowance(FenceMargin(timing_)) : Millis(0);
  if (!fenced_ && silent > timing_.fence_timeout_ms + allowance.count()) {
    Fence(fmt::format("no successful heartbeat for {}", FormatDuration(silent)));
  }
}

void Agent::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  runtime_calls_.CancelAll();  // a sweep or prune waiting on a hung runtime ends now
  health_checker_.reset();
  if (prune_thread_.joinable()) prune_thread_.join();
  if (sweep_thread_.joinable()) sweep_thread_.join();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (sample_thread_.joinable()) sample_thread_.join();
  if (executor_) {
    executor_->StopAll(/*immediate=*/false);
    executor_->WaitAllExited(Millis(timing_.kill_grace_ms + 2000));
    if (registered_) (void)HeartbeatOnce();  // report the exits now rather than at the failure timeout
  }
  // Its tasks were stopped: the lease is nobody's now, and a directory of its own on the
  // tmpfs goes with it (a killed agent's stays, for its next start to reuse).
  if (leases_) {
    const std::filesystem::path lease = leases_->path();
    leases_.reset();  // joins the keeper's thread: nothing writes the file any more
    std::error_code ec;
    std::filesystem::remove(lease, ec);
    std::filesystem::remove(lease.string() + ".tmp", ec);
    if (lease.parent_path() != std::filesystem::path(config_.work_dir)) std::filesystem::remove(lease.parent_path(), ec);
  }
  if (server_) server_->Stop();
  exec_sessions_.reset();
}

void Agent::Wait() {
  if (server_thread_.joinable()) server_thread_.join();
}

Millis SlowHeartbeatGap(const api::AgentTiming& t) {
  const int64_t interval = std::max<int64_t>(0, t.heartbeat_interval_ms);
  if (t.fence_timeout_ms <= interval) return Millis(t.fence_timeout_ms / 2);
  return Millis(interval + (t.fence_timeout_ms - interval) / 2);
}

int RunAgent(const AgentConfig& config) {
  auto agent = Agent::Start(config);
  if (!agent) {
    LOG_ERROR("{}", agent.error().message);
    return 1;
  }
  int sig = WaitForTerminationSignal();
  LOG_INFO("received {}, stopping tasks and exiting", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*agent)->Stop();
  (*agent)->Wait();
  return 0;
}

}  // namespace cohort::agent
