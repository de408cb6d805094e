// Job arrays and dependencies on a real head and agent, through the CLI: `--array` with a
// throttle, the elements' environment, the collapsed queue, cancelling one element and a
// whole array, `cohort show` of an array, dependency chains across success, failure and
// cancellation, one never satisfiable, and a head restart in the middle of an array.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "harness.h"

namespace cohort::testing {
namespace {

// "INDEX ATTEMPT" lines the elements appended to `path`.
std::multiset<std::pair<int, int>> RanLines(const std::string& path) {
  std::multiset<std::pair<int, int>> out;
  std::istringstream in(ReadFile(path));
  int index = 0, attempt = 0;
  while (in >> index >> attempt) out.insert({index, attempt});
  return out;
}

int64_t IdOf(const CliResult& r) {
  const std::string prefix = "Submitted job ";
  auto at = r.output.find(prefix);
  return at == std::string::npos ? 0 : std::stoll(r.output.substr(at + prefix.size()));
}

TEST(Arrays, ThrottleEnvQueueCancelAndShowThroughTheCli) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 4);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate", ran = c.dir() + "/ran";
  // Each element records its index (both names) and waits for the gate.
  const std::string script = "echo $COHORT_ARRAY_TASK_ID $COHORT_ATTEMPT >> " + ran +
                             "; [ $SLURM_ARRAY_TASK_ID = $COHORT_ARRAY_TASK_ID ] || exit 9; while [ ! -e " + gate +
                             " ]; do sleep 0.05; done";
  auto bad = Cohort(c, {"submit", "--array", "5-1", "--", "true"});
  EXPECT_EQ(bad.status.Code(), 2);
  EXPECT_NE(bad.errors.find("--array: '5-1': the range ends (1) before it starts (5)"), std::string::npos)
      << bad.errors;
  auto sub = Cohort(c, {"submit", "--array", "0-9%2", "-G", "1", "--", "sh", "-c", script});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  const int64_t array = IdOf(sub);
  const std::string a = std::to_string(array);
  ASSERT_TRUE(WaitUntil([&] { return RanLines(ran).size() == 2; }, std::chrono::seconds(20))) << ReadFile(ran);
  // Two of four GPUs busy: the throttle, not the GPUs, holds the rest.
  auto queue = Cohort(c, {"queue"});
  ASSERT_EQ(queue.status.Code(), 0) << queue.errors;
  EXPECT_NE(queue.output.find(a + "_[2-9%2]"), std::string::npos) << queue.output;
  EXPECT_NE(queue.output.find(a + "_0 "), std::string::npos) << queue.output;
  EXPECT_NE(queue.output.find(a + "_1 "), std::string::npos) << queue.output;
  // One index before it starts, one running element.
  auto cancel = Cohort(c, {"cancel", a + "_7", a + "_1"});
  ASSERT_EQ(cancel.status.Code(), 0) << cancel.errors;
  EXPECT_NE(cancel.output.find("Cancelled job " + a + "_7"), std::string::npos) << cancel.output;
  ASSERT_TRUE(WaitUntil([&] { return RanLines(ran).size() == 3; }, std::chrono::seconds(20))) << ReadFile(ran);
  EXPECT_EQ(RanLines(ran).count({2, 0}), 1u) << "index 2 took the cancelled element's place";
  auto show = Cohort(c, {"show", a});
  ASSERT_EQ(show.status.Code(), 0) << show.errors;
  EXPECT_NE(show.output.find("array elements: 2 CANCELLED 6 PENDING 2 RUNNING"), std::string::npos) << show.output;
  auto element = Cohort(c, {"show", a + "_0"});
  ASSERT_EQ(element.status.Code(), 0) << element.errors;
  EXPECT_NE(element.output.find("array element:"), std::string::npos) << element.output;
  auto logs = Cohort(c, {"logs", a + "_0"});
  EXPECT_EQ(logs.status.Code(), 0) << logs.errors;
  // Every command that takes a job takes an element as `cohort queue` shows it.
  auto exec = Cohort(c, {"exec", a + "_0", "--", "sh", "-c", "echo index $COHORT_ARRAY_TASK_ID"});
  EXPECT_EQ(exec.status.Code(), 0) << exec.errors;
  EXPECT_NE(exec.output.find("index 0"), std::string::npos) << exec.output;
  auto update = Cohort(c, {"update", a + "_0", "-p", "3"});  // it runs: refused as RUNNING, not as a bad id
  EXPECT_EQ(update.status.Code(), 1) << update.errors;
  EXPECT_NE(update.errors.find("is RUNNING: only its time limit and name can change now"), std::string::npos) << update.errors;
  auto hold = Cohort(c, {"hold", a + "_0"});
  EXPECT_EQ(hold.status.Code(), 1) << hold.errors;
  EXPECT_EQ(hold.errors.find("not a job id"), std::string::npos) << hold.errors;
  // The array itself runs nothing: its logs and exec name its elements instead of waiting.
  auto array_logs = Cohort(c, {"logs", "-f", a});
  EXPECT_EQ(array_logs.status.Code(), 2) << array_logs.errors;
  EXPECT_NE(array_logs.errors.find("is a job array (0-9%2): each element has its own output; name one, e.g. "
                                   "cohort logs " + a + "_0"),
            std::string::npos)
      << array_logs.errors;
  auto array_exec = Cohort(c, {"exec", a, "--", "true"});
  EXPECT_EQ(array_exec.status.Code(), 2) << array_exec.errors;
  EXPECT_NE(array_exec.errors.find("is a job array (0-9%2): exec into one of its elements"), std::string::npos)
      << array_exec.errors;
  auto waiting = Cohort(c, {"show", a + "_9"});
  EXPECT_EQ(waiting.status.Code(), 1);
  EXPECT_NE(waiting.errors.find("has not started yet"), std::string::npos) << waiting.errors;
  std::ofstream(gate).put('\n');
  json done = c.WaitForState(array, "CANCELLED", std::chrono::seconds(30));
  EXPECT_EQ(done["reason"], "2 of 10 elements cancelled");
  std::set<int> indices;
  for (const auto& [index, attempt] : RanLines(ran)) indices.insert(index);
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 8, 9}));
  EXPECT_EQ(RanLines(ran).size(), 9u) << "each element ran once";

  // The whole array at once.
  std::filesystem::remove(gate);
  auto second = Cohort(c, {"submit", "--array", "0-99999%3", "--", "sh", "-c", script});
  ASSERT_EQ(second.status.Code(), 0) << second.errors;
  ASSERT_TRUE(WaitUntil([&] { return RanLines(ran).size() == 12; }, std::chrono::seconds(20))) << ReadFile(ran);
  ASSERT_EQ(Cohort(c, {"cancel", std::to_string(IdOf(second))}).status.Code(), 0);
  json all = c.WaitForState(IdOf(second), "CANCELLED");
  EXPECT_EQ(all["array_summary"]["CANCELLED"], 100000) << all.dump();
}

