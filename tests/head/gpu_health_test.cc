// GPU health transitions in the Cluster: a reported health event marks the GPU
// unhealthy, requeues the job on it, keeps the scheduler off it, survives a new agent,
// and `resume` clears it.
#include <gtest/gtest.h>

#include <thread>

#include "head/cluster.h"
#include "store/state_store.h"

namespace cohort::head {
namespace {

api::Registration Reg(const std::string& incarnation) {
  api::Registration r;
  r.name = "n1";
  r.address = "127.0.0.1";
  r.incarnation = incarnation;
  r.cpus = 8;
  for (int i = 0; i < 2; ++i) {
    api::Gpu g;
    g.index = i;
    g.name = "sim";
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_bytes = 1 << 30;
    g.simulated = true;
    r.gpus.push_back(g);
  }
  return r;
}

api::JobSpec Spec(int max_restarts) {
  api::JobSpec s;
  s.name = "train";
  s.user = "alice";
  s.command = {"train"};
  s.gpus_per_node = 1;
  s.max_restarts = max_restarts;
  return s;
}

class GpuHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadConfig config;
    config.advertise_url = "http://127.0.0.1:1";
    config.timing.failure_timeout_ms = 50;
    auto c = Cluster::Open(config, store::NewMemoryStateStore());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    cluster_ = std::move(*c);
    ASSERT_TRUE(cluster_->Register(Reg("inc1")).has_value());
  }

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

  // A heartbeat reporting the job's tasks as running and one GPU's health counter.
  Result<api::HeartbeatReply> Beat(const std::string& incarnation, int gpu, int64_t events,
                                   std::vector<api::JobId> running = {}) {
    api::Heartbeat hb;
    hb.incarnation = incarnation;
    for (api::JobId id : running) {
      auto job = cluster_->GetJob(id);
      if (!job || job->state != api::JobState::kRunning) continue;
      api::TaskReport t;
      t.job = id;
      t.attempt = job->attempt;
      t.rank = 0;
      t.gpus = job->allocation.nodes[0].gpus;
      t.cpu_seconds = 2.5;
      t.rss_bytes = 1000;
      hb.tasks.push_back(t);
    }
    for (int i = 0; i < 2; ++i) {
      api::GpuReport g;
      g.index = i;
      g.telemetry.utilization = 0.5;
      if (i == gpu) {
        g.health_events = events;
        g.health_event = "XID 79 (GPU has fallen off the bus)";
      }
      hb.gpus.push_back(g);
    }
    return cluster_->Heartbeat("n1", hb);
  }

