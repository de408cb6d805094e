// Jobs in container images with a real Podman: the image is made here from Debian's
// busybox-static (`podman import` of a one-binary root file system; no registry), tagged
// uniquely and removed at the end. Skips, saying why, when Podman cannot run a container
// on this machine (not installed, or the host needs the configuration that
// scripts/install-deps.sh writes).
#include <unistd.h>

#include <set>
#include <sstream>

#include "container_util.h"

namespace cohort::testing {
namespace {

class Containers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/cohort-image-XXXXXX";
    dir_ = mkdtemp(tmpl);
    image_ = "localhost/cohort-test-busybox:" + std::to_string(getpid());
    const std::string busybox = "/bin/busybox";
    if (access(busybox.c_str(), X_OK) != 0) {
      skip_ = "no /bin/busybox (Debian's busybox-static, which scripts/install-deps.sh installs)";
      return;
    }
    const std::string root = dir_ + "/rootfs";
    std::filesystem::create_directories(root + "/bin");
    std::filesystem::create_directories(root + "/etc");
    std::filesystem::copy_file(busybox, root + "/bin/busybox");
    for (const char* tool : {"sh", "true", "echo", "cat", "sleep", "seq", "test", "[", "env", "id", "ls", "pwd",
                             "head", "tr"}) {
      std::filesystem::create_symlink("busybox", root + "/bin/" + tool);
    }
    std::ofstream(root + "/etc/cohort-marker") << "inside-the-image\n";
    auto [rc, out] = RunTool({"sh", "-c", "tar -C '" + root + "' -c . | podman import - " + image_}, dir_);
    if (rc != 0) {
      skip_ = "podman cannot import an image here: " + out;
      return;
    }
    auto [run_rc, run_out] = RunTool({"podman", "run", "--rm", "--network=host", image_, "/bin/true"}, dir_);
    if (run_rc != 0) {
      skip_ = "podman cannot run a container here (scripts/setup-podman.sh configures it): " + run_out;
      return;
    }
  }
  static void TearDownTestSuite() {
    RunTool({"podman", "rmi", "--force", image_}, dir_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // The containers of job `id` of `c`'s agent node-a that Podman still knows, any state.
  static std::string ContainersOf(const LocalCluster& c, int64_t id) { return ContainersOfJob("podman", c, id); }

  static inline std::string dir_, image_, skip_;
};

TEST_F(Containers, TaskRunsInTheImageWithItsEnvironmentDirectoriesAndExitCode) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string work = c.dir() + "/work";
  std::filesystem::create_directories(work);
  const std::string script =
      "echo RANK=$RANK; echo WORLD_SIZE=$WORLD_SIZE; echo MY_VAR=$MY_VAR; echo GPUS=$CUDA_VISIBLE_DEVICES; "
      "echo PWD=$(pwd); echo MARKER=$(cat /etc/cohort-marker); "
      "test -d \"$COHORT_CHECKPOINT_DIR\" && echo ok > \"$COHORT_CHECKPOINT_DIR/written\" && echo CKPT=1; "
      "echo from-the-container > out.txt; "
      // Rank 1 ends the gang with exit 3 once rank 0 has written all it prints (a failing
      // rank stops the others; neither may be stopped before its output is in).
      "if [ $RANK = 0 ]; then echo > rank0.done; exit 0; fi; "
      "for i in $(seq 200); do [ -e rank0.done ] && exit 3; sleep 0.1; done; exit 4";
  json job = c.Submit({{"command", {"sh", "-c", script}},
                       {"tasks_per_node", 2},
                       {"gpus_per_node", 2},
                       {"workdir", work},
                       {"env", {{"MY_VAR", "hello container"}}},
                       {"container", {{"image", image_}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(60));
  EXPECT_EQ(done["exit_code"], 3) << done.dump(2);
  std::set<std::string> gpus;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = ParseEnvLines(c.Logs(id, rank));
    EXPECT_EQ(env["RANK"], std::to_string(rank)) << c.Logs(id, rank);
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["MY_VAR"], "hello container");
    EXPECT_EQ(env["MARKER"], "inside-the-image") << "the task did not run in the image";
    EXPECT_EQ(env["PWD"], work);
    EXPECT_EQ(env["CKPT"], "1") << "the checkpoint directory is not mounted";
    gpus.insert(env["GPUS"]);
  }
  EXPECT_EQ(gpus.size(), 2u) << "each task gets its own simulated GPU";
  EXPECT_EQ(ReadFile(work + "/out.txt"), "from-the-container\n");
  // The job's JSON shows its image, and no container is left behind.
  EXPECT_EQ(done["spec"]["container"]["image"], image_);
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(10))) << ContainersOf(c, id);
}

