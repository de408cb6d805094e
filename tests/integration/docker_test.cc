// Jobs in container images with a real Docker (issue 18). The suite starts its own
// dockerd: its data, its exec root (with the containerd it manages), its socket and its
// containerd namespace all under a temporary directory, a configuration file of its own,
// no bridge and no iptables rules (tasks use the host's network), so it touches no other
// Docker on the machine; it stops it at the end. The agent runs Docker through a
// two-line wrapper that names that socket. The image is made here from Debian's
// busybox-static (`docker import` of a one-binary root file system; no registry). Skips,
// saying why, when dockerd or the client is missing (scripts/install-deps.sh installs
// docker.io) or cannot start or run a container on this machine (no right to create
// cgroups or mounts).
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include <gmock/gmock.h>

#include "container_util.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

// The first executable `name` in PATH, or in the sbin directories a non-login shell may
// leave out; empty if none.
std::string FindProgram(const std::string& name) {
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/local/sbin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string p = dir + "/" + name;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

class Docker : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/cohort-docker-XXXXXX";
    dir_ = mkdtemp(tmpl);
    image_ = "cohort-test-busybox:" + std::to_string(getpid());
    const std::string dockerd = FindProgram("dockerd"), client = FindProgram("docker");
    if (dockerd.empty() || client.empty()) {
      skip_ = "no dockerd or docker client (Debian's docker.io, which scripts/install-deps.sh installs)";
      return;
    }
    if (access("/bin/busybox", X_OK) != 0) {
      skip_ = "no /bin/busybox (Debian's busybox-static, which scripts/install-deps.sh installs)";
      return;
    }
    const std::string sock = dir_ + "/docker.sock";
    std::ofstream(dir_ + "/daemon.json") << "{}\n";
    SpawnOptions o;
    const std::string ns = "cohort-test-" + std::to_string(getpid());
    o.argv = {dockerd, "--config-file", dir_ + "/daemon.json", "--data-root", dir_ + "/data", "--exec-root",
              dir_ + "/exec", "--pidfile", dir_ + "/dockerd.pid", "--host", "unix://" + sock,
              "--containerd-namespace", ns, "--containerd-plugins-namespace", ns + "-plugins", "--bridge=none",
              "--iptables=false", "--ip-masq=false", "--userland-proxy=false", "--log-level=warn"};
    o.stdout_path = dir_ + "/dockerd.log";
    o.parent_death_signal = SIGTERM;
    auto d = Subprocess::Spawn(o);
    if (!d) {
      skip_ = "cannot start dockerd: " + d.error().message;
      return;
    }
    dockerd_ = std::move(*d);
    // The runtime command the agent is given: the client, told which daemon.
    runtime_ = dir_ + "/docker";
    std::ofstream(runtime_) << "#!/bin/sh\nexec " << client << " --host unix://" << sock << " \"$@\"\n";
    std::filesystem::permissions(runtime_, std::filesystem::perms::owner_all);
    bool exited = false;
    const bool up = WaitUntil([&] {
      if (dockerd_.TryWait()) {
        exited = true;
        return true;
      }
      return RunTool({runtime_, "version"}, dir_).first == 0;
    }, std::chrono::seconds(60));
    if (exited || !up) {
      skip_ = "dockerd cannot run here (" + std::string(exited ? "it exited" : "no answer in 60 s") +
              "): " + Tail(ReadFile(dir_ + "/dockerd.log"));
      return;
    }
    const std::string root = dir_ + "/rootfs";
    std::filesystem::create_directories(root + "/bin");
    std::filesystem::create_directories(root + "/etc");
    std::filesystem::copy_file("/bin/busybox", root + "/bin/busybox");
    for (const char* tool : {"sh", "true", "echo", "cat", "sleep", "seq", "test", "[", "head", "tr"}) {
      std::filesystem::create_symlink("busybox", root + "/bin/" + tool);
    }
    std::ofstream(root + "/etc/cohort-marker") << "inside-the-docker-image\n";
    auto [rc, out] = RunTool({"sh", "-c", "tar -C '" + root + "' -c . | '" + runtime_ + "' import - " + image_},
                             dir_);
    if (rc != 0) {
      skip_ = "docker cannot import an image here: " + out;
      return;
    }
    auto [run_rc, run_out] =
        RunTool({runtime_, "run", "--rm", "--network=host", image_, "/bin/true"}, dir_);
    if (run_rc != 0) skip_ = "docker cannot run a container here: " + run_out;
  }

  static void TearDownTestSuite() {
    if (dockerd_.valid()) {
      // dockerd stops its containers and its containerd and unmounts what it mounted.
      dockerd_.Signal(SIGTERM);
      if (!dockerd_.WaitFor(std::chrono::seconds(60))) {
        dockerd_.Signal(SIGKILL);
        (void)dockerd_.Wait();
      }
    }
    // dockerd leaves its bind mount of the host's network namespace (exec/netns/default).
    for (const std::string& m : MountsUnder(dir_)) umount2(m.c_str(), MNT_DETACH);
    std::error_code ec;
    if (MountsUnder(dir_).empty()) std::filesystem::remove_all(dir_, ec);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static std::string Tail(const std::string& s) { return s.size() > 2000 ? s.substr(s.size() - 2000) : s; }

  // The mount points under `dir`, deepest first (while any is left, `dir` is left in
  // place, never deleted through a mount).
  static std::vector<std::string> MountsUnder(const std::string& dir) {
    std::vector<std::string> out;
    std::istringstream lines(ReadFile("/proc/self/mountinfo"));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string id, parent, dev, root, point;
      fields >> id >> parent >> dev >> root >> point;
      if (point.starts_with(dir + "/")) out.push_back(point);
    }
    std::sort(out.rbegin(), out.rend());
    return out;
  }

  static void StartCluster(LocalCluster& c, int gpus) {
    c.StartHead();
    c.StartAgent("node-a", gpus, 16, {"--container-runtime", "docker=" + runtime_});
    c.WaitForNodes(1);
  }

  // The containers of job `id` of `c`'s agent that Docker still knows, any state.
  static std::string ContainersOf(const LocalCluster& c, int64_t id) { return ContainersOfJob(runtime_, c, id); }

  // A running task of job `id` that has printed `line`: the variables its log sets and the
  // host pid of its container's init (State.Pid, as NVML would report its GPU memory).
  struct Running {
    std::map<std::string, std::string> env;
    int init = 0;
  };
  static Running WaitForTask(LocalCluster& c, int64_t id, const std::string& line) {
    Running r;
    c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
    EXPECT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find(line) != std::string::npos; }, std::chrono::seconds(60)))
        << c.Logs(id, 0);
    r.env = ParseEnvLines(c.Logs(id, 0));
    std::string name = ContainersOf(c, id);
    name = name.substr(0, name.find(' '));
    auto [rc, out] = RunTool({runtime_, "container", "inspect", "--format", "{{.State.Pid}}", name}, c.dir());
    r.init = rc == 0 ? atoi(out.c_str()) : 0;
    EXPECT_GT(r.init, 1) << "no container " << name << " running: " << out;
    return r;
  }

  // Registers `bytes` of simulated GPU memory for the process `pid` on the task's GPU.
  static void RegisterGpuMemory(const Running& t, int pid, int64_t bytes) {
    std::ofstream(t.env.at("DIR") + "/" + std::to_string(pid)) << t.env.at("GPUS") << " " << bytes << "\n";
  }

  // After job `id` has ended: no container of it is left, nor its init (waits for both).
  static void ExpectNothingLeft(LocalCluster& c, int64_t id, int init) {
    EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30)))
        << "still there: " << ContainersOf(c, id);
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(init); }, std::chrono::seconds(10)))
        << "the container's init survived";
  }

  static json TaskUsage(LocalCluster& c, int64_t id) {
    json j = c.Job(id);
    return j.contains("tasks_usage") && j["tasks_usage"].size() == 1 ? j["tasks_usage"][0] : json();
  }

  static inline std::string dir_, image_, runtime_, skip_;
  static inline Subprocess dockerd_;
};

