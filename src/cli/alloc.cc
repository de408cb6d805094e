// `cohort alloc [-N nodes] [-G gpus] [-n tasks] [-t time] [flags] [-- COMMAND ARGS...]`:
// hold an allocation and run a command (or the user's shell) here inside it, like Slurm's
// salloc.
//
// It submits an allocation (api::JobSpec::allocation: a job that holds its nodes and GPUs
// and runs nothing of its own), prints "waiting for resources: <reason>" while it is
// PENDING, then runs COMMAND, or $SHELL (else /bin/sh), on this machine with
// COHORT_JOB_ID and SLURM_JOB_ID, the node list (COHORT_NODELIST, SLURM_JOB_NODELIST), the
// node count (COHORT_NUM_NODES, SLURM_NNODES) and the head (COHORT_HEAD, and
// COHORT_CONTEXT when one was named) in its environment, so `cohort run` there runs steps
// on the allocation's nodes (step.h) and `cohort exec $COHORT_JOB_ID` runs beside its tasks.
//
// The allocation is released when the command exits (the job SUCCEEDED for exit 0, else
// FAILED with its code: POST /v1/jobs/{id}/end), and on SIGHUP, SIGTERM or SIGINT here (the
// command gets SIGHUP and SIGTERM, SIGKILL after 5 s; the job is CANCELLED and alloc exits
// 128 + signal). Ctrl-C at an interactive shell (no COMMAND, a terminal) belongs to the
// shell and does not release it. When the allocation ends on its own (its time limit, a
// cancel, a node lost) the command gets the same signals and alloc exits with its code.
// alloc's own exit code is the command's; 1 when the allocation ended before it started, 2
// for bad flags, 3 when the head cannot be reached.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <variant>

#include "api/job_env.h"
#include "cli/client.h"
#include "cli/suggest.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/subprocess.h"

namespace cohort::cli {
namespace {

constexpr Millis kPendingPoll{250};
constexpr Millis kRunningPoll{1'000};
constexpr Millis kCommandGrace{5'000};

// The signals that release the allocation, blocked here and read with sigtimedwait.
sigset_t ReleaseSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// Waits up to `timeout` for a releasing signal; its number, or 0.
int PollReleaseSignal(Millis timeout) {
  const sigset_t set = ReleaseSignals();
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1'000'000)};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// Ends the allocation for its holder; a failure is reported but does not change alloc's
// exit code (the head ends the allocation at its time limit, or `cohort cancel` does).
void EndAllocation(const HttpClient& head, api::JobId id, int exit_code, int signal) {
  auto ended = head.Post(api::routes::JobEnd(id), json{{"exit_code", exit_code}, {"signal", signal}});
  if (!ended) {
    std::fprintf(stderr, "cohort alloc: could not release allocation %lld: %s (cohort cancel %lld releases it)\n",
                 static_cast<long long>(id), ended.error().message.c_str(), static_cast<long long>(id));
    return;
  }
  std::fprintf(stderr, "cohort alloc: released allocation %lld\n", static_cast<long long>(id));
}

// Stops the command: SIGHUP and SIGTERM (its group too when it leads one), SIGKILL after
// the grace. Returns its exit status as the shell's convention has it.
int StopCommand(Subprocess& child) {
  for (int sig : {SIGHUP, SIGTERM, SIGCONT}) child.Signal(sig);
  const SteadyTime kill_at = SteadyClock::now() + kCommandGrace;
  while (true) {
    if (auto st = child.TryWait()) return st->Code();
    if (SteadyClock::now() >= kill_at) {
      child.Signal(SIGKILL);
      auto st = child.Wait();
      return st ? st->Code() : 128 + SIGKILL;
    }
    std::this_thread::sleep_for(Millis(20));
  }
}

// Polls the allocation until it is RUNNING; prints why it waits whenever that changes.
// Returns the job, or the exit code to leave with (released on a signal, ended early).
std::variant<api::Job, int> WaitUntilRunning(const HttpClient& head, api::Job job) {
  std::string shown;
  while (job.state == api::JobState::kPending) {
    if (job.reason != shown && !job.reason.empty()) {
      std::fprintf(stderr, "cohort alloc: waiting for resources: %s\n", job.reason.c_str());
      shown = job.reason;
    }
    if (int sig = PollReleaseSignal(kPendingPoll)) {
      EndAllocation(head, job.id, 128 + sig, sig);
      return 128 + sig;
    }
    auto j = head.Get(api::routes::Job(job.id));
    if (!j) {
      if (ExitCodeFor(j.error()) == 3) continue;  // a head restarting: keep waiting
      return ReportError(j.error());
    }
    auto next = api::JobFromJson(*j);
    if (!next) return ReportError(next.error());
    job = std::move(*next);
  }
  if (job.state != api::JobState::kRunning) {
    return ReportError(Error{ErrorCode::kFailedPrecondition,
                             fmt::format("allocation {} ended before it started: {}", job.id, FinalStateLine(job))});
  }
  return job;
}

int RunAlloc(const SubmitFlags& flags, const std::vector<std::string>& command, const CLI::App* sub,
             const GlobalOptions& global) {
  // Anything left over is a mistake (an unknown flag, a command without --).
  for (const auto& arg : sub->remaining(false)) {
    if (arg == "--") continue;
    const std::string typed = arg.substr(0, arg.find('='));
    if (std::string slurm = typed.starts_with("-") ? SlurmFlagHint(typed) : ""; !slurm.empty()) {
      return ReportError(
          MakeError(ErrorCode::kInvalidArgument, fmt::format("unknown option '{}': {}", typed, slurm)).error());
    }
    // Every one-letter flag is one edit from any other: a guess would be noise.
    auto close = typed.starts_with("--") ? ClosestNames(typed, FlagNames(*sub)) : std::vector<std::string>{};
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                 fmt::format("unexpected '{}'{} (see cohort alloc --help; the command to run goes "
                                             "after --: cohort alloc -N 2 -- CMD)",
                                             arg, close.empty() ? "" : "; did you mean " + close[0] + "?"))
                           .error());
  }
  auto spec = BuildSubmitSpec(json{{"kind", "allocation"}}, flags, "");
  if (!spec) return ReportError(spec.error());

