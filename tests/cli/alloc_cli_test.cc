// `cohort alloc` and `cohort run` as a step, on the command line without a head: flags and
// their errors, and when `cohort run` makes a step (the cluster side is
// tests/integration/alloc_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/cli.h"
#include "cli_run_util.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

using test_util::Ran;
using test_util::RunArgs;

// Sets (or unsets, for nullptr) an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(AllocCliTest, FlagsAndTheirErrors) {
  ScopedEnv no_job("COHORT_JOB_ID", nullptr);
  auto r = RunArgs({"alloc", "-N", "0", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nodes"));
  r = RunArgs({"alloc", "-G", "3", "-n", "2", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot be split evenly"));
  r = RunArgs({"alloc", "--time", "soon"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("soon"));
  // Batch-only flags are not alloc's.
  r = RunArgs({"alloc", "--container", "img", "--", "true"});
  EXPECT_EQ(r.code, 2);
  r = RunArgs({"alloc", "--max-restarts", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unexpected '--max-restarts'"));
  r = RunArgs({"alloc", "--nodez", "2", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("alloc --nodes 2 -- true"));
  // Well-formed: it gets as far as the head, which is not there (exit 3).
  r = RunArgs({"alloc", "-N", "2", "-G", "4", "-n", "2", "-t", "1h", "--mem", "1G", "--", "sh", "-c", "true"});
  EXPECT_EQ(r.code, 3) << r.err;
  r = RunArgs({"alloc"});
  EXPECT_EQ(r.code, 3) << r.err;
}

TEST(AllocCliTest, RunMakesAStepOnlyInsideAnAllocation) {
  {
    ScopedEnv no_job("COHORT_JOB_ID", nullptr);
    auto r = RunArgs({"run", "-N", "2", "--", "true"});
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("-N and -G ask for a part of an allocation"));
    r = RunArgs({"run", "--", "true"});  // local ranks
    EXPECT_EQ(r.code, 0) << r.err;
  }
  {
    ScopedEnv job("COHORT_JOB_ID", "abc");
    ScopedEnv no_rank("RANK", nullptr);
    auto r = RunArgs({"run", "--", "true"});
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("COHORT_JOB_ID"));
    EXPECT_THAT(r.err, HasSubstr("'abc' is not a job id"));
  }
  {
    ScopedEnv job("COHORT_JOB_ID", "12");
    ScopedEnv no_rank("RANK", nullptr);
    auto r = RunArgs({"run", "-N", "1", "-n", "2", "-G", "1", "--", "true"});
    EXPECT_EQ(r.code, 3) << r.err;  // a step: the head is asked, and is not there
    EXPECT_THAT(r.err, HasSubstr("allocation 12"));
    r = RunArgs({"run", "--"});
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("give the program to run"));
  }
  {
    // Inside a task of a job (RANK set), `cohort run` stays local ranks.
    ScopedEnv job("COHORT_JOB_ID", "12");
    ScopedEnv rank("RANK", "0");
    auto r = RunArgs({"run", "--", "true"});
    EXPECT_EQ(r.code, 0) << r.err;
  }
}

}  // namespace
}  // namespace cohort::cli
