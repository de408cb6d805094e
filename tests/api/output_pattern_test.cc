// Output file patterns (api/output_pattern.h): Slurm's sbatch filename patterns, checked
// at submit (naming the field and the pattern) and expanded per task; open modes.
#include "api/output_pattern.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/types.h"

namespace cohort::api {
namespace {

using ::testing::HasSubstr;

OutputPatternValues Task() {
  OutputPatternValues v;
  v.job_id = 42;
  v.job_name = "train";
  v.user = "alice";
  v.node = "gpu-3";
  v.node_index = 1;
  v.rank = 5;
  return v;
}

TEST(OutputPattern, ExpandsEverySlurmField) {
  EXPECT_EQ(ExpandOutputPattern("logs/%x-%j.out", Task()), "logs/train-42.out");
  EXPECT_EQ(ExpandOutputPattern("%u/%N/%n/%t", Task()), "alice/gpu-3/1/5");
  EXPECT_EQ(ExpandOutputPattern("100%%-%j%%", Task()), "100%-42%");
  EXPECT_EQ(ExpandOutputPattern("plain.txt", Task()), "plain.txt");
  // A width zero-pads numbers (Slurm's %4t); names are never padded.
  EXPECT_EQ(ExpandOutputPattern("r%4t-j%06j-%3x", Task()), "r0005-j000042-train");
}

TEST(OutputPattern, ArrayFields) {
  OutputPatternValues v = Task();
  v.job_id = 107;
  v.array_job_id = 100;
  v.array_task_id = 7;
  EXPECT_EQ(ExpandOutputPattern("slurm-%A_%a.out", v), "slurm-100_7.out");
  EXPECT_EQ(ExpandOutputPattern("%j", v), "107");
  // Not an element: %A is the job, %a Slurm's NO_VAL.
  EXPECT_EQ(ExpandOutputPattern("slurm-%A_%a.out", Task()), "slurm-42_4294967294.out");
}

TEST(OutputPattern, UnknownValuesStayAsWritten) {
  OutputPatternValues v = Task();
  v.node.reset();
  v.node_index.reset();
  v.rank.reset();
  v.array_task_id.reset();
  EXPECT_EQ(ExpandOutputPattern("%j-%N-%n-%3t-%a-%%", v), "42-%N-%n-%3t-%a-%");
}

TEST(OutputPattern, ChecksNameTheFieldAndThePattern) {
  EXPECT_TRUE(CheckOutputPattern("output", "logs/%x-%A_%a.%N.%n.%t.%u.%j.%%.out"));
  EXPECT_TRUE(CheckOutputPattern("output", "/abs/r%10t.out"));
  const std::pair<std::string, std::string> kBad[] = {
      {"out-%q.txt", "output: pattern 'out-%q.txt' has an unknown field '%q' (known: %j %A %a %x %u %N %n %t %%)"},
      {"out-%3s", "has an unknown field '%3s'"},
      {"out-%", "output: pattern 'out-%' ends in a lone '%' (write %% for a '%')"},
      {"out-%4", "output: pattern 'out-%4' ends in '%4', a width with no field after it (e.g. '%4t')"},
      {"r%11t", "pads '%11t' to 11 digits; at most 10"},
      {"r%123t", "has a field width over 99"},
      {"", "output: is empty: give a file path, or leave it out"},
      {"logs/", "output: 'logs/' names a directory; give a file in it (e.g. 'logs/slurm-%j.out')"},
      {".", "output: '.' names a directory"},
      {"a/..", "output: 'a/..' names a directory"},
      {std::string("a\0b", 3), "output: contains a NUL byte"},
      {std::string(5000, 'a'), "output: is 5000 bytes long; a path is at most 4096 bytes"},
  };
  for (const auto& [pattern, want] : kBad) {
    auto r = CheckOutputPattern("output", pattern);
    ASSERT_FALSE(r) << pattern;
    EXPECT_EQ(r.error().field, "output");
    EXPECT_THAT(r.error().message, HasSubstr(want)) << pattern;
  }
}

TEST(OutputPattern, OpenModes) {
  EXPECT_TRUE(CheckOpenMode(""));
  EXPECT_TRUE(CheckOpenMode("append"));
  EXPECT_TRUE(CheckOpenMode("truncate"));
  auto bad = CheckOpenMode("trunc");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "open_mode");
  EXPECT_THAT(bad.error().message, HasSubstr("must be 'append' or 'truncate', got 'trunc'"));
}

TEST(OutputPattern, EveryTaskOfTheFirstAttemptAsksToTruncate) {
  // Which of the tasks that share a file empties it is settled at open (agent/output_file.h).
  EXPECT_TRUE(OutputTruncates("", 0));
  EXPECT_TRUE(OutputTruncates("truncate", 0));
  // A requeue or restart appends, as Slurm; append never truncates.
  EXPECT_FALSE(OutputTruncates("truncate", 1));
  EXPECT_FALSE(OutputTruncates("append", 0));
}

TEST(OutputPattern, TheTruncationMarkerNamesTheAttemptOfThisHeadWithoutItsToken) {
  const std::string url = "https://head:8443/v1/rendezvous/12-0-0123456789abcdef";
  const std::string marker = OutputTruncationMarker(url, 12, 0);
  // The same on every node (whatever address it reaches the head by), never the token.
  EXPECT_EQ(marker, OutputTruncationMarker("http://10.0.0.1:8080/v1/rendezvous/12-0-0123456789abcdef", 12, 0));
  EXPECT_THAT(marker, ::testing::MatchesRegex("[0-9a-f]{16}:12:0"));
  EXPECT_EQ(marker.find("0123456789abcdef"), std::string::npos);
  // Another head's job 12 (another secret, so another token), another attempt: another marker.
  EXPECT_NE(marker, OutputTruncationMarker("https://head:8443/v1/rendezvous/12-0-fedcba9876543210", 12, 0));
  EXPECT_NE(marker, OutputTruncationMarker("https://head:8443/v1/rendezvous/12-1-0123456789abcdef", 12, 1));
  EXPECT_EQ(OutputTruncationMarker("", 7, 0), "local:7:0");
}

TEST(OutputPattern, SpecFieldsRoundTripAndBadOnesAreRefusedByName) {
  json j = {{"command", {"true"}}, {"output", "logs/%x-%j.out"}, {"error", "logs/%x-%j.err"},
            {"open_mode", "append"}};
  auto s = JobSpecFromJson(j);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->output, "logs/%x-%j.out");
  EXPECT_EQ(s->error, "logs/%x-%j.err");
  EXPECT_EQ(s->open_mode, "append");
  json back = ToJson(*s);
  EXPECT_EQ(back["output"], "logs/%x-%j.out");
  EXPECT_EQ(back["error"], "logs/%x-%j.err");
  EXPECT_EQ(back["open_mode"], "append");
  // Unset fields stay off the wire, so older readers see the spec as before.
  json plain = ToJson(*JobSpecFromJson(json{{"command", {"true"}}}));
  EXPECT_FALSE(plain.contains("output") || plain.contains("error") || plain.contains("open_mode"));

