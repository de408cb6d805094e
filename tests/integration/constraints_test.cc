// Node constraints through the CLI on a real head and agents: agents with --features and
// --memory, jobs with --constraint, --nodelist, --exclude and --mem landing where they
// say, pending reasons that name the blocking constraint, and bad input refused at submit.
#include <gtest/gtest.h>

#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

std::string NodeOf(const json& job) { return job["allocation"]["nodes"][0]["node"].get<std::string>(); }

TEST(Constraints, FeaturesNodelistExcludeAndMemoryPlaceJobsAndExplainWaits) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("gpu-1", 2, 8, {"--features", "a100,ib", "--memory", "64G"});
  c.StartAgent("gpu-2", 2, 8, {"--features", "h100", "--memory", "16G"});
  c.WaitForNodes(2);
  EXPECT_EQ(c.Node("gpu-1")["features"], (json{"a100", "ib"}));
  EXPECT_EQ(c.Node("gpu-1")["memory_bytes"], int64_t{64} << 30);

  auto submit = [&](std::vector<std::string> args) {
    std::vector<std::string> all = {"--json", "submit"};
    all.insert(all.end(), args.begin(), args.end());
    return Cohort(c, all);
  };
  const std::string gate = c.dir() + "/gate";
  const std::vector<std::string> wait_gate = {"--", "sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"};
  auto with = [&](std::vector<std::string> flags) {
    flags.insert(flags.end(), wait_gate.begin(), wait_gate.end());
    return flags;
  };

  // --constraint: only gpu-1 has ib.
  auto ib = submit(with({"-C", "a100&ib", "-G", "1"}));
  ASSERT_EQ(ib.status.Code(), 0) << ib.errors;
  const int64_t ib_id = json::parse(ib.output)["id"];
  EXPECT_EQ(NodeOf(c.WaitForState(ib_id, "RUNNING")), "gpu-1");
  // --exclude gpu-1 and --nodelist gpu-2 both land on gpu-2.
  auto ex = submit(with({"-x", "gpu-[1]", "-G", "1"}));
  ASSERT_EQ(ex.status.Code(), 0) << ex.errors;
  EXPECT_EQ(NodeOf(c.WaitForState(json::parse(ex.output)["id"], "RUNNING")), "gpu-2");
  auto listed = submit(with({"-w", "gpu-2", "-G", "1"}));
  ASSERT_EQ(listed.status.Code(), 0) << listed.errors;
  EXPECT_EQ(NodeOf(c.WaitForState(json::parse(listed.output)["id"], "RUNNING")), "gpu-2");

  // --mem 48G fits gpu-1 once; a second one waits, and its reason says memory blocks.
  auto big = submit(with({"--mem", "48G"}));
  ASSERT_EQ(big.status.Code(), 0) << big.errors;
  EXPECT_EQ(NodeOf(c.WaitForState(json::parse(big.output)["id"], "RUNNING")), "gpu-1");
  auto second = submit(with({"--mem", "48G"}));
  ASSERT_EQ(second.status.Code(), 0) << second.errors;
  const int64_t second_id = json::parse(second.output)["id"];
  std::string reason;
  ASSERT_TRUE(WaitUntil([&] {
    reason = c.Job(second_id)["reason"].get<std::string>();
    return reason.find("--mem 48G") != std::string::npos;
  }, std::chrono::seconds(10))) << reason;
  EXPECT_NE(reason.find("have 16G unreserved at most"), std::string::npos) << reason;
  // The reason shows in `cohort show` too.
  auto show = Cohort(c, {"show", std::to_string(second_id)});
  EXPECT_NE(show.output.find("--mem 48G"), std::string::npos) << show.output;

  // A constraint that matches a node whose GPUs are busy: its reason names it.
  auto busy = submit(with({"-C", "ib", "-G", "2"}));
  ASSERT_EQ(busy.status.Code(), 0) << busy.errors;
  const int64_t busy_id = json::parse(busy.output)["id"];
  ASSERT_TRUE(WaitUntil([&] {
    reason = c.Job(busy_id)["reason"].get<std::string>();
    return reason.find("--constraint 'ib' matches 1 of 2 schedulable nodes") != std::string::npos;
  }, std::chrono::seconds(10))) << reason;

  // Never satisfiable, or malformed: refused at submit with the flag named.
  auto none = submit(with({"-C", "v100"}));
  EXPECT_EQ(none.status.Code(), 1) << none.output;
  EXPECT_NE(none.errors.find("--constraint 'v100' matches no node (features in the cluster: a100, h100, ib)"),
            std::string::npos)
      << none.errors;
  auto absent = submit(with({"-w", "gpu-9"}));
  EXPECT_NE(absent.errors.find("--nodelist names gpu-9, which is not in the cluster"), std::string::npos)
      << absent.errors;
  auto too_much = submit(with({"--mem", "1T"}));
  EXPECT_NE(too_much.errors.find("--mem 1T per node on 1 node, but no eligible node has that much (the largest has 64G)"),
            std::string::npos)
      << too_much.errors;
  auto syntax = submit(with({"-C", "a100&"}));
  EXPECT_EQ(syntax.status.Code(), 2) << "checked before anything is sent";
  EXPECT_NE(syntax.errors.find("a feature name is missing after '&'"), std::string::npos) << syntax.errors;
  auto bad_list = submit(with({"-w", "gpu-[2-1]"}));
  EXPECT_EQ(bad_list.status.Code(), 2);
  EXPECT_NE(bad_list.errors.find("runs backwards"), std::string::npos) << bad_list.errors;
  auto bad_mem = submit(with({"--mem", "lots"}));
  EXPECT_EQ(bad_mem.status.Code(), 2);
  EXPECT_NE(bad_mem.errors.find("--mem: 'lots' is not a memory size"), std::string::npos) << bad_mem.errors;

  // The head checks the syntax itself for clients that skip the CLI.
  auto [status, body] = PostRaw(c, "/v1/jobs", R"({"command": ["true"], "constraint": "(a100"})");
  EXPECT_EQ(status, 400) << body.dump();
  EXPECT_NE(body.dump().find("'(' without ')'"), std::string::npos) << body.dump();

  std::ofstream(gate).put('\n');
  c.WaitForState(second_id, "SUCCEEDED", std::chrono::seconds(30));
  c.WaitForState(busy_id, "SUCCEEDED", std::chrono::seconds(30));
}

}  // namespace
}  // namespace cohort::testing
