// Simulated GPU telemetry, fault injection, /proc usage parsing and the agent's metrics.
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/container_root.h"
#include "agent/gpu/gpu.h"
#include "agent/gpu/task_memory.h"
#include "agent/health_check.h"
#include "agent/metrics.h"
#include "agent/proc_usage.h"

namespace cohort::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(SimulatedTelemetryTest, RisesWhileBusyAndFallsWhenIdle) {
  auto gpus = SimulatedGpus(2, "node-a");
  auto mon = MakeSimulatedGpuMonitor(gpus);
  SteadyTime t0{};
  auto idle = mon->Sample({false, false}, t0);
  ASSERT_EQ(idle.size(), 2u);
  for (const auto& r : idle) {
    EXPECT_DOUBLE_EQ(*r.utilization, 0);
    EXPECT_DOUBLE_EQ(*r.temperature_celsius, 35);
    EXPECT_DOUBLE_EQ(*r.power_watts, 70);
    EXPECT_DOUBLE_EQ(*r.sm_clock_hz, 345e6);
    EXPECT_EQ(*r.memory_used_bytes, int64_t{1} << 29);
    EXPECT_EQ(*r.memory_total_bytes, gpus[0].memory_bytes);
    EXPECT_EQ(r.health_events, 0);
  }
  // GPU 0 busy for 1 s: load 1 - e^-1.
  auto one = mon->Sample({true, false}, t0 + std::chrono::seconds(1));
  double load = 1 - std::exp(-1.0);
  EXPECT_NEAR(*one[0].utilization, 0.95 * load, 1e-9);
  EXPECT_NEAR(*one[0].power_watts, 70 + 630 * load, 1e-6);
  EXPECT_NEAR(*one[0].temperature_celsius, 35 + 40 * load, 1e-9);
  EXPECT_DOUBLE_EQ(*one[1].utilization, 0);
  // Busy for 10 s: near full load.
  auto busy = mon->Sample({true, false}, t0 + std::chrono::seconds(10));
  EXPECT_GT(*busy[0].utilization, 0.94);
  EXPECT_GT(*busy[0].memory_used_bytes, int64_t{60} << 30);
  EXPECT_GT(*busy[0].sm_clock_hz, 1.9e9);
  // Idle for 10 s: back near idle.
  auto cool = mon->Sample({false, false}, t0 + std::chrono::seconds(20));
  EXPECT_LT(*cool[0].utilization, 0.001);
  EXPECT_LT(*cool[0].temperature_celsius, 35.01);
}

TEST(SimulatedTelemetryTest, InjectedXidCountsAsHealthEvent) {
  auto mon = MakeSimulatedGpuMonitor(SimulatedGpus(2, "node-a"));
  ASSERT_TRUE(mon->InjectXid(1, 79).has_value());
  auto r = mon->Sample({}, SteadyTime{});
  EXPECT_EQ(r[0].health_events, 0);
  EXPECT_EQ(r[1].health_events, 1);
  EXPECT_EQ(r[1].health_event, "XID 79 (GPU has fallen off the bus) (injected)");
  ASSERT_TRUE(mon->InjectXid(1, 48).has_value());
  EXPECT_EQ(mon->Sample({}, SteadyTime{})[1].health_events, 2);

  auto bad_gpu = mon->InjectXid(2, 79);
  ASSERT_FALSE(bad_gpu.has_value());
  EXPECT_EQ(bad_gpu.error().field, "gpu");
  auto app_xid = mon->InjectXid(0, 13);  // an application's fault, not the GPU's
  ASSERT_FALSE(app_xid.has_value());
  EXPECT_EQ(app_xid.error().field, "xid");
  EXPECT_EQ(mon->Sample({}, SteadyTime{})[0].health_events, 0);
}

TEST(XidTest, Descriptions) {
  EXPECT_EQ(DescribeXid(79), "XID 79 (GPU has fallen off the bus)");
  EXPECT_EQ(DescribeXid(999), "XID 999");
  EXPECT_TRUE(IsApplicationXid(31));
  EXPECT_FALSE(IsApplicationXid(48));
}

TEST(ProcUsageTest, ParsesStatLine) {
  // pid (comm with ") spaces") state ppid pgrp session tty tpgid flags minflt cminflt
  // majflt cmajflt utime stime cutime cstime priority nice threads itreal starttime vsize rss
  std::string line =
      "4242 (my (odd) prog) S 1 4242 4000 0 -1 4194560 100 0 0 0 250 50 100 0 20 0 1 0 123 1000000 300 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
  auto st = ParseProcStat(line, 100, 4096);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->pid, 4242);
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->session, 4000);
  EXPECT_DOUBLE_EQ(st->usage.cpu_seconds, 4.0);  // (250 + 50 + 100 + 0) / 100
  EXPECT_EQ(st->usage.rss_bytes, 300 * 4096);
  EXPECT_EQ(st->start_ticks, 123);
  EXPECT_FALSE(ParseProcStat("garbage", 100, 4096).has_value());
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 2", 100, 4096).has_value());
}

