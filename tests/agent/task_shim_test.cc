// The shim on its own, run as a program the way the executor runs it.
#include "agent/task_shim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/container_root.h"
#include "agent/lease.h"
#include "agent/proc_usage.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::ReadFile;
using agent_testing::TempDir;
using agent_testing::WaitForFile;
using ::testing::HasSubstr;
using ::testing::Not;

class TaskShimTest : public ::testing::Test {
 protected:
  Result<Subprocess> StartShim(std::vector<std::string> command, int grace_ms = 5000,
                               bool with_subcommand = true, std::vector<std::string> flags = {}) {
    SpawnOptions so;
    so.argv = {COHORT_TEST_SHIM};
    if (with_subcommand) so.argv.push_back(kTaskShimCommand);
    for (std::string a : {"--log", log_.c_str(), "--status", status_.c_str(), "--grace-ms"}) {
      so.argv.push_back(a);
    }
    so.argv.push_back(std::to_string(grace_ms));
    so.argv.insert(so.argv.end(), flags.begin(), flags.end());
    so.argv.push_back("--");
    so.argv.insert(so.argv.end(), command.begin(), command.end());
    so.stdout_path = log_;
    so.new_process_group = false;
    return Subprocess::Spawn(so);
  }

  json Status() {
    auto j = ParseJson(ReadFile(status_), "status");
    EXPECT_TRUE(j) << ReadFile(status_);
    return j ? *j : json();
  }

  // Writes the lease file: it expires `expires_in` from now, its deadline `margin` later.
  void WriteLease(Millis expires_in, Millis margin) {
    lease_expires_ = SteadyClock::now() + expires_in;
    ASSERT_TRUE(WriteLeaseFile(lease_, Lease{lease_expires_, lease_expires_ + margin, expires_in}));
  }
  // A shim under the lease whose task waits for `go` (after touching `ready`), then exits 0.
  Result<Subprocess> StartLeasedShim() {
    return StartShim({"sh", "-c", "touch " + ready_ + "; while [ ! -e " + go_ + " ]; do sleep 0.01; done"}, 5000,
                     true, {"--lease", lease_});
  }
  // Starts a shim under a lease that expires in 1 s with `margin` to its deadline, waits
  // for its task, and stops the shim (SIGSTOP) until `past` after the expiry: to the shim,
  // a stretch in which the node did not schedule it. Then lets it go on.
  Result<Subprocess> StartLeasedShimAndStopItPastExpiry(Millis margin, Millis past) {
    WriteLease(1000ms, margin);
    auto shim = StartLeasedShim();
    if (!shim) return shim;
    EXPECT_TRUE(WaitForFile(ready_));
    shim->Signal(SIGSTOP);
    std::this_thread::sleep_until(lease_expires_ + past);
    shim->Signal(SIGCONT);
    return shim;
  }
  // Waits for the shim and returns why it killed its task (the status's error); expects
  // the task to have been SIGKILLed.
  std::string KilledFor(Subprocess& shim) {
    EXPECT_TRUE(shim.Wait());
    json j = Status();
    EXPECT_EQ(j["signal"], SIGKILL);
    return j.value("error", "");
  }

  TempDir tmp_;
  std::string log_ = tmp_.Sub("task.log");
  std::string status_ = tmp_.Sub("task.status.json");
  std::string lease_ = tmp_.Sub("tasks.lease");
  std::string ready_ = tmp_.Sub("ready");
  std::string go_ = tmp_.Sub("go");
  SteadyTime lease_expires_;
};

TEST_F(TaskShimTest, ExitsWithTheTaskCodeAndWritesStatus) {
  auto shim = StartShim({"sh", "-c", "echo out; exit 5"});
  ASSERT_TRUE(shim) << shim.error().ToString();
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 5);
  json j = Status();
  EXPECT_EQ(j["exit_code"], 5);
  EXPECT_EQ(j["signal"], 0);
  EXPECT_EQ(j["error"], "");
  EXPECT_EQ(ReadFile(log_), "out\n");
  EXPECT_FALSE(std::filesystem::exists(status_ + ".tmp"));
}

