// ExecSessions: commands run beside running tasks, in their environment (`cohort exec`,
// `cohort attach`; the protocol is api/exec.h).
//
// A session runs one command in a task's environment (executor.h, ExecTarget): its
// environment, working directory and account (the identity change happens in the forked
// child, as the shim does for the task, so a user's job is never exec'd into as root), or,
// for a container task, `RUNTIME exec [-i] [-t] --user UID:GID -w DIR NAME command` run as
// this process. The command leads a session of its own (setsid); with a tty it gets a
// pseudo-terminal as its controlling terminal and stdin/stdout/stderr, without one pipes
// (stdin /dev/null unless the request keeps it open).
//
// Output is kept in memory as a stream of frames (api::EncodeExecFrame) until a reader
// acknowledges it (a read from offset O drops what lies before O); past max_buffered
// unread bytes the session stops reading the command's output, so a command that writes
// faster than its client reads blocks instead of filling the agent's memory. When the
// command exits, what it left in its pipes is read, its whole process group is killed, and
// the exit code is kept with the output for a final read.
//
// A session ends (its process group killed) when asked (ExecInput::close), when nobody read
// or wrote for idle_timeout, when its task stops running (Options::task_running), and at
// destruction; once the command has exited, every process left in its session is killed
// too (a job-control shell's background groups), whichever way it ended.
//
// The command belongs to its task (issue 18): Roots() gives each running command, with its
// start time, for the agent to add to its task's roots (proc_usage.h), so the command, what
// it starts and its session count in the task's CPU, RSS and GPU memory, and
// gpu_memory_enforce sees them. A bare task's command runs in a cgroup v2 leaf of its own
// where the agent may make one (exec_cgroup.h): what it starts, even a process that left
// its session and tree (setsid, a double fork), counts in the task and is killed with the
// session; without a leaf (exec_cgroup.h says when) such a process escapes both. A
// container task's command is the runtime's `exec` client; what it starts in the
// container counts through the container's PID namespace. An ended session whose output was all read, or that nobody read for
// idle_timeout after it ended, is forgotten.
//
// Threads: every public method may be called from any thread. Each session has one thread
// of its own, which forks the command (so that the command's parent-death signal, tied to
// the forking thread, fires exactly when its session's thread ends or the agent dies),
// reads its output and reaps it; one sweeper thread ends idle sessions and forgets
// finished ones. All state lives under one mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/executor.h"
#include "api/exec.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"

namespace cohort::agent {

struct ExecOutput {
  std::string frames;        // whole frames from the offset asked for
  int64_t next_offset = 0;   // read from here next
  bool done = false;         // the command has exited and everything was read
  int exit_code = 0;         // when done: its exit status, or 128 + signal
};

// A running session's command, a root of its task (proc_usage.h).
struct ExecRoot {
  TaskKey key;
  int pid = 0;
  int64_t start_ticks = 0;  // ProcStat::start_ticks of pid
  std::string cgroup = {};  // its cgroup v2 leaf (TaskRoot::cgroup); empty: none
};

class ExecSessions {
 public:
  struct Options {
    int max_sessions = 64;           // open at once on this node; kResourceExhausted beyond
    Millis idle_timeout{60'000};     // no read or write this long: the session ends
    size_t max_buffered = 1 << 20;   // unread output kept before the command is held back
    // Whether a task still runs here (Executor::IsRunning); null: always.
    std::function<bool(const TaskKey&)> task_running;
    // Where bare tasks' commands get their cgroup leaves (exec_cgroup.h); empty: the
    // agent's own cgroup (CgroupParent). A directory that is no cgroup: no leaves.
    std::string cgroup_parent;
  };

  explicit ExecSessions(Options options);
  // Ends every session (SIGKILL of each process group) and joins every thread.
  ~ExecSessions();
  ExecSessions(const ExecSessions&) = delete;
  ExecSessions& operator=(const ExecSessions&) = delete;

  // Starts `req.command` beside `target`'s task; the session's id (32 hex digits, random).
  // kResourceExhausted past max_sessions; kInternal when the pipes or the pty cannot be
  // made or the fork fails. A command that cannot be executed (no such program, a working
  // directory it cannot enter) still starts a session: its stderr says why and it exits
  // with 127, as a shell's would.
  Result<std::string> Start(const ExecTarget& target, const api::ExecRequest& req) EXCLUDES(mu_);

  // Output of session `id` (which must belong to `key`) from `offset`, waiting up to `wait`
  // for some when there is none yet. kNotFound for an unknown session (or one of another
  // task); kInvalidArgument for an offset before what was acknowledged or past the end.
  Result<ExecOutput> Read(const std::string& id, const TaskKey& key, int64_t offset, Millis wait) EXCLUDES(mu_);

  // Applies one input call (api::ExecInput): its data written to the command's stdin (or
  // terminal) within a few seconds or kUnavailable, then eof, a resize, a close.
  // kFailedPrecondition for data to a session whose stdin is not open or has ended.
  Result<void> Write(const std::string& id, const TaskKey& key, const api::ExecInput& in) EXCLUDES(mu_);

  // The commands running now, each with its task (above).
  std::vector<ExecRoot> Roots() const EXCLUDES(mu_);

  // Sessions not yet forgotten (tests, metrics).
  int Count() const EXCLUDES(mu_);

  // Where commands get their cgroup leaves; empty when they get none (the fallback).
  const std::string& cgroup_parent() const { return cgroup_parent_; }

 private:
  struct Session;
  struct SpawnPlan;
  void Pump(const std::shared_ptr<Session>& s, const std::shared_ptr<SpawnPlan>& plan) EXCLUDES(mu_);  // session thread
  void Sweep() EXCLUDES(mu_);  // sweeper thread
  Result<std::shared_ptr<Session>> Find(const std::string& id, const TaskKey& key) REQUIRES(mu_);
  void Kick(Session& s) REQUIRES(mu_);  // wakes the session's thread

  const Options options_;
  std::string cgroup_parent_;  // set by the constructor, then constant
  mutable Mutex mu_;
  CondVar cv_;  // output appended, a session ended, quitting
  std::map<std::string, std::shared_ptr<Session>> sessions_ GUARDED_BY(mu_);
  bool quit_ GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace cohort::agent
