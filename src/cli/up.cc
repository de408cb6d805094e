// `cohort up`: a whole cluster on this machine in one command.
//
// Starts a head and N agents as child processes (each in its own process group, each
// killed by the kernel if `up` itself dies), waits until every agent has registered,
// prints how to use the cluster, and on Ctrl-C or SIGTERM stops the agents (which stop
// their tasks and report the exits), then the head. Daemon logs go to files under the
// state directory.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/gpu/gpu.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/daemon_flags.h"
#include "common/client_config.h"
#include "common/tls.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/subprocess.h"

namespace cohort::cli {

namespace fs = std::filesystem;

namespace {

struct UpFlags {
  int agents = 2;
  int gpus_per_agent = -1;  // -1: real GPUs for a single agent if NVML finds some, else 4 simulated
  int cpus_per_agent = 16;
  int port = 8470;
  std::string state_dir;
  TimingFlags timing;
  std::string log_level = "info";
  bool insecure = false;
};

struct Daemon {
  std::string name;
  std::string log;
  Subprocess proc;
};

std::string Tail(const std::string& path, size_t bytes = 2000) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

Result<Daemon> SpawnDaemon(const std::string& name, std::vector<std::string> args, const std::string& log) {
  SpawnOptions o;
  o.argv = std::move(args);
  o.stdout_path = log;
  o.new_process_group = true;  // Ctrl-C reaches only `up`, which stops the daemons in order
  o.parent_death_signal = SIGTERM;
  auto p = COHORT_TRY(Subprocess::Spawn(o));
  return Daemon{name, log, std::move(p)};
}

void StopDaemon(Daemon& d, Millis grace) {
  if (!d.proc.valid()) return;
  d.proc.Signal(SIGTERM);
  if (!d.proc.WaitFor(grace)) {
    std::fprintf(stderr, "cohort up: %s did not stop within %s; killing it\n", d.name.c_str(),
                 FormatDuration(grace.count()).c_str());
    d.proc.Signal(SIGKILL);
    (void)d.proc.Wait();
  }
}


int RunUp(UpFlags& f) {
  auto timing = f.timing.Resolve();
  if (!timing) return ReportError(timing.error());
  if (f.state_dir.empty()) {
    const char* home = std::getenv("HOME");
    f.state_dir = std::string(home ? home : "/tmp") + "/.cohort/up";
  }
  std::error_code ec;
  fs::create_directories(f.state_dir, ec);
  if (ec) return ReportError(Error{ErrorCode::kInvalidArgument, "cannot create " + f.state_dir + ": " + ec.message()});
  f.state_dir = fs::absolute(f.state_dir).string();

  int gpus = f.gpus_per_agent;
  bool simulated = true;
  if (gpus < 0) {
    auto real = agent::DiscoverNvmlGpus();
    if (real && !real->empty() && f.agents == 1) {
      simulated = false;
      gpus = static_cast<int>(real->size());
    } else {
      gpus = 4;
    }
  }

  const std::string self = SelfExePath();
  std::string port_file = f.state_dir + "/head.port";
  fs::remove(port_file, ec);
  std::vector<std::string> timing_args = {
      "--heartbeat-interval", fmt::format("{}ms", timing->heartbeat_interval_ms),
      "--failure-timeout",    fmt::format("{}ms", timing->failure_timeout_ms),
      "--fence-timeout",      fmt::format("{}ms", timing->fence_timeout_ms),
      "--kill-grace",         fmt::format("{}ms", timing->kill_grace_ms)};
  std::vector<std::string> head_args = {self, "head", "--port", std::to_string(f.port), "--state-dir",
                                        f.state_dir + "/head", "--port-file", port_file, "--log-level", f.log_level};
  head_args.insert(head_args.end(), timing_args.begin(), timing_args.end());
  if (f.insecure) head_args.push_back("--insecure");
  auto head = SpawnDaemon("head", head_args, f.state_dir + "/head.log");
  if (!head) return ReportError(head.error());

  // The head writes its port once it listens.
  int port = 0;
  auto deadline = SteadyClock::now() + std::chrono::seconds(15);
  while (port == 0) {
    if (auto st = head->proc.TryWait()) {
      std::fprintf(stderr, "cohort up: the head exited (%s). Its log (%s):\n%s\n", st->ToString().c_str(),
                   head->log.c_str(), Tail(head->log).c_str());
      return 1;
    }
    std::ifstream in(port_file);
    if (!(in >> port)) port = 0;
    if (port == 0) {
      if (SteadyClock::now() > deadline) {
        StopDaemon(*head, Millis(3000));
        return ReportError(Error{ErrorCode::kDeadlineExceeded, "the head did not start within 15 s; see " + head->log});
      }
      std::this_thread::sleep_for(Millis(20));
    }
  }
  // The head serves HTTPS (--insecure: HTTP) with a certificate from the authority it made
  // in its state directory, which the agents and this command trust.
  std::string url = fmt::format("{}://127.0.0.1:{}", f.insecure ? "http" : "https", port);
  const std::string ca_file = f.state_dir + "/head/tls/ca.crt";

  std::vector<Daemon> agents;
  auto stop_all = [&] {
    for (auto& a : agents) a.proc.Signal(SIGTERM);
    for (auto& a : agents) StopDaemon(a, Millis(timing->kill_grace_ms + 5000));
    StopDaemon(*head, Millis(10000));
  };
  for (int i = 1; i <= f.agents; ++i) {
    std::string name = fmt::format("node-{}", i);
    std::vector<std::string> args = {self, "agent", "--head", url, "--name", name, "--address", "127.0.0.1",
                                     "--cpus", std::to_string(f.cpus_per_agent), "--work-dir",
                                     f.state_dir + "/" + name, "--log-level", f.log_level,
                                     // One user's cluster: tasks run as whoever ran `cohort up`.
                                     "--task-user", "agent"};
    // The head's first start wrote the agents' join token there (head/auth.h).
    if (!f.insecure) {
      args.insert(args.end(), {"--join-token-file", f.state_dir + "/head/join.token", "--head-ca", ca_file});
    }
    if (simulated) {
      args.push_back("--simulated-gpus");
      args.push_back(std::to_string(gpus));
    }
    auto a = SpawnDaemon(name, args, f.state_dir + "/" + name + ".log");
    if (!a) {
      stop_all();
      return ReportError(a.error());
    }
    agents.push_back(std::move(*a));
  }

  // Wait until every agent has registered and is UP.
  HttpClient client(url, Millis(2000));
  if (!f.insecure) {
    std::ifstream admin(f.state_dir + "/head/admin.token");
    std::string token;
    std::getline(admin, token);
    client.set_bearer_token(token);
    auto ca = tls::ReadCaFile(ca_file);
    if (!ca) {
      stop_all();
      return ReportError(ca.error());
    }
    client.set_tls(tls::ClientOptions{*ca, nullptr});
  }
  deadline = SteadyClock::now() + std::chrono::seconds(20);
  while (true) {
    int up = 0;
    if (auto reply = client.Get(api::routes::kNodes); reply) {
      auto nodes = api::NodeListFromJson(*reply);
      if (!nodes) {
        stop_all();
        return ReportError(FromHead(std::move(nodes), "node list").error());
      }
      for (const auto& n : *nodes) {
        bool ours = std::any_of(agents.begin(), agents.end(), [&](const Daemon& d) { return d.name == n.node.name; });
        if (ours && n.node.state == api::NodeState::kUp) ++up;
      }
    }
    if (up == f.agents) break;
    for (auto& a : agents) {
      if (auto st = a.proc.TryWait()) {
        std::fprintf(stderr, "cohort up: agent %s exited (%s). Its log (%s):\n%s\n", a.name.c_str(),
                     st->ToString().c_str(), a.log.c_str(), Tail(a.log).c_str());
        stop_all();
        return 1;
      }
    }
    if (SteadyClock::now() > deadline || PollTerminationSignal(Millis(50))) {
      std::fprintf(stderr, "cohort up: only %d of %d agents registered; see logs in %s\n", up, f.agents,
                   f.state_dir.c_str());
      stop_all();
      return 1;
    }
  }

  std::printf("Cohort is up: head %s, %d node(s) x %d %sGPU(s)\n", url.c_str(), f.agents, gpus,
              simulated ? "simulated " : "");
  if (f.insecure) {
    std::printf("  dashboard:      %s/\n", url.c_str());
  } else {
    std::printf("  dashboard:      %s/  (sign in with the token in %s/head/admin.token)\n", url.c_str(),
                f.state_dir.c_str());
  }
  std::printf("  live view:      cohort top\n");
  std::printf("  state and logs: %s\n", f.state_dir.c_str());
  // The head's first start wrote itself into the client config unless that names another
  // head (a login, or another cluster still up): then this shell needs the variables.
  const std::string config_path = ClientConfigPath();
  auto config = config_path.empty() ? Result<std::optional<ClientConfig>>(std::nullopt) : ReadClientConfig(config_path);
  const std::string named = config && *config ? (*config)->head : "";
  if (named != url) {
    if (!named.empty()) std::printf("  %s names another head (%s); in this shell:\n", config_path.c_str(), named.c_str());
    if (f.insecure) {
      std::printf("  export COHORT_HEAD=%s\n", url.c_str());
    } else {
      std::printf("  export COHORT_HEAD=%s COHORT_CA_FILE=%s COHORT_TOKEN=$(cat %s/head/admin.token)\n", url.c_str(),
                  ca_file.c_str(), f.state_dir.c_str());
    }
  }
  std::printf("  try: cohort nodes; cohort submit -N 2 -n 4 -G 4 -- examples/hello_rank.sh; cohort queue\n");
  std::printf("  help: cohort help (topics), cohort COMMAND --help\n");
  std::printf("Press Ctrl-C to stop.\n");
  std::fflush(stdout);

  int rc = 0;
  while (true) {
    if (int sig = PollTerminationSignal(Millis(200)); sig) {
      std::printf("\ncohort up: %s received, stopping %zu agent(s) and the head...\n",
                  sig == SIGINT ? "Ctrl-C" : "SIGTERM", agents.size());
      break;
    }
    if (auto st = head->proc.TryWait()) {
      std::fprintf(stderr, "cohort up: the head exited unexpectedly (%s); see %s\n", st->ToString().c_str(),
                   head->log.c_str());
      rc = 1;
      break;
    }
    for (auto& a : agents) {
      if (a.proc.valid()) {
        if (auto st = a.proc.TryWait()) {
          std::fprintf(stderr, "cohort up: agent %s exited (%s); see %s\n", a.name.c_str(), st->ToString().c_str(),
                       a.log.c_str());
        }
      }
    }
  }
  stop_all();
  std::printf("Cohort stopped.\n");
  return rc;
}

}  // namespace

void AddUpCommand(CommandContext& ctx) {
  auto f = std::make_shared<UpFlags>();
  auto* sub = ctx.app.add_subcommand("up", "Start a local cluster: a head and N agents on this machine");
  sub->add_option("-a,--agents", f->agents, "Number of agents (nodes), default 2")->check(CLI::Range(1, 256));
  sub->add_option("-g,--gpus-per-agent", f->gpus_per_agent,
                  "Simulated GPUs per agent (default: real GPUs for one agent when present, else 4 simulated)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--cpus-per-agent", f->cpus_per_agent, "CPUs each agent offers (default 16)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--port", f->port, "Head port (default 8470; 0 picks a free one)")->check(CLI::Range(0, 65535));
  sub->add_option("--state-dir", f->state_dir, "State and logs (default ~/.cohort/up)");
  sub->add_flag("--insecure", f->insecure, "Run the head with --insecure: no credentials asked of anyone");
  f->timing.AddTo(sub);
  AddLogLevelFlag(sub, f->log_level);
  ctx.on_run(sub, [f] {
    BlockTerminationSignals();
    return RunUp(*f);
  });
}

}  // namespace cohort::cli
