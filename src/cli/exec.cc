// `cohort exec JOB [--rank R] [-i] [-t] -- COMMAND...` and `cohort attach JOB [--rank R]`:
// a command beside a running task, in its environment (its env, working directory, user
// and container), like `kubectl exec` and `kubectl exec -it`. The protocol is api/exec.h:
// start a session through the head, then read its output (a long poll) on this thread
// while a second thread forwards stdin (-i), the terminal's size (SIGWINCH) and Ctrl-C.
//
// exec prints the command's stdout and stderr on ours and exits with its exit code; with
// -t the command gets a terminal (stdout and stderr are one stream) and ours is put in raw
// mode, so Ctrl-C, Ctrl-D and Ctrl-Z reach the remote terminal, and restored at the end.
// Without -t, a SIGINT, SIGTERM or SIGHUP here ends the remote command (its process group
// is killed) and exec exits with 128 + that signal. attach is exec -i -t of the task's
// login shell ($SHELL in the task's environment, or /bin/sh). --json (no terminal) prints
// {job, rank, node, exit_code, stdout, stderr} once the command has ended.
// Exit codes: the command's; 1 when the head refuses (not running, not the owner), 2 for
// bad usage, 3 when the head cannot be reached.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "api/exec.h"
#include "api/job_array.h"
#include "cli/client.h"
#include "cli/exec_stream.h"