// --output/--error (Slurm's -o/-e): the task's streams go to the files and still to the log;
// without --error, stderr goes to the output file; the status comes only after all of the
// output is in the file, a descendant's included.
TEST_F(TaskShimTest, CopiesTheTasksOutputToTheFilesAndTheLog) {
  const std::string out = tmp_.Sub("o.txt");
  const std::string err = tmp_.Sub("e.txt");
  auto shim = StartShim({"sh", "-c", "echo to-out; echo to-err >&2"}, 5000, true, {"--output", out, "--error", err});
  ASSERT_TRUE(shim) << shim.error().ToString();
  ASSERT_TRUE(shim->Wait());
  EXPECT_EQ(Status()["exit_code"], 0);
  EXPECT_EQ(ReadFile(out), "to-out\n");
  EXPECT_EQ(ReadFile(err), "to-err\n");
  EXPECT_THAT(ReadFile(log_), HasSubstr("to-out\n"));
  EXPECT_THAT(ReadFile(log_), HasSubstr("to-err\n"));

  // One file for both streams, in the order they were written; 2 MiB written by a
  // background child just before the leader exits all arrive before the status does.
  const std::string both = tmp_.Sub("both.txt");
  std::filesystem::remove(status_);
  auto big = StartShim({"sh", "-c", "echo first; echo second >&2; (head -c 2097152 /dev/zero | tr '\\0' x) & wait"},
                       5000, true, {"--output", both});
  ASSERT_TRUE(big);
  ASSERT_TRUE(big->Wait());
  EXPECT_EQ(Status()["exit_code"], 0);
  const std::string text = ReadFile(both);
  EXPECT_EQ(text.substr(0, 13), "first\nsecond\n");
  EXPECT_EQ(text.size(), 13u + 2097152u);
}

