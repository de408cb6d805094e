// `cohort run -n N [flags] -- program args`: N local ranks with a job's environment,
// outside any cluster (like `torchrun --standalone`).
//
// Every rank gets the job contract's variables (api::TaskEnvironment, as the head builds
// them: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, COHORT_ATTEMPT, TORCHELASTIC_RESTART_COUNT, COHORT_NUM_NODES) less those
// only a cluster has (job id and name, node, head and report URLs), with
// COHORT_RENDEZVOUS=tcp://127.0.0.1:PORT, a store that rank 0 hosts (a separate free port
// from MASTER_PORT, which PyTorch's own store binds).
// The ranks share this terminal's output. Like torchrun, the first rank that fails
// stops the others (SIGTERM to each rank's process group, SIGKILL after a grace) and its
// exit code becomes this command's; Ctrl-C stops all ranks.
//
// Inside an allocation (`cohort alloc`: COHORT_JOB_ID set, and not inside a task of a job,
// where RANK is set) the command runs instead as a step on the allocation's nodes and GPUs,
// as srun inside salloc does (step.h): -N nodes, -n tasks and -G GPUs per node then ask
// for a part of what the allocation holds (default: all of it).
#include <signal.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "agent/net.h"
#include "api/job_env.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/step.h"
#include "common/signals.h"
#include "common/subprocess.h"