// The real /proc. getsid(0) of the test itself proves nothing (in a container whose
// session leader lies outside the pid namespace it is 0, which names no process), so a
// child leads a session of its own as a task's shim does.
TEST(ProcUsageTest, SumsASessionLeaderAndItsAncestorsTree) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t shim = fork();
  ASSERT_GE(shim, 0);
  if (shim == 0) {
    setsid();
    char c = 1;
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(getsid(shim), shim);

  auto procs = ReadTaskProcesses(ShimRoots({shim}));
  ASSERT_TRUE(procs.usage.contains(shim));
  EXPECT_GT(procs.usage[shim].rss_bytes, 0);
  EXPECT_EQ(procs.task_of.at(shim), shim);
  EXPECT_FALSE(procs.task_of.contains(getpid())) << "the parent is not in the child's task";
  // This process as a root: itself and its descendant, though the child left its session.
  auto mine = ReadTaskProcesses(ShimRoots({getpid()}));
  EXPECT_EQ(mine.task_of.at(getpid()), getpid());
  EXPECT_EQ(mine.task_of.at(shim), getpid());
  EXPECT_GT(mine.usage[getpid()].rss_bytes, procs.usage[shim].rss_bytes / 2);
  EXPECT_TRUE(ReadTaskProcesses(TaskRoots{}).usage.empty());
  kill(shim, SIGKILL);
  waitpid(shim, nullptr, 0);
}

