// Job control through the CLI on a real head and agent: hold, update and release a pending
// job, a time limit ending in TIMEOUT, and `cohort history` (sacct) of what ended.
#include <gtest/gtest.h>

#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

TEST(JobControl, HoldUpdateReleaseAndHistoryThroughTheCli) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  json first = c.Submit({{"name", "blocker"}, {"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                         {"gpus_per_node", 1}});
  c.WaitForState(first["id"], "RUNNING");
  json second = c.Submit({{"name", "later"}, {"command", {"true"}}, {"gpus_per_node", 1}});
  const std::string id = std::to_string(second["id"].get<int64_t>());

  auto held = Cohort(c, {"hold", id});
  ASSERT_EQ(held.status.Code(), 0) << held.errors;
  EXPECT_NE(held.output.find("Held job " + id + " (held by "), std::string::npos) << held.output;
  auto queue = Cohort(c, {"queue"});
  EXPECT_NE(queue.output.find("(held by"), std::string::npos) << queue.output;
  auto again = Cohort(c, {"hold", id});
  EXPECT_EQ(again.status.Code(), 1);
  EXPECT_NE(again.errors.find("already held"), std::string::npos) << again.errors;

  auto updated = Cohort(c, {"update", id, "--time-limit", "1d12h", "--priority", "7", "--name", "renamed"});
  ASSERT_EQ(updated.status.Code(), 0) << updated.errors;
  json job = c.Job(second["id"]);
  EXPECT_EQ(job["spec"]["time_limit_s"], 36 * 3600);
  EXPECT_EQ(job["spec"]["priority"], 7);
  EXPECT_EQ(job["spec"]["name"], "renamed");
  EXPECT_EQ(job["held"], true) << "an update keeps the hold";

  // Bad input: exit 2 before anything is sent; a running job: the head says no (1).
  auto nothing = Cohort(c, {"update", id});
  EXPECT_EQ(nothing.status.Code(), 2);
  EXPECT_NE(nothing.errors.find("nothing to update"), std::string::npos) << nothing.errors;
  auto bad_limit = Cohort(c, {"update", id, "--time-limit", "30m1h"});
  EXPECT_EQ(bad_limit.status.Code(), 2);
  EXPECT_NE(bad_limit.errors.find("--time-limit"), std::string::npos) << bad_limit.errors;
  auto running = Cohort(c, {"update", std::to_string(first["id"].get<int64_t>()), "--priority", "1"});
  EXPECT_EQ(running.status.Code(), 1);
  EXPECT_NE(running.errors.find("is RUNNING: only its time limit and name can change now"), std::string::npos) << running.errors;
  // Its time limit may change while it runs (scontrol update TimeLimit=).
  auto longer = Cohort(c, {"update", std::to_string(first["id"].get<int64_t>()), "--time-limit", "3h"});
  EXPECT_EQ(longer.status.Code(), 0) << longer.errors;
  EXPECT_EQ(c.Job(first["id"])["spec"].value("time_limit_s", 0), 3 * 3600);
  EXPECT_EQ(c.Job(first["id"])["state"], "RUNNING");

  // Held, it does not start even with the GPU free.
  std::ofstream(gate).put('\n');
  c.WaitForState(first["id"], "SUCCEEDED");
  json pass = c.Submit({{"command", {"true"}}, {"gpus_per_node", 1}});  // takes the free GPU the held job passed over
  c.WaitForState(pass["id"], "SUCCEEDED");
  EXPECT_EQ(c.Job(second["id"])["state"], "PENDING");
  auto released = Cohort(c, {"release", id});
  ASSERT_EQ(released.status.Code(), 0) << released.errors;
  c.WaitForState(second["id"], "SUCCEEDED");

  json timed = c.Submit({{"name", "slow"}, {"command", {"sleep", "300"}}, {"time_limit_s", 1}});
  c.WaitForState(timed["id"], "TIMEOUT", std::chrono::seconds(15));

  auto history = Cohort(c, {"history", "--since", "1h"});
  ASSERT_EQ(history.status.Code(), 0) << history.errors;
  EXPECT_NE(history.output.find("JOBID"), std::string::npos);
  EXPECT_NE(history.output.find("GPU-HOURS"), std::string::npos);
  for (const char* want : {"blocker", "renamed", "slow", "TIMEOUT", "time limit of 1.0s exceeded"}) {
    EXPECT_NE(history.output.find(want), std::string::npos) << want << " in\n" << history.output;
  }
  auto timeouts = Cohort(c, {"--json", "sacct", "--state", "timeout"});
  ASSERT_EQ(timeouts.status.Code(), 0) << timeouts.errors;
  json list = json::parse(timeouts.output);
  ASSERT_EQ(list["jobs"].size(), 1u) << timeouts.output;
  EXPECT_EQ(list["jobs"][0]["id"], timed["id"]);
  auto future = Cohort(c, {"history", "--until", "2020-01-01T00:00:00Z"});
  ASSERT_EQ(future.status.Code(), 0) << future.errors;
  EXPECT_EQ(future.output.find("blocker"), std::string::npos) << "nothing was submitted before 2020";
  // -j finds a job however many have ended since (the head filters, not the newest -n).
  auto oldest = Cohort(c, {"--json", "history", "-n", "1", "-j", std::to_string(first["id"].get<int64_t>())});
  ASSERT_EQ(oldest.status.Code(), 0) << oldest.errors;
  ASSERT_EQ(json::parse(oldest.output)["jobs"].size(), 1u) << oldest.output;
  EXPECT_EQ(json::parse(oldest.output)["jobs"][0]["id"], first["id"]);
  auto bad_state = Cohort(c, {"history", "--state", "DONE"});
  EXPECT_EQ(bad_state.status.Code(), 2);
  EXPECT_NE(bad_state.errors.find("unknown job state 'DONE'"), std::string::npos) << bad_state.errors;
}

// sbatch's --parsable, --hold and --begin: the id alone on stdout; a job submitted held
// that starts only when released; one that waits for its begin time, which update moves.
TEST(JobControl, SubmitParsableHeldAndWithABeginTime) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  auto held = Cohort(c, {"submit", "--parsable", "-H", "--", "true"});
  ASSERT_EQ(held.status.Code(), 0) << held.errors;
  ASSERT_FALSE(held.output.empty());
  EXPECT_EQ(held.output.find_first_not_of("0123456789"), held.output.size() - 1) << "only the id: " << held.output;
  const int64_t held_id = std::stoll(held.output);
  EXPECT_EQ(c.Job(held_id)["held"], true);
  json blocker = c.Submit({{"command", {"true"}}, {"gpus_per_node", 1}});
  c.WaitForState(blocker["id"], "SUCCEEDED");  // passes ran with the GPU free
  EXPECT_EQ(c.Job(held_id)["state"], "PENDING");
  auto released = Cohort(c, {"release", std::to_string(held_id)});
  ASSERT_EQ(released.status.Code(), 0) << released.errors;
  c.WaitForState(held_id, "SUCCEEDED");

  auto later = Cohort(c, {"submit", "--begin", "now+1h", "--", "true"});
  ASSERT_EQ(later.status.Code(), 0) << later.errors;
  EXPECT_EQ(later.output.find("Submitted job "), 0u) << later.output;
  const int64_t later_id = std::stoll(later.output.substr(14));
  ASSERT_TRUE(WaitUntil([&] { return c.Job(later_id).value("reason", "").starts_with("BeginTime (not before "); },
                        std::chrono::seconds(20)))
      << c.Job(later_id).dump();
  auto show = Cohort(c, {"show", std::to_string(later_id)});
  EXPECT_NE(show.output.find("(in 59m"), std::string::npos) << show.output;
  auto queue = Cohort(c, {"queue"});
  EXPECT_NE(queue.output.find("BeginTime"), std::string::npos) << queue.output;
  auto bad = Cohort(c, {"update", std::to_string(later_id), "--begin", "yesterday"});
  EXPECT_EQ(bad.status.Code(), 2);
  EXPECT_NE(bad.errors.find("--begin: 'yesterday' is not a time"), std::string::npos) << bad.errors;
  auto now = Cohort(c, {"update", std::to_string(later_id), "--begin", "now"});
  ASSERT_EQ(now.status.Code(), 0) << now.errors;
  c.WaitForState(later_id, "SUCCEEDED");
  auto refused = Cohort(c, {"submit", "--begin", "16:61", "--", "true"});
  EXPECT_EQ(refused.status.Code(), 2);
  EXPECT_NE(refused.errors.find("--begin: '16:61' is not a time"), std::string::npos) << refused.errors;
}

// scancel's filters: -n NAME with -t PENDING leaves the running job of that name alone;
// -u USER takes only that user's; --me the caller's; ids narrow a filter; bad input is 2.
TEST(JobControl, CancelByFilterTakesOnlyWhatItNames) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const json sleeper = {{"command", {"sleep", "300"}}, {"gpus_per_node", 1}};
  auto named = [&](const std::string& name, const std::string& user) {
    json spec = sleeper;
    spec["name"] = name;
    spec["user"] = user;
    return c.Submit(spec)["id"].get<int64_t>();
  };
  const int64_t running = named("sweep", "alice");
  c.WaitForState(running, "RUNNING");
  const int64_t sweep_pending = named("sweep", "alice");
  const int64_t other = named("other", "alice");
  const int64_t bobs = named("sweep", "bob");
  json own = sleeper;  // the caller's own (the test's admin token)
  own["name"] = "mine";
  const int64_t mine_id = c.Submit(own)["id"].get<int64_t>();

  auto pending_sweeps = Cohort(c, {"cancel", "-n", "sweep", "-t", "pending", "-u", "alice"});
  ASSERT_EQ(pending_sweeps.status.Code(), 0) << pending_sweeps.errors;
  EXPECT_EQ(pending_sweeps.output, "Cancelled job " + std::to_string(sweep_pending) + "\n");
  EXPECT_EQ(c.Job(sweep_pending)["state"], "CANCELLED");
  EXPECT_EQ(c.Job(running)["state"], "RUNNING") << "-t pending leaves the running one";
  EXPECT_EQ(c.Job(other)["state"], "PENDING") << "-n sweep leaves another name";
  EXPECT_EQ(c.Job(bobs)["state"], "PENDING") << "-u alice leaves bob's";

  auto narrowed = Cohort(c, {"cancel", "-u", "bob", std::to_string(other)});
  ASSERT_EQ(narrowed.status.Code(), 0) << narrowed.errors;
  EXPECT_EQ(c.Job(other)["state"], "PENDING") << "job " << other << " is alice's: bob's filter does not pick it";
  EXPECT_NE(narrowed.errors.find("no pending or running job matches"), std::string::npos) << narrowed.errors;

  auto mine = Cohort(c, {"cancel", "--me"});
  ASSERT_EQ(mine.status.Code(), 0) << mine.errors;
  EXPECT_EQ(mine.output, "Cancelled job " + std::to_string(mine_id) + "\n");
  EXPECT_EQ(c.Job(mine_id)["state"], "CANCELLED");
  EXPECT_EQ(c.Job(bobs)["state"], "PENDING");
  EXPECT_EQ(c.Job(other)["state"], "PENDING");

  auto alices = Cohort(c, {"cancel", "-u", "alice"});
  ASSERT_EQ(alices.status.Code(), 0) << alices.errors;
  EXPECT_EQ(c.Job(running)["state"], "CANCELLED");
  EXPECT_EQ(c.Job(other)["state"], "CANCELLED");
  EXPECT_NE(c.Job(bobs)["state"], "CANCELLED");  // (it may start on the GPU alice's job left)

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"cancel"},
                                              std::vector<std::string>{"cancel", "-t", "failed", "--me"},
                                              std::vector<std::string>{"cancel", "--me", "-u", "bob"}}) {
    auto r = Cohort(c, bad);
    EXPECT_EQ(r.status.Code(), 2) << bad.size() << " " << r.errors;
  }
  EXPECT_NE(c.Job(bobs)["state"], "CANCELLED") << "refused input cancels nothing";
}