namespace cohort::cli {
namespace {

constexpr size_t kInputChunk = 64 << 10;

struct ExecFlags {
  std::string job;
  int rank = 0;
  bool stdin_open = false;
  bool tty = false;
  std::vector<std::string> command;
};

int self_pipe[2] = {-1, -1};  // signals → the input thread

extern "C" void OnSignal(int sig) {
  const int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(self_pipe[1], &b, 1);
  errno = saved;
}

// Puts the terminal on fd 0 in raw mode for as long as it lives.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSANOW, &raw) == 0) active_ = true;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(0, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

std::optional<std::pair<int, int>> TerminalSize() {
  winsize ws{};
  if (ioctl(1, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) {
    if (ioctl(0, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return std::nullopt;
  }
  return std::make_pair(static_cast<int>(ws.ws_row), static_cast<int>(ws.ws_col));
}

Result<ExecSession> StartSession(const HttpClient& head, api::JobId job, int rank, const api::ExecRequest& req) {
  json reply = COHORT_TRY(head.Post(
      api::routes::WithQuery(api::routes::JobExec(job), {{"rank", std::to_string(rank)}}), api::ToJson(req)));
  auto r = COHORT_TRY(FromHead(ObjectReader::Open(reply), "exec reply"));
  ExecSession s;
  s.job = job;
  s.id = COHORT_TRY(FromHead(r.String("session", std::nullopt, 64), "exec reply"));
  s.attempt = static_cast<int>(COHORT_TRY(FromHead(r.Int("attempt", std::nullopt, 0, INT32_MAX), "exec reply")));
  s.rank = static_cast<int>(COHORT_TRY(FromHead(r.Int("rank", std::nullopt, 0, INT32_MAX), "exec reply")));
  s.node = COHORT_TRY(FromHead(r.String("node", std::string()), "exec reply"));
  return s;
}

// The input thread: stdin (with -i) and the signals, until `quit_fd` is readable.
void ForwardInput(const HttpClient& head, const ExecSession& s, const ExecFlags& f, int quit_fd,
                  std::atomic<int>& interrupted) {
  bool stdin_open = f.stdin_open;
  std::string buf(kInputChunk, '\0');
  while (true) {
    pollfd fds[3] = {{quit_fd, POLLIN, 0}, {self_pipe[0], POLLIN, 0}, {stdin_open ? 0 : -1, POLLIN, 0}};
    if (poll(fds, 3, -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    if (fds[1].revents) {
      unsigned char sig = 0;
      while (read(self_pipe[0], &sig, 1) == 1) {
        api::ExecInput in;
        if (sig == SIGWINCH) {
          auto size = TerminalSize();
          if (!size) continue;
          in.rows = size->first;
          in.cols = size->second;
        } else {
          interrupted.store(sig);
          in.close = true;
        }
        (void)SendExecInput(head, s, in);
      }
    }
    if (stdin_open && fds[2].revents) {
      ssize_t n = read(0, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      api::ExecInput in;
      if (n > 0) {
        in.data.assign(buf.data(), static_cast<size_t>(n));
      } else {
        in.eof = true;
        stdin_open = false;
      }
      if (auto ok = SendExecInput(head, s, in); !ok && n > 0) {
        // The command no longer reads (it closed stdin or ended): stop forwarding.
        stdin_open = false;
      }
    }
  }
}

int Run(const ExecFlags& f, const GlobalOptions& global, bool attach) {
  if (auto ref = api::ParseJobRef(f.job, "job id"); !ref) return ReportError(ref.error());
  if (f.command.empty()) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                 "no command: cohort exec JOB [--rank R] [-i] [-t] -- COMMAND [ARGS...]", "command")
                           .error());
  }
  if (global.json && f.tty) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument, "--json cannot be used with a terminal (-t)").error());
  }
  api::ExecRequest req;
  req.command = f.command;
  req.tty = f.tty;
  req.stdin_open = f.stdin_open;
  if (f.tty) {
    if (auto size = TerminalSize()) std::tie(req.rows, req.cols) = *size;
    if (const char* term = std::getenv("TERM"); term && std::strlen(term) <= 64) req.term = term;
    bool ok = true;
    for (char c : req.term) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-._+", c));
    if (!ok) req.term.clear();
  }
  HttpClient head = HeadClient(global);
  auto job = ResolveJobRef(head, f.job);  // "12", or "12_7": an element of an array
  if (!job) return ReportError(job.error());
  auto session = StartSession(head, *job, f.rank, req);
  if (!session) return ReportError(session.error());
  if (attach) {
    std::fprintf(stderr, "cohort: attached to rank %d of job %lld on node %s; exit the shell to detach\r\n",
                 session->rank, static_cast<long long>(*job), session->node.c_str());
  }

  if (pipe2(self_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return ReportError(Error{ErrorCode::kInternal, fmt::format("pipe: {}", std::strerror(errno))});
  }
  int quit[2];
  if (pipe2(quit, O_CLOEXEC) != 0) {
    return ReportError(Error{ErrorCode::kInternal, fmt::format("pipe: {}", std::strerror(errno))});
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaction(sig, &sa, nullptr);
  std::optional<RawTerminal> raw;
  if (f.tty && isatty(0)) raw.emplace();

  std::atomic<int> interrupted{0};
  std::thread input([&] { ForwardInput(head, *session, f, quit[0], interrupted); });
  std::string out, err;
  auto code = PumpExecOutput(head, *session, [&](const api::ExecFrame& fr) {
    if (global.json) {
      (fr.stream == 'e' ? err : out) += fr.data;
    } else {
      WriteAll(fr.stream == 'e' ? 2 : 1, fr.data);
    }
  });
  raw.reset();
  int rc = code ? *code : ReportError(code.error());
  (void)!write(quit[1], "q", 1);
  input.join();
  raw.reset();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) signal(sig, SIG_DFL);
  for (int fd : {quit[0], quit[1], self_pipe[0], self_pipe[1]}) close(fd);
  if (int sig = interrupted.load(); sig && rc != 0) rc = 128 + sig;
  if (global.json) {
    PrintJson(json{{"job", *job},
                   {"rank", session->rank},
                   {"node", session->node},
                   {"exit_code", rc},
                   {"stdout", out},
                   {"stderr", err}});
  }
  return rc;
}

void AddCommonFlags(CLI::App* sub, ExecFlags& f) {
  sub->add_option("JOB", f.job, "The running job; 12_7 is element 7 of array 12")->required();
  sub->add_option("-r,--rank", f.rank, "The task to run beside (default 0)")->check(CLI::Range(0, INT32_MAX));
}

}  // namespace

void AddExecCommands(CommandContext& ctx) {
  auto f = std::make_shared<ExecFlags>();
  auto* sub = ctx.app.add_subcommand(
      "exec", "Run a command beside a running task, in its environment (like kubectl exec): cohort exec JOB -- CMD");
  AddCommonFlags(sub, *f);
  sub->add_flag("-i,--stdin", f->stdin_open, "Forward stdin to the command");
  sub->add_flag("-t,--tty", f->tty, "Give the command a terminal (this one in raw mode)");
  sub->add_option("command", f->command, "Program and arguments (after --)")->expected(-1);
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global, /*attach=*/false); });

  auto a = std::make_shared<ExecFlags>();
  auto* att = ctx.app.add_subcommand(
      "attach", "A terminal into a running task (its shell, in its environment), like kubectl exec -it");
  AddCommonFlags(att, *a);
  AddClientOptions(att, ctx.global);
  ctx.on_run(att, [a, &global] {
    ExecFlags f = *a;
    f.stdin_open = true;
    f.tty = isatty(0) != 0;
    // The task's login shell when it has one that runs here, else /bin/sh.
    f.command = {"/bin/sh", "-c", "if [ -n \"$SHELL\" ] && [ -x \"$SHELL\" ]; then exec \"$SHELL\"; fi; exec /bin/sh"};
    return Run(f, global, /*attach=*/true);
  });
}

}  // namespace cohort::cli