// A /proc of stat files only: "PID (comm) S PPID PGRP SESSION ..." with utime (field 14)
// and rss (field 24) set, so each process's CPU seconds and pages are known.
class FakeProc {
 public:
  FakeProc() : root_(std::filesystem::temp_directory_path() / ("cohort-fakeproc-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "self");  // not a pid: skipped
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  void Add(int pid, const std::string& comm, int ppid, int session, long cpu_ticks, long rss_pages,
           long start_ticks = 1) {
    std::filesystem::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "stat")
        << pid << " (" << comm << ") S " << ppid << " " << session << " " << session << " 0 -1 0 0 0 0 0 " << cpu_ticks
        << " 0 0 0 20 0 1 0 " << start_ticks << " 1000 " << rss_pages << " 0 0 0\n";
  }
  // PROC/PID/status with its NSpid line ("NSpid:\t4242\t1": the init of a child namespace).
  void SetNsPids(int pid, const std::string& nspids) {
    std::ofstream(root_ / std::to_string(pid) / "status") << "Name:\tx\nPid:\t" << pid << "\nNSpid:\t" << nspids
                                                          << "\nThreads:\t1\n";
  }
  // PROC/PID/ns/pid, a link to "pid:[INODE]" as the kernel shows it ("self" too).
  void SetPidNs(const std::string& pid, uint64_t inode) {
    std::filesystem::create_directories(root_ / pid / "ns");
    std::filesystem::remove(root_ / pid / "ns" / "pid");
    std::filesystem::create_symlink("pid:[" + std::to_string(inode) + "]", root_ / pid / "ns" / "pid");
  }
  std::string path() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

// Issue 18: a container task's processes leave the shim's session (conmon daemonizes into
// its own, the container's init leads another), yet descend from the shim, a subreaper.
// Shaped like `ps -eo pid,ppid,sid` under a real Podman task (see proc_usage.h).
TEST(ProcUsageTest, AContainerTasksProcessesCountForItsShim) {
  const long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  FakeProc proc;
  proc.Add(1, "init", 0, 1, 7 * ticks, 10);
  proc.Add(100, "cohort-task-shi", 1, 100, 0, 1);      // task A's shim
  proc.Add(101, "podman", 100, 100, ticks, 50);         // the runtime client, in the session
  proc.Add(110, "conmon", 100, 110, 0, 2);              // reparented to the shim, own session
  proc.Add(120, "podman-init", 110, 120, 0, 1);         // the container's init, own session
  proc.Add(121, "python", 120, 120, 40 * ticks, 1000);  // the container's work
  proc.Add(122, "worker (x)", 121, 125, 2 * ticks, 300);  // left the init's session too
  proc.Add(200, "cohort-task-shi", 1, 200, 0, 1);      // task B's shim, a bare task
  proc.Add(201, "sleep", 1, 200, ticks, 3);             // B's process whose parent chain broke: by session
  proc.Add(300, "sshd", 1, 300, 5 * ticks, 400);        // nobody's task
  proc.Add(301, "bash", 300, 300, ticks, 100);

  TaskProcesses t = ReadTaskProcesses(ShimRoots({100, 200}), proc.path());
  const std::map<int, int> want = {{100, 100}, {101, 100}, {110, 100}, {120, 100}, {121, 100}, {122, 100},
                                   {200, 200}, {201, 200}};
  EXPECT_EQ(t.task_of, want);
  ASSERT_TRUE(t.usage.contains(100));
  EXPECT_DOUBLE_EQ(t.usage[100].cpu_seconds, 43.0) << "podman 1 + python 40 + worker 2";
  EXPECT_EQ(t.usage[100].rss_bytes, (1 + 50 + 2 + 1 + 1000 + 300) * page);
  EXPECT_DOUBLE_EQ(t.usage[200].cpu_seconds, 1.0);
  EXPECT_EQ(t.usage[200].rss_bytes, 4 * page);
  EXPECT_EQ(t.usage.size(), 2u);
  // A task with no process left is absent; no roots, nothing read.
  EXPECT_FALSE(ReadTaskProcesses(ShimRoots({999}), proc.path()).usage.contains(999));
  EXPECT_TRUE(ReadTaskProcesses(TaskRoots{}, proc.path()).task_of.empty());
}

// Issue 18: a Docker task's container is the Docker daemon's, not a descendant of the
// task's shim. Shaped like `ps -eo pid,ppid,sid` under a real Docker task: the container's
// init (the shim publishes it, container_root.h) is the task's second root.
TEST(ProcUsageTest, ADockerTasksContainerInitIsItsSecondRoot) {
  const long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  FakeProc proc;
  proc.Add(1, "init", 0, 1, 0, 10);
  proc.Add(100, "cohort-task-shi", 1, 100, 0, 1);           // the task's shim
  proc.Add(101, "docker", 100, 100, ticks, 40);              // `docker run`, only a client
  proc.Add(50, "dockerd", 1, 50, 3 * ticks, 900);            // the daemon: nobody's task
  proc.Add(60, "containerd-shim", 1, 50, 0, 5);              // the container's parent
  proc.Add(70, "docker-init", 60, 70, 0, 1, /*start=*/5000);  // the container's init
  proc.Add(71, "python", 70, 70, 40 * ticks, 1000);           // the container's work
  proc.Add(72, "worker", 71, 75, 2 * ticks, 300);             // left the init's session too
  proc.Add(80, "docker-init", 60, 80, 9 * ticks, 77, 6000);   // another container, no task's

  const std::map<int, int> client_only = {{100, 100}, {101, 100}};
  EXPECT_EQ(ReadTaskProcesses(ShimRoots({100}), proc.path()).task_of, client_only)
      << "the shim's tree alone does not reach a Docker container";

  TaskRoots roots = ShimRoots({100});
  roots[70] = {100, 5000};
  TaskProcesses t = ReadTaskProcesses(roots, proc.path());
  const std::map<int, int> want = {{100, 100}, {101, 100}, {70, 100}, {71, 100}, {72, 100}};
  EXPECT_EQ(t.task_of, want);
  EXPECT_EQ(t.usage.size(), 1u) << "the container's use adds to its task, named by the shim";
  EXPECT_DOUBLE_EQ(t.usage[100].cpu_seconds, 43.0) << "client 1 + python 40 + worker 2";
  EXPECT_EQ(t.usage[100].rss_bytes, (1 + 40 + 1 + 1000 + 300) * page);

  // The init exited and its pid went to a process that started later: no root.
  roots[70] = {100, 4999};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, client_only);
  // A root whose process is gone roots nothing.
  roots.erase(70);
  roots[90] = {100, 5000};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, client_only);
}

