// Quotas with borrowing and preemption with real agents and a real `cohort train` job
// (issue 17): team "ml" has no quota and borrows the cluster's two idle GPUs for a 2-node
// training job; team "lab" owns them (quota 2) and submits a job. The borrower is asked to
// checkpoint (its checkpoint signal and the progress reply), preempted at that checkpoint,
// requeued without a restart counted, waits while the owner's job runs, then resumes from
// exactly that checkpoint: every step is in the loss record exactly once. `cohort show`
// shows the preemption with its reason and outcome; `cohort shares` shows the teams.
#include <gtest/gtest.h>

#include <regex>

#include "fault_cluster.h"

namespace cohort::testing {
namespace {

struct Cli {
  bool ok = false;
  std::string out;
};

// Runs `cohort --head URL ARGS...` (the admin token and CA come from the environment
// SpawnTestHead set).
Cli RunCohort(FaultCluster& c, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {COHORT_BINARY, "--head", c.url()};
  argv.insert(argv.end(), args.begin(), args.end());
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = c.dir() + "/cli.out";
  o.stderr_path = c.dir() + "/cli.out";
  std::filesystem::remove(o.stdout_path);
  auto p = Subprocess::Spawn(o);
  if (!p) return {false, p.error().message};
  auto st = p->Wait();
  return {st && st->Success(), ReadFile(o.stdout_path)};
}

int64_t AttemptEnd(const json& job, int attempt) {
  for (const auto& h : job.value("history", json::array())) {
    if (h.value("attempt", -1) == attempt) return h.value("end_ms", int64_t{0});
  }
  return 0;
}

TEST(Preemption, TheOwnerReclaimsBorrowedGpusAndTheTrainingJobResumesFromItsCheckpoint) {
  FaultCluster c;
  // No minimum runtime, so the test need not wait; a grace long enough for a checkpoint.
  ASSERT_NO_FATAL_FAILURE(c.StartHead({"--preempt-min-runtime", "0s", "--preempt-grace", "60s"}));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node-a"));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node-b"));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(2));
  std::printf("cluster: %s\n", c.layout().c_str());

  Cli lab = RunCohort(c, {"team", "create", "lab", "--quota", "gpus=2", "--borrow-limit", "0", "--weight", "2"});
  ASSERT_TRUE(lab.ok) << lab.out;
  Cli ml = RunCohort(c, {"team", "create", "ml"});  // quota 0, borrowing unlimited
  ASSERT_TRUE(ml.ok) << ml.out;

  TrainJob t;
  TrainJobSpec spec;
  // A periodic checkpoint every 100 steps, so that the requested one is told from it; the
  // owner comes after the first (a recorded step the preemption must not lose). Steps: the
  // request is answered within a progress report or two; 300 leave attempt 0 ~200.
  spec.steps = 300;
  spec.checkpoint_every = 100;
  spec.checkpoint_signal = "USR1";
  spec.checkpoints_on_request = true;
  t = SubmitTraining(c, spec, "ml");
  ASSERT_GT(t.id, 0);
  ASSERT_NO_FATAL_FAILURE(WaitForRecordedStep(c, t, spec.checkpoint_every));
  Cli shares = RunCohort(c, {"shares"});
  ASSERT_TRUE(shares.ok) << shares.out;
  EXPECT_TRUE(std::regex_search(shares.out, std::regex("\n\\s*ml\\s.*\\b2\\b"))) << "ml holds 2 borrowed GPUs:\n"
                                                                                    << shares.out;
  const int64_t recorded = LastRecordedStep(t.record);

  // The owner needs one of its GPUs back (for a second: the borrower waits as long as it
  // runs, whatever that is).
  json owner = c.Submit({{"command", {"/bin/sleep", "1"}}, {"nodes", 1}, {"gpus_per_node", 1}, {"team", "lab"}});
  const int64_t owner_id = owner.value("id", int64_t{0});
  ASSERT_GT(owner_id, 0) << owner.dump();

  json done_owner = c.WaitForState(owner_id, "SUCCEEDED", std::chrono::seconds(90));
  json moved = c.Job(t.id);
  ASSERT_GE(moved.value("attempt", 0), 1) << moved.dump(2);
  EXPECT_EQ(moved.value("moves", 0), 1) << "a preemption is a move, never a restart: " << moved.dump(2);
  const int64_t step = MovedAtStep(moved, 0);
  ASSERT_GT(step, recorded) << "the preemption did not wait for a new checkpoint: " << moved.dump(2);
  EXPECT_NE(step % spec.checkpoint_every, 0) << "expected the requested checkpoint, not a periodic one (this can "
                                                 "only fail by a 1-in-100 coincidence): "
                                              << moved.dump(2);
  EXPECT_GE(done_owner.value("start_ms", int64_t{0}), AttemptEnd(moved, 0))
      << "the owner started before the borrower gave its GPUs back";
  ASSERT_EQ(moved["preemptions"].size(), 1u) << moved.dump(2);
  const json& rec = moved["preemptions"][0];
  EXPECT_EQ(rec.value("kind", ""), "reclaim") << rec.dump();
  EXPECT_EQ(rec.value("by_job", int64_t{0}), owner_id) << rec.dump();
  EXPECT_EQ(rec.value("by_team", ""), "lab") << rec.dump();
  EXPECT_EQ(rec.value("attempt", -1), 0) << rec.dump();
  EXPECT_NE(rec.value("outcome", "").find("checkpoint at step " + std::to_string(step)), std::string::npos)
      << rec.dump();

  // The borrower resumes from that checkpoint once the owner's job is done, and finishes.
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(180));
  EXPECT_EQ(done.value("attempt", -1), 1) << done.dump(2);
  EXPECT_EQ(done.value("moves", 0), 1) << done.dump(2);
  auto first = ExpectConsistentRecord(t, 2, recorded);
  ExpectResumedFromTheRequestedCheckpoint(c, t, 1, step, first);
  EXPECT_NE(c.Logs(t.id, 0, 0).find("SIGUSR1"), std::string::npos) << "the checkpoint signal reached the trainer:\n"
                                                                     << c.Logs(t.id, 0, 0);

  Cli show = RunCohort(c, {"show", std::to_string(t.id)});
  ASSERT_TRUE(show.ok) << show.out;
  EXPECT_NE(show.out.find("preemptions:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("reclaim"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("checkpoint at step " + std::to_string(step)), std::string::npos) << show.out;
  EXPECT_TRUE(c.Job(owner_id).value("preemptions", json::array()).empty()) << "the owner was never preempted back";
}

// Bad team input through the CLI and the head: clear errors, and the teams as they were;
// `cohort queue --priority`; the teams survive a head restart.
TEST(Preemption, BadTeamInputIsRefusedAndChangesNothing) {
  FaultCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node-a", 2));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  ASSERT_TRUE(RunCohort(c, {"team", "create", "ml", "--quota", "gpus=2", "--weight", "2"}).ok);
  const Cli before = RunCohort(c, {"team", "ls"});
  ASSERT_TRUE(before.ok) << before.out;

  // A running job of ml holds 2 GPUs.
  json job = c.Submit({{"command", {"/bin/sleep", "600"}}, {"nodes", 1}, {"gpus_per_node", 2}, {"team", "ml"}});
  const int64_t id = job.value("id", int64_t{0});
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"team", "create", "cv", "--quota", "gpus=-1"}, "quota"},
      {{"team", "create", "cv", "--quota", "gpus=1.5"}, "quota"},
      {{"team", "create", "cv", "--quota", "cpus=4"}, "quota"},
      {{"team", "create", "cv", "--borrow-limit", "-2"}, "borrow"},
      {{"team", "create", "cv", "--weight", "0"}, "weight"},
      {{"team", "set", "nope", "--quota", "gpus=4"}, "nope"},
      {{"team", "set", "ml", "--quota", "gpus=1"}, "below the 2 GPUs"},
      {{"team", "set", "ml", "--weight", "0"}, "weight"},
      {{"team", "rm", "ml"}, "pending or running"},
  };
  for (const auto& [args, part] : bad) {
    const Cli r = RunCohort(c, args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_FALSE(r.ok) << "cohort " << cmd << "was accepted:\n" << r.out;
    EXPECT_NE(r.out.find(part), std::string::npos) << "cohort " << cmd << ": the error does not name '" << part
                                                   << "':\n" << r.out;
  }
  // A job naming an unknown team.
  auto unknown = c.client().Post("/v1/jobs", json{{"command", {"/bin/true"}}, {"team", "vision"}});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("unknown team 'vision'"), std::string::npos) << unknown.error().message;

  const Cli after = RunCohort(c, {"team", "ls"});
  ASSERT_TRUE(after.ok) << after.out;
  EXPECT_EQ(after.out, before.out) << "a refused change changed the teams";

  // A second job of ml waits (ml holds the node's 2 GPUs): `cohort queue --priority` shows
  // its factors, like sprio.
  json waiting = c.Submit({{"command", {"/bin/true"}}, {"nodes", 1}, {"gpus_per_node", 1}, {"team", "ml"}});
  const int64_t waiting_id = waiting.value("id", int64_t{0});
  const Cli prio = RunCohort(c, {"queue", "--priority"});
  ASSERT_TRUE(prio.ok) << prio.out;
  EXPECT_NE(prio.out.find("FAIRSHARE"), std::string::npos) << prio.out;
  EXPECT_TRUE(std::regex_search(prio.out, std::regex("\\b" + std::to_string(waiting_id) + "\\s+\\S+\\s+ml\\b")))
      << "job " << waiting_id << " of team ml is not listed:\n" << prio.out;
  // sprio's -j and -u pick rows; queue's other flags do not apply to it.
  json second = c.Submit({{"command", {"/bin/true"}}, {"nodes", 1}, {"gpus_per_node", 1}, {"team", "ml"}});
  const std::regex second_row("\\b" + std::to_string(second.value("id", int64_t{0})) + "\\s+\\S+\\s+ml\\b");
  const std::regex waiting_row("\\b" + std::to_string(waiting_id) + "\\s+\\S+\\s+ml\\b");
  EXPECT_TRUE(std::regex_search(RunCohort(c, {"queue", "--priority"}).out, second_row));
  const Cli one = RunCohort(c, {"queue", "--priority", "-j", std::to_string(waiting_id)});
  ASSERT_TRUE(one.ok) << one.out;
  EXPECT_TRUE(std::regex_search(one.out, waiting_row)) << one.out;
  EXPECT_FALSE(std::regex_search(one.out, second_row)) << "-j named only job " << waiting_id << ":\n" << one.out;
  const Cli nobody = RunCohort(c, {"queue", "--priority", "-u", "nobody"});
  ASSERT_TRUE(nobody.ok) << nobody.out;
  EXPECT_FALSE(std::regex_search(nobody.out, waiting_row)) << nobody.out;
  const Cli mixed = RunCohort(c, {"queue", "--priority", "--state", "RUNNING"});
  EXPECT_FALSE(mixed.ok);
  EXPECT_NE(mixed.out.find("it takes -u and -j"), std::string::npos) << mixed.out;

  // Teams are stored: a head killed and started again has them as they were.
  c.KillHead(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  const Cli restarted = RunCohort(c, {"team", "ls"});
  ASSERT_TRUE(restarted.ok) << restarted.out;
  EXPECT_EQ(restarted.out, before.out) << "the teams changed across a head restart";
  EXPECT_EQ(c.Job(waiting_id).value("spec", json::object()).value("team", ""), "ml");
  auto cancelled = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  EXPECT_TRUE(cancelled.has_value()) << cancelled.error().message;
}

}  // namespace
}  // namespace cohort::testing
