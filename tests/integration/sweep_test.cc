// A grid sweep of `cohort train` over two learning rates on a real head and agent: each
// element trains with its own value (read back from its log), and `cohort sweep show`
// ranks the elements by the loss they last reported.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"

namespace cohort::testing {
namespace {

TEST(Sweep, GridOfTwoLearningRatesTrainsEachAndRanksThem) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string cfg = c.dir() + "/train.yaml", spec = c.dir() + "/sweep.json";
  {
    std::ofstream corpus(c.dir() + "/corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "each element trains with its own learning rate " << i % 5 << ".\n";
    std::ofstream(cfg) << "model: {n_layer: 1, n_head: 2, n_embd: 32, seq_len: 32}\n"
                          "data: {text: corpus.txt}\n"
                          "train: {steps: 4, micro_batch: 2, lr: 1.0e-2, threads: 1}\n"
                          "log: {every: 1}\n";
    // As a spec file writes it (YAML reads to the same JSON).
    std::ofstream(spec) << json{{"name", "lr-sweep"},
                                {"command", {COHORT_BINARY, "train", "--config", cfg}},
                                {"env", {{"OMP_NUM_THREADS", "1"}}},
                                {"sweep", {{"grid", {{"train.lr", {3.0e-4, 3.0e-3}}}}}}}
                                .dump();
  }
  auto sub = Cohort(c, {"submit", spec});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  const int64_t id = std::stoll(sub.output.substr(sub.output.find("job ") + 4));
  json done = c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(done["spec"]["array"], "0-1");

  auto ranked = c.client().Get("/v1/jobs/" + std::to_string(id) + "/sweep");
  ASSERT_TRUE(ranked.has_value()) << ranked.error().message;
  const json& elements = (*ranked)["elements"];
  ASSERT_EQ(elements.size(), 2u) << ranked->dump();
  std::map<std::string, std::string> want = {{"0.0003", "lr 3.00e-04"}, {"0.003", "lr 3.00e-03"}};
  for (const auto& e : elements) {
    const std::string lr = e["values"]["train.lr"];
    ASSERT_TRUE(want.contains(lr)) << e.dump();
    // The agent serves logs once its node certificate is in place, which a job this short
    // may beat: wait for the log to be readable.
    std::string log;
    EXPECT_TRUE(WaitUntil([&] {
      log = c.Logs(e["id"].get<int64_t>(), 0);
      return log.find("step") != std::string::npos;
    }, std::chrono::seconds(15)));
    EXPECT_NE(log.find(want[lr]), std::string::npos) << "element with train.lr " << lr << " logged:\n" << log;
    EXPECT_EQ(e["step"], 4) << e.dump();
  }
  EXPECT_LE(elements[0]["loss"].get<double>(), elements[1]["loss"].get<double>()) << "ranked by loss, best first";

  auto show = Cohort(c, {"sweep", "show", std::to_string(id)});
  ASSERT_EQ(show.status.Code(), 0) << show.errors;
  EXPECT_NE(show.output.find("RANK  ELEMENT"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find("train.lr"), std::string::npos) << show.output;
  const std::string best = elements[0]["values"]["train.lr"];
  const auto first_row = show.output.find("\n1 ");
  ASSERT_NE(first_row, std::string::npos) << show.output;
  EXPECT_NE(show.output.substr(first_row, show.output.find('\n', first_row + 1) - first_row).find(best),
            std::string::npos)
      << show.output;
}

// `cohort sweep show` of a sweep still running under its `parallel` lists every point: the
// ones not started yet with the values they will run with, not only those made.
TEST(Sweep, ShowListsThePointsNotStartedYetWithTheirValues) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate", spec = c.dir() + "/sweep.json";
  std::ofstream(spec) << json{{"name", "wait-sweep"},
                              {"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                              {"sweep", {{"grid", {{"lr", {0.1, 0.2, 0.3}}}}, {"parallel", 1}}}}
                             .dump();
  auto sub = Cohort(c, {"submit", spec});
  ASSERT_EQ(sub.status.Code(), 0) << sub.errors;
  const int64_t id = std::stoll(sub.output.substr(sub.output.find("job ") + 4));
  const std::string a = std::to_string(id);
  ASSERT_TRUE(WaitUntil([&] {
    auto j = c.client().Get("/v1/jobs/" + a + "_0");
    return j && (*j)["state"] == "RUNNING";
  }, std::chrono::seconds(20)));
  auto show = Cohort(c, {"sweep", "show", a});
  ASSERT_EQ(show.status.Code(), 0) << show.errors;
  // The line of element `task`, its columns single-spaced.
  auto row = [&](int task) {
    std::istringstream lines(show.output);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string word, out;
      while (words >> word) out += (out.empty() ? "" : " ") + word;
      if (out.find(" " + a + "_" + std::to_string(task) + " ") != std::string::npos) return out;
    }
    return std::string();
  };
  EXPECT_EQ(row(0), "- " + a + "_0 RUNNING - - 0.1") << show.output;
  EXPECT_EQ(row(1), "- " + a + "_1 PENDING - - 0.2") << show.output;
  EXPECT_EQ(row(2), "- " + a + "_2 PENDING - - 0.3") << show.output;
  auto reply = c.client().Get("/v1/jobs/" + a + "/sweep");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ((*reply)["waiting"], 2) << reply->dump();
  std::ofstream(gate).put('\n');
  c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(30));
}

}  // namespace
}  // namespace cohort::testing
