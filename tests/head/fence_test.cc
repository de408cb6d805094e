// Stopping attempts: an ended attempt's tasks keep their GPUs, and the job's next attempt
// waits, until every node confirms the tasks are gone (or is DOWN, or restarted its
// agent). Driven through Register/Heartbeat/Schedule on a Cluster; no processes, no sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <thread>

#include "agent_view.h"
#include "head/cluster.h"
#include "store/state_store.h"

namespace cohort::head {
namespace {

using test_agent::Reg;
using test_agent::Running;

api::JobSpec Spec(int nodes, int max_restarts) {
  api::JobSpec s;
  s.name = "train";
  s.user = "alice";
  s.command = {"train"};
  s.nodes = nodes;
  s.gpus_per_node = 1;
  s.max_restarts = max_restarts;
  return s;
}

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(60'000); }  // nodes go DOWN only where a test waits for it

  void Open(int64_t failure_timeout_ms) {
    HeadConfig config;
    config.advertise_url = "http://127.0.0.1:1";
    config.timing.failure_timeout_ms = failure_timeout_ms;
    applied_.clear();
    auto c = Cluster::Open(config, store::NewMemoryStateStore());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    cluster_ = std::move(*c);
    for (const char* n : {"n1", "n2", "n3"}) ASSERT_TRUE(cluster_->Register(Reg(n)).has_value());
  }

  // One heartbeat from `node` reporting `tasks`, having applied everything the head sent
  // it so far (applied_ tracks the versions the replies carried).
  api::HeartbeatReply Beat(const std::string& node, std::vector<api::TaskReport> tasks) {
    api::Heartbeat hb;
    hb.incarnation = "inc1";
    hb.applied_version = applied_[node];
    hb.tasks = std::move(tasks);
    auto reply = cluster_->Heartbeat(node, hb);
    EXPECT_TRUE(reply.has_value()) << reply.error().message;
    applied_[node] = reply->version;
    return *reply;
  }

  static api::TaskReport Exited(const api::TaskReport& t, int code) {
    api::TaskReport r = t;
    r.running = false;
    r.exit_code = code;
    return r;
  }

  std::vector<std::string> Nodes(const api::Job& job) {
    std::vector<std::string> out;
    for (const auto& na : job.allocation.nodes) out.push_back(na.node);
    return out;
  }

  api::Job Get(api::JobId id) { return *cluster_->GetJob(id); }

  std::unique_ptr<Cluster> cluster_;
  std::map<std::string, int64_t> applied_;
};

// The case the fault suite met: rank 1 fails because its peer's node died, before that
// node is declared DOWN. The restart must neither land on the dead node's GPU nor start
// while the dead node's task may still run.
TEST_F(FenceTest, RestartWaitsForASilentNodeAndNeverLandsOnIt) {
  auto job = cluster_->Submit(Spec(2, 3));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job a0 = Get(job->id);
  ASSERT_EQ(a0.state, api::JobState::kRunning);
  const std::string survivor = Nodes(a0)[1];
  const std::string silent = Nodes(a0)[0];

  // Both agents start their task and report it; then the silent node's agent dies.
  std::vector<api::TaskReport> on_survivor = Running(Beat(survivor, {}));
  ASSERT_EQ(on_survivor.size(), 1u);
  Beat(survivor, on_survivor);
  std::vector<api::TaskReport> on_silent = Running(Beat(silent, {}));
  Beat(silent, on_silent);

  // The survivor's rank fails (its collective lost the peer): attempt 0 ends.
  Beat(survivor, {Exited(on_survivor[0], 3)});
  api::Job requeued = Get(job->id);
  ASSERT_EQ(requeued.state, api::JobState::kPending);
  ASSERT_EQ(requeued.attempt, 1);

  // The survivor confirms (its task exited); the silent node never does.
  Beat(survivor, {});
  EXPECT_EQ(cluster_->Schedule(), 0) << "a new attempt started while attempt 0 may still run";
  EXPECT_EQ(Get(job->id).reason, "waiting for attempt 0 on " + silent + " to stop");

  // The silent node was only slow: it heartbeats again, still running the stale task
  // (not yet confirmed: it is still in its kill grace), then without it.
  Beat(silent, on_silent);
  EXPECT_EQ(cluster_->Schedule(), 0);
  Beat(silent, {});
  ASSERT_EQ(cluster_->Schedule(), 1);
  EXPECT_EQ(Get(job->id).state, api::JobState::kRunning);
  EXPECT_EQ(Get(job->id).attempt, 1);
}

TEST_F(FenceTest, ANodeGoingDownReleasesTheRestartOntoOtherNodes) {
  Open(1000);
  auto job = cluster_->Submit(Spec(2, 3));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job a0 = Get(job->id);
  const std::string survivor = Nodes(a0)[1];
  const std::string dead = Nodes(a0)[0];
  std::string spare;
  for (const char* n : {"n1", "n2", "n3"}) {
    if (n != survivor && n != dead) spare = n;
  }
  // The dead node's agent took its assignment but died before reporting the task (the
  // head has no running report of it: the GPU would look free without the fence).
  Beat(dead, {});
  std::vector<api::TaskReport> on_survivor = Running(Beat(survivor, {}));
  Beat(survivor, {Exited(on_survivor[0], 3)});
  Beat(survivor, {});
  Beat(spare, {});
  EXPECT_EQ(cluster_->Schedule(), 0);
  EXPECT_EQ(Get(job->id).state, api::JobState::kPending);

  // Past the failure timeout for the dead node; the others keep beating.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Beat(survivor, {});
  Beat(spare, {});
  cluster_->CheckLiveness();
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job a1 = Get(job->id);
  EXPECT_EQ(a1.state, api::JobState::kRunning);
  EXPECT_EQ(a1.attempt, 1) << "no attempt may be wasted on the dead node";
  std::vector<std::string> placed = Nodes(a1);
  std::sort(placed.begin(), placed.end());
  std::vector<std::string> want = {survivor, spare};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(placed, want);
}

TEST_F(FenceTest, CancelledTasksKeepTheirGpuUntilTheAgentConfirms) {
  // Fill all three GPUs with one job, cancel it, and submit another that needs them.
  auto first = cluster_->Submit(Spec(3, 0));
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  std::map<std::string, std::vector<api::TaskReport>> running;
  for (const char* n : {"n1", "n2", "n3"}) {
    running[n] = Running(Beat(n, {}));
    Beat(n, running[n]);
  }
  ASSERT_TRUE(cluster_->Cancel(first->id).has_value());
  auto second = cluster_->Submit(Spec(1, 0));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(cluster_->Schedule(), 0);

  // n1 took the new version but its task is still shutting down (grace period).
  Beat("n1", running["n1"]);
  EXPECT_EQ(cluster_->Schedule(), 0) << "a GPU was given away while its task still ran";
  // An agent that has not applied the new version cannot confirm anything: n2 reports an
  // old heartbeat's view without the task, with an older applied version.
  {
    api::Heartbeat hb;
    hb.incarnation = "inc1";
    hb.applied_version = 0;
    ASSERT_TRUE(cluster_->Heartbeat("n2", hb).has_value());
  }
  EXPECT_EQ(cluster_->Schedule(), 0);
  // n1's task exits: its GPU is free again and the waiting job starts there.
  Beat("n1", {Exited(running["n1"][0], 143)});
  ASSERT_EQ(cluster_->Schedule(), 1);
  EXPECT_EQ(Nodes(Get(second->id)), std::vector<std::string>{"n1"});
}

TEST_F(FenceTest, AttemptWhoseTasksAllExitedNeedsNoConfirmation) {
  auto job = cluster_->Submit(Spec(1, 0));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  const std::string node = Nodes(Get(job->id))[0];
  std::vector<api::TaskReport> tasks = Running(Beat(node, {}));
  Beat(node, {Exited(tasks[0], 0)});
  ASSERT_EQ(Get(job->id).state, api::JobState::kSucceeded);
  auto next = cluster_->Submit(Spec(3, 0));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(cluster_->Schedule(), 1) << "a finished task's GPU must be free at once";
}

}  // namespace
}  // namespace cohort::head

