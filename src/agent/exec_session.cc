#include "agent/exec_session.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <set>

#include "agent/exec_cgroup.h"
#include "agent/proc_usage.h"
#include "agent/task_umask.h"
#include "common/cpu_set.h"
#include "common/log.h"
#include "common/subprocess.h"

extern char** environ;

namespace cohort::agent {

namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr Millis kWriteDeadline{5'000};
// An ended session whose last output was read is kept this long more, so that a reader
// that retries its last read (a lost reply) gets the same answer.
constexpr Millis kDeliveredLinger{5'000};
constexpr Millis kSweepPeriod{250};

std::string NewSessionId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void SetNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// Async-signal-safe: for the forked child only.
void WriteParts(std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    size_t n = strlen(p);
    while (n > 0) {
      ssize_t w = write(2, p, n);
      if (w <= 0) return;
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
}

// SIGKILLs every process of session `sid` (its command exited): a few rounds, for
// processes forked while the first were being killed.
void KillSession(int sid) {
  for (int round = 0; round < 5; ++round) {
    const std::vector<int> members = SessionMembers(sid);
    if (members.empty()) return;
    for (int pid : members) kill(pid, SIGKILL);
    poll(nullptr, 0, 10);
  }
}

}  // namespace

struct ExecSessions::SpawnPlan {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE
  std::optional<TaskIdentity> identity;
  std::string workdir;  // entered by the child (bare tasks; containers take -w)
  bool tty = false;
  bool stdin_open = false;
  int rows = 24;
  int cols = 80;
  CgroupLeaf leaf;  // bare tasks where one could be made; the session thread's
  // The task's CPUs (ExecTarget::cpus): the command is bound to them, as the task is (a
  // container's `RUNTIME exec` client too, whose exec'd process inherits Podman's mask).
  std::vector<int> cpus;
  std::promise<Result<void>> started;
};

struct ExecSessions::Session {
  // Set before the session is published, then constant.
  std::string id;
  TaskKey key;
  std::string cgroup;  // the command's leaf (SpawnPlan::leaf); empty: none
  bool tty = false;
  bool stdin_open = false;
  int wake_fd = -1;  // eventfd: the session thread polls it
  // Under ExecSessions::mu_.
  pid_t pid = -1;
  int64_t start_ticks = 0;  // the command's, read once it is forked
  std::string buffered;  // unacknowledged frames
  int64_t base = 0;      // stream offset of buffered[0]
  bool exited = false;
  int exit_code = 0;
  bool kill = false;       // end it: the session thread kills the process group
  bool delivered = false;  // a read returned the end
  SteadyTime last_used{};
  SteadyTime delivered_at{};
  std::thread thread;
  // The command's stdin (a pipe) or a dup of the pty master; -1 once closed.
  Mutex in_mu;
  int in_fd GUARDED_BY(in_mu) = -1;
};

ExecSessions::ExecSessions(Options options) : options_(std::move(options)) {
  if (!options_.cgroup_parent.empty()) {
    cgroup_parent_ = options_.cgroup_parent;
  } else if (auto parent = CgroupParent(); parent) {
    cgroup_parent_ = *parent;
    LOG_INFO("exec: commands run in cgroup v2 leaves under {}", cgroup_parent_);
  } else {
    LOG_WARN("exec: {}: a process that a `cohort exec` command starts and that leaves its session and tree "
             "(setsid, a double fork) is neither counted in its task nor killed with the session",
             parent.error().message);
  }
  if (const int n = cgroup_parent_.empty() ? 0 : RemoveLeftoverLeaves(cgroup_parent_); n > 0) {
    LOG_INFO("exec: removed {} cgroup leaves of exec sessions of agents that are gone, with their processes", n);
  }
  sweeper_ = std::thread(&ExecSessions::Sweep, this);
}

ExecSessions::~ExecSessions() {
  std::map<std::string, std::shared_ptr<Session>> all;
  {
    MutexLock lock(mu_);
    quit_ = true;
    for (auto& [id, s] : sessions_) {
      s->kill = true;
      Kick(*s);
    }
    all = sessions_;
  }
  cv_.NotifyAll();
  sweeper_.join();
  for (auto& [id, s] : all) {
    if (s->thread.joinable()) s->thread.join();
    if (s->wake_fd >= 0) close(s->wake_fd);
  }
}

void ExecSessions::Kick(Session& s) {
  uint64_t one = 1;
  (void)!write(s.wake_fd, &one, sizeof one);
}

Result<std::string> ExecSessions::Start(const ExecTarget& target, const api::ExecRequest& req) {
  auto plan = std::make_shared<SpawnPlan>();
  plan->tty = req.tty;
  plan->stdin_open = req.stdin_open;
  plan->rows = req.rows;
  plan->cols = req.cols;
  plan->cpus = target.cpus;
  if (!target.container_runtime_command.empty()) {
    // The runtime runs as this process and enters the task's identity and directory in the
    // container, as it did for the task (container.h).
    plan->argv = {target.container_runtime_command, "exec"};
    if (req.stdin_open || req.tty) plan->argv.push_back("-i");
    if (req.tty) plan->argv.push_back("-t");
    if (req.tty && !req.term.empty()) plan->argv.insert(plan->argv.end(), {"-e", "TERM=" + req.term});
    if (target.identity) {
      plan->argv.insert(plan->argv.end(),
                        {"--user", fmt::format("{}:{}", target.identity->uid, target.identity->gid)});
    }
    if (!target.workdir.empty()) plan->argv.insert(plan->argv.end(), {"-w", target.workdir});
    plan->argv.push_back(target.container_name);
    plan->argv.insert(plan->argv.end(), req.command.begin(), req.command.end());
    for (char** e = environ; *e; ++e) plan->env.emplace_back(*e);
  } else {
    plan->argv = req.command;
    plan->identity = target.identity;
    plan->workdir = target.workdir;
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string_view::npos) env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    for (const auto& name : target.unset_env) env.erase(name);
    for (const auto& [k, v] : target.env) env[k] = v;
    if (req.tty && !req.term.empty()) env["TERM"] = req.term;
    for (const auto& [k, v] : env) plan->env.push_back(k + "=" + v);
  }

  auto s = std::make_shared<Session>();
  s->id = NewSessionId();
  s->key = target.key;
  if (target.container_runtime_command.empty() && !cgroup_parent_.empty()) {
    auto leaf = MakeCgroupLeaf(cgroup_parent_, LeafName(s->id));
    if (leaf) {
      plan->leaf = *leaf;
      s->cgroup = leaf->dir;
    } else {
      LOG_WARN("exec: session {} runs without a cgroup leaf, so what leaves its session escapes its task: {}",
               s->id.substr(0, 8), leaf.error().message);
    }
  }
  s->tty = req.tty;
  s->stdin_open = req.stdin_open;
  s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd < 0) {
    RemoveCgroupLeaf(plan->leaf);
    return Errorf(ErrorCode::kInternal, "eventfd: {}", strerror(errno));
  }
  std::future<Result<void>> started = plan->started.get_future();
  {
    MutexLock lock(mu_);
    if (quit_) {
      close(s->wake_fd);
      RemoveCgroupLeaf(plan->leaf);
      return MakeError(ErrorCode::kUnavailable, "the agent is stopping");
    }
    if (static_cast<int>(sessions_.size()) >= options_.max_sessions) {
      close(s->wake_fd);
      RemoveCgroupLeaf(plan->leaf);
      return Errorf(ErrorCode::kResourceExhausted, "this node has {} exec sessions open, the most it allows",
                    sessions_.size());
    }
    s->last_used = SteadyClock::now();
    sessions_[s->id] = s;
    s->thread = std::thread(&ExecSessions::Pump, this, s, plan);
  }
  auto ok = started.get();
  if (!ok) return std::unexpected(ok.error());  // the session thread has ended it; the sweeper forgets it
  LOG_INFO("exec: session {} for job {} attempt {} rank {}: {}{}", s->id.substr(0, 8), target.key.job_id,
           target.key.attempt, target.key.rank, req.command[0], req.tty ? " (tty)" : "");
  return s->id;
}

void ExecSessions::Pump(const std::shared_ptr<Session>& s, const std::shared_ptr<SpawnPlan>& plan) {
  int out_fd = -1, err_fd = -1, in_fd = -1;        // this side's ends
  int child_in = -1, child_out = -1, child_err = -1;  // the child's
  std::string error;
  if (plan->tty) {
    winsize ws{};
    ws.ws_row = static_cast<unsigned short>(plan->rows);
    ws.ws_col = static_cast<unsigned short>(plan->cols);
    int master = -1, slave = -1;
    if (openpty(&master, &slave, nullptr, nullptr, &ws) != 0) {
      error = fmt::format("cannot open a pseudo-terminal: {}", strerror(errno));
    } else {
      fcntl(master, F_SETFD, FD_CLOEXEC);
      fcntl(slave, F_SETFD, FD_CLOEXEC);
      out_fd = master;
      in_fd = fcntl(master, F_DUPFD_CLOEXEC, 0);
      child_in = slave;
    }
  } else {
    int p[2];
    if (plan->stdin_open) {
      if (pipe2(p, O_CLOEXEC) == 0) {
        child_in = p[0];
        in_fd = p[1];
      } else {
        error = fmt::format("pipe: {}", strerror(errno));
      }
    } else {
      child_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (error.empty() && pipe2(p, O_CLOEXEC) == 0) {
      out_fd = p[0];
      child_out = p[1];
    } else if (error.empty()) {
      error = fmt::format("pipe: {}", strerror(errno));
    }
    if (error.empty() && pipe2(p, O_CLOEXEC) == 0) {
      err_fd = p[0];
      child_err = p[1];
    } else if (error.empty()) {
      error = fmt::format("pipe: {}", strerror(errno));
    }
  }
  std::vector<char*> argv, envp;
  for (auto& a : plan->argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : plan->env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* workdir = plan->workdir.empty() ? nullptr : plan->workdir.c_str();
  int mask = -1;  // the task's umask (task_umask.h), read here: the child makes no buffers
  for (const auto& e : plan->env) {
    if (e.starts_with("COHORT_UMASK=")) mask = TaskUmaskFrom(e.c_str() + std::strlen("COHORT_UMASK="));
  }
  const pid_t parent = getpid();
  pid_t pid = -1;
  if (error.empty()) {
    pid = fork();
    if (pid < 0) error = fmt::format("fork: {}", strerror(errno));
  }
  if (pid == 0) {
    // The child of a threaded process: async-signal-safe calls only, every buffer made above.
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Into the leaf before anything is started, so everything the command ever starts is
    // a member (exec_cgroup.h).
    if (plan->leaf.procs_fd >= 0) JoinCgroupLeaf(plan->leaf.procs_fd);
    setsid();
    if (plan->tty) {
      ioctl(child_in, TIOCSCTTY, 0);
      dup2(child_in, 0);
      dup2(child_in, 1);
      dup2(child_in, 2);
    } else {
      dup2(child_in, 0);
      dup2(child_out, 1);
      dup2(child_err, 2);
    }
#ifdef SYS_close_range
    syscall(SYS_close_range, 3U, ~0U, 0U);
#endif
    // Its task's CPUs; a mask the kernel refuses leaves it unbound, as the shim does.
    if (!plan->cpus.empty()) {
      if (const int err = BindToCpus(plan->cpus); err != 0) {
        WriteParts({"cohort exec: cannot bind the command to its task's CPUs: ", strerror(err), "; it runs unbound\n"});
      }
    }
    const int id_err = plan->identity ? AssumeTaskIdentity(*plan->identity) : 0;
    if (mask >= 0) umask(static_cast<mode_t>(mask));
    // Set after the identity change, which clears it: the command dies with this thread.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (id_err != 0) {
      WriteParts({"cohort exec: cannot become the task's user: ", strerror(id_err), "\n"});
    } else if (workdir && chdir(workdir) != 0) {
      WriteParts({"cohort exec: cannot enter working directory '", workdir, "': ", strerror(errno), "\n"});
    } else {
      environ = envp.data();
      execvp(argv[0], argv.data());
      WriteParts({"cohort exec: cannot execute '", argv[0], "': ", strerror(errno), "\n"});
    }
    _exit(127);
  }
  CloseFd(child_in);
  CloseFd(child_out);
  CloseFd(child_err);
  if (!error.empty()) {
    CloseFd(out_fd);
    CloseFd(err_fd);
    CloseFd(in_fd);
    RemoveCgroupLeaf(plan->leaf);
    {
      MutexLock lock(mu_);
      s->exited = true;
      s->exit_code = 127;
      s->delivered = true;
      s->delivered_at = SteadyClock::now() - kDeliveredLinger;
    }
    plan->started.set_value(MakeError(ErrorCode::kInternal, "cannot start the exec session: " + error));
    cv_.NotifyAll();
    return;
  }
  SetNonBlocking(out_fd);
  if (err_fd >= 0) SetNonBlocking(err_fd);
  if (in_fd >= 0) SetNonBlocking(in_fd);
  int pidfd = PidfdOpen(pid);
  // The child is ours and unreaped: its pid is still its own.
  const int64_t start_ticks = ProcStartTicks(pid).value_or(0);
  {
    MutexLock lock(mu_);
    s->pid = pid;
    s->start_ticks = start_ticks;
  }
  {
    MutexLock lock(s->in_mu);
    s->in_fd = in_fd;
  }
  plan->started.set_value(Result<void>{});

  std::string chunk(kReadChunk, '\0');
  // Reads what `fd` has into the buffer as frames of `stream`; false at its end (EOF, or
  // EIO from a pty master whose terminal has no process left).
  auto read_some = [&](int& fd, char stream, bool drain) {
    while (fd >= 0) {
      ssize_t n = read(fd, chunk.data(), chunk.size());
      if (n > 0) {
        {
          MutexLock lock(mu_);
          s->buffered += api::EncodeExecFrame(stream, std::string_view(chunk.data(), static_cast<size_t>(n)));
        }
        cv_.NotifyAll();
        if (!drain) return;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      CloseFd(fd);
    }
  };
  bool killed = false;
  std::optional<ExitStatus> status;
  while (!status) {
    bool room = false, kill_now = false;
    {
      MutexLock lock(mu_);
      room = s->buffered.size() < options_.max_buffered;
      kill_now = s->kill;
    }
    if (kill_now && !killed) {
      // The group, and the command itself: a child that has not reached setsid() yet has
      // no group of its own (kill(-pid) fails with ESRCH) and would go on to run its
      // command unkilled. Once it has, the command leads the group, so its descendants
      // go too.
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      if (!plan->leaf.dir.empty()) KillCgroupMembers(plan->leaf.dir);  // what left the group
      killed = true;
    }
    pollfd fds[4];
    int n = 0;
    fds[n++] = {s->wake_fd, POLLIN, 0};
    const int out_i = room && out_fd >= 0 ? n : -1;
    if (out_i >= 0) fds[n++] = {out_fd, POLLIN, 0};
    const int err_i = room && err_fd >= 0 ? n : -1;
    if (err_i >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (pidfd >= 0) fds[n++] = {pidfd, POLLIN, 0};
    poll(fds, static_cast<nfds_t>(n), pidfd >= 0 ? 1000 : 50);
    uint64_t count;
    while (read(s->wake_fd, &count, sizeof count) > 0) {
    }
    if (out_i >= 0 && fds[out_i].revents) read_some(out_fd, 'o', false);
    if (err_i >= 0 && fds[err_i].revents) read_some(err_fd, 'e', false);
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) status = DecodeWaitStatus(st);
  }
  // What the command left in its pipes (or terminal), then the rest of its group and of its
  // session (a session id is not reused while any process has it).
  read_some(out_fd, 'o', true);
  read_some(err_fd, 'e', true);
  kill(-pid, SIGKILL);
  KillSession(pid);
  if (const std::string leaf = plan->leaf.dir; !RemoveCgroupLeaf(plan->leaf)) {
    LOG_WARN("exec: session {}: cgroup {} did not empty after its kill; left behind", s->id.substr(0, 8), leaf);
  }
  CloseFd(out_fd);
  CloseFd(err_fd);
  if (pidfd >= 0) close(pidfd);
  {
    MutexLock lock(s->in_mu);
    CloseFd(s->in_fd);
  }
  {
    MutexLock lock(mu_);
    s->exited = true;
    s->start_ticks = 0;
    s->exit_code = status->Code();
    s->last_used = SteadyClock::now();
  }
  cv_.NotifyAll();
  LOG_INFO("exec: session {} ended: {}", s->id.substr(0, 8), status->ToString());
}

std::vector<ExecRoot> ExecSessions::Roots() const {
  std::vector<ExecRoot> out;
  MutexLock lock(mu_);
  for (const auto& [id, s] : sessions_) {
    if (!s->exited && s->pid > 0 && s->start_ticks > 0) out.push_back({s->key, s->pid, s->start_ticks, s->cgroup});
  }
  return out;
}

Result<std::shared_ptr<ExecSessions::Session>> ExecSessions::Find(const std::string& id, const TaskKey& key) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->key != key) {
    return Errorf(ErrorCode::kNotFound, "no exec session {} for job {} attempt {} rank {} on this node (it ended, or was "
                  "idle too long)", id, key.job_id, key.attempt, key.rank);
  }
  return it->second;
}

Result<ExecOutput> ExecSessions::Read(const std::string& id, const TaskKey& key, int64_t offset, Millis wait) {
  MutexLock lock(mu_);
  auto s = COHORT_TRY(Find(id, key));
  s->last_used = SteadyClock::now();
  const int64_t end = s->base + static_cast<int64_t>(s->buffered.size());
  if (offset < s->base || offset > end) {
    return Errorf(ErrorCode::kInvalidArgument, "offset: the session's output can be read from byte {} to {}, not {}",
                  s->base, end, offset);
  }
  if (offset > s->base) {
    const bool was_full = s->buffered.size() >= options_.max_buffered;
    s->buffered.erase(0, static_cast<size_t>(offset - s->base));
    s->base = offset;
    if (was_full) Kick(*s);
  }
  cv_.WaitFor(mu_, wait, [&]() REQUIRES(mu_) { return !s->buffered.empty() || s->exited || quit_; });
  ExecOutput out;
  out.frames = s->buffered;
  out.next_offset = s->base + static_cast<int64_t>(s->buffered.size());
  out.done = s->exited;
  out.exit_code = s->exit_code;
  if (out.done && !s->delivered) {
    s->delivered = true;
    s->delivered_at = SteadyClock::now();
  }
  s->last_used = SteadyClock::now();
  return out;
}

Result<void> ExecSessions::Write(const std::string& id, const TaskKey& key, const api::ExecInput& in) {
  std::shared_ptr<Session> s;
  {
    MutexLock lock(mu_);
    s = COHORT_TRY(Find(id, key));
    s->last_used = SteadyClock::now();
  }
  if (!in.data.empty() || in.eof || in.rows) {
    MutexLock lock(s->in_mu);
    if (!in.data.empty()) {
      if (!s->stdin_open && !s->tty) {
        return MakeError(ErrorCode::kFailedPrecondition, "this exec session's stdin is not open (cohort exec -i)");
      }
      if (s->in_fd < 0) return MakeError(ErrorCode::kFailedPrecondition, "this exec session's stdin is closed");
      const auto deadline = SteadyClock::now() + kWriteDeadline;
      size_t done = 0;
      while (done < in.data.size()) {
        ssize_t w = write(s->in_fd, in.data.data() + done, in.data.size() - done);
        if (w > 0) {
          done += static_cast<size_t>(w);
          continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN) {
          return Errorf(ErrorCode::kFailedPrecondition, "the command's stdin is closed: {}", strerror(errno));
        }
        const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now());
        if (left.count() <= 0) {
          return Errorf(ErrorCode::kUnavailable, "the command read only {} of {} bytes of input in {} ms", done,
                        in.data.size(), kWriteDeadline.count());
        }
        pollfd p{s->in_fd, POLLOUT, 0};
        poll(&p, 1, static_cast<int>(left.count()));
      }
    }
    // End of input closes a pipe; on a terminal the user types Ctrl-D instead.
    if (in.eof && !s->tty) CloseFd(s->in_fd);
    if (in.rows && s->tty && s->in_fd >= 0) {
      winsize ws{};
      ws.ws_row = static_cast<unsigned short>(*in.rows);
      ws.ws_col = static_cast<unsigned short>(*in.cols);
      ioctl(s->in_fd, TIOCSWINSZ, &ws);  // the kernel sends SIGWINCH to the foreground group
    }
  }
  if (in.close) {
    MutexLock lock(mu_);
    s->kill = true;
    Kick(*s);
  }
  return {};
}