// Rule 4 (proc_usage.h): a `cohort exec` command's cgroup leaf (here a directory with a
// cgroup.procs as the kernel writes it) gives the task the members that the tree and the
// session miss: one that setsid'd and was adopted by init. A member another task's tree
// holds stays that task's; a listed pid with no process, or 0 (outside the reader's PID
// namespace), is nobody; a root that left its pid gives nothing by its leaf.
TEST(ProcUsageTest, ACgroupLeafsMembersCountForItsTask) {
  const long ticks = sysconf(_SC_CLK_TCK);
  FakeProc proc;
  proc.Add(1, "init", 0, 1, 0, 10);
  proc.Add(100, "cohort-task-shi", 1, 100, 0, 1);  // task 100's shim
  proc.Add(110, "python", 100, 100, ticks, 50);
  proc.Add(400, "cohort", 1, 400, 0, 90);            // the agent
  proc.Add(500, "sh", 400, 500, 0, 2, 7000);         // the exec'd command, a root of task 100
  proc.Add(501, "sleep", 500, 500, 0, 1);
  proc.Add(520, "burn", 1, 520, 5 * ticks, 300);     // setsid + double fork: init's, its own session
  proc.Add(600, "sshd", 1, 600, 3 * ticks, 30);      // nobody's
  const std::filesystem::path leaf = std::filesystem::path(proc.path()) / "leaf";
  std::filesystem::create_directories(leaf);
  std::ofstream(leaf / "cgroup.procs") << "500\n501\n520\n110\n777\n0\n";

  TaskRoots roots = ShimRoots({100});
  roots[500] = {100, 7000, false, leaf.string()};
  TaskProcesses t = ReadTaskProcesses(roots, proc.path());
  const std::map<int, int> want = {{100, 100}, {110, 100}, {500, 100}, {501, 100}, {520, 100}};
  EXPECT_EQ(t.task_of, want);
  EXPECT_DOUBLE_EQ(t.usage[100].cpu_seconds, 6.0) << "python 1 + burn 5";

  roots[500].cgroup.clear();
  EXPECT_FALSE(ReadTaskProcesses(roots, proc.path()).task_of.contains(520)) << "without the leaf it escapes";
  roots[500] = {100, 6999, false, leaf.string()};  // the command exited and its pid was reused
  const std::map<int, int> shim_only = {{100, 100}, {110, 100}};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, shim_only);
  // Another task's leaf cannot take a process from this task's tree.
  roots = ShimRoots({100});
  roots[500] = {200, 7000, false, leaf.string()};
  const std::map<int, int> split = {{100, 100}, {110, 100}, {500, 200}, {501, 200}, {520, 200}};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, split);
}

// Issue 18: `docker exec` and `podman exec` start their process as a child of
// containerd's shim or of an exec conmon, in the container's PID namespace but below no
// root of the task; the namespace of the task's container init makes it the task's (rule
// 3, proc_usage.h). Shaped like `ps -eo pid,ppid,sid` with `readlink /proc/PID/ns/pid`.
TEST(ProcUsageTest, ProcessesExecdIntoATasksContainerCountForIt) {
  const long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  constexpr uint64_t kHost = 4026531836, kTask = 4026532500, kOther = 4026532600;
  FakeProc proc;
  proc.SetPidNs("self", kHost);
  proc.Add(1, "init", 0, 1, 0, 10);
  proc.SetPidNs("1", kHost);
  proc.Add(100, "cohort-task-shi", 1, 100, 0, 1);            // the task's shim
  proc.Add(101, "docker", 100, 100, ticks, 40);               // `docker run`, only a client
  proc.Add(60, "containerd-shim", 1, 50, 0, 5);               // the container's parent
  proc.SetPidNs("60", kHost);
  proc.Add(70, "docker-init", 60, 70, 0, 1, /*start=*/5000);  // the container's init
  proc.SetPidNs("70", kTask);
  proc.Add(71, "python", 70, 70, 40 * ticks, 1000);           // the container's work
  proc.SetPidNs("71", kTask);
  proc.Add(90, "burn", 60, 90, 7 * ticks, 200, 6000);          // `docker exec`'d: containerd's child
  proc.SetPidNs("90", kTask);
  proc.Add(91, "hold", 90, 91, 0, 500, 6001);                  // its child, a session of its own
  proc.SetPidNs("91", kTask);
  proc.Add(130, "conmon", 1, 130, 0, 3);                       // a `podman exec` session's monitor
  proc.SetPidNs("130", kHost);
  proc.Add(131, "sh", 130, 131, 3 * ticks, 20, 7000);          // `podman exec`'d into the container
  proc.SetPidNs("131", kTask);
  proc.Add(80, "docker-init", 60, 80, 9 * ticks, 77, 6000);    // another container, no task's
  proc.SetPidNs("80", kOther);
  proc.Add(81, "exec", 60, 81, 9 * ticks, 77, 6000);           // exec'd into that one
  proc.SetPidNs("81", kOther);
  proc.Add(300, "sshd", 1, 300, 5 * ticks, 400);               // nobody's
  proc.SetPidNs("300", kHost);
  proc.Add(200, "cohort-task-shi", 1, 200, 0, 1);              // another task's shim
  proc.SetPidNs("200", kHost);
  proc.Add(201, "joined", 200, 200, 2 * ticks, 8, 8000);       // in task 100's namespace, but
  proc.SetPidNs("201", kTask);                                 // below 200's shim: the tree wins

  TaskRoots roots = ShimRoots({100, 200});
  roots[70] = {100, 5000, /*namespace_init=*/true};
  TaskProcesses t = ReadTaskProcesses(roots, proc.path());
  const std::map<int, int> want = {{100, 100}, {101, 100}, {70, 100},  {71, 100}, {90, 100},
                                   {91, 100},  {131, 100}, {200, 200}, {201, 200}};
  EXPECT_EQ(t.task_of, want);
  EXPECT_DOUBLE_EQ(t.usage[100].cpu_seconds, 51.0) << "client 1 + python 40 + burn 7 + podman exec'd 3";
  EXPECT_EQ(t.usage[100].rss_bytes, (1 + 40 + 1 + 1000 + 200 + 500 + 20) * page);

  // The same init as a plain root (no namespace): its tree only.
  roots[70] = {100, 5000};
  const std::map<int, int> tree = {{100, 100}, {101, 100}, {70, 100},
                                   {71, 100},  {200, 200}, {201, 200}};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, tree);
  // The init exited and its pid went to a later process: neither its tree nor its namespace.
  roots[70] = {100, 4999, true};
  const std::map<int, int> client_only = {{100, 100}, {101, 100}, {200, 200}, {201, 200}};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, client_only);
  // A namespace root in the reader's own namespace (a root file naming a host process)
  // gives the task its tree, never the host's every process.
  roots.erase(70);
  roots[60] = {100, 1, true};
  const std::map<int, int> shim_tree = {{100, 100}, {101, 100}, {60, 100}, {70, 100},
                                        {71, 100},  {90, 100},  {91, 100},  {80, 100},
                                        {81, 100},  {200, 200}, {201, 200}};
  EXPECT_EQ(ReadTaskProcesses(roots, proc.path()).task_of, shim_tree);
}

