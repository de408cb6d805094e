// What no node could start is refused at submission: exec's size limits on a spec's
// command and env, and working directories Linux cannot have. Stored jobs still load.
#include "api/spec_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/job_env.h"

namespace cohort::api {
namespace {

using ::testing::HasSubstr;

json WithEnv(size_t vars, size_t value_bytes) {
  json env = json::object();
  for (size_t i = 0; i < vars; ++i) env[fmt::format("VAR_{}", i)] = std::string(value_bytes, 'v');
  return json{{"command", {"python3", "train.py"}}, {"env", env}};
}

TEST(SpecLimits, EnvironmentWithinArgMaxIsAccepted) {
  // 60 x 30 KiB = 1.76 MiB, under 2 MiB less the 64 KiB reserve.
  auto s = JobSpecFromJson(WithEnv(60, 30 << 10));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_LE(ExecBytes(s->command) + ExecBytes(s->env), kMaxSpecExecBytes);
}

TEST(SpecLimits, EnvironmentPastArgMaxIsRefusedWithSizes) {
  // The probe that failed at start with "Argument list too long": 1,024 x 3 KiB.
  auto s = JobSpecFromJson(WithEnv(1024, 3 << 10));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().field, "env");
  EXPECT_EQ(s.error().message,
            "env: 3.0 MiB of environment and arguments; a task can be started with at most 1.9 MiB "
            "(Linux ARG_MAX, less 64 KiB for what Cohort adds)");
}

TEST(SpecLimits, ArgumentsCountTowardTheSameLimit) {
  JobSpec s;
  s.command = {"run"};
  for (int i = 0; i < 70; ++i) s.command.push_back(std::string(30 << 10, 'a'));
  auto r = CheckSpecFitsNodes(s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "command");
  EXPECT_THAT(r.error().message, HasSubstr("2.1 MiB of environment and arguments"));
}

TEST(SpecLimits, OneArgumentPastMaxArgStrlenIsRefused) {
  // 128 KiB is within the command's own limit, but exec needs room for the NUL too.
  json j = {{"command", {std::string(kMaxArgStrlen, 'x')}}};
  auto s = JobSpecFromJson(j);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().field, "command[0]");
  EXPECT_THAT(s.error().message, HasSubstr("arguments of at most 131071 bytes (MAX_ARG_STRLEN)"));
  j["command"][0] = std::string(kMaxArgStrlen - 1, 'x');
  EXPECT_TRUE(JobSpecFromJson(j).has_value());
}

TEST(SpecLimits, WorkdirsNoNodeCouldHaveAreRefused) {
  auto workdir_error = [](const std::string& dir) {
    auto s = JobSpecFromJson(json{{"command", {"true"}}, {"workdir", dir}});
    return s ? Error{} : s.error();
  };
  EXPECT_THAT(workdir_error("/data/../etc").message, HasSubstr("workdir: must not have '..' components"));
  EXPECT_THAT(workdir_error("/data/..").message, HasSubstr("'..'"));
  EXPECT_THAT(workdir_error("/data/" + std::string(256, 'n')).message,
              HasSubstr("has a name of 256 bytes ('nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...'); Linux names are at most 255 "
                        "bytes (NAME_MAX), so no node could have it"));
  std::string long_path;
  while (long_path.size() < kPathMax) long_path += "/dir";
  EXPECT_THAT(workdir_error(long_path).message,
              HasSubstr("workdir: is 4096 bytes long; Linux paths are at most 4095 bytes (PATH_MAX)"));
  EXPECT_EQ(workdir_error(long_path).field, "workdir");
  for (const std::string& ok : std::vector<std::string>{"/data/./run", "/data/run/", "/..data/x..", "/" + std::string(255, 'n')}) {
    EXPECT_TRUE(JobSpecFromJson(json{{"command", {"true"}}, {"workdir", ok}}).has_value()) << ok;
  }
}

TEST(SpecLimits, StoredJobsAreNotHeldToThem) {
  json spec = WithEnv(1024, 3 << 10);
  spec["workdir"] = "/data/../run";
  json record = {{"id", 7}, {"spec", spec}, {"state", "FAILED"}};
  auto job = JobFromJson(record);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  EXPECT_EQ(job->spec.env.size(), 1024u);
}

TEST(SpecLimits, TheContractsVariablesFitTheReserve) {
  Job job;
  job.id = 123456789;
  job.attempt = 999;
  job.spec.name = std::string(128, 'n');
  job.spec.command = {"true"};
  job.spec.tasks_per_node = 1024;
  job.allocation.master_addr = std::string(255, 'h');
  job.allocation.master_port = 65535;
  NodeAllocation node;
  node.node = std::string(64, 'm');
  node.node_rank = 4095;
  TaskPlacement task{65535, 1023, {}};
  for (int g = 0; g < 1024; ++g) task.gpus.push_back(g);
  job.allocation.nodes.assign(4096, node);
  auto options = ClusterTaskEnvOptions("http://" + std::string(255, 'h') + ":65535", std::string(128, 't'),
                                       "/" + std::string(kPathMax - 64, 'c'), job.id);
  size_t added = ExecBytes(TaskEnvironment(job, node, task, options)) - ExecBytes(job.spec.env);
  // Even at every field's largest, the contract takes a fraction of the reserve: the rest
  // is the shim's arguments and the agent's own environment.
  EXPECT_LT(added, kExecReserveBytes / 4) << added;
}

}  // namespace
}  // namespace cohort::api
