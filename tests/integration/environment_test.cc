// The job's environment through the CLI on a real head and agent: a test-only user whose
// shell has its own PATH (with a program only it has), its own variables and a preload
// submits, and the tasks see what --export says: ALL less the deny list, NONE, or a list;
// the program is the one that user's PATH found, and one it cannot find is refused at
// submit with exit 2 and no job.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

class Environment : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.StartHead();
    c_.StartAgent("node-a", 1);
    c_.WaitForNodes(1);
    bin_ = c_.dir() + "/testuser-bin";
    std::filesystem::create_directories(bin_);
    const std::string tool = bin_ + "/print-env";
    std::ofstream(tool) << "#!/bin/sh\nenv\n";
    chmod(tool.c_str(), 0755);
  }

  // `cohort ARGS` run from the test user's shell: nothing inherited but the head's
  // credentials; `path` is that user's PATH.
  CliResult AsTestUser(const std::string& path, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env", "-i", "PATH=" + path, "HOME=" + c_.dir(), "USER=testuser",
                                     "TESTUSER_VAR=hello", "LD_PRELOAD=", "SSH_AUTH_SOCK=/tmp/agent.sock"};
    for (const char* name : {"COHORT_TOKEN", "COHORT_CA_FILE"}) {
      if (const char* v = std::getenv(name)) argv.push_back(std::string(name) + "=" + v);
    }
    argv.insert(argv.end(), {COHORT_BINARY, "--head", c_.url(), "--json"});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCli(c_, argv);
  }

  // Submits `args` as the test user, waits for it to succeed, and returns the
  // environment its task printed and the job.
  std::pair<std::map<std::string, std::string>, json> Run(const std::vector<std::string>& args) {
    auto r = AsTestUser(path_, args);
    EXPECT_EQ(r.status.Code(), 0) << r.errors;
    if (r.status.Code() != 0) return {};
    const int64_t id = json::parse(r.output)["id"].get<int64_t>();
    c_.WaitForState(id, "SUCCEEDED");
    auto logs = Cohort(c_, {"logs", std::to_string(id), "--rank", "0"});
    EXPECT_EQ(logs.status.Code(), 0) << logs.errors;
    return {ParseEnvLines(logs.output), c_.Job(id)};
  }

  LocalCluster c_;
  std::string bin_;
  std::string path_ = "";  // set by each test: the test user's PATH
};

TEST_F(Environment, ExportDoesWhatItSaysForAUserWithAnotherPath) {
  path_ = bin_ + ":/usr/bin:/bin";

  // ALL (the default): the user's variables and PATH, less the deny list.
  auto [all, job] = Run({"submit", "--", "print-env"});
  EXPECT_EQ(job["spec"]["command"][0], bin_ + "/print-env") << "the program that user's PATH found";
  EXPECT_EQ(all["TESTUSER_VAR"], "hello");
  EXPECT_EQ(all["PATH"], path_);
  EXPECT_EQ(all.count("LD_PRELOAD"), 0u);
  EXPECT_EQ(all.count("SSH_AUTH_SOCK"), 0u);
  EXPECT_NE(all["COHORT_JOB_TOKEN"], std::getenv("COHORT_TOKEN") ? std::getenv("COHORT_TOKEN") : "")
      << "the job gets its own token, never the submitter's";
  EXPECT_EQ(all["RANK"], "0") << "the job contract is still there";

  // NONE: none of the user's variables; the program was still resolved at submit.
  auto [none, job_none] = Run({"submit", "--export", "NONE", "--", "print-env"});
  EXPECT_EQ(none.count("TESTUSER_VAR"), 0u);
  EXPECT_NE(none["PATH"], path_);
  EXPECT_EQ(job_none["spec"]["command"][0], bin_ + "/print-env");

  // A list: just those, with --env on top.
  auto [list, job_list] = Run({"submit", "--export", "TESTUSER_VAR,EXTRA=1", "--env", "EXTRA=2", "--", "print-env"});
  EXPECT_EQ(list["TESTUSER_VAR"], "hello");
  EXPECT_EQ(list["EXTRA"], "2");
  EXPECT_NE(list["PATH"], path_);
}

TEST_F(Environment, AProgramMissingOnTheSubmittingSideIsRefusedAtSubmit) {
  // This user's PATH has no print-env: exit 2 at submit, and no job.
  auto r = AsTestUser("/usr/bin:/bin", {"submit", "--", "print-env"});
  EXPECT_EQ(r.status.Code(), 2) << r.output << r.errors;
  EXPECT_NE(r.errors.find("'print-env' is not found in PATH on the submitting side"), std::string::npos) << r.errors;
  auto queue = Cohort(c_, {"--json", "queue", "--all"});
  ASSERT_EQ(queue.status.Code(), 0) << queue.errors;
  EXPECT_TRUE(json::parse(queue.output)["jobs"].empty()) << queue.output;
}

}  // namespace
}  // namespace cohort::testing