  const std::pair<json, std::string> kBad[] = {
      {{{"output", "x-%z"}}, "output: pattern 'x-%z' has an unknown field '%z'"},
      {{{"error", "e-%"}}, "error: pattern 'e-%' ends in a lone '%'"},
      {{{"output", ""}}, "output: is empty: give a file path, or leave it out"},
      {{{"error", ""}}, "error: is empty"},
      {{{"open_mode", ""}}, "open_mode: is empty: give 'append' or 'truncate'"},
      {{{"open_mode", "overwrite"}}, "open_mode: must be 'append' or 'truncate', got 'overwrite'"},
      {{{"output", 5}}, "output"},
      {{{"output", "logs/"}}, "output: 'logs/' names a directory"},
  };
  for (const auto& [fields, want] : kBad) {
    json spec = {{"command", {"true"}}};
    spec.update(fields);
    auto r = JobSpecFromJson(spec);
    ASSERT_FALSE(r) << fields.dump();
    EXPECT_THAT(r.error().message, HasSubstr(want)) << fields.dump();
  }
  // An allocation runs no command of its own to write them.
  auto alloc = JobSpecFromJson(json{{"kind", "allocation"}, {"output", "o.txt"}});
  ASSERT_FALSE(alloc);
  EXPECT_EQ(alloc.error().field, "output");
}

TEST(OutputPattern, TaskLaunchCarriesThePatterns) {
  HeartbeatReply r;
  TaskLaunch l;
  l.job = 3;
  l.command = {"true"};
  l.output = "o-%t";
  l.error = "e-%t";
  l.open_mode = "append";
  r.tasks.push_back(l);
  TaskLaunch plain = l;
  plain.rank = 1;
  plain.output = plain.error = plain.open_mode = "";
  r.tasks.push_back(plain);
  json j = ToJson(r);
  EXPECT_FALSE(j["tasks"][1].contains("output"));
  auto back = HeartbeatReplyFromJson(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->tasks[0].output, "o-%t");
  EXPECT_EQ(back->tasks[0].error, "e-%t");
  EXPECT_EQ(back->tasks[0].open_mode, "append");
  EXPECT_EQ(back->tasks[1].output, "");
}

}  // namespace
}  // namespace cohort::api
