// Task shim: the small supervisor that stands between the agent and one task.
//
// The agent never runs a job command itself. For every task it spawns the lean
// `cohort-task-shim` program installed next to `cohort` (task_shim_main.cc; it links no
// more than this file needs, so a task start does not pay for loading the whole cohort
// binary, CUDA libraries included) as `cohort-task-shim --log FILE --status FILE
// --grace-ms N [--cwd DIR] [--parent-pid PID] [--lease FILE] [--user NAME:UID:GID:GROUPS]
// [--cpus LIST] [--container-runtime CMD --container-name NAME --container-image IMAGE [--container-root
// FILE [--container-detached]]] [--output FILE [--truncate-output]] [--error FILE [--truncate-error]]
// [--io-user NAME:UID:GID:GROUPS] [--io-cwd DIR] [--truncate-marker ID]
// -- command args...` (or `--hold` in place of `-- command`: an allocation's task, api/step.h, whose
// child enters the account and directory as a command's would, then only waits for the
// signal that ends it: no user process runs, the task holds its GPUs for the steps; or
// `--script FILE -- args...`: a batch script's task, api::JobSpec::script, FILE readable by
// the shim's account only, which the shim copies into a sealed memfd the child executes as
// /proc/self/fd/N, so its #! interpreter runs it as the job's account), or,
// without it, `cohort task-shim ...`, with the task's environment already in the shim's
// environment (compare slurmstepd, containerd-shim). The shim:
//
//  - leaves the agent's session (setsid), ignores SIGINT/SIGHUP/SIGPIPE and asks for
//    SIGUSR1 when its parent dies (PR_SET_PDEATHSIG, then re-checks getppid());
//  - becomes a child subreaper, so every orphaned descendant of the task is reparented to
//    it rather than to init;
//  - forks the task as the leader of its own process group: stdin from /dev/null, stdout
//    and stderr appended to the log, default signal dispositions and an empty mask
//    restored; with --user, the job's account entered (supplementary groups, gid, uid:
//    task_identity.h) and only then the parent-death signal set, which a credential change
//    clears; with --cpus LIST ("0-3,8", common/cpu_set.h), bound to those CPUs first
//    (sched_setaffinity; one the kernel refuses is a line in the log and an unbound task,
//    never a failed one); the working directory entered (as that user), then execvp. The shim itself
//    keeps the identity it was started with (root on a multi-user node), so the task cannot
//    signal, stop or ptrace its supervisor. If the identity change, chdir or exec fails,
//    the child writes one line into the log ("cohort: cannot execute 'foo': No such file
//    or directory") and exits 127, and the shim records the same text as the error;
//  - with --output and/or --error (the job's output files, api/output_pattern.h), before
//    the task: forks an output copier that enters the task's account (--io-user for a
//    container task, whose runtime runs as the shim; else --user) and working directory
//    (--io-cwd, else --cwd) as the task child does, never the shim's, so a path or a
//    symbolic link reaches only what that account could open; opens the files as a shell's
//    `>>` would (O_CREAT|O_WRONLY|O_APPEND, mode 0666 less the umask; the same file once
//    when both name it; a symbolic link as the name only when that account or root owns
//    it) and, with --truncate-*, empties each once per attempt: under
//    flock, unless the marker of the attempt --truncate-marker names is on it already
//    (output_file.h), so tasks on any node that share the file never cut each other's
//    lines; then copies the task's stdout to the log and the output file and its stderr to
//    the log and the error file (stdout and stderr through one pipe, in the order written,
//    when there is no --error or it names the output file; stdout to the log only when
//    there is no --output) until every process of the task has closed them, so the log
//    (`cohort logs`) stays whole. A file it cannot open fails the task's start: exit 127, with
//    "cannot open output file 'x' (in 'DIR'): Permission denied" in the log and the status.
//    The copier is spared by the clean-up below and reaped before the status file is
//    written, so no tail of the output is lost. A file it can no longer write (full disk)
//    is a line in the log; the task runs on. The copier runs as the job's user, who may
//    kill it (its own output is then lost, and its writes fail with EPIPE);
//  - on SIGTERM sends SIGTERM to the task's group and SIGKILL after --grace-ms; on
//    SIGUSR1 (the agent died, or the agent fences the task) sends SIGKILL at once.
//    Signals are read from a signalfd; no work happens in signal handlers;
//  - with --lease, watches the lease file the agent renews (lease.h): once the expiry has
//    passed and a re-read of the file shows no later one, it SIGKILLs the task at once (as
//    the agent's fence does: a grace would overlap the head's rerun of the gang
//    elsewhere) and records why in `error`. A lapse that the node's scheduling delay
//    explains is forgiven, within the lease's deadline: the shim wakes every 100 ms and
//    tracks how late those wake-ups are (wakeup_lateness.h), and kills at
//    Lease::KillAt(that lateness), re-reading the file until then. The shim is its own
//    process, so this works while the agent is stopped (SIGSTOP) or hung: a fenced
//    node's tasks end by themselves. A lease unreadable at start counts as expired; one
//    that becomes unreadable later is treated as not renewed;
//  - when the task leader exits for any reason, SIGKILLs the rest of its group and kills
//    and reaps every remaining descendant (bounded wait), so that when the status file
//    appears no process of the task is left;
//  - creates the log (if the agent has not) and the status file 0600, never through a
//    symbolic link;
//  - writes the status file atomically (FILE.tmp, then rename) as one JSON object
//    `{"exit_code": N, "signal": S, "error": "..."}`: `signal` is the signal that ended
//    the task leader (0 if it exited), `exit_code` its exit status, or 128 + signal when
//    it was killed, or 127 when it could not be started; `error` is empty unless the
//    task could not be started, the shim failed, or its lease expired;
//  - for a container task (the --container-* flags; the command is the runtime's `run`,
//    agent/container.h), once the task is over: when the runtime itself failed (exit
//    125) records its "Error: " line from the log as `error`, saying whether the image
//    is missing from the node; and when the runtime was stopped, killed or failed, removes the
//    container by name (`RUNTIME rm --force`, bounded), since its monitor and processes
//    were killed as orphans and its record may remain;
//  - with --container-root FILE (every container task): publishes the container's init in
//    FILE for the agent's usage and GPU memory measures (container_root.h: its PID
//    namespace, `docker exec`'d and `podman exec`'d processes included, is the task's),
//    and removes FILE after the task;
//  - with --container-detached too (a Docker task: the container's processes are the
//    Docker daemon's, not the shim's descendants): delivers SIGTERM and
//    the checkpoint signal to the container by its name (`RUNTIME kill --signal`, the
//    SIGTERM retried until the container exists: the client, still creating it, is never
//    signalled, so no container is created or started after the task; SIGKILL after the
//    grace, the agent's death or the lease still kill the client at once), and after the
//    task, when the client was killed, removes the container by name (again
//    within 2 s when the client was killed before the container was seen running: its
//    create may still be in flight at the daemon);
//  - exits with the same code as `exit_code` (2 for a command line it cannot parse, in
//    which case no status file is written).
//
// RunTaskShim is the whole program: call it from main() in a fresh, single-threaded
// process. `argv[0]` is the program; an optional "task-shim" word after it is skipped, so
// the cohort binary can pass its full argv.
//
// kTaskShimProgram is the lean program's file name; FindTaskShim (executor.h) looks for it
// next to the running binary.
#pragma once

namespace cohort::agent {

// The subcommand word the agent puts after the binary path.
inline constexpr char kTaskShimCommand[] = "task-shim";
// The lean shim program's file name, installed next to `cohort`.
inline constexpr char kTaskShimProgram[] = "cohort-task-shim";

int RunTaskShim(int argc, char** argv);

}  // namespace cohort::agent
