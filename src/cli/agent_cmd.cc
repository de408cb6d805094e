// `cohort agent`: run a worker agent.
#include <fmt/format.h>

#include "agent/agent.h"
#include "api/types.h"
#include "cli/cli.h"
#include "cli/daemon_flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "sched/constraints.h"

namespace cohort::cli {

void AddAgentCommand(CommandContext& ctx) {
  struct Flags {
    agent::AgentConfig config;
    std::string head_down_grace = "60s";
    std::string log_level = "info";
    std::string health_check_interval = "60s";
    std::string gpu_monitor_timeout = "30s";
    std::string join_token_file;
    std::string task_user = "job";
    std::string cpu_bind = "none";
    std::vector<std::string> container_runtimes;
    std::vector<std::string> topology;
    std::string image_max_unused = "0";
    std::string container_sweep_interval = "60s";
    std::string memory;
    std::string simulated_mig;
  };
  auto f = std::make_shared<Flags>();
  auto* sub = ctx.app.add_subcommand("agent", "Run a worker agent: register GPUs, run tasks");
  sub->add_option("--head", f->config.head_url, "Head URL, e.g. https://10.0.0.1:8470")->required();
  sub->add_option("--name", f->config.name, "Node name (default: host name)");
  sub->add_option("--address", f->config.address, "Address other nodes reach this one at (default: detected)");
  sub->add_option("--listen", f->config.listen_host, "Address the agent's HTTP server binds (default: --address)");
  sub->add_option("--port", f->config.port, "Agent HTTP port (default 0: any free port)")->check(CLI::Range(0, 65535));
  sub->add_option("--simulated-gpus", f->config.simulated_gpus,
                  "Present N simulated GPUs instead of the real ones (NVML)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--simulated-gpu-model", f->config.simulated_layout.model,
                  "Simulated GPUs' model as NVML names it, e.g. 'NVIDIA H100 80GB HBM3' (jobs ask for it as h100); "
                  "their memory is what the name states (80GB), else 80 GiB");
  sub->add_option("--simulated-nvlink-island", f->config.simulated_layout.nvlink_island,
                  "Simulated GPUs form NVLink islands of N consecutive GPUs")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--simulated-pcie-switch", f->config.simulated_layout.pcie_switch,
                  "Simulated GPUs sit under PCIe switches of N consecutive GPUs")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--simulated-mig", f->simulated_mig,
                  "Simulated GPU 0 in MIG mode, carved into PROFILE:COUNT[,...] instances, e.g. 1g.10gb:3,3g.40gb:1");
  sub->add_option("--cpus", f->config.cpus, "CPUs to offer (default: the CPUs this process may run on, its affinity mask)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--cpu-bind", f->cpu_bind,
                  "Bind each task to its own CPUs, as many as its job's cpus_per_task: 'cores' (one agent per "
                  "machine; sets OMP_NUM_THREADS to the CPUs bound) or 'none' (default: tasks run on all of the agent's "
                  "CPUs)");
  sub->add_option("--topology", f->topology,
                  "Topology labels KEY=VALUE of this node (repeatable or comma-separated), e.g. "
                  "rack=r1,switch=s3: multi-node gangs prefer the fewest switches; the gateway prefers replicas "
                  "whose site a request names");
  sub->add_option("--features", f->config.features,
                  "Node features jobs select with --constraint, comma-separated (e.g. a100,ib,nvlink)")
      ->delimiter(',');
  sub->add_option("--memory", f->memory,
                  "Memory offered to jobs that ask with --mem: 512 (MiB), 64G, 1T (default: the machine's)");
  sub->add_option("--work-dir", f->config.work_dir, "Task logs and status files (default ~/.cohort/agent-NAME)");
  sub->add_option("--head-down-grace", f->head_down_grace,
                  "Keep tasks running this long while the head refuses connections (default 60s; 0 fences at once)");
  sub->add_option("--health-check", f->config.health_check,
                  "GPU health check, run with /bin/sh -c every interval: a non-zero exit marks GPUs unhealthy "
                  "(lines 'gpu N: reason' name them; otherwise all)");
  sub->add_option("--health-check-interval", f->health_check_interval, "How often to run --health-check (default 60s)");
  sub->add_option("--gpu-monitor-timeout", f->gpu_monitor_timeout,
                  "A GPU query (NVML) that has not returned for this long marks every GPU of the node unhealthy, "
                  "as a failed health check does (a GPU that fell off the bus hangs NVML); 0: never (default 30s)");
  sub->add_option("--join-token", f->config.join_token,
                  "Token that lets this node join (role agent; default $COHORT_JOIN_TOKEN, or the head's "
                  "state_dir/join.token with --join-token-file)");
  sub->add_option("--join-token-file", f->join_token_file, "Read --join-token from this file");
  sub->add_option("--head-ca", f->config.head_ca_file,
                  "The head's certificate authority, for an https head (its state_dir/tls/ca.crt; default "
                  "$COHORT_CA_FILE)");
  sub->add_option("--task-user", f->task_user,
                  "Which account runs tasks: 'job' (default: each task as its job's user, which needs a root "
                  "agent; a non-root agent runs only its own user's jobs) or 'agent' (every task as this agent's "
                  "user, whatever the job names: a single-user cluster); the last one given counts")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--container-runtime", f->container_runtimes,
                  "A container runtime this node offers to jobs with `container:`, as KIND=COMMAND (kind podman "
                  "or docker; repeat for both), or 'none' (default: podman=podman and docker=docker)");
  sub->add_option("--image-max-unused", f->image_max_unused,
                  "Remove container images no task started in for this long (checked every 10 minutes): 7d, "
                  "12h (default 0: keep them until `cohort images rm|prune`)");
  sub->add_option("--container-sweep-interval", f->container_sweep_interval,
                  "How often to remove the containers of this agent that no task of its own runs any more (their "
                  "shim died with an earlier run), besides once at the start: 30s, 10m, at least 1s (default 60s; "
                  "0: never sweep)");
  sub->add_option("--cdi-spec-dir", f->config.cdi_spec_dir,
                  "Where to write the CDI spec of this node's GPUs, which container tasks get their GPUs by "
                  "(cohort.dev/gpu=INDEX); a directory the runtime reads (default /var/run/cdi; '' for none)");
  AddLogLevelFlag(sub, f->log_level);
  ctx.on_run(sub, [f] {
    if (auto t = ResolveJoinToken(f->config.join_token, f->join_token_file); !t) {
      return ReportError(t.error());
    } else {
      f->config.join_token = *t;
    }
    auto grace = ParseDurationMs(f->head_down_grace, "--head-down-grace");
    if (!grace) return ReportError(grace.error());
    f->config.head_down_grace_ms = *grace;
    auto check_interval = ParseDurationMs(f->health_check_interval, "--health-check-interval");
    if (!check_interval) return ReportError(check_interval.error());
    if (*check_interval < 100) {
      return ReportError(Error{ErrorCode::kInvalidArgument, "--health-check-interval must be at least 100ms",
                               "health_check_interval"});
    }
    f->config.health_check_interval_ms = *check_interval;
    auto monitor_timeout = ParseDurationMs(f->gpu_monitor_timeout, "--gpu-monitor-timeout");
    if (!monitor_timeout) return ReportError(monitor_timeout.error());
    if (*monitor_timeout != 0 && *monitor_timeout < 1000) {
      return ReportError(Error{ErrorCode::kInvalidArgument,
                               fmt::format("--gpu-monitor-timeout must be 0 (never) or at least 1s, got {}",
                                           f->gpu_monitor_timeout),
                               "gpu_monitor_timeout"});
    }
    f->config.gpu_monitor_timeout_ms = *monitor_timeout;
    auto max_unused = ParseDurationMs(f->image_max_unused, "--image-max-unused");
    if (!max_unused) return ReportError(max_unused.error());
    f->config.image_max_unused_ms = *max_unused;
    auto sweep_interval = ParseDurationMs(f->container_sweep_interval, "--container-sweep-interval");
    if (!sweep_interval) return ReportError(sweep_interval.error());
    if (*sweep_interval != 0 && *sweep_interval < 1000) {
      return ReportError(Error{ErrorCode::kInvalidArgument,
                               fmt::format("--container-sweep-interval must be 0 (never sweep) or at least 1s, got "
                                           "{} ms (each sweep lists the runtime's containers)", *sweep_interval),
                               "container_sweep_interval"});
    }
    f->config.container_sweep_interval_ms = *sweep_interval;
    for (const std::string& labels : f->topology) {
      // KEY=VALUE, repeated or comma-separated (rack=r1,switch=s3).
      for (size_t start = 0; start <= labels.size();) {
        const size_t comma = std::min(labels.find(',', start), labels.size());
        const std::string label = labels.substr(start, comma - start);
        start = comma + 1;
        const size_t eq = label.find('=');
        if (eq == std::string::npos) {
          return ReportError(Error{ErrorCode::kInvalidArgument, "--topology: expected KEY=VALUE, got '" + label + "'",
                                   "topology"});
        }
        f->config.labels[label.substr(0, eq)] = label.substr(eq + 1);
      }
    }
    if (!f->simulated_mig.empty()) {
      auto mig = agent::ParseSimulatedMig(f->simulated_mig);
      if (!mig) return ReportError(mig.error());
      f->config.simulated_layout.mig = std::move(*mig);
    }
    if (auto v = api::ValidateNodeLabels(f->config.labels, "--topology"); !v) return ReportError(v.error());
    if (auto v = api::ValidateNodeFeatures(f->config.features, "--features"); !v) return ReportError(v.error());
    if (!f->memory.empty()) {
      auto mb = sched::ParseMemoryMb(f->memory, "--memory");
      if (!mb) return ReportError(mb.error());
      f->config.memory_bytes = *mb << 20;
    }
    auto task_user = agent::ParseTaskUserPolicy(f->task_user);
    if (!task_user) return ReportError(task_user.error());
    f->config.task_user = *task_user;
    auto cpu_bind = agent::ParseCpuBind(f->cpu_bind);
    if (!cpu_bind) return ReportError(cpu_bind.error());
    f->config.cpu_bind = *cpu_bind;
    if (!f->container_runtimes.empty()) {
      auto runtimes = agent::ParseContainerRuntimes(f->container_runtimes);
      if (!runtimes) return ReportError(runtimes.error());
      f->config.container_runtimes = std::move(*runtimes);
    }
    BlockTerminationSignals();
    InitLogging(f->config.name.empty() ? "agent" : "agent " + f->config.name, f->log_level);
    return agent::RunAgent(f->config);
  });
}

}  // namespace cohort::cli
