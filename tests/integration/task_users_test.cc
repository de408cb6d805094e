// Jobs run as their users: a root agent with `--task-user job` starts each task as its job's
// account. Two Unix accounts made for the test (useradd; removed afterwards, also when the
// test fails) each run a job; each task runs under its own uid and gid, and one account
// cannot read the other's task environment (/proc/<pid>/environ, which holds its
// rendezvous token), log or checkpoint directory, nor signal the shim that supervises its
// own task. A job whose user has no account on the node fails at start, naming both. The
// accesses are tried by a child of the test that takes the account's credentials, as
// `setpriv --reuid --regid --init-groups` would. Needs root (CI runs as root) and useradd.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <optional>
#include <random>
#include <regex>

#include "harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

// The program's path in PATH or the sbin directories (a test's PATH may lack them).
std::string FindProgram(const std::string& name) {
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string candidate = path.substr(start, end - start) + "/" + name;
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Runs argv to completion; its exit code, or -1 if it could not run. Output goes to `log`.
int Run(const std::vector<std::string>& argv, const std::string& log) {
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = log;
  auto p = Subprocess::Spawn(o);
  if (!p) return -1;
  auto st = p->Wait();
  return st && st->signal == 0 ? st->exit_code : -1;
}

// A Unix account made with useradd for this test, with a group of its own; userdel'd (and
// its group groupdel'd) when the object goes away, whatever the test's outcome.
class TestAccount {
 public:
  static std::optional<TestAccount> Create(const std::string& name, const std::string& log) {
    if (Run({FindProgram("useradd"), "--no-create-home", "--user-group", "--shell", "/bin/sh", name}, log) != 0) {
      return std::nullopt;
    }
    TestAccount a;
    a.name_ = name;  // removed again by a's destructor if it cannot be looked up
    passwd* pw = getpwnam(name.c_str());
    if (!pw || pw->pw_uid == 0) return std::nullopt;
    a.uid_ = pw->pw_uid;
    a.gid_ = pw->pw_gid;
    return a;
  }
  TestAccount() = default;
  TestAccount(TestAccount&& o) noexcept : name_(std::exchange(o.name_, "")), uid_(o.uid_), gid_(o.gid_) {}
  TestAccount& operator=(TestAccount&&) = delete;
  ~TestAccount() {
    if (name_.empty()) return;
    (void)Run({FindProgram("userdel"), "--force", name_}, "/dev/null");
    (void)Run({FindProgram("groupdel"), name_}, "/dev/null");  // if userdel left the group
  }

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

  // What a process of this account gets from `try_it` (0 or an errno), run in a forked
  // child that takes the account's uid, gid and groups first.
  template <typename F>
  int As(F try_it) const {
    pid_t pid = fork();
    if (pid == 0) {
      gid_t groups[] = {gid_};
      if (setgroups(1, groups) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(255);
      _exit(try_it());
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
  }
  // open(path) with `flags` as this account: 0 if it opened, else the errno.
  int Open(const std::string& path, int flags = O_RDONLY) const {
    return As([&] {
      int fd = open(path.c_str(), flags | O_CLOEXEC);
      if (fd < 0) return errno;
      char c;
      // /proc/<pid>/environ checks access at read too.
      int r = (flags & O_DIRECTORY) || read(fd, &c, 1) >= 0 ? 0 : errno;
      close(fd);
      return r;
    });
  }
  int Signal0(pid_t pid) const { return As([&] { return kill(pid, 0) == 0 ? 0 : errno; }); }

 private:
  std::string name_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// The "Uid:" or "Gid:" line of /proc/<pid>/status: real, effective, saved, filesystem.
std::string StatusIds(int pid, const std::string& key) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  if (!std::regex_search(status, m, std::regex(key + ":\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)"))) return "";
  return m[1].str() + " " + m[2].str() + " " + m[3].str() + " " + m[4].str();
}

int ParentPid(int pid) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  return std::regex_search(status, m, std::regex("PPid:\\s+(\\d+)")) ? std::stoi(m[1].str()) : 0;
}

class TaskUsersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: only a root agent starts tasks as other users";
    if (FindProgram("useradd").empty() || FindProgram("userdel").empty()) {
      GTEST_SKIP() << "needs useradd and userdel to make the test's accounts";
    }
    // Unique per run, so tests running side by side (or a crashed run's leftovers) never clash.
    std::random_device rd;
    const std::string tag = fmt::format("{}{:04x}", getpid() % 100000, rd() & 0xffff);
    const std::string log = c_.dir() + "/useradd.log";
    for (char who : {'a', 'b'}) {
      auto a = TestAccount::Create(fmt::format("cohort-{}-{}", tag, who), log);
      if (!a) GTEST_SKIP() << "useradd failed: " << ReadFile(log);
      accounts_.push_back(std::move(*a));
    }
    // The accounts' tasks reach their checkpoint directories (not the 0700 state directory).
    ASSERT_EQ(chmod(c_.dir().c_str(), 0711), 0);
    ckpt_root_ = c_.dir() + "/checkpoints";
    ASSERT_EQ(mkdir(ckpt_root_.c_str(), 0711), 0);
    ASSERT_NO_FATAL_FAILURE(c_.StartHead(0, {"--checkpoint-root", ckpt_root_}));
    ASSERT_NO_FATAL_FAILURE(c_.StartAgent("node-1", 0, 16, {"--task-user", "job"}));
    ASSERT_NO_FATAL_FAILURE(c_.WaitForNodes(1));
  }

  // Submits a job of `user` whose task prints its pid and ids, writes a checkpoint and
  // sleeps; returns the job id.
  int64_t SubmitSleeper(const std::string& user) {
    json j = c_.Submit({{"command",
                         {"sh", "-c",
                          "echo pid=$$ ids=$(id -u):$(id -g); echo secret > \"$COHORT_CHECKPOINT_DIR/ckpt\"; "
                          "echo ready; exec sleep 300"}},
                        {"user", user},
                        {"name", "whoami"}});
    return j.value("id", int64_t{0});
  }

  // The pid the task printed, once it is ready.
  int WaitForTaskPid(int64_t id) {
    std::smatch m;
    std::string log;
    bool ok = WaitUntil([&] {
      log = c_.Logs(id, 0);
      return log.find("ready\n") != std::string::npos;
    }, 20s);
    EXPECT_TRUE(ok) << "job " << id << " never got ready; job: " << c_.Job(id).dump(2) << "\nlog:\n" << log;
    return std::regex_search(log, m, std::regex("pid=(\\d+)")) ? std::stoi(m[1].str()) : 0;
  }

  std::string LogPath(int64_t id) const { return fmt::format("{}/node-1/jobs/{}/attempt-0/rank-0.log", c_.dir(), id); }
  std::string CheckpointDir(int64_t id) const { return fmt::format("{}/job-{}", ckpt_root_, id); }

  // Declared before the cluster, so the accounts outlive its processes.
  std::vector<TestAccount> accounts_;
  LocalCluster c_;
  std::string ckpt_root_;
};

