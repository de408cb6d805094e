// --export and the command resolved at submit (cli/job_env.h): a test-only "user" whose
// environment (PATH, HOME, a preload, a token) differs from the process's shows what each
// form sends.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"
#include "cli/job_env.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

// A scratch directory with an executable `tool` in bin/ and a non-executable `data`.
class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-jobenv-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/bin");
    std::ofstream(dir_ + "/bin/tool") << "#!/bin/sh\n";
    chmod((dir_ + "/bin/tool").c_str(), 0755);
    std::ofstream(dir_ + "/data") << "x";
    chmod((dir_ + "/data").c_str(), 0644);
    user_env_ = {{"PATH", dir_ + "/bin:/usr/bin:/bin"},
                 {"HOME", "/home/testuser"},
                 {"USER", "testuser"},
                 {"LD_PRELOAD", "/opt/hook.so"},
                 {"COHORT_TOKEN", "cohort_secret"},
                 {"SSH_AUTH_SOCK", "/tmp/agent.sock"},
                 {"VIRTUAL_ENV", "/home/testuser/venv"},
                 {"NCCL_DEBUG", "INFO"}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  Env user_env_;
};

TEST_F(JobEnvTest, AllSendsTheEnvironmentLessTheDenyList) {
  auto env = ExportedEnvironment("ALL", user_env_);
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(*env, (Env{{"PATH", dir_ + "/bin:/usr/bin:/bin"}, {"VIRTUAL_ENV", "/home/testuser/venv"},
                       {"NCCL_DEBUG", "INFO"}}));
  for (const char* denied : {"LD_PRELOAD", "HOME", "USER", "COHORT_TOKEN", "SSH_AUTH_SOCK", "RANK", "PWD"}) {
    EXPECT_TRUE(DeniedForExport(denied)) << denied;
  }
  EXPECT_FALSE(DeniedForExport("PATH"));
  EXPECT_FALSE(DeniedForExport("LD_LIBRARY_PATH"));
}

// A job submitted from a `cohort alloc` shell or from an array's element (a pipeline's next
// step) is neither that allocation nor that element: Slurm's names cohort set there stay
// behind, or the job would read another job's id, nodes or array index.
TEST_F(JobEnvTest, AllLeavesTheSlurmNamesOfTheSubmittingJobBehind) {
  Env inside = user_env_;
  inside.insert({{"SLURM_JOB_ID", "27"}, {"SLURM_JOBID", "27"}, {"SLURM_JOB_NODELIST", "n1,n2"},
                 {"SLURM_NNODES", "2"}, {"SLURM_ARRAY_JOB_ID", "14"}, {"SLURM_ARRAY_TASK_ID", "3"},
                 {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_CONF", "/etc/slurm/slurm.conf"}});
  auto env = ExportedEnvironment("ALL", inside);
  ASSERT_TRUE(env.has_value()) << env.error().message;
  for (const auto& [name, value] : *env) {
    EXPECT_FALSE(name.starts_with("SLURM_J") || name.starts_with("SLURM_A") || name == "SLURM_NNODES") << name;
  }
  EXPECT_EQ(env->at("SLURM_CONF"), "/etc/slurm/slurm.conf") << "other Slurm settings go as any variable";
  auto named = ExportedEnvironment("SLURM_JOB_ID", inside);  // asked for by name: sent
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->at("SLURM_JOB_ID"), "27");
}

TEST_F(JobEnvTest, NoneAndListsSendOnlyWhatTheySay) {
  EXPECT_EQ(*ExportedEnvironment("NONE", user_env_), Env{});
  EXPECT_EQ(*ExportedEnvironment("NCCL_DEBUG,EXTRA=1", user_env_), (Env{{"NCCL_DEBUG", "INFO"}, {"EXTRA", "1"}}));
  auto all_plus = ExportedEnvironment("ALL,NCCL_DEBUG=WARN", user_env_);
  ASSERT_TRUE(all_plus.has_value());
  EXPECT_EQ(all_plus->at("NCCL_DEBUG"), "WARN");
  EXPECT_EQ(all_plus->count("PATH"), 1u);
  // An explicit name is sent even when ALL would leave it out (but never a reserved one).
  EXPECT_EQ(*ExportedEnvironment("LD_PRELOAD", user_env_), (Env{{"LD_PRELOAD", "/opt/hook.so"}}));
}

TEST_F(JobEnvTest, BadExportsAreNamed) {
  for (const char* bad : {"", "A,,B", "NOT_SET_HERE", "NONE,PATH", "1BAD=x", "COHORT_TOKEN", "RANK=3"}) {
    auto env = ExportedEnvironment(bad, user_env_);
    ASSERT_FALSE(env.has_value()) << bad;
    EXPECT_THAT(env.error().message, HasSubstr("--export")) << bad;
    EXPECT_EQ(ExitCodeFor(env.error()), 2) << bad;
  }
}

TEST_F(JobEnvTest, ProgramsResolveWhereTheJobWasSubmitted) {
  const std::string path = dir_ + "/bin:/usr/bin:/bin";
  EXPECT_EQ(*ResolveProgram("tool", path, "/"), dir_ + "/bin/tool");  // through PATH, first match
  EXPECT_EQ(*ResolveProgram("./bin/tool", path, dir_), dir_ + "/bin/tool");  // relative: the workdir
  EXPECT_EQ(*ResolveProgram("bin/../bin/tool", path, dir_), dir_ + "/bin/tool");
  EXPECT_EQ(*ResolveProgram(dir_ + "/bin/tool", "", "/"), dir_ + "/bin/tool");
  // Another user's PATH finds another program, or none.
  auto missing = ResolveProgram("tool", "/usr/bin:/bin", "/");
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("not found in PATH"));
  EXPECT_EQ(ExitCodeFor(missing.error()), 2);
  for (const std::string& bad : {std::string("./nope.sh"), dir_ + "/data", dir_ + "/bin"}) {
    auto r = ResolveProgram(bad, path, dir_);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("on the submitting side")) << bad;
  }
}

