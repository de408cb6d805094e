// A heartbeat reply and the state store's commits (Cluster::Heartbeat): a reply that tells the
// agent nothing new goes out while another record's commit is held (a slow fsync must not
// stretch past the lease the reply renews), and one that tells it something new, or that
// acknowledges an exit, still waits until that is durable. Driven on a Cluster over a store
// whose commits can be held at a gate; no processes.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

#include "agent_view.h"
#include "head/cluster.h"
#include "store/state_store.h"

namespace cohort::head {
namespace {

using test_agent::Reg;
using test_agent::Running;

// The in-memory store, its commits held while `hold` is set.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  int waiting = 0;  // commits held now
};

class GatedCommitStore final : public store::StateStore {
 public:
  explicit GatedCommitStore(Gate& g) : gate_(g), inner_(store::NewMemoryStateStore()) {}
  Result<std::vector<api::JobId>> Commit(const store::WriteBatch& b) override {
    {
      std::unique_lock lock(gate_.mu);
      ++gate_.waiting;
      gate_.cv.notify_all();
      gate_.cv.wait(lock, [&] { return !gate_.hold; });
      --gate_.waiting;
    }
    return inner_->Commit(b);
  }
  Result<api::Job> GetJob(api::JobId id) override { return inner_->GetJob(id); }
  Result<std::vector<api::Job>> LoadJobs() override { return inner_->LoadJobs(); }
  Result<std::vector<api::Node>> LoadNodes() override { return inner_->LoadNodes(); }
  Result<std::optional<std::string>> GetMeta(const std::string& k) override { return inner_->GetMeta(k); }
  Result<void> AppendAudit(const std::vector<api::AuditEntry>& e) override { return inner_->AppendAudit(e); }
  Result<std::vector<api::AuditEntry>> QueryAudit(const store::AuditQuery& q) override {
    return inner_->QueryAudit(q);
  }
  Result<int64_t> TrimAudit(int64_t before_ms, int64_t max_rows) override {
    return inner_->TrimAudit(before_ms, max_rows);
  }

 private:
  Gate& gate_;
  std::unique_ptr<store::StateStore> inner_;
};

api::JobSpec OneNode(const std::string& name) {
  api::JobSpec s;
  s.name = name;
  s.user = "alice";
  s.command = {"train"};
  s.nodes = 1;
  s.gpus_per_node = 1;
  return s;
}

class HeartbeatCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadConfig config;
    config.advertise_url = "http://127.0.0.1:1";
    config.timing.failure_timeout_ms = 60'000;
    auto c = Cluster::Open(config, std::make_unique<GatedCommitStore>(gate_));
    ASSERT_TRUE(c.has_value()) << c.error().message;
    cluster_ = std::move(*c);
    for (const char* n : {"n1", "n2"}) ASSERT_TRUE(cluster_->Register(Reg(n)).has_value());
  }
  void TearDown() override { Release(); }

  // Holds every commit from now on, then starts `what` on a thread and returns once its
  // commit waits at the gate.
  std::future<void> HeldCommit(std::function<void()> what) {
    {
      std::lock_guard lock(gate_.mu);
      gate_.hold = true;
    }
    auto f = std::async(std::launch::async, std::move(what));
    std::unique_lock lock(gate_.mu);
    EXPECT_TRUE(gate_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate_.waiting > 0; }))
        << "the commit never reached the store";
    return f;
  }
  void Release() {
    {
      std::lock_guard lock(gate_.mu);
      gate_.hold = false;
    }
    gate_.cv.notify_all();
  }

  Result<api::HeartbeatReply> Beat(const std::string& node, std::vector<api::TaskReport> tasks) {
    api::Heartbeat hb;
    hb.incarnation = "inc1";
    hb.applied_version = applied_[node];
    hb.tasks = std::move(tasks);
    auto reply = cluster_->Heartbeat(node, hb);
    if (reply) applied_[node] = reply->version;
    return reply;
  }

  Gate gate_;
  std::unique_ptr<Cluster> cluster_;
  std::map<std::string, int64_t> applied_;
};