// `cohort exec` into a user's job runs as that job's account, never as the root agent: with
// its ids, and no more access than its task (the other account's checkpoint stays closed).
TEST_F(TaskUsersTest, ExecRunsAsTheJobsAccount) {
  const TestAccount& a = accounts_[0];
  const TestAccount& b = accounts_[1];
  const int64_t ja = SubmitSleeper(a.name());
  const int64_t jb = SubmitSleeper(b.name());
  ASSERT_GT(WaitForTaskPid(ja), 0);
  ASSERT_GT(WaitForTaskPid(jb), 0);
  auto r = Cohort(c_, {"exec", std::to_string(ja), "--", "sh", "-c",
                       "echo ids=$(id -u):$(id -g); grep '^Uid:' /proc/self/status; "
                       "cat $COHORT_CHECKPOINT_DIR/ckpt; cat " + CheckpointDir(jb) + "/ckpt"});
  EXPECT_EQ(r.status.Code(), 1) << "the other account's checkpoint is not readable: " << r.output << r.errors;
  EXPECT_NE(r.output.find(fmt::format("ids={}:{}", a.uid(), a.gid())), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("{0}\t{0}\t{0}\t{0}", a.uid())), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("secret"), std::string::npos) << "its own checkpoint is: " << r.output;
  EXPECT_NE(r.errors.find("Permission denied"), std::string::npos) << r.errors;
  for (int64_t id : {ja, jb}) {
    ASSERT_TRUE(c_.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object()).has_value());
    c_.WaitForState(id, "CANCELLED");
  }
}