TEST_F(JobEnvTest, AContainerJobSendsNothingByDefaultAndKeepsTheImagesProgram) {
  json spec = {{"command", {"python3", "train.py"}}, {"workdir", dir_}, {"env", {{"NCCL_DEBUG", "TRACE"}}},
               {"container", {{"image", "localhost/trainer:1"}}}};
  auto out = ApplySubmittingSide(spec, "", user_env_);
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_EQ((*out)["env"], (json{{"NCCL_DEBUG", "TRACE"}})) << "the submitter's PATH would hide the image's";
  EXPECT_EQ((*out)["command"][0], "python3") << "the program is the image's, not resolved here";
  // An explicit --export still sends what it names.
  auto named = ApplySubmittingSide(spec, "VIRTUAL_ENV", user_env_);
  ASSERT_TRUE(named.has_value()) << named.error().message;
  EXPECT_EQ((*named)["env"]["VIRTUAL_ENV"], "/home/testuser/venv");
  // Without a container, the default is ALL.
  spec.erase("container");
  spec["command"] = {"tool"};
  auto bare = ApplySubmittingSide(spec, "", user_env_);
  ASSERT_TRUE(bare.has_value()) << bare.error().message;
  EXPECT_EQ((*bare)["env"]["VIRTUAL_ENV"], "/home/testuser/venv");
  EXPECT_EQ((*bare)["command"][0], dir_ + "/bin/tool");
}

TEST_F(JobEnvTest, SubmitSideSpecTakesExportThenItsOwnEnvAndAResolvedCommand) {
  json spec = {{"command", {"tool", "--flag"}}, {"workdir", dir_}, {"env", {{"NCCL_DEBUG", "TRACE"}}}};
  auto out = ApplySubmittingSide(spec, "ALL", user_env_);
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_EQ((*out)["command"], (json{dir_ + "/bin/tool", "--flag"}));
  EXPECT_EQ((*out)["env"]["NCCL_DEBUG"], "TRACE");  // the spec's env wins over --export
  EXPECT_EQ((*out)["env"]["VIRTUAL_ENV"], "/home/testuser/venv");
  EXPECT_FALSE((*out)["env"].contains("LD_PRELOAD"));
  // NONE: PATH is not sent, the command still resolves with the submitter's PATH.
  auto none = ApplySubmittingSide(spec, "NONE", user_env_);
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_EQ((*none)["env"], (json{{"NCCL_DEBUG", "TRACE"}}));
  EXPECT_EQ((*none)["command"][0], dir_ + "/bin/tool");
  // The exported PATH is the one that resolves: a PATH without bin/ finds no tool.
  auto other = ApplySubmittingSide(spec, "ALL,PATH=/usr/bin:/bin", user_env_);
  ASSERT_FALSE(other.has_value());
  EXPECT_THAT(other.error().message, HasSubstr("'tool' is not found in PATH"));
  // A malformed command is left for the spec's own check.
  json no_command = {{"workdir", dir_}};
  EXPECT_TRUE(ApplySubmittingSide(no_command, "NONE", user_env_).has_value());
  // The result is a spec the API accepts.
  auto parsed = api::JobSpecFromJson([&] {
    json j = *out;
    j["user"] = "testuser";
    return j;
  }());
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->command.front(), dir_ + "/bin/tool");
}

}  // namespace
}  // namespace cohort::cli