TEST(ProcUsageTest, ReadsThePidNamespaceOfAProcess) {
  FakeProc proc;
  proc.SetPidNs("7", 4026532500);
  EXPECT_EQ(ReadPidNamespace("7", proc.path()), 4026532500u);
  EXPECT_EQ(ReadPidNamespace("8", proc.path()), std::nullopt) << "no such process";
  std::filesystem::create_directories(proc.path() + "/9/ns");
  std::filesystem::create_symlink("net:[4026532500]", proc.path() + "/9/ns/pid");
  EXPECT_EQ(ReadPidNamespace("9", proc.path()), std::nullopt);
  std::filesystem::create_directories(proc.path() + "/10/ns");
  std::filesystem::create_symlink("pid:[12x]", proc.path() + "/10/ns/pid");
  EXPECT_EQ(ReadPidNamespace("10", proc.path()), std::nullopt);
  // The real /proc: this process and its child share a namespace.
  auto self = ReadPidNamespace("self");
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(ReadPidNamespace(std::to_string(getpid())), self);
}

// The real /proc and real namespaces, as `docker exec` makes them: an init in a PID
// namespace of its own, and a process that joins that namespace with setns() from outside
// the init's tree. With the init as a namespace root, the joined process is the task's;
// as a plain root, it is not.
TEST(ProcUsageTest, AProcessThatJoinsARootsPidNamespaceIsItsTasks) {
  if (getuid() != 0) GTEST_SKIP() << "creating a PID namespace needs root";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // The "runtime": forks the namespace's init and waits.
  pid_t runtime = fork();
  ASSERT_GE(runtime, 0);
  if (runtime == 0) {
    if (unshare(CLONE_NEWPID) != 0) {
      (void)!write(ready[1], "f", 1);
      _exit(1);
    }
    pid_t init = fork();
    if (init == 0) {
      (void)!write(ready[1], "i", 1);
      pause();
      _exit(0);
    }
    waitpid(init, nullptr, 0);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  if (c == 'f') {
    waitpid(runtime, nullptr, 0);
    GTEST_SKIP() << "cannot create a PID namespace here";
  }
  pid_t init = 0;
  ASSERT_TRUE([&] {
    for (int i = 0; i < 1000 && init == 0; ++i) {
      std::ifstream(fmt::format("/proc/{}/task/{}/children", runtime, runtime)) >> init;
      if (init == 0) usleep(1000);
    }
    return init > 0;
  }());
  // The "exec": joins the init's namespace from outside its tree; its child lives there.
  pid_t exec = fork();
  ASSERT_GE(exec, 0);
  if (exec == 0) {
    int fd = open(fmt::format("/proc/{}/ns/pid", init).c_str(), O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWPID) != 0) {
      (void)!write(ready[1], "f", 1);
      _exit(1);
    }
    pid_t joined = fork();
    if (joined == 0) {
      (void)!write(ready[1], "j", 1);
      pause();
      _exit(0);
    }
    waitpid(joined, nullptr, 0);
    _exit(0);
  }
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  ASSERT_EQ(c, 'j') << "cannot join the namespace";
  pid_t joined = 0;
  for (int i = 0; i < 1000 && joined == 0; ++i) {
    std::ifstream(fmt::format("/proc/{}/task/{}/children", exec, exec)) >> joined;
    if (joined == 0) usleep(1000);
  }
  ASSERT_GT(joined, 0);
  const auto start = ProcStartTicks(init);
  ASSERT_TRUE(start.has_value());

  TaskRoots roots;
  roots[init] = {init, *start, /*namespace_init=*/true};
  auto t = ReadTaskProcesses(roots);
  EXPECT_EQ(t.task_of[init], init);
  EXPECT_EQ(t.task_of[joined], init) << "the process exec'd into the namespace is the task's";
  EXPECT_FALSE(t.task_of.contains(exec)) << "the exec's parent stays in the host's namespace";
  EXPECT_FALSE(t.task_of.contains(getpid()));
  roots[init].namespace_init = false;
  EXPECT_FALSE(ReadTaskProcesses(roots).task_of.contains(joined));

  kill(init, SIGKILL);  // the namespace's init: its death ends every process in it
  waitpid(runtime, nullptr, 0);
  waitpid(exec, nullptr, 0);
}

