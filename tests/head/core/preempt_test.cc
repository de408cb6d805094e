// Preemption through the head's core: a team borrows idle GPUs, the owner's job reclaims
// them. The victim goes drain --now's way (asked to checkpoint, moved at the checkpoint or
// at the grace deadline), is requeued as a move that never counts against max_restarts,
// and its preemption is recorded with the reason and how it ended. The preemptor is
// nominated and starts once the GPUs are free; a job that just started is not preempted.
#include "core_test_util.h"
#include "head/core/job_control.h"
#include "head/core/preempt.h"
#include "head/core/shares.h"
#include "head/core/teams.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

constexpr int64_t kMinRuntime = 60'000;
constexpr int64_t kGrace = 30'000;

class PreemptCoreTest : public CoreTest {
 protected:
  void SetUp() override {
    ctx_.shares.preemption.min_runtime_ms = kMinRuntime;
    ctx_.shares.preempt_grace_ms = kGrace;
    Register(Reg("n1", 1));
    Register(Reg("n2", 1));
    // "lab" owns the cluster's 2 GPUs; "ml" has no quota and borrows without limit.
    api::Team lab;
    lab.name = "lab";
    lab.quota_gpus = 2;
    lab.borrow_limit_gpus = 0;
    ASSERT_TRUE(CreateTeam(state_, ctx_, lab, now_).has_value());
    api::Team ml;
    ml.name = "ml";
    ASSERT_TRUE(CreateTeam(state_, ctx_, ml, now_).has_value());

    api::JobSpec s = Spec(2, 1, /*max_restarts=*/0);
    s.team = "ml";
    s.checkpoint_signal = "USR1";
    borrower_ = Submit(s);
    ASSERT_EQ(Pass(), 1);
    ASSERT_EQ(Job(borrower_).state, JobState::kRunning);
    Beat("n1", {Running(borrower_, 0, Job(borrower_).allocation.nodes[0].node == "n1" ? 0 : 1, {0})});
    Beat("n2", {Running(borrower_, 0, Job(borrower_).allocation.nodes[0].node == "n2" ? 0 : 1, {0})});
  }

  api::JobId SubmitOwner() {
    api::JobSpec s = Spec(1, 1);
    s.team = "lab";
    return Submit(s);
  }

  api::JobId borrower_ = 0;
};

// After a restart a node takes no work before its first heartbeat; its free GPUs are not
// a reason to preempt a borrower elsewhere meanwhile: preemption waits for every node.
TEST_F(CoreTest, AfterARestartNoJobIsPreemptedBeforeEveryNodeHasReportedIn) {
  ctx_.shares.preemption.min_runtime_ms = kMinRuntime;
  ctx_.shares.preempt_grace_ms = kGrace;
  Register(Reg("n1", 1));
  api::Team lab;
  lab.name = "lab";
  lab.quota_gpus = 2;
  lab.borrow_limit_gpus = 0;
  ASSERT_TRUE(CreateTeam(state_, ctx_, lab, now_).has_value());
  api::Team ml;
  ml.name = "ml";
  ASSERT_TRUE(CreateTeam(state_, ctx_, ml, now_).has_value());
  api::JobSpec s = Spec(1, 1);
  s.team = "ml";
  const api::JobId borrower = Submit(s);
  ASSERT_EQ(Pass(), 1);
  Register(Reg("n2", 1));  // free
  Advance(kMinRuntime + 1);

  std::vector<api::Job> jobs;
  for (const auto& [id, job] : state_.jobs) jobs.push_back(*api::JobFromJson(api::ToJson(job)));
  std::vector<api::Node> nodes;
  for (const auto& [name, node] : state_.nodes) nodes.push_back(node);
  const auto teams = state_.shares.teams;
  state_ = LoadState(std::move(nodes), std::move(jobs), now_);
  state_.shares.teams = teams;
  RebuildUsage(state_, ctx_, now_);
  Beat("n1", {Running(borrower, 0, 0, {0})});  // n2 has not reported in yet

  s.team = "lab";
  const api::JobId owner = Submit(s);
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(borrower).move.has_value()) << "preempted while n2's GPU was about to be free";
  Beat("n2");
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(owner).state, JobState::kRunning);
  EXPECT_EQ(Job(owner).allocation.nodes[0].node, "n2");
  EXPECT_FALSE(Job(borrower).move.has_value());
}

