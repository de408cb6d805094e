// `cohort top --once` against a live local cluster: one frame, no escape codes, with the
// nodes, their GPUs, the running job and the queue, fitted to the width asked for.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.h"

namespace cohort::testing {
namespace {

// Runs `cohort top` with `args`; returns its stdout (and stderr) and exit code.
std::pair<std::string, int> RunTop(const LocalCluster& c, std::vector<std::string> args) {
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "top", "--head", c.url()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = c.dir() + "/top.out";
  std::filesystem::remove(o.stdout_path);
  auto p = Subprocess::Spawn(o);
  if (!p) return {p.error().message, -1};
  auto st = p->WaitFor(std::chrono::seconds(20));
  if (!st) {
    p->Signal(SIGKILL);
    (void)p->Wait();
    return {"timed out", -1};
  }
  return {ReadFile(o.stdout_path), st->Code()};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

TEST(TopTest, OnceShowsNodesGpusAndJobs) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("top-node", 2);
  c.WaitForNodes(1);
  json run = c.Submit({{"name", "long-train"}, {"command", {"sleep", "600"}}, {"gpus_per_node", 2}});
  int64_t run_id = run["id"];
  c.WaitForState(run_id, "RUNNING");
  json wait = c.Submit({{"name", "queued-job"}, {"command", {"true"}}, {"gpus_per_node", 2}});
  std::string reason;
  ASSERT_TRUE(WaitUntil([&] {
    // The submit-time placeholder is replaced by the scheduler's own reason on its next
    // pass; compare against that one, which stays put while the running job holds the GPUs.
    reason = c.Job(wait["id"])["reason"].get<std::string>();
    return !reason.empty() && reason != "waiting for the scheduler";
  }, std::chrono::seconds(10)));

  auto [out, rc] = RunTop(c, {"--once", "--width", "140"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "--once must print no escape codes";
  EXPECT_NE(out.find("nodes 1/1 up   GPUs 2/2 allocated   running 1   pending 1"), std::string::npos) << out;
  EXPECT_NE(out.find("NODES (1)"), std::string::npos) << out;
  EXPECT_NE(out.find("GPUS (2)"), std::string::npos) << out;
  EXPECT_NE(out.find("RUNNING (1)"), std::string::npos) << out;
  EXPECT_NE(out.find("QUEUE (1)"), std::string::npos) << out;
  // A row per GPU, each held by the running job.
  int gpu_rows = 0;
  for (const auto& line : Lines(out)) {
    if (line.rfind("top-node", 0) == 0 && line.find(" " + std::to_string(run_id) + " ") != std::string::npos) ++gpu_rows;
  }
  EXPECT_EQ(gpu_rows, 2) << out;
  EXPECT_NE(out.find("long-train"), std::string::npos) << out;
  EXPECT_NE(out.find("queued-job"), std::string::npos) << out;
  EXPECT_NE(out.find(reason.substr(0, 30)), std::string::npos) << "reason '" << reason << "' missing:\n" << out;

  // A narrow terminal: every line fits.
  auto [narrow, rc2] = RunTop(c, {"--once", "--width", "60"});
  ASSERT_EQ(rc2, 0) << narrow;
  for (const auto& line : Lines(narrow)) EXPECT_LE(CodePoints(line), 60u) << line;
  EXPECT_NE(narrow.find("GPUS (2)"), std::string::npos) << narrow;

  // --json --once prints the dashboard reply.
  auto [js, rc3] = RunTop(c, {"--once", "--json"});
  ASSERT_EQ(rc3, 0) << js;
  json d = json::parse(js, nullptr, false);
  ASSERT_TRUE(d.is_object()) << js;
  EXPECT_EQ(d["running"][0]["id"], run_id);

  // Bad flags and an unreachable head are reported, not drawn.
  auto [bad, rc4] = RunTop(c, {"--once", "--interval", "0"});
  EXPECT_EQ(rc4, 2) << bad;
  EXPECT_NE(bad.find("--interval"), std::string::npos) << bad;
}

// One GPU shared by two jobs: its row names both with their parts (a job's tasks on it
// added up), and the RUNNING table counts a gpu_memory-only job by the part it holds.
TEST(TopTest, ASharedGpuNamesEveryJobOnItWithItsPart) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("top-node", 1);  // one simulated 80 GiB GPU
  c.WaitForNodes(1);
  const int64_t quarters = c.Submit({{"name", "quarters"}, {"command", {"sleep", "600"}},
                                     {"tasks_per_node", 2}, {"gpus_per_task", 0.25}})["id"];
  const int64_t memory = c.Submit({{"name", "memory-only"}, {"command", {"sleep", "600"}},
                                   {"gpu_memory", "20GiB"}})["id"];
  c.WaitForState(quarters, "RUNNING");
  c.WaitForState(memory, "RUNNING");

  auto [out, rc] = RunTop(c, {"--once", "--width", "140"});
  ASSERT_EQ(rc, 0) << out;
  const std::string holders = fmt::format(" {}(0.5),{}(0.25) ", quarters, memory);
  bool gpu_row = false;
  for (const auto& line : Lines(out)) {
    if (line.rfind("top-node  0 ", 0) == 0) gpu_row = line.find(holders) != std::string::npos;
  }
  EXPECT_TRUE(gpu_row) << "GPU 0's row should name" << holders << "\n" << out;
  bool memory_row = false;
  for (const auto& line : Lines(out)) {
    if (line.rfind(std::to_string(memory) + " ", 0) == 0 && line.find("memory-only") != std::string::npos) {
      memory_row = line.find(" 0.25 ") != std::string::npos;
    }
  }
  EXPECT_TRUE(memory_row) << "the gpu_memory-only job holds 0.25 of a GPU:\n" << out;

  auto [narrow, rc2] = RunTop(c, {"--once", "--width", "60"});
  ASSERT_EQ(rc2, 0) << narrow;
  for (const auto& line : Lines(narrow)) EXPECT_LE(CodePoints(line), 60u) << line;
}

TEST(TopTest, UnreachableHeadIsAnError) {
  LocalCluster c;  // no head started: its URL is empty, so point at a closed port
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "top", "--once", "--head", "http://127.0.0.1:1"};
  o.stdout_path = c.dir() + "/top.out";
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value());
  auto st = p->WaitFor(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->Code(), 3) << ReadFile(o.stdout_path);
}

}  // namespace
}  // namespace cohort::testing