namespace cohort::cli {

namespace {

struct RunFlags {
  int ranks = 1;
  int gpus_per_rank = -1;  // -1: leave CUDA_VISIBLE_DEVICES alone
  std::string checkpoint_dir;
  std::string grace = "5s";
  std::vector<std::string> command;
  // A step (inside an allocation) only: 0 takes what the allocation holds.
  int step_nodes = 0;
  int step_gpus = 0;
};


int RunRanks(const RunFlags& f) {
  if (f.command.empty()) {
    return ReportError(Error{ErrorCode::kInvalidArgument, "give the program to run after --, e.g. cohort run -n 4 -- python3 train.py"});
  }
  auto grace = ParseDurationMs(f.grace, "--grace");
  if (!grace) return ReportError(grace.error());
  std::vector<int> ports = agent::FindFreePorts(2);
  if (ports.size() < 2) return ReportError(Error{ErrorCode::kUnavailable, "cannot find free TCP ports on this machine"});
  std::string cwd = std::filesystem::current_path().string();

  std::vector<Subprocess> procs;
  auto stop_all = [&](int sig) {
    for (auto& p : procs) p.Signal(sig, /*group=*/true);
  };
  // One unnamed node, no job id and no head: the contract's variables less the cluster's.
  api::Job job;
  job.spec.tasks_per_node = f.ranks;
  job.allocation.master_addr = "127.0.0.1";
  job.allocation.master_port = ports[0];
  job.allocation.nodes = {api::NodeAllocation{}};
  api::TaskEnvOptions env_options;
  env_options.rendezvous_url = fmt::format("tcp://127.0.0.1:{}", ports[1]);
  env_options.checkpoint_dir = f.checkpoint_dir;
  env_options.set_visible_devices = f.gpus_per_rank >= 0;
  for (int r = 0; r < f.ranks; ++r) {
    api::TaskPlacement task{r, r, {}};
    for (int g = 0; g < f.gpus_per_rank; ++g) task.gpus.push_back(r * f.gpus_per_rank + g);
    SpawnOptions o;
    o.argv = f.command;
    o.env = api::TaskEnvironment(job, job.allocation.nodes[0], task, env_options);
    o.cwd = cwd;
    o.new_process_group = true;  // Ctrl-C reaches `cohort run`, which stops the ranks in order
    o.parent_death_signal = SIGKILL;
    auto p = Subprocess::Spawn(o);
    if (!p) {
      stop_all(SIGKILL);
      for (auto& q : procs) (void)q.Wait();
      return ReportError(p.error());
    }
    procs.push_back(std::move(*p));
  }

  // Wait for every rank; the first failure (or a signal) stops the rest.
  int rc = 0;
  int failed_rank = -1;
  // Set once the ranks are being stopped (a rank failed, or a signal): the ranks that then
  // end by our SIGTERM are no failure of their own, and the exit code stays the first cause.
  std::optional<SteadyTime> kill_at;
  size_t running = procs.size();
  std::vector<bool> done(procs.size(), false);
  while (running > 0) {
    for (size_t r = 0; r < procs.size(); ++r) {
      if (done[r]) continue;
      if (auto st = procs[r].TryWait()) {
        done[r] = true;
        --running;
        if (!st->Success() && failed_rank < 0 && !kill_at) {
          failed_rank = static_cast<int>(r);
          rc = st->Code();
          std::fprintf(stderr, "cohort run: rank %zu %s; stopping the other ranks\n", r, st->ToString().c_str());
          stop_all(SIGTERM);
          kill_at = SteadyClock::now() + Millis(*grace);
        }
      }
    }
    if (int sig = PollTerminationSignal(Millis(20)); sig && !kill_at) {
      std::fprintf(stderr, "cohort run: %s, stopping %zu rank(s)\n", sig == SIGINT ? "interrupted" : "terminated", running);
      stop_all(SIGTERM);
      kill_at = SteadyClock::now() + Millis(*grace);
      rc = 128 + sig;
    }
    if (kill_at && SteadyClock::now() > *kill_at) {
      stop_all(SIGKILL);
      kill_at = SteadyClock::now() + std::chrono::hours(1);
    }
  }
  return rc;
}

}  // namespace

void AddRunCommand(CommandContext& ctx) {
  auto f = std::make_shared<RunFlags>();
  auto* sub = ctx.app.add_subcommand("run", "Run N local ranks with a job's environment (like torchrun --standalone)");
  sub->add_option("-n,--ranks,--ntasks", f->ranks,
                  "Number of ranks (default 1); inside an allocation, the step's tasks (default: all it holds), as "
                  "srun's -n/--ntasks")
      ->check(CLI::Range(1, 1024));
  sub->add_option("-N,--nodes", f->step_nodes,
                  "Inside an allocation (COHORT_JOB_ID): the step's nodes, its first N (default: all)")
      ->check(CLI::Range(1, api::kMaxNodes));
  sub->add_option("-G,--gpus,--gpus-per-node", f->step_gpus,
                  "Inside an allocation: GPUs per node the step needs; more than it holds is an error")
      ->check(CLI::Range(0, api::kMaxGpusPerNode));
  sub->add_option("--gpus-per-rank", f->gpus_per_rank,
                  "Set CUDA_VISIBLE_DEVICES to consecutive GPUs per rank (default: leave it alone)")
      ->check(CLI::Range(0, 64));
  sub->add_option("--checkpoint-dir", f->checkpoint_dir, "COHORT_CHECKPOINT_DIR for the ranks");
  sub->add_option("--grace", f->grace, "SIGTERM to SIGKILL delay when stopping ranks (default 5s)");
  sub->add_option("command", f->command, "Program and arguments (after --)")->expected(-1);
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, sub, &global] {
    BlockTerminationSignals();
    const std::string allocation = StepAllocationFromEnvironment();
    if (allocation.empty()) {
      if (sub->count("--nodes") > 0 || sub->count("--gpus") > 0) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                     "-N and -G ask for a part of an allocation: run them inside cohort alloc "
                                     "(COHORT_JOB_ID set)")
                               .error());
      }
      return RunRanks(*f);
    }
    api::StepRequest req;
    req.command = f->command;
    req.nodes = f->step_nodes;
    req.tasks = sub->count("--ranks") > 0 ? f->ranks : 0;
    req.gpus_per_node = f->step_gpus;
    return RunStep(allocation, req, global);
  });
}

}  // namespace cohort::cli