TEST_F(HeartbeatCommitTest, ARepeatedReplyGoesOutWhileAnotherCommitIsHeld) {
  auto job = cluster_->Submit(OneNode("a"));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(cluster_->Schedule(), 1);
  const std::string busy = cluster_->GetJob(job->id)->allocation.nodes.at(0).node;
  const std::string idle = busy == "n1" ? "n2" : "n1";
  // Each agent hears its tasks and reports them running; the next replies repeat the last.
  auto first = Beat(busy, {});
  ASSERT_TRUE(first.has_value());
  const std::vector<api::TaskReport> running = Running(*first);
  ASSERT_EQ(running.size(), 1u);
  ASSERT_TRUE(Beat(busy, running).has_value());
  ASSERT_TRUE(Beat(idle, {}).has_value());

  // Another record's commit (a submission) is held at the store.
  auto submitted = HeldCommit([&] { EXPECT_TRUE(cluster_->Submit(OneNode("b")).has_value()); });
  // Replies that repeat the last ones go out meanwhile: the agents hear nothing new. (A
  // reply held behind the commit fails here, after 5 s, rather than hanging the test.)
  for (int i = 0; i < 3; ++i) {
    auto beats = std::async(std::launch::async, [&] {
      auto on_busy = Beat(busy, running);
      ASSERT_TRUE(on_busy.has_value()) << on_busy.error().message;
      EXPECT_EQ(on_busy->tasks.size(), 1u);
      auto on_idle = Beat(idle, {});
      ASSERT_TRUE(on_idle.has_value()) << on_idle.error().message;
      EXPECT_TRUE(on_idle->tasks.empty());
    });
    if (beats.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ADD_FAILURE() << "a heartbeat that tells the agent nothing new waited for another record's commit";
      Release();
      beats.get();
      submitted.get();
      return;
    }
    beats.get();
  }
  EXPECT_EQ(submitted.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the submission's commit was not held";
  Release();
  submitted.get();
}

TEST_F(HeartbeatCommitTest, ANewTaskOrAnExitWaitsForItsCommit) {
  auto job = cluster_->Submit(OneNode("a"));
  ASSERT_TRUE(job.has_value());
  ASSERT_TRUE(Beat("n1", {}).has_value());
  ASSERT_TRUE(Beat("n2", {}).has_value());

  // The scheduling pass's commit (the job placed) is held: the agent that gets the task
  // hears of it only once the placement is durable.
  auto scheduled = HeldCommit([&] { EXPECT_EQ(cluster_->Schedule(), 1); });
  const std::string busy = cluster_->GetJob(job->id)->allocation.nodes.at(0).node;
  const std::string idle = busy == "n1" ? "n2" : "n1";
  ASSERT_TRUE(Beat(idle, {}).has_value()) << "a reply with nothing new waited for the commit";
  auto told = std::async(std::launch::async, [&] { return Beat(busy, {}); });
  EXPECT_EQ(told.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the task went out before its placement was durable";
  Release();
  scheduled.get();
  auto reply = told.get();
  ASSERT_TRUE(reply.has_value()) << reply.error().message;
  const std::vector<api::TaskReport> running = Running(*reply);
  ASSERT_EQ(running.size(), 1u);
  ASSERT_TRUE(Beat(busy, running).has_value());

  // An exit is acknowledged only once stored, while another commit is held.
  auto submitted = HeldCommit([&] { EXPECT_TRUE(cluster_->Submit(OneNode("b")).has_value()); });
  api::TaskReport exited = running[0];
  exited.running = false;
  exited.exit_code = 0;
  auto acked = std::async(std::launch::async, [&] { return Beat(busy, {exited}); });
  EXPECT_EQ(acked.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "an exit was acknowledged before it was stored";
  Release();
  submitted.get();
  auto ack = acked.get();
  ASSERT_TRUE(ack.has_value()) << ack.error().message;
  ASSERT_EQ(ack->acked.size(), 1u);
  EXPECT_EQ(cluster_->GetJob(job->id)->state, api::JobState::kSucceeded);
}

}  // namespace
}  // namespace cohort::head