// The container's processes are the Docker daemon's, not the task shim's descendants;
// their CPU, RSS and GPU memory still count for the task (agent/container_root.h). The
// task holds 128 MiB in its shell and burns a core; the `docker run` client, the only
// process of the task under the shim, idles at about 40 MiB and no CPU, so the figures
// can only be reached by counting the container. GPU memory is registered by the host pid
// of the container's init, as NVML would report it (the simulated-device directory is not
// mounted in the container). Cancel stops the container: none is left, nor its processes.
TEST_F(Docker, ATasksCpuMemoryAndGpuMemoryCountForItAndCancelStopsTheContainer) {
  LocalCluster c;
  StartCluster(c, 1);
  const std::string script =
      "echo GPUS=$CUDA_VISIBLE_DEVICES; echo DIR=$COHORT_SIMULATED_GPU_MEMORY_DIR; "
      "x=$(head -c 134217728 /dev/zero | tr '\\0' a); echo HELD=${#x}; while :; do :; done";
  json job = c.Submit({{"command", {"sh", "-c", script}},
                       {"gpus_per_node", 1},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  Running t = WaitForTask(c, id, "HELD=");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(t.env["HELD"], "134217728");

  json u;
  EXPECT_TRUE(WaitUntil([&] {
    u = TaskUsage(c, id);
    return u.is_object() && u.value("cpu_seconds", 0.0) >= 3 && u.value("rss_bytes", int64_t{0}) >= (int64_t{128} << 20);
  }, std::chrono::seconds(60))) << "the container's CPU and memory are not the task's: " << u.dump(2);

  const int64_t bytes = int64_t{3} << 30;
  RegisterGpuMemory(t, t.init, bytes);
  EXPECT_TRUE(WaitUntil([&] {
    u = TaskUsage(c, id);
    return u.is_object() && u.value("gpu_memory_bytes", int64_t{0}) == bytes;
  }, std::chrono::seconds(20))) << "the container's GPU memory is not the task's: " << u.dump(2);
  CliResult show = Cohort(c, {"show", std::to_string(id)});
  EXPECT_TRUE(show.status.Success()) << show.errors;
  EXPECT_THAT(show.output, HasSubstr("3.0 GiB"));

  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)["state"], "CANCELLED");
  ExpectNothingLeft(c, id, t.init);
}