// The copier outlives the task: when the leader exits while output is still on its way
// (here the output file is a FIFO the test has not read yet, so the copier is blocked
// writing to it, with more in the task's pipe), the shim's clean-up kills the task's
// processes but not the copier, and all the task wrote reaches the file and the log.
TEST_F(TaskShimTest, NoTailIsLostWhenTheTaskEndsWithOutputInFlight) {
  const std::string fifo = tmp_.Sub("out.fifo");
  const std::string left = tmp_.Sub("left");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int rd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(rd, 0);
  // 100000 bytes: 64 KiB fill the FIFO, the copier blocks writing the next chunk, the rest
  // waits in the task's pipe (which holds 64 KiB more); then the leader exits.
  auto shim = StartShim({"sh", "-c",
                         "head -c 100000 /dev/zero | tr '\\0' x; echo $$ > " + left + ".tmp; mv " + left + ".tmp " +
                             left + "; exit 0"},
                        5000, true, {"--output", fifo});
  ASSERT_TRUE(shim);
  // Read only once the shim has reaped the leader (its pid is gone), so its clean-up
  // runs while the copier is still blocked.
  const pid_t leader = agent_testing::ReadPidFile(left);
  ASSERT_GT(leader, 0);
  ASSERT_TRUE(agent_testing::WaitFor([&] { return kill(leader, 0) != 0 && errno == ESRCH; }));
  std::string got;
  char buf[65536];
  while (true) {
    pollfd p{rd, POLLIN, 0};
    ASSERT_GT(poll(&p, 1, 20000), 0) << "the copier neither wrote nor closed the FIFO";
    const ssize_t n = read(rd, buf, sizeof buf);
    if (n == 0) break;  // the copier closed it
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
  close(rd);
  ASSERT_TRUE(shim->Wait());
  EXPECT_EQ(got.size(), 100000u);
  EXPECT_EQ(ReadFile(log_).size(), 100000u);
  EXPECT_EQ(Status()["exit_code"], 0);
}

TEST_F(TaskShimTest, OutputFilesAreAppendedToUnlessTruncated) {
  const std::string out = tmp_.Sub("o.txt");
  const std::string rel_dir = tmp_.Sub("work");
  std::filesystem::create_directory(rel_dir);
  {
    std::ofstream(out) << "old\n";
    std::ofstream(rel_dir + "/rel.txt") << "old\n";
  }
  auto append = StartShim({"echo", "new"}, 5000, true, {"--output", out});
  ASSERT_TRUE(append && append->Wait());
  EXPECT_EQ(ReadFile(out), "old\nnew\n");
  // Relative to the working directory; truncated when asked.
  auto truncate =
      StartShim({"echo", "only"}, 5000, true, {"--cwd", rel_dir, "--output", "rel.txt", "--truncate-output"});
  ASSERT_TRUE(truncate && truncate->Wait());
  EXPECT_EQ(ReadFile(rel_dir + "/rel.txt"), "only\n");
}

// stderr that goes to the output file (no --error, or --error naming the output file)
// keeps the order the task wrote in, as a shell's `>f 2>&1` does: the lines are never
// regrouped by stream, in the file or in the log.
// COHORT_UMASK (the submitter's umask, api::JobSpec::umask) is the task's and the output
// copier's: their files are made with it, whatever the agent's own umask is.
TEST_F(TaskShimTest, TheTaskAndItsOutputFilesTakeTheJobsUmask) {
  const std::string out = tmp_.Sub("umask.out");
  const std::string made = tmp_.Sub("made.txt");
  const mode_t agents = umask(022);
  setenv("COHORT_UMASK", "0077", 1);
  auto shim = StartShim({"sh", "-c", "umask; touch " + made}, 5000, true, {"--output", out});
  unsetenv("COHORT_UMASK");
  umask(agents);
  ASSERT_TRUE(shim) << shim.error().ToString();
  ASSERT_TRUE(shim->Wait());
  EXPECT_EQ(ReadFile(out), "0077\n");
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(TaskShimTest, StdoutAndStderrIntoOneFileKeepTheirOrder) {
  const std::string script = "i=0; while [ $i -lt 300 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done";
  std::string want;
  for (int i = 0; i < 300; ++i) want += fmt::format("o{}\ne{}\n", i, i);
  const std::string joined = tmp_.Sub("joined.txt");
  const std::string same = tmp_.Sub("same.txt");
  for (const auto& flags : {std::vector<std::string>{"--output", joined},
                            std::vector<std::string>{"--output", same, "--error", same}}) {
    std::filesystem::remove(log_);
    auto shim = StartShim({"sh", "-c", script}, 5000, true, flags);
    ASSERT_TRUE(shim && shim->Wait());
    EXPECT_EQ(ReadFile(flags[1]), want) << flags.size();
    EXPECT_EQ(ReadFile(log_), want) << flags.size();
  }
}

// A file the copier cannot open fails the task's start as an exec failure does: exit 127,
// the reason in the log and the status, and the command never runs.
TEST_F(TaskShimTest, AnOutputFileThatCannotBeOpenedFailsTheStart) {
  const std::string ran = tmp_.Sub("ran");
  const std::string work = tmp_.Sub("w");
  std::filesystem::create_directory(work);
  auto shim = StartShim({"touch", ran}, 5000, true, {"--cwd", work, "--output", "missing/o.txt"});
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 127);
  const std::string want =
      "cannot open output file 'missing/o.txt' (in '" + work + "'): No such file or directory";
  EXPECT_EQ(Status()["exit_code"], 127);
  EXPECT_EQ(Status()["error"], want);
  EXPECT_THAT(ReadFile(log_), HasSubstr(want));
  EXPECT_FALSE(std::filesystem::exists(ran));

  std::filesystem::remove(status_);
  auto dir = StartShim({"touch", ran}, 5000, true, {"--output", tmp_.Sub("o.txt"), "--error", work});
  ASSERT_TRUE(dir && dir->Wait());
  EXPECT_EQ(Status()["error"], "cannot open error file '" + work + "': Is a directory");
  EXPECT_FALSE(std::filesystem::exists(ran));
}

// A symbolic link another user planted at the output path fails the start, saying so
// (agent/output_file.h); the file it names is left alone.
TEST_F(TaskShimTest, AnOutputLinkAnotherUserPlantedFailsTheStart) {
  const std::string precious = tmp_.Sub("precious");
  const std::string link = tmp_.Sub("planted.out");
  std::ofstream(precious) << "keep\n";
  ASSERT_EQ(symlink(precious.c_str(), link.c_str()), 0);
  if (geteuid() != 0 || lchown(link.c_str(), 4242, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "giving a link to another user needs root";
  }
  auto shim = StartShim({"echo", "ran"}, 5000, true, {"--output", link, "--truncate-output"});
  ASSERT_TRUE(shim && shim->Wait());
  EXPECT_EQ(Status()["exit_code"], 127);
  EXPECT_EQ(Status()["error"], "cannot open output file '" + link +
                                   "': it is a symbolic link that another user owns, which cohort does not follow "
                                   "(remove it, or give the file it points to)");
  EXPECT_EQ(ReadFile(precious), "keep\n");
}

TEST_F(TaskShimTest, WorksWithoutTheSubcommandWord) {
  auto shim = StartShim({"true"}, 5000, /*with_subcommand=*/false);
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->Success());
  EXPECT_EQ(Status()["exit_code"], 0);
}

TEST_F(TaskShimTest, SigtermStopsTheTaskGroup) {
  std::string ready = tmp_.Sub("ready");
  auto shim = StartShim({"sh", "-c", "touch " + ready + "; sleep 100 & wait"});
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGTERM);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 128 + SIGTERM);  // the shim itself exits normally
  json j = Status();
  EXPECT_EQ(j["signal"], SIGTERM);
  EXPECT_EQ(j["exit_code"], 128 + SIGTERM);
}