TEST_F(PreemptCoreTest, TheOwnerReclaimsBorrowedGpusThroughACheckpointAndTheVictimIsRequeued) {
  Advance(kMinRuntime + 1);
  ProgressPoint p;
  p.step = 40;
  p.checkpoint_step = 30;
  progress_[{borrower_, 0}] = p;
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0) << "the GPUs are not free until the victim stops";

  // The victim is asked to checkpoint, past what it reported, within the grace.
  const api::Job& victim = Job(borrower_);
  ASSERT_EQ(victim.state, JobState::kRunning);
  ASSERT_TRUE(victim.move.has_value());
  EXPECT_EQ(victim.move->preempted_for, owner);
  EXPECT_EQ(victim.move->baseline_checkpoint, 40);
  EXPECT_EQ(victim.move->deadline_ms, now_.unix_ms + kGrace);
  ASSERT_EQ(victim.preemptions.size(), 1u);
  const api::PreemptionRecord& rec = victim.preemptions[0];
  EXPECT_EQ(rec.kind, "reclaim");
  EXPECT_EQ(rec.by_job, owner);
  EXPECT_EQ(rec.by_team, "lab");
  EXPECT_EQ(rec.attempt, 0);
  EXPECT_EQ(rec.ended_ms, 0);
  EXPECT_NE(rec.reason.find("ml"), std::string::npos) << rec.reason;
  EXPECT_TRUE(fx_.jobs_to_store.contains(borrower_));
  EXPECT_TRUE(state_.shares.nominated.contains(owner));
  api::HeartbeatReply reply = Beat("n1", {Running(borrower_, 0, 0, {0})});
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(reply.tasks[0].checkpoint_requested) << "the agent must deliver the checkpoint signal";

  // A second pass while the victim checkpoints preempts nothing more.
  Advance(1000);
  EXPECT_EQ(Pass(), 0);
  EXPECT_EQ(Job(borrower_).preemptions.size(), 1u);

  // The checkpoint arrives: the victim moves, requeued without a restart counted.
  Advance(1500);
  ProgressResult r = OnProgress(state_, ctx_, borrower_, 0, 45, now_);
  EXPECT_FALSE(r.checkpoint);
  const api::Job& moved = Job(borrower_);
  EXPECT_EQ(moved.state, JobState::kPending);
  EXPECT_EQ(moved.attempt, 1);
  EXPECT_EQ(moved.moves, 1) << "a preemption must not count against max_restarts (0 here)";
  EXPECT_EQ(moved.reason, fmt::format("moved: preempted for job {} ({}); checkpoint at step 45 written 2.5s after "
                                      "the request",
                                      owner, rec.reason));
  ASSERT_EQ(moved.preemptions.size(), 1u);
  EXPECT_EQ(moved.preemptions[0].ended_ms, now_.unix_ms);
  EXPECT_EQ(moved.preemptions[0].outcome, "checkpoint at step 45 written 2.5s after the request");

  // The agents confirm the old attempt's tasks are gone; the owner starts, the borrower
  // waits for two free GPUs and does not take them back from the owner.
  Beat("n1", {Exited(borrower_, 0, 0, 143)});
  Beat("n2", {Exited(borrower_, 0, 1, 143)});
  Beat("n1");
  Beat("n2");
  Advance(1000);
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(owner).state, JobState::kRunning);
  EXPECT_EQ(Job(borrower_).state, JobState::kPending);
  Advance(kMinRuntime + 1);
  EXPECT_EQ(Pass(), 0);
  EXPECT_TRUE(Job(owner).preemptions.empty()) << "a victim never preempts the job it gave way to";
  EXPECT_EQ(Job(owner).state, JobState::kRunning);
}

TEST_F(PreemptCoreTest, AVictimSilentPastTheGraceIsMovedAnyway) {
  Advance(kMinRuntime + 1);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value());
  Advance(kGrace + 1);
  Beat("n1", {Running(borrower_, 0, 0, {0})});
  Beat("n2", {Running(borrower_, 0, 1, {0})});
  fx_ = CheckLiveness(state_, ctx_, now_);  // moves overdue jobs, as after drain --now
  const api::Job& moved = Job(borrower_);
  EXPECT_EQ(moved.state, JobState::kPending);
  EXPECT_EQ(moved.moves, 1);
  ASSERT_EQ(moved.preemptions.size(), 1u);
  EXPECT_EQ(moved.preemptions[0].outcome,
            "no new checkpoint reported within 30.0s (work since the last checkpoint is redone)");
  EXPECT_NE(moved.reason.find(fmt::format("preempted for job {}", owner)), std::string::npos) << moved.reason;
}

