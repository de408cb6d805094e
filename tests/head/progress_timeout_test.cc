// Hung tasks: a RUNNING job with progress_timeout_s fails its attempt (requeue, then
// FAILED) when no progress report of that attempt arrives in time. Driven with a fake
// clock through Cluster::CheckProgress; no sleeps.
#include <gtest/gtest.h>

#include "head/cluster.h"
#include "store/state_store.h"

namespace cohort::head {
namespace {

api::Registration Reg() {
  api::Registration r;
  r.name = "n1";
  r.address = "127.0.0.1";
  r.incarnation = "inc1";
  r.cpus = 8;
  return r;
}

api::JobSpec Spec(int64_t progress_timeout_s, int max_restarts) {
  api::JobSpec s;
  s.name = "train";
  s.user = "alice";
  s.command = {"train"};
  s.progress_timeout_s = progress_timeout_s;
  s.max_restarts = max_restarts;
  return s;
}

class ProgressTimeoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadConfig config;
    config.advertise_url = "http://127.0.0.1:1";
    config.timing.failure_timeout_ms = 60'000;  // node liveness stays out of the way
    auto c = Cluster::Open(config, store::NewMemoryStateStore());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    cluster_ = std::move(*c);
    ASSERT_TRUE(cluster_->Register(Reg()).has_value());
  }

  api::Job Started(const api::JobSpec& spec) {
    auto job = cluster_->Submit(spec);
    EXPECT_TRUE(job.has_value()) << job.error().message;
    EXPECT_EQ(cluster_->Schedule(), 1);
    auto running = cluster_->GetJob(job->id);
    EXPECT_EQ(running->state, api::JobState::kRunning);
    return *running;
  }

  void Report(const api::Job& job, int64_t step, int64_t at_ms) {
    ProgressPoint p;
    p.time_ms = at_ms;
    p.attempt = job.attempt;
    p.step = step;
    cluster_->progress().Add(job.id, p);
  }

  api::Job Get(api::JobId id) { return *cluster_->GetJob(id); }

  // The agent has stopped the previous attempt's task: it heartbeats having applied the
  // head's newest assignment and reports nothing running (cluster.h's StoppingAttempt).
  void AgentConfirmsStopped(const std::string& incarnation = "inc1") {
    api::Heartbeat hb;
    hb.incarnation = incarnation;
    auto reply = cluster_->Heartbeat("n1", hb);
    ASSERT_TRUE(reply.has_value()) << reply.error().message;
    hb.applied_version = reply->version;
    ASSERT_TRUE(cluster_->Heartbeat("n1", hb).has_value());
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ProgressTimeoutTest, OffByDefaultAndStoredSpecsWithoutTheFieldLoad) {
  auto parsed = api::JobSpecFromJson(json{{"command", {"x"}}});
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->progress_timeout_s, 0);
  api::Job job = Started(Spec(0, 0));
  cluster_->CheckProgress(job.start_ms + 10LL * 24 * 3600 * 1000);
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
}

TEST_F(ProgressTimeoutTest, NoReportSinceStartRequeuesThenFails) {
  api::Job job = Started(Spec(120, 1));
  cluster_->CheckProgress(job.start_ms + 119'000);
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
  cluster_->CheckProgress(job.start_ms + 121'000);
  api::Job requeued = Get(job.id);
  EXPECT_EQ(requeued.state, api::JobState::kPending);
  EXPECT_EQ(requeued.attempt, 1);
  EXPECT_NE(requeued.reason.find("no progress reported for 120s (progress_timeout_s)"), std::string::npos)
      << requeued.reason;
  EXPECT_NE(requeued.reason.find("restart 1 of 1"), std::string::npos) << requeued.reason;
  ASSERT_EQ(requeued.history.size(), 1u);
  EXPECT_NE(requeued.history[0].end_reason.find("progress_timeout_s"), std::string::npos);

  // Attempt 1 reports, then goes silent: the timer runs from its last report.
  AgentConfirmsStopped();
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job second = Get(job.id);
  ASSERT_EQ(second.state, api::JobState::kRunning);
  Report(second, 340, second.start_ms + 100'000);
  cluster_->CheckProgress(second.start_ms + 200'000);  // 100 s after the report
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
  cluster_->CheckProgress(second.start_ms + 221'000);
  api::Job failed = Get(job.id);
  EXPECT_EQ(failed.state, api::JobState::kFailed);
  EXPECT_NE(failed.reason.find("no progress reported for 120s (progress_timeout_s); last step 340 at "),
            std::string::npos)
      << failed.reason;
  EXPECT_NE(failed.reason.find("no restarts left"), std::string::npos) << failed.reason;
  EXPECT_EQ(failed.history.size(), 2u);
}

TEST_F(ProgressTimeoutTest, ReportsOfAnEarlierAttemptDoNotCount) {
  api::Job job = Started(Spec(10, 1));
  Report(job, 5, job.start_ms + 1000);
  cluster_->CheckProgress(job.start_ms + 12'000);
  ASSERT_EQ(Get(job.id).state, api::JobState::kPending);
  AgentConfirmsStopped();
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job second = Get(job.id);
  // Attempt 0's report is older than attempt 1's start; only the start counts.
  cluster_->CheckProgress(second.start_ms + 9'000);
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
  cluster_->CheckProgress(second.start_ms + 11'000);
  api::Job failed = Get(job.id);
  EXPECT_EQ(failed.state, api::JobState::kFailed);
  EXPECT_NE(failed.reason.find("none since attempt 1 started"), std::string::npos) << failed.reason;
}

TEST_F(ProgressTimeoutTest, SteadyReportsKeepTheJobRunning) {
  api::Job job = Started(Spec(2, 0));
  for (int i = 1; i <= 20; ++i) {
    Report(job, i, job.start_ms + i * 1000);
    cluster_->CheckProgress(job.start_ms + i * 1000 + 1500);
  }
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
}

TEST(ProgressTimeoutSpec, FieldIsValidatedByName) {
  auto bad = api::JobSpecFromJson(json{{"command", {"x"}}, {"progress_timeout_s", -1}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().field, "progress_timeout_s");
  auto ok = api::JobSpecFromJson(json{{"command", {"x"}}, {"progress_timeout_s", 120}});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->progress_timeout_s, 120);
  EXPECT_EQ(api::ToJson(*ok)["progress_timeout_s"], 120);
}

}  // namespace
}  // namespace cohort::head