// A process started with `docker exec` is a child of containerd's shim, not of the
// container's init, but lives in the container's PID namespace: its CPU, RSS and GPU
// memory count for the task (agent/proc_usage.h, rule 3), and cancel ends it with the
// container. The task itself only sleeps; the exec'd process holds 128 MiB and burns a
// core, so the figures can only be reached by counting it.
TEST_F(Docker, AProcessDockerExecdIntoATaskCountsForItAndEndsWithIt) {
  LocalCluster c;
  StartCluster(c, 1);
  json job = c.Submit({{"command", {"sh", "-c", "echo GPUS=$CUDA_VISIBLE_DEVICES; echo DIR=$COHORT_SIMULATED_GPU_MEMORY_DIR; exec sleep 1000"}},
                       {"gpus_per_node", 1},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  Running t = WaitForTask(c, id, "DIR=");
  ASSERT_FALSE(HasFailure());
  const std::string marker = "cohort-docker-exec-" + std::to_string(getpid());
  auto [rc, out] = RunTool({runtime_, "exec", "-d", FirstContainerOfJob(runtime_, c, id), "sh", "-c", kBurner, marker},
                           c.dir());
  ASSERT_EQ(rc, 0) << out;
  int execd = 0;
  ASSERT_TRUE(WaitUntil([&] { return (execd = FindProcess(marker, c.dir())) > 0; }, std::chrono::seconds(10)));

  json u;
  EXPECT_TRUE(WaitUntil([&] {
    u = TaskUsage(c, id);
    return u.is_object() && u.value("cpu_seconds", 0.0) >= 2 && u.value("rss_bytes", int64_t{0}) >= (int64_t{128} << 20);
  }, std::chrono::seconds(60))) << "the exec'd process's CPU and memory are not the task's: " << u.dump(2);
  const int64_t bytes = int64_t{2} << 30;
  RegisterGpuMemory(t, execd, bytes);
  EXPECT_TRUE(WaitUntil([&] {
    u = TaskUsage(c, id);
    return u.is_object() && u.value("gpu_memory_bytes", int64_t{0}) == bytes;
  }, std::chrono::seconds(20))) << "the exec'd process's GPU memory is not the task's: " << u.dump(2);

  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ExpectNothingLeft(c, id, t.init);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(execd); }, std::chrono::seconds(10)))
      << "the exec'd process survived its task";
}

