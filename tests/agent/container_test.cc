// The container runtime's command lines (agent/container.h).
#include "agent/container.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

bool Has(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

ContainerLaunch Launch() {
  ContainerLaunch c;
  c.runtime_command = "/usr/bin/podman";
  c.runtime = "podman";
  c.image = "localhost/trainer:1";
  c.name = "cohort-0000abcd-j7-a1-r3";
  c.env_names = {"RANK", "COHORT_JOB_TOKEN", "MY_VAR"};
  c.mounts = {"/data/work", "/data/ckpt/7"};
  c.workdir = "/data/work";
  c.command = {"python3", "-c", "print(1)"};
  return c;
}

TEST(ContainerRunArgv, PassesTheEnvironmentByNameOnlyAndMountsTheJobsDirectories) {
  ContainerLaunch c = Launch();
  auto argv = ContainerRunArgv(c);
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "/usr/bin/podman");
  EXPECT_EQ(argv[1], "run");
  EXPECT_TRUE(Has(argv, {"--name", c.name}));
  EXPECT_TRUE(Has(argv, {"--rm"}));
  EXPECT_TRUE(Has(argv, {"--init"}));
  EXPECT_TRUE(Has(argv, {"--network=host"}));
  EXPECT_TRUE(Has(argv, {"--ipc=host"}));
  EXPECT_TRUE(Has(argv, {"--replace"}));
  for (const auto& name : c.env_names) EXPECT_TRUE(Has(argv, {"-e", name})) << name;
  EXPECT_TRUE(Has(argv, {"-v", "/data/work:/data/work"}));
  EXPECT_TRUE(Has(argv, {"-v", "/data/ckpt/7:/data/ckpt/7"}));
  EXPECT_TRUE(Has(argv, {"-w", "/data/work"}));
  // The image, then the command, last.
  EXPECT_TRUE(Has(argv, {"localhost/trainer:1", "python3", "-c", "print(1)"}));
  EXPECT_EQ(argv.back(), "print(1)");
  EXPECT_FALSE(Has(argv, {"--user"})) << "no identity: the image's user";
}

TEST(ContainerRunArgv, TheJobsUserAndGroupsAndGpuDevices) {
  ContainerLaunch c = Launch();
  c.identity = TaskIdentity{"alice", 1001, 1001, {1001, 27, 44}};
  c.devices = {"cohort.dev/gpu=0", "cohort.dev/gpu=3"};
  auto argv = ContainerRunArgv(c);
  EXPECT_TRUE(Has(argv, {"--user", "1001:1001"}));
  EXPECT_TRUE(Has(argv, {"--group-add", "27"}));
  EXPECT_TRUE(Has(argv, {"--group-add", "44"}));
  EXPECT_FALSE(Has(argv, {"--group-add", "1001"})) << "the primary group is not added again";
  EXPECT_TRUE(Has(argv, {"--device", "cohort.dev/gpu=0"}));
  EXPECT_TRUE(Has(argv, {"--device", "cohort.dev/gpu=3"}));
}

// The runtime runs as the agent, root: without no-new-privileges a set-user-ID program of
// the job's image (`chmod 4755`) made a job of uid 1001 the container's root, who is the
// host's root, with the job's host directories mounted.
TEST(ContainerRunArgv, TheJobsUserGainsNoPrivilegesFromItsImage) {
  ContainerLaunch c = Launch();
  c.identity = TaskIdentity{"alice", 1001, 1001, {1001}};
  auto argv = ContainerRunArgv(c);
  const auto flag = std::find(argv.begin(), argv.end(), "--security-opt=no-new-privileges");
  ASSERT_NE(flag, argv.end());
  EXPECT_LT(flag - argv.begin(), std::find(argv.begin(), argv.end(), c.image) - argv.begin())
      << "a runtime flag, before the image";
  c.runtime = "docker";
  EXPECT_TRUE(Has(ContainerRunArgv(c), {"--security-opt=no-new-privileges"})) << "docker takes it too";
}

TEST(ContainerRunArgv, DockerGetsNoPodmanOnlyFlags) {
  ContainerLaunch c = Launch();
  c.runtime = "docker";
  c.runtime_command = "docker";
  auto argv = ContainerRunArgv(c);
  EXPECT_EQ(argv[0], "docker");
  EXPECT_FALSE(Has(argv, {"--replace"}));
}

TEST(ContainerName, IsStablePerAgentDirectoryAndDistinctAcrossAgentsAndTasks) {
  const std::string a = ContainerName("/var/lib/cohort/agent-a", 12, 0, 3);
  EXPECT_EQ(a, ContainerName("/var/lib/cohort/agent-a", 12, 0, 3));
  EXPECT_NE(a, ContainerName("/var/lib/cohort/agent-b", 12, 0, 3));
  EXPECT_NE(a, ContainerName("/var/lib/cohort/agent-a", 12, 1, 3));
  EXPECT_NE(a, ContainerName("/var/lib/cohort/agent-a", 12, 0, 2));
  EXPECT_TRUE(a.starts_with("cohort-")) << a;
  EXPECT_TRUE(a.ends_with("-j12-a0-r3")) << a;
}

}  // namespace
}  // namespace cohort::agent