int ExecSessions::Count() const {
  MutexLock lock(mu_);
  return static_cast<int>(sessions_.size());
}

void ExecSessions::Sweep() {
  MutexLock lock(mu_);
  while (!quit_) {
    cv_.WaitFor(mu_, kSweepPeriod, [&]() REQUIRES(mu_) { return quit_; });
    if (quit_) break;
    const SteadyTime now = SteadyClock::now();
    std::set<TaskKey> keys;
    std::vector<std::shared_ptr<Session>> gone;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Session& s = *it->second;
      const bool idle = now - s.last_used > options_.idle_timeout;
      if (s.exited && ((s.delivered && now - s.delivered_at > kDeliveredLinger) || idle)) {
        gone.push_back(it->second);
        it = sessions_.erase(it);
        continue;
      }
      if (!s.exited && idle && !s.kill) {
        LOG_INFO("exec: session {} idle for {} ms; ending it", s.id.substr(0, 8), options_.idle_timeout.count());
        s.kill = true;
        Kick(s);
      }
      if (!s.exited) keys.insert(s.key);
      ++it;
    }
    std::set<TaskKey> ended;
    if (options_.task_running && !keys.empty()) {
      lock.Unlock();
      for (const auto& k : keys) {
        if (!options_.task_running(k)) ended.insert(k);
      }
      lock.Lock();
    }
    for (auto& [id, s] : sessions_) {
      if (!s->exited && !s->kill && ended.contains(s->key)) {
        s->kill = true;
        Kick(*s);
      }
    }
    if (!gone.empty()) {
      lock.Unlock();
      for (auto& s : gone) {
        if (s->thread.joinable()) s->thread.join();
        close(s->wake_fd);
      }
      lock.Lock();
    }
  }
}

}  // namespace cohort::agent