TEST_F(TaskShimTest, Sigusr1KillsAtOnce) {
  std::string ready = tmp_.Sub("ready");
  auto shim = StartShim({"sh", "-c", "trap '' TERM; touch " + ready + "; exec sleep 100"},
                        /*grace_ms=*/60000);
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGUSR1);
  auto st = shim->WaitFor(20s);
  ASSERT_TRUE(st);
  EXPECT_EQ(Status()["signal"], SIGKILL);
}

TEST_F(TaskShimTest, SignalsForTheShimAloneAreIgnored) {
  // SIGINT/SIGHUP/SIGPIPE to the shim must not end it (nor the task).
  std::string ready = tmp_.Sub("ready"), go = tmp_.Sub("go");
  auto shim = StartShim({"sh", "-c",
                         "touch " + ready + "; while [ ! -e " + go + " ]; do sleep 0.01; done; exit 6"});
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGINT);
  shim->Signal(SIGHUP);
  shim->Signal(SIGPIPE);
  std::ofstream(go) << "go";
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 6);
  EXPECT_EQ(Status()["exit_code"], 6);
}

TEST_F(TaskShimTest, HoldKeepsTheTaskWithoutACommandUntilASignal) {
  SpawnOptions so;
  so.argv = {COHORT_TEST_SHIM, kTaskShimCommand, "--log", log_, "--status", status_, "--grace-ms", "5000",
             "--cwd", tmp_.Sub(""), "--hold"};
  so.stdout_path = log_;
  so.new_process_group = false;
  auto shim = Subprocess::Spawn(so);
  ASSERT_TRUE(shim);
  // It holds: the log says so and no status appears until it is stopped.
  ASSERT_TRUE(agent_testing::WaitFor([&] { return ReadFile(log_).find("holding the allocation") != std::string::npos; }));
  EXPECT_FALSE(shim->TryWait().has_value());
  EXPECT_FALSE(std::filesystem::exists(status_));
  shim->Signal(SIGTERM);
  auto st = shim->WaitFor(20s);
  ASSERT_TRUE(st);
  json j = Status();
  EXPECT_EQ(j["signal"], SIGTERM);
  EXPECT_EQ(j["error"], "");

  // --hold runs no command.
  so.argv.insert(so.argv.end(), {"--", "true"});
  auto bad = Subprocess::Spawn(so);
  ASSERT_TRUE(bad);
  auto code = bad->Wait();
  ASSERT_TRUE(code);
  EXPECT_EQ(code->exit_code, 2);
  EXPECT_THAT(ReadFile(log_), HasSubstr("--hold runs no command"));
}