  int GpuOf(api::JobId id) {
    auto job = cluster_->GetJob(id);
    EXPECT_TRUE(job.has_value());
    EXPECT_EQ(job->state, api::JobState::kRunning);
    return job->allocation.nodes.at(0).gpus.at(0);
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(GpuHealthTest, HealthEventRequeuesJobAndKeepsSchedulerOff) {
  auto job = cluster_->Submit(Spec(/*max_restarts=*/1));
  ASSERT_TRUE(job.has_value()) << job.error().message;
  ASSERT_EQ(cluster_->Schedule(), 1);
  int bad = GpuOf(job->id);
  int good = 1 - bad;

  // Telemetry and task usage arrive with the heartbeat.
  ASSERT_TRUE(Beat("inc1", bad, 0, {job->id}).has_value());
  auto node = cluster_->GetNode("n1");
  ASSERT_TRUE(node->node.gpus[0].telemetry.has_value());
  EXPECT_EQ(*node->node.gpus[0].telemetry->utilization, 0.5);
  EXPECT_GT(node->node.gpus[0].telemetry->updated_ms, 0);
  auto usage = cluster_->RunningTaskUsage();
  ASSERT_EQ(usage[job->id].size(), 1u);
  EXPECT_EQ(usage[job->id][0].cpu_seconds, 2.5);
  EXPECT_EQ(usage[job->id][0].node, "n1");

  // The counter grows: the GPU is unhealthy and the job goes back to the queue.
  ASSERT_TRUE(Beat("inc1", bad, 1, {job->id}).has_value());
  node = cluster_->GetNode("n1");
  EXPECT_FALSE(node->node.gpus[bad].healthy);
  EXPECT_EQ(node->node.gpus[bad].health_reason, "XID 79 (GPU has fallen off the bus)");
  EXPECT_TRUE(node->node.gpus[good].healthy);
  EXPECT_EQ(node->unhealthy_gpus, 1);
  auto requeued = cluster_->GetJob(job->id);
  EXPECT_EQ(requeued->state, api::JobState::kPending);
  EXPECT_EQ(requeued->attempt, 1);
  EXPECT_NE(requeued->reason.find("became unhealthy"), std::string::npos) << requeued->reason;

  // Placed again once the agent stopped the old task, never on the unhealthy GPU; the same
  // counter again changes nothing.
  EXPECT_EQ(cluster_->Schedule(), 0);
  AgentConfirmsStopped();
  ASSERT_EQ(cluster_->Schedule(), 1);
  EXPECT_EQ(GpuOf(job->id), good);
  ASSERT_TRUE(Beat("inc1", bad, 1, {job->id}).has_value());
  EXPECT_EQ(cluster_->GetJob(job->id)->state, api::JobState::kRunning);
  // A second job cannot use the unhealthy GPU: it waits.
  auto second = cluster_->Submit(Spec(0));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(cluster_->Schedule(), 0);
  EXPECT_EQ(cluster_->GetJob(second->id)->state, api::JobState::kPending);

  // resume: the GPU is healthy again and takes the waiting job.
  auto resumed = cluster_->Resume("n1");
  ASSERT_TRUE(resumed.has_value());
  EXPECT_TRUE(resumed->node.gpus[bad].healthy);
  EXPECT_EQ(resumed->unhealthy_gpus, 0);
  EXPECT_EQ(cluster_->Schedule(), 1);
  EXPECT_EQ(GpuOf(second->id), bad);
  // The old counter does not bring the mark back.
  ASSERT_TRUE(Beat("inc1", bad, 1, {job->id, second->id}).has_value());
  EXPECT_TRUE(cluster_->GetNode("n1")->node.gpus[bad].healthy);

  auto m = cluster_->Metrics();
  EXPECT_EQ(m.gpu_health_events, 1u);
  EXPECT_EQ((m.transitions[{"running", "pending"}]), 1u);
  EXPECT_EQ((m.transitions[{"pending", "running"}]), 3u);
  EXPECT_EQ((m.transitions[{"none", "pending"}]), 2u);
}

TEST_F(GpuHealthTest, NoRestartsLeftFailsTheJob) {
  auto job = cluster_->Submit(Spec(/*max_restarts=*/0));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  int bad = GpuOf(job->id);
  ASSERT_TRUE(Beat("inc1", bad, 0, {job->id}).has_value());
  ASSERT_TRUE(Beat("inc1", bad, 3, {job->id}).has_value());
  auto failed = cluster_->GetJob(job->id);
  EXPECT_EQ(failed->state, api::JobState::kFailed);
  EXPECT_NE(failed->reason.find("GPU " + std::to_string(bad) + " on n1 became unhealthy"), std::string::npos)
      << failed->reason;
}

TEST_F(GpuHealthTest, MarkSurvivesNewAgentWhoseCountersStartAtZero) {
  ASSERT_TRUE(Beat("inc1", 0, 0).has_value());
  ASSERT_TRUE(Beat("inc1", 0, 1).has_value());
  ASSERT_FALSE(cluster_->GetNode("n1")->node.gpus[0].healthy);
  // A new agent process registers once the old one has been silent for the failure timeout.
  Result<api::AgentTiming> reg = MakeError(ErrorCode::kInternal, "not tried");
  auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (SteadyClock::now() < deadline && !(reg = cluster_->Register(Reg("inc2")))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(reg.has_value()) << reg.error().message;
  auto node = cluster_->GetNode("n1");
  EXPECT_FALSE(node->node.gpus[0].healthy);
  EXPECT_EQ(node->node.gpus[0].health_reason, "XID 79 (GPU has fallen off the bus)");
  EXPECT_FALSE(node->node.gpus[0].telemetry.has_value());  // the new agent has not reported yet
  // The new agent's first event on GPU 1 counts (counters restart from 0).
  ASSERT_TRUE(Beat("inc2", 1, 1).has_value());
  EXPECT_EQ(cluster_->GetNode("n1")->unhealthy_gpus, 2);
}

}  // namespace
}  // namespace cohort::head