namespace cohort::head {
namespace {

// `cohort drain --now`: ask the job to checkpoint, move it once it reports a newer
// checkpoint (or at the deadline), and do not count the move as a restart.
class DrainNowTest : public FenceTest {
 protected:
  RendezvousScope Scope(const api::Job& job) {
    RendezvousScope s;
    s.job = job.id;
    s.attempt = job.attempt;
    return s;
  }
  static ProgressPoint Point(int64_t step, std::optional<int64_t> checkpoint) {
    ProgressPoint p;
    p.step = step;
    p.checkpoint_step = checkpoint;
    return p;
  }
};

TEST_F(DrainNowTest, AsksForACheckpointThenMovesTheJobWithoutSpendingARestart) {
  api::JobSpec spec = Spec(1, 0);  // no restarts: a move must not need one
  spec.checkpoint_signal = "USR1";
  auto submitted = cluster_->Submit(spec);
  ASSERT_TRUE(submitted.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job job = Get(submitted->id);
  const std::string node = Nodes(job)[0];
  std::vector<api::TaskReport> tasks = Running(Beat(node, {}));
  Beat(node, tasks);
  EXPECT_FALSE(cluster_->ReportProgress(Scope(job), Point(10, 0)));  // nothing asked yet

  ASSERT_TRUE(cluster_->Drain(node, "maintenance", /*now=*/true, 60'000).has_value());
  // The request reaches the task both ways: the agent's reply carries it with the signal...
  api::HeartbeatReply reply = Beat(node, tasks);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(reply.tasks[0].checkpoint_requested);
  EXPECT_EQ(reply.tasks[0].checkpoint_signal, SIGUSR1);
  // ... and the reply to its progress reports, until a checkpoint newer than step 0 comes.
  EXPECT_TRUE(cluster_->ReportProgress(Scope(job), Point(11, 0)));
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
  EXPECT_FALSE(cluster_->ReportProgress(Scope(job), Point(12, 12)));
  api::Job moved = Get(job.id);
  EXPECT_EQ(moved.state, api::JobState::kPending);
  EXPECT_EQ(moved.attempt, 1);
  EXPECT_EQ(moved.moves, 1);
  EXPECT_NE(moved.reason.find("moved: node " + node + " drained now; checkpoint at step 12"), std::string::npos)
      << moved.reason;
  ASSERT_EQ(moved.history.size(), 1u);
  EXPECT_NE(moved.history[0].end_reason.find("checkpoint at step 12"), std::string::npos);
  // A late report of the old attempt asks nothing.
  EXPECT_FALSE(cluster_->ReportProgress(Scope(job), Point(13, 12)));

  // Placed again elsewhere once the drained node's agent has stopped the old task (it
  // learns of the move from the first reply, and confirms with the next heartbeat).
  Beat(node, tasks);
  Beat(node, {Exited(tasks[0], 143)});
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job again = Get(job.id);
  EXPECT_EQ(again.state, api::JobState::kRunning);
  EXPECT_NE(Nodes(again)[0], node);
  api::HeartbeatReply next = Beat(Nodes(again)[0], {});
  ASSERT_EQ(next.tasks.size(), 1u);
  EXPECT_EQ(next.tasks[0].env.at("COHORT_ATTEMPT"), "1");
  EXPECT_FALSE(next.tasks[0].checkpoint_requested) << "the request was for attempt 0";
}

TEST_F(DrainNowTest, AJobThatNeverCheckpointsIsMovedAtTheDeadline) {
  auto submitted = cluster_->Submit(Spec(2, 0));
  ASSERT_TRUE(submitted.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job job = Get(submitted->id);
  const std::string node = Nodes(job)[1];
  ASSERT_TRUE(cluster_->Drain(node, "", /*now=*/true, /*timeout_ms=*/20).has_value());
  api::HeartbeatReply reply = Beat(node, {});
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(reply.tasks[0].checkpoint_requested);
  EXPECT_EQ(reply.tasks[0].checkpoint_signal, 0) << "no checkpoint_signal in the spec: no signal";
  cluster_->CheckLiveness();
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  cluster_->CheckLiveness();
  api::Job moved = Get(job.id);
  EXPECT_EQ(moved.state, api::JobState::kPending);
  EXPECT_EQ(moved.moves, 1);
  EXPECT_NE(moved.reason.find("no new checkpoint reported within"), std::string::npos) << moved.reason;
}

TEST_F(DrainNowTest, PlainDrainMovesNothingAndFailuresStillCountAfterAMove) {
  auto submitted = cluster_->Submit(Spec(1, 1));
  ASSERT_TRUE(submitted.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job job = Get(submitted->id);
  const std::string node = Nodes(job)[0];
  ASSERT_TRUE(cluster_->Drain(node, "", /*now=*/false).has_value());
  EXPECT_FALSE(Beat(node, {}).tasks[0].checkpoint_requested);
  EXPECT_FALSE(cluster_->ReportProgress(Scope(job), Point(5, 5)));
  EXPECT_EQ(Get(job.id).state, api::JobState::kRunning);

  // Now move it, then let the moved attempt fail twice: one restart, then FAILED.
  ASSERT_TRUE(cluster_->Drain(node, "", /*now=*/true, 60'000).has_value());
  EXPECT_FALSE(cluster_->ReportProgress(Scope(job), Point(6, 6)));
  ASSERT_EQ(Get(job.id).moves, 1);
  Beat(node, {});
  Beat(node, {});
  ASSERT_EQ(cluster_->Schedule(), 1);
  for (int failure = 1; failure <= 2; ++failure) {
    api::Job current = Get(job.id);
    ASSERT_EQ(current.state, api::JobState::kRunning) << "failure " << failure;
    const std::string on = Nodes(current)[0];
    std::vector<api::TaskReport> t = Running(Beat(on, {}));
    Beat(on, {Exited(t[0], 1)});
    Beat(on, {});
    cluster_->Schedule();
  }
  api::Job failed = Get(job.id);
  EXPECT_EQ(failed.state, api::JobState::kFailed);
  EXPECT_EQ(failed.attempt, 2);
  EXPECT_NE(failed.reason.find("no restarts left of 1"), std::string::npos) << failed.reason;
}

TEST(CheckpointSignalSpec, ValidatedAndCanonical) {
  auto ok = api::JobSpecFromJson(json{{"command", {"x"}}, {"checkpoint_signal", "SIGUSR2"}});
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(ok->checkpoint_signal, "USR2");
  EXPECT_EQ(api::CheckpointSignalNumber(ok->checkpoint_signal), SIGUSR2);
  auto bad = api::JobSpecFromJson(json{{"command", {"x"}}, {"checkpoint_signal", "KILL"}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("checkpoint_signal"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("USR1, USR2"), std::string::npos) << bad.error().message;
  auto none = api::JobSpecFromJson(json{{"command", {"x"}}});
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->checkpoint_signal, "");
}

}  // namespace
}  // namespace cohort::head

namespace cohort::head {
namespace {

// min_nodes: an elastic gang starts small when nodes are missing and grows back at its
// next checkpoint once they return and nothing else waits.
class ElasticTest : public DrainNowTest {
 protected:
  // Both beats of an agent that stops what the head dropped and runs what it assigned.
  std::vector<api::TaskReport> Settle(const std::string& node, std::vector<api::TaskReport> running) {
    std::vector<api::TaskReport> now = Running(Beat(node, running));
    Beat(node, now);
    return now;
  }
};

TEST_F(ElasticTest, StartsSmallGrowsBackAtTheNextCheckpoint) {
  ASSERT_TRUE(cluster_->Drain("n3", "", false).has_value());
  api::JobSpec spec = Spec(3, 0);
  spec.min_nodes = 2;
  auto submitted = cluster_->Submit(spec);
  ASSERT_TRUE(submitted.has_value()) << submitted.error().message;
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job small = Get(submitted->id);
  ASSERT_EQ(Nodes(small).size(), 2u);
  EXPECT_EQ(small.world_size(), 2);
  std::map<std::string, std::vector<api::TaskReport>> tasks;
  for (const auto& n : Nodes(small)) {
    api::HeartbeatReply r = Beat(n, {});
    ASSERT_EQ(r.tasks.size(), 1u);
    EXPECT_EQ(r.tasks[0].env.at("WORLD_SIZE"), "2");
    EXPECT_EQ(r.tasks[0].env.at("COHORT_NUM_NODES"), "2");
    tasks[n] = Running(r);
    Beat(n, tasks[n]);
  }
  // No spare node: a checkpoint changes nothing.
  EXPECT_FALSE(cluster_->ReportProgress(Scope(small), Point(20, 20)));
  EXPECT_EQ(Get(small.id).state, api::JobState::kRunning);

  // n3 returns. The job is not asked to checkpoint early; its next checkpoint moves it.
  ASSERT_TRUE(cluster_->Resume("n3").has_value());
  cluster_->Schedule();
  EXPECT_FALSE(Beat(Nodes(small)[0], tasks[Nodes(small)[0]]).tasks[0].checkpoint_requested);
  EXPECT_FALSE(cluster_->ReportProgress(Scope(small), Point(30, 20)));
  EXPECT_EQ(Get(small.id).state, api::JobState::kRunning) << "no new checkpoint yet";
  EXPECT_FALSE(cluster_->ReportProgress(Scope(small), Point(40, 40)));
  api::Job moved = Get(small.id);
  ASSERT_EQ(moved.state, api::JobState::kPending);
  EXPECT_EQ(moved.moves, 1);
  EXPECT_NE(moved.reason.find("growing back to 3 nodes at its checkpoint at step 40"), std::string::npos)
      << moved.reason;

  for (const auto& n : Nodes(small)) {
    Beat(n, tasks[n]);
    Beat(n, {});
  }
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job full = Get(small.id);
  EXPECT_EQ(Nodes(full).size(), 3u);
  EXPECT_EQ(Beat("n3", {}).tasks.at(0).env.at("WORLD_SIZE"), "3");
}

TEST_F(ElasticTest, DoesNotGrowIntoNodesOtherJobsWaitFor) {
  ASSERT_TRUE(cluster_->Drain("n3", "", false).has_value());
  api::JobSpec spec = Spec(3, 0);
  spec.min_nodes = 1;
  auto elastic = cluster_->Submit(spec);
  ASSERT_TRUE(elastic.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  api::Job small = Get(elastic->id);
  ASSERT_EQ(Nodes(small).size(), 2u);
  for (const auto& n : Nodes(small)) Settle(n, {});

  // A second job needs the node that returns: it gets it, the elastic job stays small.
  ASSERT_TRUE(cluster_->Resume("n3").has_value());
  auto other = cluster_->Submit(Spec(1, 0));
  ASSERT_TRUE(other.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  EXPECT_EQ(Get(other->id).state, api::JobState::kRunning);
  EXPECT_FALSE(cluster_->ReportProgress(Scope(small), Point(60, 60)));
  EXPECT_EQ(Get(small.id).state, api::JobState::kRunning);
  EXPECT_EQ(Get(small.id).attempt, 0);
}

TEST(ElasticSpec, MinNodesIsValidated) {
  auto bad = api::JobSpecFromJson(json{{"command", {"x"}}, {"nodes", 2}, {"min_nodes", 3}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("min_nodes: must be at most nodes (2), got 3"), std::string::npos)
      << bad.error().message;
  auto ok = api::JobSpecFromJson(json{{"command", {"x"}}, {"nodes", 4}, {"min_nodes", 2}});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->min_nodes, 2);
}

}  // namespace
}  // namespace cohort::head