TEST(ContainerRootTest, ParsesTheInspectAnswer) {
  EXPECT_EQ(ParseInspectPid("31017\n"), 31017);
  EXPECT_EQ(ParseInspectPid(" 42 "), 42);
  EXPECT_EQ(ParseInspectPid("0\n"), std::nullopt) << "created, not started: no init yet";
  EXPECT_EQ(ParseInspectPid(""), std::nullopt);
  EXPECT_EQ(ParseInspectPid("Error: No such container: x"), std::nullopt);
  EXPECT_EQ(ParseInspectPid("12 13"), std::nullopt);
  EXPECT_EQ(ParseInspectPid("-5"), std::nullopt);
}

TEST(ContainerRootTest, OnlyTheInitOfAPidNamespaceIsAContainerRoot) {
  FakeProc proc;
  proc.Add(70, "docker-init", 60, 70, 0, 1, 5000);
  proc.SetNsPids(70, "70\t1");
  proc.Add(71, "python", 70, 70, 0, 1, 5001);
  proc.SetNsPids(71, "71\t7");  // in the container, not its init
  proc.Add(72, "sshd", 1, 72, 0, 1, 5002);
  proc.SetNsPids(72, "72");  // a host process that took a container init's pid
  proc.Add(73, "nested-init", 1, 73, 0, 1, 5003);
  proc.SetNsPids(73, "73\t12\t1");
  EXPECT_EQ(CheckContainerInit(70, proc.path()), (ContainerRoot{70, 5000}));
  EXPECT_EQ(CheckContainerInit(71, proc.path()), std::nullopt);
  EXPECT_EQ(CheckContainerInit(72, proc.path()), std::nullopt);
  EXPECT_EQ(CheckContainerInit(73, proc.path()), (ContainerRoot{73, 5003}));
  EXPECT_EQ(CheckContainerInit(74, proc.path()), std::nullopt) << "no such process";
  EXPECT_EQ(CheckContainerInit(getpid()), std::nullopt) << "this test is no container's init";
}

TEST(ContainerRootTest, TheRootFileRoundTrips) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("cohort-root-" + std::to_string(getpid()))).string();
  EXPECT_EQ(ReadContainerRoot(path), std::nullopt) << "no file yet";
  ASSERT_TRUE(WriteContainerRoot(path, {31017, 987654}));
  EXPECT_EQ(ReadContainerRoot(path), (ContainerRoot{31017, 987654}));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  for (const char* bad : {"", "31017", "31017 x", "1 5", "31017 0", "x 5"}) {
    std::ofstream(path) << bad << "\n";
    EXPECT_EQ(ReadContainerRoot(path), std::nullopt) << bad;
  }
  std::filesystem::remove(path);
}

