// A pending preemption across a head crash (issue 17), with a real head and agent: team
// "ml" borrows two of a node's four GPUs; team "lab" (quota 4) submits a job that needs
// all four, which nominates ml's job as its victim (asked to checkpoint; it never reports
// one, so the head waits out the grace). The head is killed (SIGKILL) and restarted while
// the grace runs. After the restart the nomination still holds the node: a short job of
// ml that would fit in the two free GPUs does not start there; at the grace deadline the
// victim is stopped and requeued (a move: attempt 1, not failed, not a restart), and the
// preemptor starts on the node.
#include <gtest/gtest.h>

#include "harness.h"

namespace cohort::testing {
namespace {

const std::vector<std::string> kHeadFlags = {"--preempt-min-runtime", "0s", "--preempt-grace", "8s"};

int64_t IdOf(const json& j) { return j.value("id", int64_t{0}); }

TEST(PreemptionRestart, ANominationHoldsItsNodeAcrossAHeadKillAndItsVictimIsRequeued) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead(0, kHeadFlags));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 4));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  auto lab = c.client().Post("/v1/teams", json{{"name", "lab"}, {"quota", {{"gpus", 4}}}, {"borrow_limit", {{"gpus", 0}}}});
  ASSERT_TRUE(lab.has_value()) << lab.error().message;
  auto ml = c.client().Post("/v1/teams", json{{"name", "ml"}});  // quota 0, borrows without limit
  ASSERT_TRUE(ml.has_value()) << ml.error().message;

  const int64_t victim = IdOf(c.Submit({{"command", {"sleep", "600"}}, {"gpus_per_node", 2}, {"team", "ml"}}));
  ASSERT_GT(victim, 0);
  c.WaitForState(victim, "RUNNING");
  const int64_t owner = IdOf(c.Submit({{"command", {"sleep", "600"}}, {"gpus_per_node", 4}, {"team", "lab"}}));
  ASSERT_GT(owner, 0);
  json nominated;
  ASSERT_TRUE(WaitUntil([&] {
    nominated = c.Job(owner);
    return nominated.contains("nomination") && c.Job(victim).value("preemptions", json::array()).size() == 1;
  }, std::chrono::seconds(10))) << nominated.dump(2);
  EXPECT_EQ(nominated["nomination"]["nodes"], json::array({"n1"})) << nominated.dump(2);
  EXPECT_EQ(c.Job(victim).value("state", ""), "RUNNING") << "it has the grace to checkpoint";

  // The head dies mid-preemption and comes back on the same state directory and port.
  c.KillHead(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(c.StartHead(c.port(), kHeadFlags));
  json after = c.Job(owner);
  EXPECT_TRUE(after.contains("nomination")) << "the nomination is kept with the job: " << after.dump(2);
  EXPECT_EQ(c.Job(victim).value("state", ""), "RUNNING") << c.Job(victim).dump(2);

  // A short job that fits in n1's two free GPUs, of a team that may borrow them: the
  // node is held for the nominated job, so it waits. Backfill alone would start it: it
  // ends (1 s) before the owner's reservation, which starts at the victim's grace deadline.
  const int64_t small = IdOf(c.Submit(
      {{"command", {"sleep", "600"}}, {"gpus_per_node", 1}, {"time_limit_s", 1}, {"team", "ml"}}));
  ASSERT_GT(small, 0);
  // (Until n1's first heartbeat to the new head, no job is placed there at all: its reason
  // says n1 is unheard since the restart. The hold is what is tested, after that.)
  json waiting;
  ASSERT_TRUE(WaitUntil([&] {
    waiting = c.Job(small);
    const std::string why = waiting.value("reason", "");
    return why != "waiting for the scheduler" && !why.empty() && why.find("unheard") == std::string::npos &&
           c.Job(owner).value("reason", "").find("unheard") == std::string::npos;
  }, std::chrono::seconds(10))) << waiting.dump(2);
  EXPECT_EQ(waiting.value("state", ""), "PENDING") << "a job started on the node held for job " << owner << ": "
                                                  << waiting.dump(2);
  // The owner's reason says whom it waits for, and where and when it is reserved.
  const std::string reason = c.Job(owner).value("reason", "");
  EXPECT_EQ(reason.find("waiting for preempted job(s) " + std::to_string(victim)), 0u) << reason;
  EXPECT_NE(reason.find("; reserved to start in "), std::string::npos) << reason;
  EXPECT_TRUE(reason.ends_with(" on n1")) << reason;

  // At the grace deadline the victim stops and is requeued; the owner starts on n1.
  json started = c.WaitForState(owner, "RUNNING", std::chrono::seconds(20));
  ASSERT_EQ(started["allocation"]["nodes"].size(), 1u) << started.dump(2);
  EXPECT_EQ(started["allocation"]["nodes"][0].value("node", ""), "n1") << started.dump(2);
  json requeued = c.Job(victim);
  EXPECT_EQ(requeued.value("state", ""), "PENDING") << "requeued, never failed: " << requeued.dump(2);
  EXPECT_EQ(requeued.value("attempt", -1), 1) << requeued.dump(2);
  EXPECT_EQ(requeued.value("moves", -1), 1) << "a preemption is a move, not a restart: " << requeued.dump(2);
  ASSERT_EQ(requeued["preemptions"].size(), 1u) << requeued.dump(2);
  EXPECT_EQ(requeued["preemptions"][0].value("by_job", int64_t{0}), owner) << requeued.dump(2);
  EXPECT_GT(requeued["preemptions"][0].value("ended_ms", int64_t{0}), 0) << requeued.dump(2);
  EXPECT_FALSE(c.Job(owner).contains("nomination")) << "started: no longer nominated";
  EXPECT_EQ(c.Job(small).value("state", ""), "PENDING") << "the owner holds all four GPUs";

  for (int64_t id : {owner, victim, small}) {
    auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
    EXPECT_TRUE(r.has_value()) << r.error().message;
  }
}

}  // namespace
}  // namespace cohort::testing