TEST(Dependencies, ChainsAcrossSuccessFailureAndCancellation) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  const std::string wait = "while [ ! -e " + gate + " ]; do sleep 0.05; done";
  auto submit = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"submit"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = Cohort(c, argv);
    EXPECT_EQ(r.status.Code(), 0) << r.errors;
    return std::to_string(IdOf(r));
  };
  const std::string ok = submit({"--", "sh", "-c", wait});
  const std::string fails = submit({"--", "sh", "-c", wait + "; exit 3"});
  const std::string cancelled = submit({"--", "sh", "-c", wait});
  const std::string after_ok = submit({"-d", "afterok:" + ok, "--", "true"});
  const std::string chain = submit({"-d", "afterok:" + after_ok, "--", "true"});
  const std::string after_notok = submit({"-d", "afternotok:" + fails + ",afterany:" + cancelled, "--", "true"});
  const std::string never = submit({"-d", "afterok:" + fails, "--", "true"});
  const std::string killed = submit({"-d", "afterok:" + fails, "--kill-on-invalid-dep", "--", "true"});
  const std::string after_cancelled = submit({"-d", "afternotok:" + cancelled, "--", "true"});
  auto unknown = Cohort(c, {"submit", "-d", "afterok:99999", "--", "true"});
  EXPECT_NE(unknown.status.Code(), 0);
  EXPECT_NE(unknown.errors.find("there is no job 99999"), std::string::npos) << unknown.errors;
  auto typo = Cohort(c, {"submit", "-d", "aftrok:1", "--", "true"});
  EXPECT_EQ(typo.status.Code(), 2);
  EXPECT_NE(typo.errors.find("unknown dependency type 'aftrok'"), std::string::npos) << typo.errors;

  c.WaitForState(std::stoll(ok), "RUNNING");
  json pending = c.WaitForState(std::stoll(after_ok), "PENDING");
  EXPECT_TRUE(WaitUntil([&] { return c.Job(std::stoll(after_ok)).value("reason", "").starts_with("Dependency ("); },
                        std::chrono::seconds(10)))
      << c.Job(std::stoll(after_ok)).dump();
  ASSERT_EQ(Cohort(c, {"cancel", cancelled}).status.Code(), 0);
  c.WaitForState(std::stoll(after_cancelled), "SUCCEEDED");
  std::ofstream(gate).put('\n');
  c.WaitForState(std::stoll(chain), "SUCCEEDED");
  c.WaitForState(std::stoll(after_notok), "SUCCEEDED");
  json killed_job = c.WaitForState(std::stoll(killed), "CANCELLED");
  EXPECT_NE(killed_job.value("reason", "").find("DependencyNeverSatisfied (afterok:" + fails + ": FAILED)"),
            std::string::npos)
      << killed_job.dump();
  EXPECT_TRUE(WaitUntil([&] {
    return c.Job(std::stoll(never)).value("reason", "").starts_with("DependencyNeverSatisfied");
  }, std::chrono::seconds(10))) << c.Job(std::stoll(never)).dump();
  EXPECT_EQ(c.Job(std::stoll(never))["state"], "PENDING") << "stays pending, as Slurm leaves it";
}