// `cohort logs -f` on a job that has not started says that it waits and why, and `--tail N`
// counts lines.
TEST(JobControl, LogsFollowOnAPendingJobSaysWhyAndTailCountsLines) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  json blocker = c.Submit({{"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                           {"gpus_per_node", 1}});
  c.WaitForState(blocker["id"], "RUNNING");
  json held = c.Submit({{"name", "waits"}, {"command", {"true"}}, {"gpus_per_node", 1}});
  const std::string id = std::to_string(held["id"].get<int64_t>());
  auto hold = Cohort(c, {"hold", id});
  ASSERT_EQ(hold.status.Code(), 0) << hold.errors;
  std::ofstream(gate).put('\n');
  c.WaitForState(blocker["id"], "SUCCEEDED");

  SpawnOptions o;
  o.argv = {COHORT_BINARY, "--head", c.url(), "logs", "-f", id};
  o.stdout_path = c.dir() + "/follow.out";
  o.stderr_path = c.dir() + "/follow.err";
  auto follower = Subprocess::Spawn(o);
  ASSERT_TRUE(follower.has_value());
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(o.stderr_path).find("waiting for it to start: held by") != std::string::npos; },
                        std::chrono::seconds(10)))
      << ReadFile(o.stderr_path);
  ASSERT_EQ(Cohort(c, {"cancel", id}).status.Code(), 0);
  auto st = follower->WaitFor(std::chrono::seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->Code(), 1);
  EXPECT_NE(ReadFile(o.stderr_path).find("ended before it started"), std::string::npos) << ReadFile(o.stderr_path);

  json lines = c.Submit({{"command", {"sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done"}}});
  c.WaitForState(lines["id"], "SUCCEEDED");
  auto tail = Cohort(c, {"logs", std::to_string(lines["id"].get<int64_t>()), "--rank", "0", "--tail", "2"});
  ASSERT_EQ(tail.status.Code(), 0) << tail.errors;
  EXPECT_EQ(tail.output, "line4\nline5\n");
}

