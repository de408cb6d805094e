// `cohort exec` and `cohort attach` (issue 19 item 3) on a local cluster: a command beside a
// running task gets the task's environment, working directory and user, its output and
// exit code come back, stdin is forwarded with -i; attach opens a terminal driven here
// through a pseudo-terminal; and the errors: a job not running, a rank it lacks, an unknown
// job, another user's job (403) and a viewer (403).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

std::string Token(LocalCluster& c, const std::string& user, const std::string& role) {
  auto r = c.client().Post("/v1/tokens", json{{"user", user}, {"role", role}});
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? r->value("token", "") : "";
}

// Whether a process of this machine runs with exactly the arguments `argv`.
bool ProcessRunning(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + '\0';
  std::error_code ec;  // processes come and go while the directory is read
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    // ReadFile: a process that exits while its cmdline is read reads as empty (libstdc++
    // throws the read's ESRCH from the stream buffer).
    if (ReadFile((it->path() / "cmdline").string()) == want) return true;
  }
  return false;
}

// A job whose task waits for `gate` to exist; returns its id once the task has started
// (its log says "ready").
int64_t StartWaitingJob(LocalCluster& c, const std::string& gate, json extra = json::object()) {
  json spec = {{"command", {"sh", "-c", "echo ready; while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
               {"gpus_per_node", 1}};
  spec.update(extra);
  const int64_t id = c.Submit(spec)["id"];
  c.WaitForState(id, "RUNNING");
  EXPECT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find("ready") != std::string::npos; }, 20s))
      << c.Job(id).dump() << "\n" << c.Logs(id, 0);
  return id;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

TEST(Exec, RunsBesideTheTaskInItsEnvironmentWithItsExitCode) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string work = c.dir() + "/work";
  std::filesystem::create_directories(work);
  const std::string gate = c.dir() + "/gate";
  const int64_t id = StartWaitingJob(c, gate, {{"workdir", work}, {"env", {{"EXEC_TEST_VAR", "from-the-spec"}}}});
  const std::string job = std::to_string(id);

  // Output on both streams, the exit code, and the task's environment, directory and user.
  auto r = Cohort(c, {"exec", job, "--", "sh", "-c",
                      "echo var=$EXEC_TEST_VAR; echo cwd=$(pwd); echo job=$COHORT_JOB_ID; echo uid=$(id -u); "
                      "echo to-stderr >&2; exit 7"});
  EXPECT_EQ(r.status.Code(), 7) << r.output << r.errors;
  auto seen = ParseEnvLines(r.output);
  EXPECT_EQ(seen["var"], "from-the-spec") << r.output;
  EXPECT_EQ(seen["cwd"], work);
  EXPECT_EQ(seen["job"], job);
  EXPECT_EQ(seen["uid"], std::to_string(geteuid())) << "the agent runs tasks as itself here";
  EXPECT_NE(r.errors.find("to-stderr"), std::string::npos) << r.errors;
  EXPECT_EQ(r.output.find("to-stderr"), std::string::npos) << "stderr stays apart without a terminal";

  // stdin with -i, up to its end.
  r = RunCli(c, {"sh", "-c",
                 "printf 'one\\ntwo\\n' | " + std::string(COHORT_BINARY) + " --head " + c.url() + " exec -i " + job +
                     " -- sh -c 'n=0; while read l; do n=$((n+1)); echo got:$l; done; echo lines=$n'"});
  EXPECT_EQ(r.status.Code(), 0) << r.errors;
  EXPECT_NE(r.output.find("got:one\ngot:two\nlines=2"), std::string::npos) << r.output;
  // Without -i the command's stdin is empty.
  r = RunCli(c, {"sh", "-c", "echo ignored | " + std::string(COHORT_BINARY) + " --head " + c.url() + " exec " + job +
                                 " -- sh -c 'cat; echo end'"});
  EXPECT_EQ(r.output, "end\n") << r.errors;

  // --json: the whole result as one object.
  r = Cohort(c, {"--json", "exec", job, "--", "sh", "-c", "printf out; printf err >&2; exit 3"});
  EXPECT_EQ(r.status.Code(), 3) << r.errors;
  json j = json::parse(r.output, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["stdout"], "out");
  EXPECT_EQ(j["stderr"], "err");
  EXPECT_EQ(j["node"], "node-a");

  // A program the task's PATH lacks: 127 and why, as a shell says it.
  r = Cohort(c, {"exec", job, "--", "no-such-program-here"});
  EXPECT_EQ(r.status.Code(), 127);
  EXPECT_NE(r.errors.find("cannot execute 'no-such-program-here'"), std::string::npos) << r.errors;

  // Errors, each clear: a rank the job lacks, an unknown job, no command.
  r = Cohort(c, {"exec", "--rank", "3", job, "--", "true"});
  EXPECT_EQ(r.status.Code(), 2) << r.errors;
  EXPECT_NE(r.errors.find("job " + job + " has ranks 0 to 0, not 3"), std::string::npos) << r.errors;
  r = Cohort(c, {"exec", "987654", "--", "true"});
  EXPECT_EQ(r.status.Code(), 1) << r.errors;
  EXPECT_NE(r.errors.find("987654"), std::string::npos) << r.errors;
  r = Cohort(c, {"exec", job});
  EXPECT_EQ(r.status.Code(), 2) << r.errors;
  EXPECT_NE(r.errors.find("no command"), std::string::npos) << r.errors;

  // A pending job (both GPUs of the node are not free while the first job holds one)
  // cannot be exec'd into.
  const int64_t pending = c.Submit({{"command", {"true"}}, {"gpus_per_node", 2}})["id"];
  r = Cohort(c, {"exec", std::to_string(pending), "--", "true"});
  EXPECT_EQ(r.status.Code(), 1) << r.errors;
  EXPECT_NE(r.errors.find("job " + std::to_string(pending) + " is PENDING: cannot exec"), std::string::npos)
      << r.errors;

  // Another user, and a viewer, are refused (403); the job's owner (here the admin) is not.
  for (const auto& [user, role] : {std::pair{"mallory", "user"}, std::pair{"vera", "viewer"}}) {
    const std::string token = Token(c, user, role);
    ASSERT_FALSE(token.empty());
    r = RunCli(c, {"sh", "-c",
                   "COHORT_TOKEN=" + ShellQuote(token) + " " + std::string(COHORT_BINARY) + " --head " + c.url() +
                       " exec " + job + " -- sh -c 'touch " + c.dir() + "/intruded'"});
    EXPECT_EQ(r.status.Code(), 4) << user << ": " << r.errors;  // refused credentials (cohort help exit-codes)
    EXPECT_NE(r.errors.find("may not"), std::string::npos) << user << ": " << r.errors;
  }
  EXPECT_FALSE(std::filesystem::exists(c.dir() + "/intruded"));

  // Once the task has ended there is nothing to exec into.
  ASSERT_TRUE(Cohort(c, {"cancel", std::to_string(pending)}).status.Success());
  std::ofstream(gate).put('\n');
  c.WaitForState(id, "SUCCEEDED");
  r = Cohort(c, {"exec", job, "--", "true"});
  EXPECT_EQ(r.status.Code(), 1);
  EXPECT_NE(r.errors.find("is SUCCEEDED: cannot exec"), std::string::npos) << r.errors;
}