// Slurm's scancel 12_[1-3,8]: some elements at once, started or not, in one request; one
// that cannot be cancelled (already gone) is named and makes the exit code 1.
TEST(Arrays, CancelARangeOfElementsStartedOrNot) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string ran = c.dir() + "/ran", gate = c.dir() + "/gate";
  auto sub = Cohort(c, {"submit", "--array", "0-9%2", "--", "sh", "-c",
                        "echo $COHORT_ARRAY_TASK_ID $COHORT_ATTEMPT >> " + ran + "; while [ ! -e " + gate +
                            " ]; do sleep 0.05; done"});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  const std::string a = std::to_string(IdOf(sub));
  ASSERT_TRUE(WaitUntil([&] { return RanLines(ran).size() == 2; }, std::chrono::seconds(20))) << ReadFile(ran);
  // 1 runs; 2, 3 and 8 wait in the array.
  auto some = Cohort(c, {"cancel", a + "_[1-3,8]"});
  ASSERT_EQ(some.status.Code(), 0) << some.errors;
  EXPECT_NE(some.output.find("Cancelled job " + a + "_[1-3,8]"), std::string::npos) << some.output;
  auto show = Cohort(c, {"show", a});
  EXPECT_NE(show.output.find("4 CANCELLED"), std::string::npos) << show.output;
  // 0 runs; 3 is gone already: 0 is cancelled, 3 named.
  auto again = Cohort(c, {"cancel", a + "_[0,3]"});
  EXPECT_EQ(again.status.Code(), 1);
  EXPECT_NE(again.output.find("Cancelled job " + a + "_[0]"), std::string::npos) << again.output;
  EXPECT_NE(again.errors.find(a + "_3: "), std::string::npos) << again.errors;
  auto bad = Cohort(c, {"cancel", a + "_[5-1]"});
  EXPECT_EQ(bad.status.Code(), 2);
  EXPECT_NE(bad.errors.find("the range ends (1) before it starts (5)"), std::string::npos) << bad.errors;
  std::ofstream(gate).put('\n');
  json done = c.WaitForState(IdOf(sub), "CANCELLED", std::chrono::seconds(30));
  EXPECT_EQ(done["array_summary"]["CANCELLED"], 5) << done.dump();
  EXPECT_EQ(done["array_summary"]["SUCCEEDED"], 5) << done.dump();
  std::set<int> indices;
  for (const auto& [index, attempt] : RanLines(ran)) indices.insert(index);
  EXPECT_EQ(indices, (std::set<int>{0, 1, 4, 5, 6, 7, 9}));
}