TEST(ProcUsageTest, TasksOfGoesToTheNearestAncestorAndSurvivesCycles) {
  auto st = [](int pid, int ppid, int session) { return ProcStat{pid, ppid, session, {}, 1}; };
  // A task started from inside another task's tree (an agent in a task): the inner shim's
  // processes are the inner task's. A pid cycle (pid reuse mid-read) ends the walk.
  const std::vector<ProcStat> procs = {st(10, 1, 10), st(11, 10, 10), st(20, 11, 20), st(21, 20, 21),
                                       st(30, 31, 30), st(31, 30, 31)};
  const std::map<int, int> want = {{10, 10}, {11, 10}, {20, 20}, {21, 20}};
  EXPECT_EQ(TasksOf(procs, ShimRoots({10, 20})), want);
}

TEST(AgentMetricsTest, GpuAndTaskSeries) {
  auto gpus = SimulatedGpus(2, "n1");
  auto mon = MakeSimulatedGpuMonitor(gpus);
  auto readings = mon->Sample({true, false}, SteadyTime{});
  readings[1].power_watts.reset();  // unknown: no sample
  auto text = RenderAgentMetrics("n1", gpus, readings, {{7, 0, 3, 1, 12.5, 1 << 20, int64_t{3} << 30, true}});
  ASSERT_TRUE(text.has_value()) << text.error().message;
  std::string uuid0 = gpus[0].uuid;
  EXPECT_THAT(*text, HasSubstr("# TYPE cohort_gpu_utilization_ratio gauge\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpu_power_watts{node=\"n1\",gpu=\"0\",uuid=\"" + uuid0 + "\"} 70\n"));
  EXPECT_THAT(*text, Not(HasSubstr("cohort_gpu_power_watts{node=\"n1\",gpu=\"1\"")));
  EXPECT_THAT(*text, HasSubstr("cohort_gpu_memory_total_bytes{node=\"n1\",gpu=\"1\",uuid=\"" + gpus[1].uuid +
                               "\"} 85899345920\n"));
  EXPECT_THAT(*text, HasSubstr("# TYPE cohort_gpu_health_events_total counter\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_task_cpu_seconds_total{node=\"n1\",job=\"7\",attempt=\"0\",rank=\"3\"} 12.5\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_task_resident_memory_bytes{node=\"n1\",job=\"7\",attempt=\"0\",rank=\"3\"} 1048576\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_agent_tasks_running{node=\"n1\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_task_gpu_memory_bytes{node=\"n1\",job=\"7\",attempt=\"0\",rank=\"3\"} 3221225472\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_task_gpu_memory_over_share{node=\"n1\",job=\"7\",attempt=\"0\",rank=\"3\"} 1\n"));
}

// ---- Per-process GPU memory (issue 18) ----

class SimulatedProcessMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("cohort-simmem-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Register(int pid, const std::string& lines) { std::ofstream(dir_ / std::to_string(pid)) << lines; }
  std::filesystem::path dir_;
};

TEST_F(SimulatedProcessMemoryTest, RegisteredMemoryIsReadByIndexOrUuidAndCountsAsUsed) {
  auto gpus = SimulatedGpus(2, "n1");
  auto mon = MakeSimulatedGpuMonitor(gpus, dir_.string());
  const int self = getpid();
  Register(self, "1 1073741824\n" + gpus[0].uuid + " 2048\nbogus 5\n");
  auto procs = mon->Processes();
  ASSERT_EQ(procs.size(), 2u);
  EXPECT_EQ(procs[0].gpu, 0);
  EXPECT_EQ(procs[0].pid, self);
  EXPECT_EQ(procs[0].memory_bytes, 2048);
  EXPECT_EQ(procs[1].gpu, 1);
  EXPECT_EQ(procs[1].memory_bytes, int64_t{1} << 30);
  auto r = mon->Sample({false, false}, SteadyTime{});
  EXPECT_EQ(*r[1].memory_used_bytes, (int64_t{1} << 29) + (int64_t{1} << 30));
}

TEST_F(SimulatedProcessMemoryTest, FilesOfExitedProcessesAreDropped) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: the pid names no process now
  Register(child, "0 4096\n");
  auto mon = MakeSimulatedGpuMonitor(SimulatedGpus(1, "n1"), dir_.string());
  EXPECT_TRUE(mon->Processes().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ / std::to_string(child)));
  // Without a directory: no processes, and no failure.
  EXPECT_TRUE(MakeSimulatedGpuMonitor(SimulatedGpus(1, "n1"))->Processes().empty());
}