// A victim whose task ends on its checkpoint signal (SIGTERM's or SIGUSR1's default
// action, or a script that checkpoints and exits, as Slurm jobs do on --signal) did what
// it was asked: the attempt ends as the preemption's move, requeued without a restart
// counted (max_restarts is 0 here: it used to end FAILED), and the record says how.
TEST_F(PreemptCoreTest, AVictimKilledByItsCheckpointSignalIsRequeuedNotFailed) {
  Advance(kMinRuntime + 1);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value());
  Advance(2000);
  const int rank = Job(borrower_).allocation.nodes[0].node == "n1" ? 0 : 1;
  api::TaskReport killed = Exited(borrower_, 0, rank, 0);
  killed.signal = 10;  // SIGUSR1, the borrower's checkpoint signal
  Beat("n1", {killed});
  const api::Job& moved = Job(borrower_);
  EXPECT_EQ(moved.state, JobState::kPending) << moved.reason;
  EXPECT_EQ(moved.attempt, 1);
  EXPECT_EQ(moved.moves, 1) << "a preemption must not count against max_restarts (0 here)";
  const std::string stopped = fmt::format("it stopped 2.0s after the request: rank {} on n1 was killed by signal 10", rank);
  ASSERT_EQ(moved.preemptions.size(), 1u);
  EXPECT_EQ(moved.preemptions[0].ended_ms, now_.unix_ms);
  EXPECT_EQ(moved.preemptions[0].outcome, stopped);
  EXPECT_EQ(moved.reason, fmt::format("moved: preempted for job {} ({}); {}", owner, moved.preemptions[0].reason,
                                      stopped));
  ASSERT_FALSE(moved.history.empty());
  EXPECT_EQ(moved.history[0].end_reason,
            fmt::format("preempted for job {} ({}); {}", owner, moved.preemptions[0].reason, stopped));
}

// The job a victim gives way to is cancelled while the victim checkpoints: nothing needs
// its GPUs any more, so the next pass (the queue now empty) withdraws the move and the
// victim keeps running past the grace; its record says why. It used to be stopped and
// requeued at the grace deadline anyway, losing its work for no one.
TEST_F(PreemptCoreTest, AVictimKeepsRunningWhenItsPreemptorIsCancelled) {
  Advance(kMinRuntime + 1);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value());
  Advance(1000);
  ASSERT_TRUE(Cancel(state_, ctx_, owner, now_).has_value());
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(borrower_).move.has_value()) << "the move is withdrawn";
  EXPECT_TRUE(fx_.jobs_to_store.contains(borrower_)) << "and stored";
  ASSERT_EQ(Job(borrower_).preemptions.size(), 1u);
  EXPECT_EQ(Job(borrower_).preemptions[0].ended_ms, now_.unix_ms);
  EXPECT_EQ(Job(borrower_).preemptions[0].outcome,
            fmt::format("withdrawn: job {} left the queue (CANCELLED) before it was moved", owner));
  EXPECT_FALSE(state_.shares.nominated.contains(owner));
  api::HeartbeatReply reply = Beat("n1", {Running(borrower_, 0, 0, {0})});
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_FALSE(reply.tasks[0].checkpoint_requested);
  Advance(kGrace + 1);
  Beat("n1", {Running(borrower_, 0, 0, {0})});
  Beat("n2", {Running(borrower_, 0, 1, {0})});
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(Job(borrower_).state, JobState::kRunning);
  EXPECT_EQ(Job(borrower_).attempt, 0);
}

// Held while its victim checkpoints, the preemptor will not start: the victim keeps
// running. Released, it is an ordinary pending job again and preempts anew.
TEST_F(PreemptCoreTest, AVictimKeepsRunningWhenItsPreemptorIsHeld) {
  Advance(kMinRuntime + 1);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value());
  Advance(1000);
  ASSERT_TRUE(Hold(state_, ctx_, owner, "bob", now_).has_value());
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(borrower_).move.has_value());
  EXPECT_FALSE(Job(owner).nomination.has_value());
  ASSERT_EQ(Job(borrower_).preemptions.size(), 1u);
  EXPECT_EQ(Job(borrower_).preemptions[0].outcome, fmt::format("withdrawn: job {} was held before it was moved", owner));
  Advance(1000);
  ASSERT_TRUE(Release(state_, ctx_, owner, now_).has_value());
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value()) << "released, it preempts again";
  EXPECT_EQ(Job(borrower_).move->preempted_for, owner);
  EXPECT_EQ(Job(borrower_).preemptions.size(), 2u);
}