TEST_F(Containers, CancelStopsTheContainerAndLeavesNoneBehind) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"sh", "-c", "echo started; exec sleep 1000"}},
                       {"container", {{"image", image_}, {"runtime", "podman"}}}});
  const int64_t id = job["id"];
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
  ASSERT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find("started") != std::string::npos; }, std::chrono::seconds(30)))
      << c.Logs(id, 0);
  EXPECT_FALSE(ContainersOf(c, id).empty()) << "the task is not in a container";
  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)["state"], "CANCELLED");
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30)))
      << "still there: " << ContainersOf(c, id);
}

// A failing rank stops the rest of its gang at once, often while their runtime is still
// creating their container (where a SIGTERM makes Podman exit without its clean-up):
// whenever the stop lands, no container may be left.
TEST_F(Containers, AGangStoppedByAFailingRankLeavesNoContainer) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 4);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"sh", "-c", "[ $RANK = 0 ] && exit 1; exec sleep 1000"}},
                       {"tasks_per_node", 4},
                       {"container", {{"image", image_}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(60));
  EXPECT_EQ(done["exit_code"], 1) << done.dump(2);
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30)))
      << "still there: " << ContainersOf(c, id);
}

// The agent dies: its shims SIGKILL their tasks at once (no grace), which kills the
// runtime without letting it clean up; the container's processes and record must go too.
TEST_F(Containers, AKilledAgentLeavesNoContainerAndNoProcessBehind) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  // A duration no other process sleeps, to find the task's own process by its command line.
  const std::string sleep = "sleep 9" + std::to_string(getpid());
  json job = c.Submit({{"command", {"sh", "-c", "echo started; exec " + sleep}},
                       {"container", {{"image", image_}}}});
  const int64_t id = job["id"];
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
  ASSERT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find("started") != std::string::npos; }, std::chrono::seconds(30)));
  auto sleeping = [&] { return RunTool({"pgrep", "-f", "^" + sleep + "$"}, dir_).first == 0; };
  ASSERT_TRUE(WaitUntil(sleeping, std::chrono::seconds(10))) << "the task's process is not visible on the host";
  c.agent("node-a").Signal(SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return !sleeping(); }, std::chrono::seconds(30))) << "the container's process survived";
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30)))
      << "still there: " << ContainersOf(c, id);
}

// Issue 18: a container task's processes leave the shim's session (conmon daemonizes, the
// container's init leads a session of its own) and still count for the task: CPU, RSS and
// GPU memory (agent/proc_usage.h). The task holds 128 MiB in its shell and burns a core;
// the runtime client, the only process left in the shim's session, idles at about 50 MiB,
// so the figures can only be reached by counting the container. The simulated GPU
// directory is not mounted in the container, and a process there sees only its own PID
// namespace, so it cannot register its host pid the way NVML reports it: the test
// registers the container's init by its host pid (`podman inspect`), as NVML would show it.
TEST_F(Containers, AContainerTasksCpuMemoryAndGpuMemoryCountForTheTask) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string script =
      "echo GPUS=$CUDA_VISIBLE_DEVICES; echo DIR=$COHORT_SIMULATED_GPU_MEMORY_DIR; "
      "test -d \"$COHORT_SIMULATED_GPU_MEMORY_DIR\" && echo DIR_VISIBLE=1; "
      "x=$(head -c 134217728 /dev/zero | tr '\\0' a); echo HELD=${#x}; while :; do :; done";
  json job = c.Submit({{"command", {"sh", "-c", script}}, {"gpus_per_node", 1}, {"container", {{"image", image_}}}});
  const int64_t id = job["id"];
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
  ASSERT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find("HELD=") != std::string::npos; }, std::chrono::seconds(60)))
      << c.Logs(id, 0);
  auto env = ParseEnvLines(c.Logs(id, 0));
  EXPECT_EQ(env["HELD"], "134217728");
  EXPECT_EQ(env["DIR_VISIBLE"], "") << "the simulated GPU directory is visible in the container after all";
  ASSERT_FALSE(env["DIR"].empty()) << c.Logs(id, 0);

  auto usage = [&] {
    json j = c.Job(id);
    return j.contains("tasks_usage") && j["tasks_usage"].size() == 1 ? j["tasks_usage"][0] : json();
  };
  json u;
  EXPECT_TRUE(WaitUntil([&] {
    u = usage();
    return u.is_object() && u.value("cpu_seconds", 0.0) >= 3 && u.value("rss_bytes", int64_t{0}) >= (int64_t{128} << 20);
  }, std::chrono::seconds(60))) << "the container's CPU and memory are not the task's: " << u.dump(2);

  // GPU memory of the container's init, by its host pid.
  const std::string name = ContainersOf(c, id);
  ASSERT_FALSE(name.empty());
  auto [rc, pid] = RunTool({"podman", "inspect", "--format", "{{.State.Pid}}", name.substr(0, name.find(' '))}, dir_);
  ASSERT_EQ(rc, 0) << pid;
  pid = pid.substr(0, pid.find('\n'));
  const int64_t bytes = int64_t{3} << 30;
  std::ofstream(env["DIR"] + "/" + pid) << env["GPUS"] << " " << bytes << "\n";
  EXPECT_TRUE(WaitUntil([&] {
    u = usage();
    return u.is_object() && u.value("gpu_memory_bytes", int64_t{0}) == bytes;
  }, std::chrono::seconds(20))) << "the container's GPU memory is not the task's: " << u.dump(2);
  CliResult show = Cohort(c, {"show", std::to_string(id)});
  EXPECT_TRUE(show.status.Success()) << show.errors;
  EXPECT_NE(show.output.find("3.0 GiB"), std::string::npos) << show.output;

  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30))) << ContainersOf(c, id);
}