// Slurm's --signal=USR1@TIME and scontrol requeue: the job gets its checkpoint signal
// before its time limit, writes its state and requeues itself with its own token; the next
// attempt, same id and checkpoint directory, resumes and succeeds. An ended job is
// requeued from outside, held when asked; what cannot be requeued says why.
TEST(JobControl, ASignalBeforeTheTimeLimitLetsAJobRequeueItself) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  // The limit is far (2 minutes); the signal comes 118 s before it, 2 s after the start.
  const std::string script =
      std::string(kTaskCaFile) + "echo attempt=$COHORT_ATTEMPT; "
      "if [ \"$COHORT_ATTEMPT\" != 0 ]; then echo resumed=$(cat \"$COHORT_CHECKPOINT_DIR/state\"); exit 0; fi; "
      "trap 'echo step42 > \"$COHORT_CHECKPOINT_DIR/state\"; echo signalled=1; HOME=$(mktemp -d) " +
      std::string(COHORT_BINARY) + " requeue $COHORT_JOB_ID; sleep 60' USR1; "
      "while true; do sleep 0.05; done";
  auto submitted = Cohort(c, {"--json", "submit", "-t", "2m", "--signal", "USR1@118", "-G", "1", "--", "sh", "-c",
                              script});
  ASSERT_EQ(submitted.status.Code(), 0) << submitted.errors;
  const int64_t id = json::parse(submitted.output)["id"].get<int64_t>();
  c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(60));
  json job = c.Job(id);
  EXPECT_EQ(job["attempt"], 1);
  EXPECT_EQ(job["spec"]["checkpoint_before_limit_s"], 118);
  EXPECT_EQ(job["spec"]["checkpoint_signal"], "USR1");
  ASSERT_GE(job["history"].size(), 2u) << job.dump();
  EXPECT_NE(job["history"][0]["end_reason"].get<std::string>().find("requeued by "), std::string::npos)
      << job["history"][0].dump();
  const auto seen = ParseEnvLines(c.Logs(id, 0));
  EXPECT_EQ(seen.count("resumed") ? seen.at("resumed") : "", "step42") << c.Logs(id, 0);
  auto show = Cohort(c, {"show", std::to_string(id)});
  EXPECT_NE(show.output.find("SIGUSR1 and progress-report replies (on drain --now or a preemption, and 1m58s before "
                             "the time limit)"),
            std::string::npos)
      << show.output;

  // From outside: a failed job runs again, held first when asked; the restarts it had are
  // not used up (max_restarts 0).
  json failed = c.Submit({{"command", {"sh", "-c", "exit $((3 - 3 * COHORT_ATTEMPT))"}}, {"gpus_per_node", 1}});
  c.WaitForState(failed["id"], "FAILED");
  const std::string fid = std::to_string(failed["id"].get<int64_t>());
  auto requeued = Cohort(c, {"requeue", "--hold", fid});
  ASSERT_EQ(requeued.status.Code(), 0) << requeued.errors;
  EXPECT_NE(requeued.output.find("Requeued job " + fid + " (held by "), std::string::npos) << requeued.output;
  auto pending = Cohort(c, {"requeue", fid});
  EXPECT_EQ(pending.status.Code(), 1);
  EXPECT_NE(pending.errors.find("is PENDING already"), std::string::npos) << pending.errors;
  ASSERT_EQ(Cohort(c, {"release", fid}).status.Code(), 0);
  c.WaitForState(failed["id"], "SUCCEEDED");
  EXPECT_EQ(c.Job(failed["id"])["attempt"], 1);
  auto missing = Cohort(c, {"requeue", "99999"});
  EXPECT_EQ(missing.status.Code(), 1);
  EXPECT_NE(missing.errors.find("job 99999 not found"), std::string::npos) << missing.errors;
}

