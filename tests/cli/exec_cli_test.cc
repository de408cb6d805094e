// `cohort exec` and `cohort attach` on the command line, without a head: flags and their
// errors (the cluster side is tests/integration/exec_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/cli.h"
#include "cli_run_util.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

using test_util::Ran;
using test_util::RunArgs;

TEST(ExecCliTest, FlagsAndTheirErrors) {
  auto r = RunArgs({"exec", "12"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no command: cohort exec JOB"));
  r = RunArgs({"exec", "abc", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("abc"));
  r = RunArgs({"exec", "--rank", "-1", "12", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--rank"));
  r = RunArgs({"--json", "exec", "-t", "12", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--json cannot be used with a terminal"));
  r = RunArgs({"attach"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("JOB"));
  // Well-formed: it gets as far as the head, which is not there (exit 3).
  r = RunArgs({"exec", "-i", "-t", "--rank", "1", "12", "--", "sh", "-c", "true"});
  EXPECT_EQ(r.code, 3) << r.err;
  r = RunArgs({"attach", "12"});
  EXPECT_EQ(r.code, 3) << r.err;
}

}  // namespace
}  // namespace cohort::cli