// A process started with `podman exec` is a child of an exec session's conmon, not of the
// container's init nor of the task's shim, but lives in the container's PID namespace: its
// CPU, RSS and GPU memory count for the task (agent/proc_usage.h, rule 3), and cancel ends
// it with the container. The task itself only sleeps; the exec'd process holds 128 MiB and
// burns a core, so the figures can only be reached by counting it.
TEST_F(Containers, AProcessPodmanExecdIntoATaskCountsForItAndEndsWithIt) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"sh", "-c", "echo GPUS=$CUDA_VISIBLE_DEVICES; echo DIR=$COHORT_SIMULATED_GPU_MEMORY_DIR; exec sleep 1000"}},
                       {"gpus_per_node", 1},
                       {"container", {{"image", image_}}}});
  const int64_t id = job["id"];
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
  ASSERT_TRUE(WaitUntil([&] { return c.Logs(id, 0).find("DIR=") != std::string::npos; }, std::chrono::seconds(60)))
      << c.Logs(id, 0);
  auto env = ParseEnvLines(c.Logs(id, 0));
  const std::string name = FirstContainerOfJob("podman", c, id);
  ASSERT_FALSE(name.empty());
  const std::string marker = "cohort-podman-exec-" + std::to_string(getpid());
  auto [rc, out] = RunTool({"podman", "exec", "-d", name, "sh", "-c", kBurner, marker}, c.dir());
  ASSERT_EQ(rc, 0) << out;
  int execd = 0;
  ASSERT_TRUE(WaitUntil([&] { return (execd = FindProcess(marker, c.dir())) > 0; }, std::chrono::seconds(10)));

  auto usage = [&] {
    json j = c.Job(id);
    return j.contains("tasks_usage") && j["tasks_usage"].size() == 1 ? j["tasks_usage"][0] : json();
  };
  json u;
  EXPECT_TRUE(WaitUntil([&] {
    u = usage();
    return u.is_object() && u.value("cpu_seconds", 0.0) >= 2 && u.value("rss_bytes", int64_t{0}) >= (int64_t{128} << 20);
  }, std::chrono::seconds(60))) << "the exec'd process's CPU and memory are not the task's: " << u.dump(2);
  const int64_t bytes = int64_t{2} << 30;
  std::ofstream(env["DIR"] + "/" + std::to_string(execd)) << env["GPUS"] << " " << bytes << "\n";
  EXPECT_TRUE(WaitUntil([&] {
    u = usage();
    return u.is_object() && u.value("gpu_memory_bytes", int64_t{0}) == bytes;
  }, std::chrono::seconds(20))) << "the exec'd process's GPU memory is not the task's: " << u.dump(2);

  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(WaitUntil([&] { return ContainersOf(c, id).empty(); }, std::chrono::seconds(30))) << ContainersOf(c, id);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(execd); }, std::chrono::seconds(10)))
      << "the exec'd process survived its task";
}