// The checks both usage tests end with: the job's one task's usage reaches what the
// process `what` (running while `alive()`) burns and holds (2 s of CPU, 128 MiB), then
// cancelling the job ends that process and `cli` (the `cohort exec` client).
void ExpectTheTasksUsageHoldsItAndCancelEndsIt(LocalCluster& c, const std::string& job, Subprocess& cli,
                                               const std::function<bool()>& alive, const std::string& what) {
  json u;
  EXPECT_TRUE(WaitUntil([&] {
    json j = c.Job(std::stoll(job));
    u = j.contains("tasks_usage") && j["tasks_usage"].size() == 1 ? j["tasks_usage"][0] : json();
    return u.is_object() && u.value("cpu_seconds", 0.0) >= 2 && u.value("rss_bytes", int64_t{0}) >= (int64_t{128} << 20);
  }, 60s)) << what << "'s CPU and memory are not the task's: " << u.dump(2);

  auto r = c.client().Post("/v1/jobs/" + job + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(WaitUntil([&] { return !alive(); }, 20s)) << what << " outlived its task";
  auto st = cli.WaitFor(20s);
  EXPECT_TRUE(st.has_value()) << "cohort exec did not end with its task";
  if (!st) {
    cli.Signal(SIGKILL);
    (void)cli.Wait();
  }
}

// Issue 18: what `cohort exec` starts beside a bare task is the task's: its CPU and RSS
// count in the task's usage, and cancelling the job ends it. The task only waits; the
// exec'd command holds 128 MiB and burns a core, so the figures can only be reached by
// counting it.
TEST(Exec, ACommandExecdIntoATaskCountsInItsUsageAndEndsWithIt) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  const std::string job = std::to_string(StartWaitingJob(c, gate));
  const std::string marker = "cohort-exec-usage-" + std::to_string(getpid());
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "--head", c.url(), "exec", job, "--", "sh", "-c",
            "x=$(head -c 134217728 /dev/zero | tr '\\0' a); while :; do :; done", marker};
  o.stdout_path = c.dir() + "/exec.out";
  auto cli = Subprocess::Spawn(o);
  ASSERT_TRUE(cli.has_value()) << cli.error().message;
  auto execd = [&] { return ProcessRunning({"sh", "-c", o.argv[8], marker}); };
  ASSERT_TRUE(WaitUntil(execd, 20s)) << ReadFile(o.stdout_path);

  ExpectTheTasksUsageHoldsItAndCancelEndsIt(c, job, *cli, execd, "the exec'd command");
}