TEST(TaskGpuMemoryTest, LimitFromTheEnvironment) {
  auto none = GpuMemoryLimitFromEnv({});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->share_bytes, 0);
  auto kill = GpuMemoryLimitFromEnv({{"COHORT_GPU_MEMORY_MIB", "20480"}, {"COHORT_GPU_MEMORY_ENFORCE", "kill"}});
  ASSERT_TRUE(kill);
  EXPECT_EQ(kill->share_bytes, int64_t{20} << 30);
  EXPECT_TRUE(kill->kill);
  EXPECT_FALSE(GpuMemoryLimitFromEnv({{"COHORT_GPU_MEMORY_MIB", "1024"}})->kill) << "report is the default";
  auto bad = GpuMemoryLimitFromEnv({{"COHORT_GPU_MEMORY_MIB", "20GiB"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "COHORT_GPU_MEMORY_MIB: must be a count of MiB (0 to 2^40), got '20GiB'");
  auto mode = GpuMemoryLimitFromEnv({{"COHORT_GPU_MEMORY_MIB", "1024"}, {"COHORT_GPU_MEMORY_ENFORCE", "warn"}});
  ASSERT_FALSE(mode);
  EXPECT_EQ(mode.error().message, "COHORT_GPU_MEMORY_ENFORCE: must be 'report' or 'kill', got 'warn'");
}

TEST(TaskGpuMemoryTest, MeasuresTheTasksSessionAndJudgesItsShare) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // Task 100 (pids 100, 101) on GPU 2; pid 200 is another task's; 300 is no task's.
  const std::map<int, int> task_of = {{100, 100}, {101, 100}, {200, 200}};
  const std::vector<GpuProcess> procs = {
      {2, 100, 20 * kGiB}, {2, 101, static_cast<int64_t>(3.1 * double(kGiB))}, {2, 200, 50 * kGiB},
      {2, 300, 70 * kGiB}, {3, 101, kGiB}};
  const GpuMemoryLimit share{20 * kGiB, /*kill=*/true};
  TaskGpuMemory m = MeasureTaskGpuMemory(0, 100, {2}, share, procs, task_of);
  EXPECT_EQ(m.bytes, 20 * kGiB + static_cast<int64_t>(3.1 * double(kGiB)) + kGiB);
  EXPECT_EQ(m.by_gpu.at(3), kGiB);
  EXPECT_EQ(m.over, "task 0 used 23.1 GiB of GPU 2, over its share of 20 GiB (gpu_memory_enforce: kill)");
  // Within the share (exactly at it is within): nothing to report.
  EXPECT_EQ(MeasureTaskGpuMemory(0, 100, {2}, {24 * kGiB, false}, procs, task_of).over, "");
  // Report mode says so.
  EXPECT_THAT(MeasureTaskGpuMemory(5, 100, {2}, {kGiB, false}, procs, task_of).over,
              HasSubstr("task 5 used 23.1 GiB of GPU 2, over its share of 1 GiB (gpu_memory_enforce: report)"));
  // A whole-GPU task (no share) is measured, never over.
  TaskGpuMemory whole = MeasureTaskGpuMemory(1, 200, {2}, {}, procs, task_of);
  EXPECT_EQ(whole.bytes, 50 * kGiB);
  EXPECT_EQ(whole.over, "");
  // Memory on a GPU the task does not hold is counted but not judged.
  EXPECT_EQ(MeasureTaskGpuMemory(0, 100, {3}, {kGiB / 2, true}, procs, task_of).over,
            "task 0 used 1 GiB of GPU 3, over its share of 0.5 GiB (gpu_memory_enforce: kill)");
  EXPECT_EQ(MeasureTaskGpuMemory(0, 100, {4}, {kGiB / 2, true}, procs, task_of).over, "");
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

TEST(HealthCheckTest, EventsFromExitAndOutput) {
  EXPECT_TRUE(HealthCheckEvents(0, false, "gpu 1: fine really\n", 4).empty());
  auto named = HealthCheckEvents(1, false, "checking\ngpu 1: fan failure\ngpu 9: out of range\ngpu x: bad\n", 4);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, 1);
  EXPECT_EQ(named[0].second, "health check: fan failure");
  auto all = HealthCheckEvents(3, false, "\nPCIe link degraded\nmore\n", 2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].first, 1);
  EXPECT_EQ(all[1].second, "health check exited 3: PCIe link degraded");
  auto timeout = HealthCheckEvents(0, true, "", 1);
  ASSERT_EQ(timeout.size(), 1u);
  EXPECT_EQ(timeout[0].second, "health check timed out");
}

}  // namespace
}  // namespace cohort::agent
