// Job limits in the head's core (core/job_limits.h): a user's open jobs and the cluster's
// are capped, a refusal changes nothing, ending a job or a failed commit gives room back,
// and a restart counts again from the stored records.
#include "core_test_util.h"
#include "head/core/job_limits.h"
#include "head/core/submit.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

class JobLimitsTest : public CoreTest {
 protected:
  api::JobSpec SpecOf(const std::string& user) {
    api::JobSpec s = Spec(1, 1);
    s.user = user;
    return s;
  }
  // AcceptJob's refusal for `user` (an empty message if it was accepted, then dropped).
  std::string Refusal(const std::string& user) {
    const size_t jobs = state_.jobs.size();
    auto job = AcceptJob(state_, ctx_, SpecOf(user), now_);
    if (job) {
      DropNewJob(state_, *job);
      return "";
    }
    EXPECT_EQ(job.error().code, ErrorCode::kResourceExhausted);
    EXPECT_EQ(state_.jobs.size(), jobs) << "a refusal adds nothing";
    return job.error().message;
  }
  int64_t Open(const std::string& user) const {
    auto it = state_.open.by_user.find(user);
    return it == state_.open.by_user.end() ? 0 : it->second;
  }
};

TEST_F(JobLimitsTest, AUserAtTheLimitIsRefusedOthersAreNotAndAnEndedJobGivesRoomBack) {
  Register(Reg("n1", 1));
  ctx_.job_limits = {3, 0};
  const api::JobId first = Submit(SpecOf("alice"));
  Submit(SpecOf("alice"));
  Submit(SpecOf("alice"));
  EXPECT_EQ(Open("alice"), 3);
  const std::string why = Refusal("alice");
  EXPECT_NE(why.find("user alice has 3 jobs pending or running"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-jobs-per-user 3"), std::string::npos) << why;
  EXPECT_EQ(Refusal("bob"), "") << "another user has room";
  EXPECT_EQ(Open("bob"), 0) << "a dropped job is not open";

  // A job that runs and exits, and one cancelled: two places give room back.
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(first).state, JobState::kRunning);
  Beat("n1", {Exited(first, Job(first).attempt, 0, 0)});
  ASSERT_EQ(Job(first).state, JobState::kSucceeded);
  EXPECT_EQ(Open("alice"), 2);
  EXPECT_EQ(Refusal("alice"), "");
  const api::JobId third = Submit(SpecOf("alice"));
  ASSERT_NE(third, 0);
  EXPECT_NE(Refusal("alice"), "");
  ASSERT_TRUE(Cancel(state_, ctx_, third, now_).has_value());
  EXPECT_EQ(Open("alice"), 2);
  EXPECT_EQ(Refusal("alice"), "");
}

TEST_F(JobLimitsTest, TheClusterLimitCountsEveryUser) {
  Register(Reg("n1", 1));
  ctx_.job_limits = {0, 4};
  Submit(SpecOf("alice"));
  Submit(SpecOf("alice"));
  Submit(SpecOf("bob"));
  Submit(SpecOf("bob"));
  EXPECT_EQ(state_.open.total, 4);
  const std::string why = Refusal("carol");
  EXPECT_NE(why.find("the cluster has 4 jobs pending or running"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-jobs 4"), std::string::npos) << why;
  ctx_.job_limits = {0, 0};
  EXPECT_EQ(Refusal("carol"), "") << "0 is no limit";
}

TEST_F(JobLimitsTest, ARestartCountsTheOpenJobsFromTheStoredRecords) {
  Register(Reg("n1", 1));
  const api::JobId a = Submit(SpecOf("alice"));
  Submit(SpecOf("alice"));
  Submit(SpecOf("bob"));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(a, Job(a).attempt, 0, 1)});  // alice's first ends (FAILED)
  ASSERT_TRUE(api::IsTerminal(Job(a).state));
  std::vector<api::Job> jobs;
  for (const auto& [id, j] : state_.jobs) jobs.push_back(j);
  std::vector<api::Node> nodes;
  for (const auto& [name, n] : state_.nodes) nodes.push_back(n);
  const OpenJobs before = state_.open;
  state_ = LoadState(nodes, jobs, now_);
  EXPECT_EQ(state_.open.by_user, before.by_user);
  EXPECT_EQ(state_.open.total, 2);
  EXPECT_EQ(Open("alice"), 1);
  EXPECT_EQ(Open("bob"), 1);
}

}  // namespace
}  // namespace cohort::head::core::testing
