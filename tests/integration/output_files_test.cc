// Slurm's sbatch -o/-e/--open-mode on a real head and agent, through the CLI: the files get
// the tasks' stdout and stderr under their expanded names (%x-%j, %A_%a, %t) while `cohort
// logs` still shows everything; stderr joins the output file without -e; several ranks
// share one file; truncate versus append across `cohort requeue`; a file that cannot be
// opened fails the job naming it. (Run-as-user cases: task_users_test.cc.)
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

int64_t SubmittedId(const CliResult& r) {
  auto j = ParseJson(r.output, "submit");
  return j && j->is_object() ? j->value("id", int64_t{0}) : 0;
}

class OutputFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(c_.StartHead());
    ASSERT_NO_FATAL_FAILURE(c_.StartAgent("node-1", 0, 8));
    ASSERT_NO_FATAL_FAILURE(c_.WaitForNodes(1));
    work_ = c_.dir() + "/work";
    std::filesystem::create_directories(work_ + "/logs");
  }
  // `cohort --json submit -D work ARGS...`; the job's id (0 when refused).
  int64_t Submit(std::vector<std::string> args, CliResult* result = nullptr) {
    std::vector<std::string> argv = {"--json", "submit", "-D", work_};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult r = Cohort(c_, argv);
    if (result) *result = r;
    EXPECT_EQ(r.status.Code(), 0) << r.errors;
    return SubmittedId(r);
  }
  // Waits until the job has ended its attempt `attempt` in `state`.
  json WaitForAttempt(int64_t id, int attempt, const std::string& state) {
    json last;
    EXPECT_TRUE(WaitUntil([&] {
      last = c_.Job(id);
      return last.value("attempt", -1) == attempt && last.value("state", "") == state;
    }, 30s)) << last.dump(2);
    return last;
  }

  LocalCluster c_;
  std::string work_;
};