TEST_F(Containers, AMissingImageFailsTheJobWithItsReason) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string missing = "localhost/cohort-no-such-image:" + std::to_string(getpid());
  json job = c.Submit({{"command", {"true"}}, {"container", {{"image", missing}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "FAILED", std::chrono::seconds(60));
  ASSERT_EQ(done["exits"].size(), 1u) << done.dump(2);
  const std::string error = done["exits"][0].value("error", "");
  EXPECT_NE(error.find("container image '" + missing + "' is not on this node"), std::string::npos) << error;
  EXPECT_EQ(done["exits"][0]["exit_code"], 125);
  EXPECT_TRUE(ContainersOf(c, id).empty()) << ContainersOf(c, id);
}

// A program the image lacks: Podman's init (catatonit) exits 1 with "failed to exec pid1";
// the job says what a bare process would have: exit 127, the program not found there.
TEST_F(Containers, AProgramTheImageLacksIsExit127NamingIt) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"python3", "train.py"}}, {"container", {{"image", image_}}}});
  json done = c.WaitForState(job["id"], "FAILED", std::chrono::seconds(60));
  ASSERT_EQ(done["exits"].size(), 1u) << done.dump(2);
  EXPECT_EQ(done["exits"][0]["exit_code"], 127) << done.dump(2);
  const std::string error = done["exits"][0].value("error", "");
  EXPECT_NE(error.find("image '" + image_ + "' has no program 'python3' it can run (not found"), std::string::npos)
      << error;
  // A command that exits 1 by itself stays exit 1, unexplained.
  json own = c.Submit({{"command", {"sh", "-c", "echo failed to exec pid1 look-alike; exit 1"}},
                       {"container", {{"image", image_}}}});
  json own_done = c.WaitForState(own["id"], "FAILED", std::chrono::seconds(60));
  EXPECT_EQ(own_done["exits"][0]["exit_code"], 1) << own_done.dump(2);
}

TEST_F(Containers, ARuntimeTheNodeDoesNotOfferFailsTheStartSayingWhichItHas) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1, 4, {"--container-runtime", "podman=podman"});
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"true"}}, {"container", {{"image", image_}, {"runtime", "docker"}}}});
  json done = c.WaitForState(job["id"], "FAILED", std::chrono::seconds(30));
  ASSERT_EQ(done["exits"].size(), 1u) << done.dump(2);
  EXPECT_EQ(done["exits"][0].value("error", ""),
            "the job asks for container runtime 'docker'; node node-a offers podman");
}

// `cohort agent` with `flags` (which it must refuse before it reaches the head): its exit
// code and output, run in a scratch folder removed after.
std::pair<int, std::string> RunAgentWithFlags(const std::vector<std::string>& flags) {
  const std::string dir = std::filesystem::temp_directory_path() / ("cohort-flags-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> argv = {COHORT_BINARY, "agent", "--head", "http://127.0.0.1:1", "--join-token", "x"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto result = RunTool(std::move(argv), dir);
  std::filesystem::remove_all(dir);
  return result;
}

TEST(ContainerFlags, AnAgentRefusesARuntimeItCannotName) {
  auto [rc, out] = RunAgentWithFlags({"--container-runtime", "lxc=/usr/bin/lxc"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--container-runtime 'lxc=/usr/bin/lxc': expected KIND=COMMAND with KIND podman or docker"),
            std::string::npos)
      << out;
}

// --container-sweep-interval: a duration, 0 (never) or at least a second; the error names
// the flag and the number.
TEST(ContainerFlags, AnAgentRefusesASweepIntervalUnderASecond) {
  auto [rc, out] = RunAgentWithFlags({"--container-sweep-interval", "500ms"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--container-sweep-interval must be 0 (never sweep) or at least 1s, got 500 ms"), std::string::npos)
      << out;
  auto [rc2, out2] = RunAgentWithFlags({"--container-sweep-interval", "often"});
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("--container-sweep-interval: 'often' is not a duration"), std::string::npos) << out2;
}

// --gpu-monitor-timeout (agent.h, AgentConfig::gpu_monitor_timeout_ms): 0 (never) or at
// least a second, named with the value given.
TEST(ContainerFlags, AnAgentRefusesAGpuMonitorTimeoutUnderASecond) {
  auto [rc, out] = RunAgentWithFlags({"--gpu-monitor-timeout", "200ms"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--gpu-monitor-timeout must be 0 (never) or at least 1s, got 200ms"), std::string::npos) << out;
  auto [rc2, out2] = RunAgentWithFlags({"--gpu-monitor-timeout", "-5s"});
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("--gpu-monitor-timeout"), std::string::npos) << out2;
}

}  // namespace
}  // namespace cohort::testing