// A drain --now after the job answered its time-limit request with a checkpoint signals
// it again: the agent forgets a request the head no longer makes.
TEST(JobControl, ADrainAfterAnAnsweredTimeLimitRequestSignalsAgain) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string signals = c.dir() + "/signals";
  const std::string post = "curl -sf --cacert \"$ca\" -o /dev/null -X POST \"$COHORT_REPORT\" -d ";
  // Each USR1 reports a checkpoint of a new step; a later attempt ends at once.
  const std::string script =
      std::string(kTaskCaFile) + "if [ \"$COHORT_ATTEMPT\" != 0 ]; then exit 0; fi; n=0; trap 'n=$((n+1)); echo $n >> " +
      signals + "; " + post + "\"{\\\"step\\\": $n, \\\"checkpoint_step\\\": $n}\"' USR1; while true; do sleep 0.05; done";
  auto submitted = Cohort(c, {"--json", "submit", "-t", "2m", "--signal", "USR1@118", "-G", "1", "--", "sh", "-c",
                              script});
  ASSERT_EQ(submitted.status.Code(), 0) << submitted.errors;
  const int64_t id = json::parse(submitted.output)["id"].get<int64_t>();
  int64_t reported_ms = 0;
  ASSERT_TRUE(WaitUntil([&] {
    json mark = c.Job(id).value("last_checkpoint", json());
    if (!mark.is_object() || mark.value("step", 0) != 1) return false;
    reported_ms = mark.value("reported_ms", int64_t{0});
    return true;
  }, std::chrono::seconds(30))) << c.Job(id).dump(2);
  // A heartbeat after the checkpoint: its reply told the agent the request was answered.
  ASSERT_TRUE(WaitUntil([&] { return c.Node("node-a").value("last_heartbeat_ms", int64_t{0}) > reported_ms; },
                        std::chrono::seconds(30)));
  EXPECT_EQ(ReadFile(signals), "1\n");
  EXPECT_EQ(c.Job(id)["state"], "RUNNING") << "the job runs on after its time-limit checkpoint";

  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  auto drained = Cohort(c, {"drain", "node-a", "--now", "--timeout", "10m"});
  ASSERT_EQ(drained.status.Code(), 0) << drained.errors;
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(signals) == "1\n2\n"; }, std::chrono::seconds(30)))
      << "the drain's request was not signalled: " << ReadFile(signals);
  c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(30));
  EXPECT_EQ(c.Job(id)["moves"], 1) << c.Job(id).dump(2);
}

