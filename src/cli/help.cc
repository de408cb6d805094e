// `cohort help [TOPIC | COMMAND...]`: what a man page would say, from the binary itself.
// Topics explain what runs across commands (durations, job states, the job's environment,
// the client config, exit codes, the spec file); a command name prints its --help.
#include "cli/client.h"
#include "cli/suggest.h"

namespace cohort::cli {
namespace {

struct Topic {
  const char* name;
  const char* summary;
  const char* text;
};

constexpr Topic kTopics[] = {
    {"durations", "The one duration syntax of every flag (--time-limit, --since, --timeout, --expires)",
     R"(Every flag that takes a duration reads the same syntax:

  3600            a bare number is seconds
  500ms 90s 15m 2h 7d     a number with a unit: ms, s, m (or min), h, d
  1d12h 1h30m 2m30s       several units, largest first
  10:30           MM:SS                (Slurm)
  01:30:00        HH:MM:SS             (Slurm)
  2-00 1-12:00:00 D-HH, D-HH:MM, D-HH:MM:SS (Slurm, with days)

Time limits also take 0, unlimited or none. A point in time (history and audit
--since/--until) is such a duration back from now, or an RFC 3339 time
(2026-03-01T12:00:00Z). Durations are shown as 450ms, 3.2s, 1m02s, 2h05m, 1d02h;
times as 2026-03-01T12:00:00Z (UTC), the same in the CLI and the dashboard.
)"},
    {"states", "Job states, pending reasons and how jobs end",
     R"(PENDING    waiting; `cohort queue` shows why in NODELIST(REASON):
             needs N nodes with G free GPUs; K available   (resources)
             waiting for job J (priority)                  (an earlier job goes first)
             waiting for attempt A on NODE to stop         (the last attempt is still dying)
             held by USER (cohort release J)               (cohort hold)
RUNNING    every task of the gang started (restarted gangs keep their job id)
SUCCEEDED  every rank exited 0
FAILED     a rank failed (its exit code), a node went down with no restarts left, or
           the gang hung past progress_timeout_s
CANCELLED  cohort cancel
TIMEOUT    killed at its time limit (time_limit_s, --time-limit); --signal USR1@120
           asks it to checkpoint two minutes before

cohort hold/release/update act on PENDING jobs; cohort requeue puts a running or ended
one back as its next attempt (same id and checkpoints); cohort history (sacct) lists the
ended.
)"},
    {"environment", "What a task finds in its environment (the job contract)",
     R"(Every task gets RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK
MASTER_ADDR MASTER_PORT CUDA_VISIBLE_DEVICES COHORT_JOB_ID COHORT_JOB_NAME
COHORT_ATTEMPT TORCHELASTIC_RESTART_COUNT COHORT_NODE COHORT_NUM_NODES COHORT_HEAD
COHORT_RENDEZVOUS COHORT_REPORT COHORT_CHECKPOINT_DIR COHORT_JOB_TOKEN (and COHORT_CA
with TLS), plus the spec's env (--env KEY=VALUE). A job spec may not set these.
COHORT_UMASK is the umask of the shell that submitted (the spec's umask, as Slurm's
SLURM_UMASK): the task, its output files and exec sessions into it create files with it.
An array's element also gets COHORT_ARRAY_JOB_ID, COHORT_ARRAY_TASK_ID and the array's
COHORT_ARRAY_TASK_COUNT, _MIN, _MAX and _STEP (and Slurm's SLURM_ARRAY_JOB_ID,
SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, ...); a sweep's element its values as
COHORT_SWEEP_<NAME> (train.lr: COHORT_SWEEP_TRAIN_LR). A task on a shared GPU
(gpus_per_task, gpu_memory) gets COHORT_GPU_MEMORY_MIB, COHORT_GPU_MEMORY_ENFORCE and
NVIDIA MPS's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.

cohort submit sends the submitting shell's environment (--export, Slurm's semantics):
  --export=ALL         the default: every variable but a deny list: LD_PRELOAD, LD_AUDIT,
                       LD_DEBUG, HOME, USER, LOGNAME, SHELL, MAIL, PWD, OLDPWD, SHLVL, _,
                       HOSTNAME, DISPLAY, XAUTHORITY, SSH_*, BASH_FUNC_*, TMUX, XDG_RUNTIME_DIR
                       and the session's other XDG_SESSION/DBUS names, the names above
                       (COHORT_*, COHORT_TOKEN included, RANK, ...), and the SLURM_JOB_ID,
                       SLURM_JOBID, SLURM_JOB_NODELIST, SLURM_NNODES and SLURM_ARRAY_* that
                       cohort alloc's shell and an array's element have
  --export=NONE        nothing
  --export=A,B=1       only A (its value here) and B=1; ALL,B=1 adds B=1 to ALL
The spec file's env and --env override what --export sends. The command's program is
resolved where you submit: a name through the exported PATH (yours when PATH is not
exported), a relative path against the working directory; the job runs that absolute
path, so python3 is the python3 you had (a shared filesystem, as with Slurm). A program
missing here is an error at submit (exit 2). A job in a container image (--container)
runs the image's programs in the image's environment: it sends only what --env and an
explicit --export name, and its program is not looked up here.

cohort alloc's command (or shell) runs here, not in a task: it gets COHORT_JOB_ID and
SLURM_JOB_ID (the allocation), COHORT_NODELIST and SLURM_JOB_NODELIST (its nodes, comma
separated), COHORT_NUM_NODES and SLURM_NNODES, and COHORT_HEAD. With COHORT_JOB_ID set and
RANK unset, cohort run runs a step on the allocation's tasks, each in its task's
environment (the variables above). A batch script (cohort batch, sbatch) runs in the first
task of its allocation with that task's variables less RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK, plus SLURM_JOB_ID, SLURM_JOB_NODELIST,
SLURM_NNODES, SLURM_JOB_NAME and SLURM_SUBMIT_DIR; so its cohort run is a step too, made
with the job's own token.

A root agent runs the task as the job's user with that account's HOME, USER, LOGNAME
and SHELL. Post progress (step, loss, samples_per_s) to $COHORT_REPORT to see it in
cohort show, cohort top and the dashboard; with total_steps they show percent, rate and
ETA (cohort queue too), and val_loss is drawn beside the loss.
)"},
    {"config", "The client config file: which head, which token, which authority",
     R"(The CLI finds its head in this order: --head URL, $COHORT_HEAD, the client config,
then https://127.0.0.1:8470. The client config is $XDG_CONFIG_HOME/cohort/config or
~/.config/cohort/config (mode 0600), lines of "key: value":

  head: https://head.example:8470
  token: cohort_...
  ca: /home/me/.config/cohort/ca.crt

cohort login writes it; a head's first start writes it for the user who started it.

Contexts, like kubectl's, keep several heads: copies of the config under
~/.config/cohort/contexts/NAME.
  cohort context save NAME    keep the current config (head, token, ca) as NAME
  cohort context use NAME     make NAME the current config (alias use-context)
  cohort context ls           list them; * marks the current one
  cohort context rm NAME
  cohort --context NAME ...   (or COHORT_CONTEXT=NAME) one command against NAME
  cohort login --context NAME ...  log in to context NAME (made if new; the config stays as it is)
$COHORT_TOKEN overrides the token, $COHORT_CA_FILE the authority.
)"},
    {"exit-codes", "What cohort's exit codes mean",
     R"(0  success
1  the request failed: the head said no (a job that already ended, a job in the wrong
   state), or the job failed (submit --wait)
2  bad usage or bad input: an unknown flag, a bad duration, a spec field out of range
   (checked before anything is sent)
3  the head could not be reached (see the hint: where the URL came from)
4  the head refused the credentials (none, unknown, expired, revoked, or not allowed)
)"},
    {"spec", "The job spec file (cohort submit job.yaml)",
     R"(YAML or JSON; unknown fields are errors that name the field; flags override the file.

  name: hello                # default: the program's name
  command: [python3, train.py]
  nodes: 2                   # -N; the gang starts on all or none
  min_nodes: 1               # elastic: may run on fewer, grows back at a checkpoint
  tasks_per_node: 4          # -n
  gpus_per_node: 4           # -G; split evenly among the node's tasks
  # gpus: h100:4             # -G TYPE:COUNT instead: a model (h100) or MIG profile (1g.10gb:2)
  # gpus_per_task: 0.5       # instead: a shared part of one GPU per task (0.25, 0.5, 0.75)
  # gpu_type: h100           # the GPU model, with gpus_per_node (what gpus: h100:4 says)
  # gpu_memory: 20GiB        # GPU memory per task on a shared GPU
  # gpu_memory_enforce: kill # report (default) | kill: a task over its share is stopped
  # topology: required       # preferred (default) | required: one NVLink island, one switch
  cpus_per_task: 1           # -c
  priority: 0                # -p; -1000..1000
  placement: pack            # pack | spread
  max_restarts: 1            # gang restarts after a failure
  time_limit_s: 3600         # -t; TIMEOUT when exceeded; 0 = none
  progress_timeout_s: 600    # no progress report for this long = hung
  checkpoint_signal: USR1    # sent on drain --now or a preemption
  checkpoint_before_limit_s: 120   # ... and this long before the time limit (--signal USR1@120)
  env: {NCCL_DEBUG: INFO}    # --env
  workdir: /abs/path         # --workdir; default: the submitting directory
  output: logs/%x-%j.out     # -o; also write stdout (and stderr, without error) to this file
  error: logs/%x-%j.err      # -e; patterns %j %A %a %x %u %N %n %t %%, relative to workdir
  open_mode: truncate        # --open-mode; truncate (default; a requeue appends) | append
  nodelist: "gpu[1-2]"       # -w; these nodes are members (a Slurm host list)
  exclude: gpu7              # -x; never these nodes
  constraint: a100&ib        # -C; node features (cohort agent --features): & | ( )
  mem_per_node_mb: 65536     # --mem 64G; scheduled per node, not enforced
  team: ml                   # the team it counts against (default: its user's team)
  tensor_group_size: 2       # ranks that must share a node (cohort train's parallel.tensor)
  container: {image: localhost/trainer:1.0, runtime: podman}   # --container IMAGE
  array: 0-999%16            # --array; each element a job of its own (12_7)
  dependency: afterok:12,singleton   # -d; also afterany, afternotok, after
  kill_on_invalid_dep: true  # --kill-on-invalid-dep: cancel when a dependency can never hold
  # begin_ms: 1796140800000  # --begin 16:00 (or now+1h, a date): not before this Unix ms time
  # sweep: {grid: {train.lr: [3.0e-4, 1.0e-3]}}   # instead of array: an element per point
  # kind: service            # batch (default) | service (cohort serve deploy) | allocation
  # script: "#!/bin/sh\n..."  # with kind allocation: a batch script (cohort batch), command its args
)"},
};

void PrintIndex(CLI::App& root) {
  std::printf("cohort help TOPIC    explains:\n");
  for (const auto& t : kTopics) std::printf("  %-13s %s\n", t.name, t.summary);
  std::printf("\ncohort help COMMAND  (or cohort COMMAND --help) for a command:\n");
  for (CLI::App* sub : root.get_subcommands([](CLI::App*) { return true; })) {
    std::printf("  %-13s %s\n", sub->get_name().c_str(), sub->get_description().c_str());
  }
}

}  // namespace