// Issue 18: a process the exec'd command starts that leaves its session and tree (setsid,
// then a double fork: init adopts it) is still the task's through the command's cgroup
// leaf: its CPU and memory show in the job's usage and cancel kills it. Skips where the
// agent says it has no cgroup v2 to write (the fallback, exec_cgroup.h).
TEST(Exec, AProcessThatLeavesTheExecdCommandsSessionCountsAndDiesWithTheTask) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string log = c.dir() + "/node-a.log";
  if (ReadFile(log).find("commands run in cgroup v2 leaves") == std::string::npos) {
    GTEST_SKIP() << "the agent has no cgroup v2 leaves here:\n" << ReadFile(log);
  }
  const std::string gate = c.dir() + "/gate";
  const std::string job = std::to_string(StartWaitingJob(c, gate));
  const std::string marker = "cohort-exec-escapee-" + std::to_string(getpid());
  const std::string burn = "x=$(head -c 134217728 /dev/zero | tr '\\0' a); while :; do :; done";
  SpawnOptions o;
  // The command stays (its sleep keeps the session open); the escapee is its grandchild's
  // orphan in a session of its own.
  o.argv = {COHORT_BINARY, "--head", c.url(), "exec", job, "--", "sh", "-c",
            "setsid sh -c 'sh -c \"$0\" \"$1\" &' \"$0\" \"$1\"; sleep 600", burn, marker};
  o.stdout_path = c.dir() + "/exec.out";
  auto cli = Subprocess::Spawn(o);
  ASSERT_TRUE(cli.has_value()) << cli.error().message;
  auto escaped = [&] { return ProcessRunning({"sh", "-c", burn, marker}); };
  ASSERT_TRUE(WaitUntil(escaped, 20s)) << ReadFile(o.stdout_path);

  ExpectTheTasksUsageHoldsItAndCancelEndsIt(c, job, *cli, escaped, "the escaped process");
}

TEST(Exec, AttachOpensATerminalIntoTheTask) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  const int64_t id = StartWaitingJob(c, gate, {{"env", {{"ATTACH_VAR", "inside"}}}});

  // `cohort attach` on a terminal of the test's: 33 rows, 101 columns.
  int master = -1;
  winsize ws{};
  ws.ws_row = 33;
  ws.ws_col = 101;
  const std::string job = std::to_string(id);
  const pid_t pid =
      SpawnOnTerminal({COHORT_BINARY, "--head", c.url(), "attach", job}, {{"TERM", "xterm"}}, &ws, master);
  ASSERT_GE(pid, 0);
  std::string seen;
  ReadUntil(master, "attached to rank 0", 20s, seen);
  ASSERT_NE(seen.find("attached to rank 0 of job " + job), std::string::npos) << seen;
  // A command typed, its output read: the task's environment and the terminal's size.
  const std::string typed = "echo \"v=$ATTACH_VAR $(stty size) t=$TERM $((6*7))\"\r";
  ASSERT_EQ(write(master, typed.data(), typed.size()), static_cast<ssize_t>(typed.size()));
  ReadUntil(master, "v=inside 33 101 t=xterm 42", 20s, seen);
  EXPECT_NE(seen.find("v=inside 33 101 t=xterm 42"), std::string::npos) << seen;
  // Ctrl-C reaches the remote terminal: it interrupts a command there, not attach.
  const std::string sleep_cmd = "sleep 30.0417; echo not-interrupted\r";
  ASSERT_EQ(write(master, sleep_cmd.data(), sleep_cmd.size()), static_cast<ssize_t>(sleep_cmd.size()));
  // The interrupt goes once sleep runs (the task is on this machine): the line's echo alone
  // came before bash had started it, and an interrupt then left sleep running (CI, 2026-11-27).
  ASSERT_TRUE(WaitUntil([] { return ProcessRunning({"sleep", "30.0417"}); }, 20s)) << seen;
  ASSERT_EQ(write(master, "\x03", 1), 1);
  const std::string after = "echo after-$((1+1))\r";
  ASSERT_EQ(write(master, after.data(), after.size()), static_cast<ssize_t>(after.size()));
  ReadUntil(master, "after-2", 20s, seen);
  EXPECT_NE(seen.find("after-2"), std::string::npos) << seen;
  // The echo's output never came: every "not-interrupted" is in the typed line ("echo
  // not-interrupted"). The line may show twice: typed before bash printed its prompt, the
  // terminal echoes it and readline draws it again (seen in CI, 2026-11-27).
  size_t printed = 0;
  for (size_t at = seen.find("not-interrupted"); at != std::string::npos; at = seen.find("not-interrupted", at + 1)) {
    if (at < 5 || seen.compare(at - 5, 5, "echo ") != 0) ++printed;
  }
  EXPECT_EQ(printed, 0u) << "the interrupted command's output: " << seen;
  // Leaving the shell ends attach with its exit code.
  const std::optional<int> ended = TypeAndWaitForExit(master, pid, "exit 5\r", 20s);
  ASSERT_TRUE(ended.has_value()) << seen;
  const int st = *ended;
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 5) << seen;
  close(master);
  EXPECT_EQ(c.Job(id)["state"], "RUNNING") << "attach leaves the task alone";
  std::ofstream(gate).put('\n');
  c.WaitForState(id, "SUCCEEDED");
}

}  // namespace
}  // namespace cohort::testing