// A head restart keeps the nomination (no second round of preemption for the same job)
// and the victims' last checkpoint times: both travel in the stored job records.
TEST_F(PreemptCoreTest, ARestartKeepsTheNominationAndTheCheckpointTimes) {
  Register(Reg("n3", 1));
  api::JobSpec s = Spec(1, 1);
  s.team = "ml";
  const api::JobId other = Submit(s);
  ASSERT_EQ(Pass(), 1);
  Beat("n3", {Running(other, 0, 0, {0})});
  Advance(kMinRuntime + 1);
  // The borrower checkpoints now: it has less work at risk than `other` (which never did).
  Advance(1000);
  ProgressResult r = OnProgress(state_, ctx_, borrower_, 0, 30, now_);
  EXPECT_TRUE(r.effects.jobs_to_store.contains(borrower_)) << "the checkpoint time is stored with the job";
  const int64_t checkpointed = now_.unix_ms;
  Advance(1000);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value()) << "the borrower loses 2 GPU-s, the other job 62";
  ASSERT_TRUE(Job(owner).nomination.has_value());
  EXPECT_TRUE(fx_.jobs_to_store.contains(owner)) << "the nomination is stored with the preemptor";
  const std::vector<std::string> freed = Job(owner).nomination->nodes;
  ASSERT_EQ(freed.size(), 1u);

  // Restart: every record goes through its stored form.
  std::vector<api::Job> jobs;
  for (const auto& [id, job] : state_.jobs) {
    auto back = api::JobFromJson(api::ToJson(job));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    jobs.push_back(std::move(*back));
  }
  std::vector<api::Node> nodes;
  for (const auto& [name, node] : state_.nodes) nodes.push_back(node);
  const auto teams = state_.shares.teams;
  state_ = LoadState(std::move(nodes), std::move(jobs), now_);
  state_.shares.teams = teams;
  RebuildUsage(state_, ctx_, now_);

  ASSERT_TRUE(Job(owner).nomination.has_value());
  EXPECT_EQ(Job(owner).nomination->nodes, freed);
  // The nodes report in: until then a restarted head places and preempts nothing.
  const bool n1_first = Job(borrower_).allocation.nodes[0].node == "n1";
  Beat("n1", {Running(borrower_, 0, n1_first ? 0 : 1, {0})});
  Beat("n2", {Running(borrower_, 0, n1_first ? 1 : 0, {0})});
  Beat("n3", {Running(other, 0, 0, {0})});
  ASSERT_TRUE(Job(borrower_).last_checkpoint.has_value());
  EXPECT_EQ(Job(borrower_).last_checkpoint->reported_ms, checkpointed);
  EXPECT_EQ(Job(borrower_).last_checkpoint->step, 30);
  Advance(1000);
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(other).move.has_value()) << "the nominated owner waits for its victim; it preempts no more";
  EXPECT_TRUE(Job(other).preemptions.empty());
  EXPECT_NE(state_.pending_reasons.at(owner).find("waiting for preempted job(s)"), std::string::npos)
      << state_.pending_reasons.at(owner);
}

TEST_F(PreemptCoreTest, AJobWithinItsMinimumRuntimeIsNotPreempted) {
  Advance(kMinRuntime - 1000);
  const api::JobId owner = SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(borrower_).move.has_value());
  EXPECT_TRUE(Job(borrower_).preemptions.empty());
  EXPECT_EQ(Job(owner).state, JobState::kPending);
  // Once the minimum runtime has passed, it is.
  Advance(2000);
  EXPECT_EQ(Pass(), 0);
  ASSERT_TRUE(Job(borrower_).move.has_value());
  EXPECT_EQ(Job(borrower_).move->preempted_for, owner);
}

TEST_F(PreemptCoreTest, NoPreemptionWhenItIsOff) {
  ctx_.shares.preemption.enabled = false;
  Advance(kMinRuntime + 1);
  SubmitOwner();
  EXPECT_EQ(Pass(), 0);
  EXPECT_FALSE(Job(borrower_).move.has_value());
}

}  // namespace
}  // namespace cohort::head::core::testing