TEST_F(TaskUsersTest, EachUsersTasksRunAsItsAccountAndCannotReadTheOthers) {
  const TestAccount& a = accounts_[0];
  const TestAccount& b = accounts_[1];
  const int64_t ja = SubmitSleeper(a.name());
  const int64_t jb = SubmitSleeper(b.name());
  ASSERT_GT(ja, 0);
  ASSERT_GT(jb, 0);
  const int pa = WaitForTaskPid(ja);
  const int pb = WaitForTaskPid(jb);
  ASSERT_GT(pa, 0);
  ASSERT_GT(pb, 0);

  // Each task runs with its account's ids, real, effective, saved and filesystem alike.
  for (auto [pid, acct] : {std::pair{pa, &a}, std::pair{pb, &b}}) {
    EXPECT_EQ(StatusIds(pid, "Uid"), fmt::format("{0} {0} {0} {0}", acct->uid())) << acct->name();
    EXPECT_EQ(StatusIds(pid, "Gid"), fmt::format("{0} {0} {0} {0}", acct->gid())) << acct->name();
  }
  EXPECT_NE(c_.Logs(ja, 0).find(fmt::format("ids={}:{}", a.uid(), a.gid())), std::string::npos) << c_.Logs(ja, 0);
  EXPECT_NE(c_.Logs(jb, 0).find(fmt::format("ids={}:{}", b.uid(), b.gid())), std::string::npos) << c_.Logs(jb, 0);

  // The environment: each reads its own task's (so the check below can fail), not the other's.
  EXPECT_EQ(a.Open(fmt::format("/proc/{}/environ", pa)), 0);
  EXPECT_EQ(b.Open(fmt::format("/proc/{}/environ", pb)), 0);
  EXPECT_EQ(a.Open(fmt::format("/proc/{}/environ", pb)), EACCES);
  EXPECT_EQ(b.Open(fmt::format("/proc/{}/environ", pa)), EACCES);

  // Nor can a task's own account signal the shim that supervises it (it stays root).
  const int shim_a = ParentPid(pa);
  ASSERT_GT(shim_a, 1);
  EXPECT_EQ(StatusIds(shim_a, "Uid"), "0 0 0 0");
  EXPECT_EQ(a.Signal0(shim_a), EPERM);
  EXPECT_EQ(a.Signal0(pa), 0);  // its own task, for contrast

  // Logs: each account's own, 0600, and not readable by the other.
  for (auto [id, acct] : {std::pair{ja, &a}, std::pair{jb, &b}}) {
    struct stat st{};
    ASSERT_EQ(stat(LogPath(id).c_str(), &st), 0) << LogPath(id);
    EXPECT_EQ(st.st_uid, acct->uid());
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  }
  EXPECT_EQ(a.Open(LogPath(jb)), EACCES);
  EXPECT_EQ(b.Open(LogPath(ja)), EACCES);

  // Checkpoint directories: each account's own, 0700; the other can neither list it nor
  // read the checkpoint in it, while the owner can.
  for (auto [id, acct] : {std::pair{ja, &a}, std::pair{jb, &b}}) {
    struct stat st{};
    ASSERT_EQ(stat(CheckpointDir(id).c_str(), &st), 0) << CheckpointDir(id);
    EXPECT_EQ(st.st_uid, acct->uid());
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  }
  EXPECT_EQ(b.Open(CheckpointDir(jb) + "/ckpt"), 0);
  EXPECT_EQ(a.Open(CheckpointDir(ja) + "/ckpt"), 0);
  EXPECT_EQ(a.Open(CheckpointDir(jb), O_RDONLY | O_DIRECTORY), EACCES);
  EXPECT_EQ(a.Open(CheckpointDir(jb) + "/ckpt"), EACCES);
  EXPECT_EQ(b.Open(CheckpointDir(ja) + "/ckpt"), EACCES);

  for (int64_t id : {ja, jb}) {
    auto r = c_.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
    c_.WaitForState(id, "CANCELLED");
  }
}