const char* HelpTopicText(std::string_view name) {
  for (const auto& t : kTopics) {
    if (name == t.name) return t.text;
  }
  return nullptr;
}

void AddHelpCommand(CommandContext& ctx) {
  auto words = std::make_shared<std::vector<std::string>>();
  auto* sub = ctx.app.add_subcommand("help", "Explain a topic (durations, states, environment, ...) or a command");
  sub->add_option("TOPIC", *words, "A topic, or a command (and subcommand)");
  CLI::App& root = ctx.app;
  ctx.on_run(sub, [words, &root] {
    if (words->empty()) {
      PrintIndex(root);
      return 0;
    }
    if (words->size() == 1) {
      if (const char* text = HelpTopicText(words->front())) {
        std::fputs(text, stdout);
        return 0;
      }
    }
    CLI::App* app = &root;
    for (const auto& w : *words) {
      CLI::App* next = nullptr;
      for (CLI::App* s : app->get_subcommands([](CLI::App*) { return true; })) {
        if (s->check_name(w)) next = s;
      }
      if (next == nullptr) {
        std::vector<std::string> names = SubcommandNames(*app);
        if (app == &root) {
          for (const auto& t : kTopics) names.emplace_back(t.name);
        }
        auto close = ClosestNames(w, names);
        return ReportError(Error{ErrorCode::kInvalidArgument,
                                 fmt::format("no help topic or command '{}'{} (cohort help lists them)", w,
                                             close.empty() ? "" : "; did you mean " + close[0] + "?")});
      }
      app = next;
    }
    // The usage line names the whole command ("Usage: cohort serve scale ..."), as --help does.
    const CLI::App* parent = app->get_parent();
    std::fputs((parent ? app->help(CommandPath(*parent)) : app->help()).c_str(), stdout);
    return 0;
  });
}

}  // namespace cohort::cli