  // From here a release signal is read, never delivered: the allocation is ended first.
  const sigset_t release = ReleaseSignals();
  sigprocmask(SIG_BLOCK, &release, nullptr);
  HttpClient head = HeadClient(global);
  auto created = head.Post(api::routes::kJobs, SubmitBody(*spec, flags.user.has_value(), head));
  if (!created) return ReportError(WithContext(created.error(), "requesting the allocation"));
  auto submitted = api::JobFromJson(*created);
  if (!submitted) return ReportError(submitted.error());
  std::fprintf(stderr, "cohort alloc: pending allocation %lld\n", static_cast<long long>(submitted->id));
  auto waited = WaitUntilRunning(head, std::move(*submitted));
  if (const int* rc = std::get_if<int>(&waited)) return *rc;
  const api::Job job = std::get<api::Job>(std::move(waited));
  std::map<std::string, std::string> variables = api::AllocationVariables(job);
  const std::string nodes = variables.at("COHORT_NODELIST");
  std::fprintf(stderr, "cohort alloc: granted allocation %lld on %s\n", static_cast<long long>(job.id), nodes.c_str());

  SpawnOptions so;
  const bool interactive = command.empty() && isatty(0);
  if (command.empty()) {
    const char* shell = std::getenv("SHELL");
    so.argv = {shell && *shell ? shell : "/bin/sh"};
  } else {
    so.argv = command;
  }
  so.env = std::move(variables);
  so.env["COHORT_HEAD"] = ResolveHeadUrl(global);
  if (!global.context.empty()) so.env["COHORT_CONTEXT"] = global.context;
  so.inherit_stdin = true;       // the shell reads the terminal (or whatever alloc's stdin is)
  so.new_process_group = false;  // an interactive shell stays in the terminal's foreground group
  so.parent_death_signal = SIGHUP;
  auto child = Subprocess::Spawn(so);
  if (!child) {
    EndAllocation(head, job.id, 127, 0);
    return ReportError(WithContext(child.error(), "starting the command"));
  }

  SteadyTime next_check = SteadyClock::now() + kRunningPoll;
  while (true) {
    if (auto st = child->TryWait()) {
      EndAllocation(head, job.id, st->Code(), 0);
      return st->Code();
    }
    if (int sig = PollReleaseSignal(Millis(50))) {
      if (sig == SIGINT && interactive) continue;  // the shell's own Ctrl-C
      std::fprintf(stderr, "cohort alloc: %s; releasing allocation %lld\n",
                   sig == SIGINT ? "interrupted" : sig == SIGHUP ? "hung up" : "terminated",
                   static_cast<long long>(job.id));
      (void)StopCommand(*child);
      EndAllocation(head, job.id, 128 + sig, sig);
      return 128 + sig;
    }
    if (SteadyClock::now() < next_check) continue;
    next_check = SteadyClock::now() + kRunningPoll;
    auto j = head.Get(api::routes::Job(job.id));
    if (!j) continue;  // unreachable for now: the command goes on
    auto now = api::JobFromJson(*j);
    if (!now || !api::IsTerminal(now->state)) continue;
    std::fprintf(stderr, "cohort alloc: %s; ending the command\n",
                 fmt::format("allocation {} ended: {}", job.id, FinalStateLine(*now)).c_str());
    return StopCommand(*child);
  }
}

}  // namespace

void AddAllocCommand(CommandContext& ctx) {
  auto flags = std::make_shared<SubmitFlags>();
  auto* sub = ctx.app.add_subcommand(
      "alloc", "Hold an allocation and run a command (after --) or your $SHELL here inside it, like salloc: cohort alloc "
      "-N 2 -G 8 [-- CMD ARGS...]");
  sub->allow_extras();  // reported by RunAlloc, with a hint
  AddResourceFlags(sub, *flags);
  auto command = std::make_shared<std::vector<std::string>>();
  sub->add_option("COMMAND", *command, "The command to run here inside the allocation, after -- (default: $SHELL)")
      ->expected(-1);
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [flags, command, sub, &global] { return RunAlloc(*flags, *command, sub, global); });
}

}  // namespace cohort::cli