// Slurm's -o/-e files are opened as the job's account, never as the root agent: in a
// directory the account cannot write the job fails at start naming the file, and a symbolic
// link the user planted at the output path, pointing at a root-owned file, does not let
// the job write that file. Its own file is created as its own.
TEST_F(TaskUsersTest, OutputFilesAreOpenedAsTheJobsAccount) {
  const TestAccount& a = accounts_[0];
  const std::string ro = c_.dir() + "/ro";  // root's, 0755: a may enter, not write
  const std::string mine = c_.dir() + "/mine";
  const std::string root_file = c_.dir() + "/root-owned";
  ASSERT_EQ(mkdir(ro.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(mine.c_str(), 0755), 0);
  ASSERT_EQ(chown(mine.c_str(), a.uid(), a.gid()), 0);
  std::ofstream(root_file) << "root's\n";
  ASSERT_EQ(chmod(root_file.c_str(), 0644), 0);
  const std::string link = mine + "/planted.out";
  ASSERT_EQ(a.As([&] { return symlink(root_file.c_str(), link.c_str()) == 0 ? 0 : errno; }), 0);

  auto run = [&](const std::string& workdir, const std::string& output) {
    json j = c_.Submit({{"command", {"sh", "-c", "echo ran"}}, {"user", a.name()}, {"workdir", workdir},
                        {"output", output}, {"open_mode", "append"}});
    return j.value("id", int64_t{0});
  };
  const int64_t denied = run(ro, "out.txt");
  const int64_t planted = run(mine, "planted.out");
  const int64_t own = run(mine, "own-%j.out");
  for (auto [id, file, dir] : {std::tuple{denied, "out.txt", ro}, std::tuple{planted, "planted.out", mine}}) {
    ASSERT_GT(id, 0);
    json failed = c_.WaitForState(id, "FAILED");
    ASSERT_EQ(failed["exits"].size(), 1u) << failed.dump(2);
    EXPECT_EQ(failed["exits"][0].value("error", ""),
              fmt::format("cannot open output file '{}' (in '{}'): Permission denied", file, dir));
    EXPECT_EQ(failed["exits"][0].value("exit_code", 0), 127);
    EXPECT_EQ(c_.Logs(id, 0).find("ran"), std::string::npos) << c_.Logs(id, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(ro + "/out.txt"));
  EXPECT_EQ(ReadFile(root_file), "root's\n");
  ASSERT_GT(own, 0);
  c_.WaitForState(own, "SUCCEEDED");
  const std::string own_path = fmt::format("{}/own-{}.out", mine, own);
  EXPECT_EQ(ReadFile(own_path), "ran\n");
  struct stat st{};
  ASSERT_EQ(stat(own_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, a.uid());
  EXPECT_EQ(st.st_gid, a.gid());
}

// A batch script (cohort batch) runs as the job's account, which cannot read the agent's
// copy of it: the shim hands it a sealed anonymous copy, run by its #! interpreter.
TEST_F(TaskUsersTest, ABatchScriptRunsAsTheJobsAccount) {
  const TestAccount& a = accounts_[0];
  json j = c_.Submit({{"kind", "allocation"},
                      {"script", "#!/bin/sh\necho ids=$(id -u):$(id -g) args=$*\n"},
                      {"command", {"x", "y"}},
                      {"user", a.name()}});
  const int64_t id = j.value("id", int64_t{0});
  ASSERT_GT(id, 0) << j.dump();
  c_.WaitForState(id, "SUCCEEDED");
  EXPECT_NE(c_.Logs(id, 0).find(fmt::format("ids={}:{} args=x y\n", a.uid(), a.gid())), std::string::npos)
      << c_.Logs(id, 0);
}

TEST_F(TaskUsersTest, AJobWhoseUserHasNoAccountFailsAtStartNamingUserAndNode) {
  const std::string ghost = accounts_[0].name() + "-none";
  json j = c_.Submit({{"command", {"sh", "-c", "echo ran"}}, {"user", ghost}, {"name", "ghost"}});
  const int64_t id = j.value("id", int64_t{0});
  ASSERT_GT(id, 0);
  json failed = c_.WaitForState(id, "FAILED");
  ASSERT_EQ(failed["exits"].size(), 1u) << failed.dump(2);
  const std::string error = failed["exits"][0].value("error", "");
  EXPECT_NE(error.find("'" + ghost + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("'node-1'"), std::string::npos) << error;
  EXPECT_EQ(failed["exits"][0].value("exit_code", 0), 127);
  EXPECT_EQ(c_.Logs(id, 0).find("ran"), std::string::npos);
}

}  // namespace
}  // namespace cohort::testing