// A researcher whose array partly failed is told which indices, ready for --array.
TEST(Arrays, ShowNamesTheFailedElementsToRunAgain) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  auto sub = Cohort(c, {"submit", "--array", "0-5", "--", "sh", "-c", "exit $((COHORT_ARRAY_TASK_ID % 3 == 1))"});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  json done = c.WaitForState(IdOf(sub), "FAILED", std::chrono::seconds(30));
  EXPECT_EQ(done["array_failed"], "1,4") << done.dump();
  auto show = Cohort(c, {"show", std::to_string(IdOf(sub))});
  EXPECT_NE(show.output.find("failed elements: 1,4 (to run them again: cohort submit ... --array 1,4)"),
            std::string::npos)
      << show.output;
}

// `cohort logs -f 12_1` while element 1 still waits in its array (the throttle): it waits
// for the element, saying so, and follows it, as it does a pending job.
TEST(Arrays, LogsFollowOfAnElementNotMadeYetWaitsForIt) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  auto sub = Cohort(c, {"submit", "--array", "0-1%1", "--", "sh", "-c",
                        "echo hello-$COHORT_ARRAY_TASK_ID; while [ $COHORT_ARRAY_TASK_ID = 0 ] && [ ! -e " + gate +
                            " ]; do sleep 0.05; done"});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  const std::string a = std::to_string(IdOf(sub));
  auto now = Cohort(c, {"logs", a + "_1"});  // without -f: the head's answer, at once
  EXPECT_EQ(now.status.Code(), 1);
  EXPECT_NE(now.errors.find("has not started yet"), std::string::npos) << now.errors;
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "--head", c.url(), "logs", "-f", a + "_1"};
  o.stdout_path = c.dir() + "/follow.out";
  o.stderr_path = c.dir() + "/follow.err";
  auto follower = Subprocess::Spawn(o);
  ASSERT_TRUE(follower.has_value());
  EXPECT_TRUE(WaitUntil([&] {
    return ReadFile(o.stderr_path).find("element " + a + "_1 has not started yet, waiting for its array") !=
           std::string::npos;
  }, std::chrono::seconds(10)))
      << ReadFile(o.stderr_path);
  std::ofstream(gate).put('\n');
  auto st = follower->WaitFor(std::chrono::seconds(20));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->Code(), 0) << ReadFile(o.stderr_path);
  EXPECT_EQ(ReadFile(o.stdout_path), "[rank 0] hello-1\n");
}

TEST(Arrays, AHeadRestartMidArrayLosesNothingAndRunsNoElementTwice) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string ran = c.dir() + "/ran";
  json array = c.Submit({{"command", {"sh", "-c", "echo $COHORT_ARRAY_TASK_ID $COHORT_ATTEMPT >> " + ran + "; sleep 0.2"}},
                         {"array", "0-23%3"},
                         {"gpus_per_node", 1}});
  const int64_t id = array["id"].get<int64_t>();
  ASSERT_TRUE(WaitUntil([&] { return RanLines(ran).size() >= 6; }, std::chrono::seconds(30))) << ReadFile(ran);
  c.KillHead(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  json done = c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(60));
  EXPECT_EQ(done["array_summary"]["SUCCEEDED"], 24) << done.dump();
  // Every index ran as exactly one element: attempt 0 once (an element whose tasks were
  // fenced while the head was away may rerun as its own attempt 1, never as a second element).
  std::map<int, int> first_attempts;
  for (const auto& [index, attempt] : RanLines(ran)) first_attempts[index] += attempt == 0;
  ASSERT_EQ(first_attempts.size(), 24u) << ReadFile(ran);
  for (const auto& [index, n] : first_attempts) EXPECT_EQ(n, 1) << "index " << index;
  auto list = c.client().Get("/v1/jobs?state=all&limit=1000");
  ASSERT_TRUE(list.has_value());
  std::multiset<int64_t> elements;
  for (const auto& j : (*list)["jobs"]) {
    if (j.value("array_job_id", int64_t{0}) == id) elements.insert(j["array_task_id"].get<int64_t>());
  }
  EXPECT_EQ(elements.size(), 24u);
  EXPECT_EQ(std::set<int64_t>(elements.begin(), elements.end()).size(), 24u) << "one element per index";
}

}  // namespace
}  // namespace cohort::testing