// The same two requests with no heartbeat between them: the time-limit request answered
// and the drain's made while the agent is stopped, so that its next heartbeat's reply asks
// for a checkpoint as the one before did. It is a new request: the agent signals again.
TEST(JobControl, TwoCheckpointRequestsWithNoHeartbeatBetweenThemSignalTwice) {
  // The agent is stopped on purpose here: no liveness timeout may end its tasks meanwhile.
  Timing timing;
  timing.failure = "60s";
  timing.fence = "30s";
  LocalCluster c(timing);
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  const std::string signals = c.dir() + "/signals";
  const std::string go = c.dir() + "/go";
  const std::string post = "curl -sf --cacert \"$ca\" -o /dev/null -X POST \"$COHORT_REPORT\" -d ";
  // Each USR1 reports a checkpoint of a new step (the first once the test says go); a later
  // attempt ends at once.
  const std::string script =
      std::string(kTaskCaFile) + "if [ \"$COHORT_ATTEMPT\" != 0 ]; then exit 0; fi; n=0; trap 'n=$((n+1)); echo $n >> " +
      signals + "; while [ $n = 1 ] && [ ! -e " + go + " ]; do sleep 0.02; done; " + post +
      "\"{\\\"step\\\": $n, \\\"checkpoint_step\\\": $n}\"' USR1; while true; do sleep 0.05; done";
  auto submitted = Cohort(c, {"--json", "submit", "-t", "2m", "--signal", "USR1@118", "-G", "1", "--", "sh", "-c",
                              script});
  ASSERT_EQ(submitted.status.Code(), 0) << submitted.errors;
  const int64_t id = json::parse(submitted.output)["id"].get<int64_t>();
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(signals) == "1\n"; }, std::chrono::seconds(30)))
      << "the time-limit request was not signalled: " << ReadFile(signals) << "\n" << c.Job(id).dump(2);
  const std::string node = c.Job(id)["allocation"]["nodes"][0]["node"].get<std::string>();

  c.agent(node).Signal(SIGSTOP);
  std::ofstream(go).put('\n');
  ASSERT_TRUE(WaitUntil([&] {
    json mark = c.Job(id).value("last_checkpoint", json());
    return mark.is_object() && mark.value("step", 0) == 1;
  }, std::chrono::seconds(30))) << c.Job(id).dump(2);
  auto drained = Cohort(c, {"drain", node, "--now", "--timeout", "10m"});
  c.agent(node).Signal(SIGCONT);
  ASSERT_EQ(drained.status.Code(), 0) << drained.errors;
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(signals) == "1\n2\n"; }, std::chrono::seconds(30)))
      << "the drain's request was not signalled: " << ReadFile(signals) << "\nagent log:\n"
      << ReadFile(c.dir() + "/" + node + ".log");
  c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(30));
  EXPECT_EQ(c.Job(id)["moves"], 1) << c.Job(id).dump(2);
}

}  // namespace
}  // namespace cohort::testing