TEST_F(TaskShimTest, BadCommandLineExits2) {
  SpawnOptions so;
  so.argv = {COHORT_TEST_SHIM, kTaskShimCommand, "--log", log_, "--bogus", "x", "--", "true"};
  so.stdout_path = log_;
  auto shim = Subprocess::Spawn(so);
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(ReadFile(log_), HasSubstr("unknown flag '--bogus'"));
  EXPECT_FALSE(std::filesystem::exists(status_));
}

TEST_F(TaskShimTest, ContainerDetachedNeedsTheContainersRoot) {
  SpawnOptions so;
  so.argv = {COHORT_TEST_SHIM, kTaskShimCommand, "--log", log_, "--status", status_, "--grace-ms", "0",
             "--container-runtime", "docker", "--container-name", "c1", "--container-image", "img",
             "--container-detached", "--", "docker", "run"};
  so.stdout_path = log_;
  auto shim = Subprocess::Spawn(so);
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(ReadFile(log_), HasSubstr("--container-detached needs --container-root"));
}

TEST_F(TaskShimTest, AnExpiredLeaseKillsTheTask) {
  ASSERT_NO_FATAL_FAILURE(WriteLease(200ms, 0ms));
  auto shim = StartLeasedShim();
  ASSERT_TRUE(shim);
  // Nobody renews and nobody creates `go`.
  EXPECT_THAT(KilledFor(*shim), HasSubstr("did not renew the task's lease for 200ms ("));
  EXPECT_THAT(ReadFile(log_), HasSubstr("did not renew the task's lease"));
}

TEST_F(TaskShimTest, ALeaseRenewedInTimeKeepsTheTask) {
  ASSERT_NO_FATAL_FAILURE(WriteLease(std::chrono::hours(1), 0ms));
  auto shim = StartLeasedShim();
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready_));
  std::ofstream(go_) << "go";
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 0);
  EXPECT_EQ(Status()["error"], "");
}

// The shim was not scheduled (SIGSTOP) across its lease's expiry, and the agent renews only
// after it runs again: the lapse is its own lateness, so the task lives.
TEST_F(TaskShimTest, ALapseItsOwnLatenessExplainsIsForgiven) {
  // Stopped 1.2 s past the expiry, so late by more than 1.1 s: allowed over 4.4 s past it.
  auto shim = StartLeasedShimAndStopItPastExpiry(60s, 1200ms);
  ASSERT_TRUE(shim);
  ASSERT_NO_FATAL_FAILURE(WriteLease(60s, 60s));
  std::ofstream(go_) << "go";
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 0) << ReadFile(log_);
  EXPECT_EQ(Status()["error"], "");
}

// The same lapse without a renewal: the task dies once the allowance is used up.
TEST_F(TaskShimTest, TheAllowanceRunsOutWithoutARenewal) {
  auto shim = StartLeasedShimAndStopItPastExpiry(60s, 500ms);
  ASSERT_TRUE(shim);
  EXPECT_THAT(KilledFor(*shim), HasSubstr("that this node's scheduling delay explains"));
}

// However late the shim ran, it never lets the task live past the lease's deadline (the
// head's failure timeout): stopped beyond it, it kills at once when it runs again.
TEST_F(TaskShimTest, NoAllowanceOutlivesTheDeadline) {
  auto shim = StartLeasedShimAndStopItPastExpiry(200ms, 1000ms);
  ASSERT_TRUE(shim);
  EXPECT_THAT(KilledFor(*shim), HasSubstr("did not renew the task's lease for 1.0s ("));
}