TEST_F(OutputFilesTest, OutputAndErrorFilesGetTheStreamsUnderTheirExpandedNames) {
  const int64_t id = Submit({"-J", "hello", "-o", "logs/%x-%j.out", "-e", "logs/%x-%j.err", "--", "sh", "-c",
                             "echo out-line; echo err-line >&2"});
  ASSERT_GT(id, 0);
  c_.WaitForState(id, "SUCCEEDED");
  const std::string base = fmt::format("{}/logs/hello-{}", work_, id);
  EXPECT_EQ(ReadFile(base + ".out"), "out-line\n");
  EXPECT_EQ(ReadFile(base + ".err"), "err-line\n");
  // The log on the node is whole too: cohort logs shows both.
  const std::string logs = c_.Logs(id, 0);
  EXPECT_NE(logs.find("out-line\n"), std::string::npos) << logs;
  EXPECT_NE(logs.find("err-line\n"), std::string::npos) << logs;
  auto show = Cohort(c_, {"show", std::to_string(id)});
  EXPECT_NE(show.output.find("output:"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find(base + ".out\n"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find(base + ".err\n"), std::string::npos) << show.output;

  // Without -e stderr goes to the output file; two ranks share it (%j) or get one each (%t).
  const int64_t both = Submit({"-n", "2", "-o", "both-%j.txt", "-e", "rank-%2t.err", "--", "sh", "-c",
                               "echo out-$RANK; echo err-$RANK >&2"});
  ASSERT_GT(both, 0);
  c_.WaitForState(both, "SUCCEEDED");
  const std::string shared = ReadFile(fmt::format("{}/both-{}.txt", work_, both));
  EXPECT_NE(shared.find("out-0\n"), std::string::npos) << shared;
  EXPECT_NE(shared.find("out-1\n"), std::string::npos) << shared;
  EXPECT_EQ(shared.size(), 12u) << shared;
  EXPECT_EQ(ReadFile(work_ + "/rank-00.err"), "err-0\n");
  EXPECT_EQ(ReadFile(work_ + "/rank-01.err"), "err-1\n");
  const int64_t joined = Submit({"-o", "joined.txt", "--", "sh", "-c", "echo a; echo b >&2; echo c"});
  c_.WaitForState(joined, "SUCCEEDED");
  EXPECT_EQ(ReadFile(work_ + "/joined.txt"), "a\nb\nc\n");
}

// Slurm's default (truncate) empties the file on the first attempt and appends on a
// requeue; --open-mode append keeps what was there.
TEST_F(OutputFilesTest, TruncateAndAppendAcrossARequeue) {
  std::ofstream(work_ + "/trunc.out") << "old\n";
  std::ofstream(work_ + "/append.out") << "old\n";
  const int64_t t = Submit({"-o", "trunc.out", "--", "sh", "-c", "echo attempt=$COHORT_ATTEMPT"});
  const int64_t a =
      Submit({"-o", "append.out", "--open-mode", "append", "--", "sh", "-c", "echo attempt=$COHORT_ATTEMPT"});
  for (int64_t id : {t, a}) {
    ASSERT_GT(id, 0);
    c_.WaitForState(id, "SUCCEEDED");
    auto requeued = Cohort(c_, {"requeue", std::to_string(id)});
    ASSERT_EQ(requeued.status.Code(), 0) << requeued.errors;
    WaitForAttempt(id, 1, "SUCCEEDED");
  }
  EXPECT_EQ(ReadFile(work_ + "/trunc.out"), "attempt=0\nattempt=1\n");
  EXPECT_EQ(ReadFile(work_ + "/append.out"), "old\nattempt=0\nattempt=1\n");
}

TEST_F(OutputFilesTest, ArrayElementsWriteTheirOwnFiles) {
  CliResult r;
  std::vector<std::string> args = {"--json", "submit", "-D", work_, "--array", "0-2", "-o", "logs/arr-%A_%a.out",
                                   "--", "sh", "-c", "echo index=$COHORT_ARRAY_TASK_ID"};
  r = Cohort(c_, args);
  ASSERT_EQ(r.status.Code(), 0) << r.errors;
  const int64_t id = SubmittedId(r);
  ASSERT_GT(id, 0);
  c_.WaitForState(id, "SUCCEEDED", 60s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ReadFile(fmt::format("{}/logs/arr-{}_{}.out", work_, id, i)), fmt::format("index={}\n", i));
  }
  // The array's show expands what it knows; each element's index stays %a.
  auto show = Cohort(c_, {"show", std::to_string(id)});
  EXPECT_NE(show.output.find(fmt::format("{}/logs/arr-{}_%a.out", work_, id)), std::string::npos) << show.output;
  auto element = Cohort(c_, {"show", fmt::format("{}_1", id)});
  EXPECT_NE(element.output.find(fmt::format("{}/logs/arr-{}_1.out", work_, id)), std::string::npos)
      << element.output;
}

TEST_F(OutputFilesTest, AFileThatCannotBeOpenedFailsTheJobNamingIt) {
  const int64_t id = Submit({"-o", "no-such-dir/out.txt", "--", "sh", "-c", "echo ran"});
  ASSERT_GT(id, 0);
  json failed = c_.WaitForState(id, "FAILED");
  ASSERT_EQ(failed["exits"].size(), 1u) << failed.dump(2);
  const std::string want =
      fmt::format("cannot open output file 'no-such-dir/out.txt' (in '{}'): No such file or directory", work_);
  EXPECT_EQ(failed["exits"][0].value("error", ""), want);
  EXPECT_EQ(failed["exits"][0].value("exit_code", 0), 127);
  const std::string logs = c_.Logs(id, 0);
  EXPECT_NE(logs.find(want), std::string::npos) << logs;
  EXPECT_EQ(logs.find("ran"), std::string::npos) << logs;

  // Refused at submit, naming the field: nothing is stored.
  auto [status, body] = PostRaw(c_, "/v1/jobs", R"({"command": ["true"], "output": "x-%y"})");
  EXPECT_EQ(status, 400) << body.dump();
  EXPECT_NE(body.dump().find("output: pattern 'x-%y' has an unknown field '%y'"), std::string::npos) << body.dump();
}

// A multi-node job whose ranks share one output file (no %N or %t: on a shared filesystem,
// here the one disk both agents use). The first opener of the first attempt empties it,
// whichever rank that is, and nobody writes before: rank 0's node is held back (its agent
// stopped) until rank 1 on the other node has written, and rank 0's start must not cut
// that line. A second job on the same file empties it again.
TEST(OutputFilesSharedTest, RanksOnSeveralNodesShareAFileWithoutCuttingEachOthersLines) {
  // A failure timeout far above the pause, so the stopped agent's node stays UP.
  LocalCluster c(Timing{"100ms", "60s", "30s", "2s"});
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node-a", 0, 4));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node-b", 0, 4));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(2));
  const std::string work = c.dir() + "/work";
  std::filesystem::create_directories(work);
  const std::string out = work + "/shared.out";
  std::ofstream(out) << "stale line of an earlier job\n";

  // Equal nodes go in name order: node-a hosts node rank 0 (checked below).
  c.agent("node-a").Signal(SIGSTOP);
  auto r = Cohort(c, {"--json", "submit", "-D", work, "-N", "2", "-o", "shared.out", "--", "sh", "-c",
                      "echo line-$RANK"});
  ASSERT_EQ(r.status.Code(), 0) << r.errors;
  const int64_t id = SubmittedId(r);
  ASSERT_GT(id, 0);
  const bool rank1_wrote = WaitUntil([&] { return ReadFile(out).find("line-1\n") != std::string::npos; }, 30s);
  c.agent("node-a").Signal(SIGCONT);
  ASSERT_TRUE(rank1_wrote) << ReadFile(out) << "\n" << c.Job(id).dump(2);
  json done = c.WaitForState(id, "SUCCEEDED", 30s);
  ASSERT_EQ(done["allocation"]["nodes"][0].value("node", ""), "node-a") << done.dump(2);
  EXPECT_EQ(ReadFile(out), "line-1\nline-0\n");

  const int64_t again = SubmittedId(Cohort(c, {"--json", "submit", "-D", work, "-N", "2", "-o", "shared.out", "--",
                                               "sh", "-c", "echo again-$RANK"}));
  ASSERT_GT(again, 0);
  c.WaitForState(again, "SUCCEEDED", 30s);
  const std::string second = ReadFile(out);
  EXPECT_TRUE(second == "again-0\nagain-1\n" || second == "again-1\nagain-0\n") << second;
}

}  // namespace
}  // namespace cohort::testing