// The agent and its task's shim are SIGKILLed together (a service stop that kills the
// agent's whole process tree, the OOM killer): nobody is left to remove the container, the
// Docker daemon's child, which keeps running. The agent restarted on its directory sweeps it
// as it starts (agent/container_sweep.h); a container named for another agent (another
// cluster's, on the same daemon) is left alone.
TEST_F(Docker, AContainerLeftByAKilledAgentAndShimIsSweptWhenTheAgentRestarts) {
  LocalCluster c;
  StartCluster(c, 1);
  json job = c.Submit({{"command", {"sh", "-c", "echo started=1; exec sleep 1000"}},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  Running t = WaitForTask(c, id, "started=");
  ASSERT_FALSE(HasFailure());
  const std::string name = agent::ContainerName(c.dir() + "/node-a", id, 0, 0);
  const std::string others = agent::ContainerName(c.dir() + "/another-cluster/node-a", id, 0, 0);
  struct Remove {  // whatever happens, the other container goes at the end
    std::string runtime, name, dir;
    ~Remove() { RunTool({runtime, "rm", "--force", name}, dir); }
  } remove_others{runtime_, others, c.dir()};
  auto [rc, out] = RunTool({runtime_, "run", "-d", "--network=host", "--name", others, image_, "sleep", "1000"}, c.dir());
  ASSERT_EQ(rc, 0) << out;
  auto running = [&](const std::string& n) {
    auto [ps_rc, names] = RunTool({runtime_, "ps", "--format", "{{.Names}}"}, c.dir());
    return ps_rc == 0 && ("\n" + names).find("\n" + n + "\n") != std::string::npos;
  };

  const int shim = FindProcess("container-name " + name, c.dir());
  ASSERT_GT(shim, 0) << "no shim runs the task";
  kill(shim, SIGKILL);
  c.agent("node-a").Signal(SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(shim); }, std::chrono::seconds(10)));
  ASSERT_TRUE(running(name)) << "the container did not outlive its shim: nothing to sweep";

  c.StartAgent("node-a", 1, 16, {"--container-runtime", "docker=" + runtime_});
  EXPECT_TRUE(WaitUntil([&] { return !running(name) && ContainersOf(c, id).find(name + " ") == std::string::npos; },
                        std::chrono::seconds(30)))
      << "the restarted agent left its container: " << ContainersOf(c, id);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(t.init); }, std::chrono::seconds(10)))
      << "the container's init survived";
  EXPECT_TRUE(running(others)) << "another agent's container was swept";
  // Logged once the removal has returned, so after the container is gone.
  EXPECT_TRUE(WaitUntil([&] {
    return ReadFile(c.dir() + "/node-a.log").find("container sweep: removed docker " + name) != std::string::npos;
  }, std::chrono::seconds(10))) << "the sweep did not say what it removed";
}

// The task's output reaches its log, its exit code the job; the container is gone after.
TEST_F(Docker, LogsAndExitCodeComeThroughAndNoContainerIsLeft) {
  LocalCluster c;
  StartCluster(c, 1);
  const std::string work = c.dir() + "/work";
  std::filesystem::create_directories(work);
  json job = c.Submit({{"command", {"sh", "-c",
                                    "echo RANK=$RANK; echo MY_VAR=$MY_VAR; echo PWD=$(pwd); "
                                    "echo MARKER=$(cat /etc/cohort-marker); echo out > out.txt; exit 3"}},
                       {"workdir", work},
                       {"env", {{"MY_VAR", "hello docker"}}},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(60));
  EXPECT_EQ(done["exit_code"], 3) << done.dump(2);
  auto env = ParseEnvLines(c.Logs(id, 0));
  EXPECT_EQ(env["RANK"], "0") << c.Logs(id, 0);
  EXPECT_EQ(env["MY_VAR"], "hello docker");
  EXPECT_EQ(env["PWD"], work);
  EXPECT_EQ(env["MARKER"], "inside-the-docker-image") << "the task did not run in the image";
  EXPECT_EQ(ReadFile(work + "/out.txt"), "out\n");
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(10))) << ContainersOf(c, id);
}

// gpu_memory_enforce: kill sees a Docker task's GPU memory (by its container's init) and
// stops it: the agent kills the task at once, which kills the client; the shim removes the
// container by name, its processes with it.
TEST_F(Docker, GpuMemoryEnforceKillsATaskOverItsShareAndItsContainer) {
  LocalCluster c;
  StartCluster(c, 1);
  json job = c.Submit({{"command", {"sh", "-c", "echo GPUS=$CUDA_VISIBLE_DEVICES; echo DIR=$COHORT_SIMULATED_GPU_MEMORY_DIR; exec sleep 1000"}},
                       {"gpus_per_task", 0.5},
                       {"gpu_memory_enforce", "kill"},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  Running t = WaitForTask(c, id, "DIR=");
  ASSERT_FALSE(HasFailure());
  RegisterGpuMemory(t, t.init, int64_t{50} << 30);
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(30));
  EXPECT_THAT(done.value("reason", ""), HasSubstr("task 0 used 50 GiB of GPU " + t.env["GPUS"] +
                                                  ", over its share of 40 GiB (gpu_memory_enforce: kill)"));
  ExpectNothingLeft(c, id, t.init);
}

// A failing rank stops the rest of its gang at once, often while their `docker run` is
// still creating their container; the shim then stops the container by name once it
// exists, never by killing the client mid-create (which can leave a container created or
// running after the task). Whenever the stop lands, no container may be left.
TEST_F(Docker, AGangStoppedByAFailingRankLeavesNoContainer) {
  LocalCluster c;
  StartCluster(c, 4);
  json job = c.Submit({{"command", {"sh", "-c", "[ $RANK = 0 ] && exit 1; exec sleep 1000"}},
                       {"tasks_per_node", 4},
                       {"container", {{"image", image_}, {"runtime", "docker"}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(60));
  EXPECT_EQ(done["exit_code"], 1) << done.dump(2);
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30)))
      << "still there: " << ContainersOf(c, id);
}

}  // namespace
}  // namespace cohort::testing