// A Docker task (--container-root, --container-detached): the container is not the shim's
// descendant. A fake
// runtime stands in for the Docker client and daemon: `run` waits for `go` (the client
// creating the container), then starts the container's init in a PID namespace of its own
// (unshare; a shell that exits on SIGTERM, as docker-init passes it on) and waits for it;
// `container inspect` prints the init's pid, or 0 before it
// exists; `kill --signal SIG` fails until the init exists, then signals it; every call and
// a SIGTERM that reaches the client are logged in `calls`.
class DockerShimTest : public TaskShimTest {
 protected:
  void SetUp() override {
    if (getuid() != 0 || system("unshare --pid --fork true >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "cannot create a PID namespace here (unshare --pid needs root)";
    }
    std::ofstream(runtime_) << "#!/bin/sh\n"
                            << "D=" << tmp_.path() << "\n"
                            << R"(echo "$*" >> $D/calls
case "$1" in
run)
  trap 'echo client-got-TERM >> $D/calls' TERM
  while [ ! -e $D/go ]; do sleep 0.01; done
  unshare --pid --fork --kill-child sh -c 'trap "exit 143" TERM; while :; do sleep 0.05; done' & u=$!
  c=""; while [ -z "$c" ]; do c=$(tr -d ' ' < /proc/$u/task/$u/children 2>/dev/null); done
  echo $c > $D/init.tmp && mv $D/init.tmp $D/init.pid
  wait $u; exit $? ;;
container) if [ -e $D/init.pid ]; then cat $D/init.pid; else echo 0; fi ;;
kill) [ -e $D/init.pid ] && kill -$3 $(cat $D/init.pid) ;;
rm) rm -f $D/init.pid ;;
esac
)";
    std::filesystem::permissions(runtime_, std::filesystem::perms::owner_all);
  }
  Result<Subprocess> StartDockerShim() {
    return StartShim({runtime_, "run"}, 20000, true,
                     {"--container-runtime", runtime_, "--container-name", "c1", "--container-image", "img",
                      "--container-root", root_, "--container-detached"});
  }
  int InitPid() { return atoi(ReadFile(tmp_.Sub("init.pid")).c_str()); }

  std::string runtime_ = tmp_.Sub("docker");
  std::string root_ = tmp_.Sub("task.container-root");
  std::string calls_ = tmp_.Sub("calls");
};

// The shim finds the container's init by asking the runtime (0 until it runs) and
// publishes it with its start time; after the task the file is gone.
TEST_F(DockerShimTest, PublishesTheContainersInitForTheAgent) {
  auto shim = StartDockerShim();
  ASSERT_TRUE(shim);
  ASSERT_TRUE(agent_testing::WaitFor([&] { return ReadFile(calls_).find("container inspect") != std::string::npos; }));
  EXPECT_FALSE(std::filesystem::exists(root_)) << "published before the container ran";
  std::ofstream(go_) << "go";
  ASSERT_TRUE(agent_testing::WaitFor([&] { return InitPid() > 0 && ReadContainerRoot(root_).has_value(); }));
  const int init = InitPid();
  EXPECT_EQ(ReadContainerRoot(root_), (ContainerRoot{init, ProcStartTicks(init).value_or(-1)}));
  EXPECT_THAT(ReadFile(calls_), HasSubstr("container inspect --format {{.State.Pid}} c1"));
  kill(init, SIGKILL);  // the container ends: the client returns its code
  ASSERT_TRUE(shim->WaitFor(20s));
  EXPECT_FALSE(std::filesystem::exists(root_));
  EXPECT_FALSE(std::filesystem::exists(root_ + ".inspect"));
}

// SIGTERM while the client is still creating the container: the client is never
// signalled (killing it then can leave a container created, or started, after the task);
// the container gets SIGTERM by its name once it exists, and is removed after.
TEST_F(DockerShimTest, SigtermReachesTheContainerByNameNeverTheCreatingClient) {
  auto shim = StartDockerShim();
  ASSERT_TRUE(shim);
  ASSERT_TRUE(agent_testing::WaitFor([&] { return ReadFile(calls_).find("run") != std::string::npos; }));
  shim->Signal(SIGTERM);
  ASSERT_TRUE(agent_testing::WaitFor([&] { return ReadFile(calls_).find("kill --signal TERM c1") != std::string::npos; }));
  std::ofstream(go_) << "go";  // the create completes; the retried kill now lands
  auto st = shim->WaitFor(20s);
  ASSERT_TRUE(st);
  const std::string calls = ReadFile(calls_);
  EXPECT_THAT(calls, Not(HasSubstr("client-got-TERM")));
  EXPECT_THAT(calls, HasSubstr("rm --force c1"));
  EXPECT_EQ(Status()["signal"], 0) << "the client was not killed: it returned the container's end";
  EXPECT_NE(Status()["exit_code"], 0);
}

}  // namespace
}  // namespace cohort::agent
