#include "store_test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace cohort::store::testing {

api::Job FullJob(std::optional<int> exit_code) {
  api::Job job;
  job.id = 77;  // ignored by CreateJob
  job.spec.name = "train-gpt.v2";
  job.spec.user = "alice_b";
  job.spec.command = {"/usr/bin/python3", "train.py", "--lr=3e-4", "quote\"s and\nnewline", "ünïcødé ✓"};
  job.spec.env = {{"NCCL_DEBUG", "INFO"}, {"EMPTY", ""}, {"PATHS", "/a:/b"}};
  job.spec.workdir = "/scratch/alice";
  job.spec.nodes = 2;
  job.spec.tasks_per_node = 2;
  job.spec.gpus_per_node = 4;
  job.spec.cpus_per_task = 8;
  job.spec.priority = -17;
  job.spec.placement = api::Placement::kSpread;
  job.spec.max_restarts = 5;
  job.spec.time_limit_s = 3600;
  job.state = api::JobState::kFailed;
  job.reason = "rank 1 exited with code 3";
  job.attempt = 2;
  job.submit_ms = 1'700'000'000'123;
  job.start_ms = 1'700'000'100'456;
  job.end_ms = 1'700'000'200'789;
  job.exit_code = exit_code;
  for (int n = 0; n < 2; ++n) {
    api::NodeAllocation na;
    na.node = n == 0 ? "node-b" : "node-a";
    na.address = n == 0 ? "10.0.0.2" : "10.0.0.1";
    na.node_rank = n;
    na.gpus = n == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{4, 5, 6, 7};
    na.cpus = 16 + n;
    for (int t = 0; t < 2; ++t) {
      na.tasks.push_back({n * 2 + t, t, {na.gpus[2 * t], na.gpus[2 * t + 1]}});
    }
    na.version = 40 + n;
    job.allocation.nodes.push_back(na);
  }
  job.allocation.master_addr = "10.0.0.2";
  job.allocation.master_port = 29500;
  job.exits.push_back({1, "node-b", 3, 0, "", 1'700'000'200'000});
  job.exits.push_back({2, "node-a", -1, 9, "killed: SIGKILL", 1'700'000'200'500});
  job.history.push_back({0, 1'700'000'010'000, 1'700'000'050'000, {"node-c", "node-d"}, "node node-c DOWN"});
  job.history.push_back({1, 1'700'000'060'000, 1'700'000'090'000, {"node-b"}, "task failed"});
  return job;
}

api::Job SmallJob(std::string name) {
  api::Job job;
  job.spec.name = std::move(name);
  job.spec.user = "tester";
  job.spec.command = {"true"};
  job.submit_ms = 1000;
  return job;
}

api::Node FullNode(std::string name, int gpus) {
  api::Node node;
  node.name = std::move(name);
  node.address = "192.168.1.7";
  node.agent_url = "http://192.168.1.7:7071";
  node.incarnation = "inc-0042";
  node.version = "0.1.0";
  for (int i = 0; i < gpus; ++i) {
    node.gpus.push_back({i, "NVIDIA H100 80GB HBM3", "GPU-" + std::to_string(1000 + i),
                         int64_t(80) << 30, i % 2 == 1});
  }
  node.cpus = 96;
  node.state = api::NodeState::kDown;
  node.reason = "missed 3 heartbeats";
  node.drain = true;
  node.drain_reason = "maintenance";
  node.registered_ms = 1'700'000'000'001;
  node.last_heartbeat_ms = 1'700'000'000'999;
  return node;
}

void ExpectJobEq(const api::Job& w, const api::Job& g, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(w.id, g.id);
  EXPECT_EQ(w.spec.name, g.spec.name);
  EXPECT_EQ(w.spec.user, g.spec.user);
  EXPECT_EQ(w.spec.command, g.spec.command);
  EXPECT_EQ(w.spec.env, g.spec.env);
  EXPECT_EQ(w.spec.workdir, g.spec.workdir);
  EXPECT_EQ(w.spec.nodes, g.spec.nodes);
  EXPECT_EQ(w.spec.tasks_per_node, g.spec.tasks_per_node);
  EXPECT_EQ(w.spec.gpus_per_node, g.spec.gpus_per_node);
  EXPECT_EQ(w.spec.cpus_per_task, g.spec.cpus_per_task);
  EXPECT_EQ(w.spec.priority, g.spec.priority);
  EXPECT_EQ(w.spec.placement, g.spec.placement);
  EXPECT_EQ(w.spec.max_restarts, g.spec.max_restarts);
  EXPECT_EQ(w.spec.time_limit_s, g.spec.time_limit_s);
  EXPECT_EQ(w.state, g.state);
  EXPECT_EQ(w.reason, g.reason);
  EXPECT_EQ(w.attempt, g.attempt);
  EXPECT_EQ(w.submit_ms, g.submit_ms);
  EXPECT_EQ(w.start_ms, g.start_ms);
  EXPECT_EQ(w.end_ms, g.end_ms);
  EXPECT_EQ(w.exit_code, g.exit_code);
  EXPECT_EQ(w.allocation.master_addr, g.allocation.master_addr);
  EXPECT_EQ(w.allocation.master_port, g.allocation.master_port);
  ASSERT_EQ(w.allocation.nodes.size(), g.allocation.nodes.size());
  for (size_t i = 0; i < w.allocation.nodes.size(); ++i) {
    const auto& wn = w.allocation.nodes[i];
    const auto& gn = g.allocation.nodes[i];
    SCOPED_TRACE("allocation.nodes[" + std::to_string(i) + "]");
    EXPECT_EQ(wn.node, gn.node);
    EXPECT_EQ(wn.address, gn.address);
    EXPECT_EQ(wn.node_rank, gn.node_rank);
    EXPECT_EQ(wn.gpus, gn.gpus);
    EXPECT_EQ(wn.cpus, gn.cpus);
    EXPECT_EQ(wn.version, gn.version);
    ASSERT_EQ(wn.tasks.size(), gn.tasks.size());
    for (size_t t = 0; t < wn.tasks.size(); ++t) {
      EXPECT_EQ(wn.tasks[t].rank, gn.tasks[t].rank);
      EXPECT_EQ(wn.tasks[t].local_rank, gn.tasks[t].local_rank);
      EXPECT_EQ(wn.tasks[t].gpus, gn.tasks[t].gpus);
    }
  }
  ASSERT_EQ(w.exits.size(), g.exits.size());
  for (size_t i = 0; i < w.exits.size(); ++i) {
    SCOPED_TRACE("exits[" + std::to_string(i) + "]");
    EXPECT_EQ(w.exits[i].rank, g.exits[i].rank);
    EXPECT_EQ(w.exits[i].node, g.exits[i].node);
    EXPECT_EQ(w.exits[i].exit_code, g.exits[i].exit_code);
    EXPECT_EQ(w.exits[i].signal, g.exits[i].signal);
    EXPECT_EQ(w.exits[i].error, g.exits[i].error);
    EXPECT_EQ(w.exits[i].finished_ms, g.exits[i].finished_ms);
  }
  ASSERT_EQ(w.history.size(), g.history.size());
  for (size_t i = 0; i < w.history.size(); ++i) {
    SCOPED_TRACE("history[" + std::to_string(i) + "]");
    EXPECT_EQ(w.history[i].attempt, g.history[i].attempt);
    EXPECT_EQ(w.history[i].start_ms, g.history[i].start_ms);
    EXPECT_EQ(w.history[i].end_ms, g.history[i].end_ms);
    EXPECT_EQ(w.history[i].nodes, g.history[i].nodes);
    EXPECT_EQ(w.history[i].end_reason, g.history[i].end_reason);
  }
}

void ExpectNodeEq(const api::Node& w, const api::Node& g, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(w.name, g.name);
  EXPECT_EQ(w.address, g.address);
  EXPECT_EQ(w.agent_url, g.agent_url);
  EXPECT_EQ(w.incarnation, g.incarnation);
  EXPECT_EQ(w.version, g.version);
  EXPECT_EQ(w.cpus, g.cpus);
  EXPECT_EQ(w.state, g.state);
  EXPECT_EQ(w.reason, g.reason);
  EXPECT_EQ(w.drain, g.drain);
  EXPECT_EQ(w.drain_reason, g.drain_reason);
  EXPECT_EQ(w.registered_ms, g.registered_ms);
  EXPECT_EQ(w.last_heartbeat_ms, g.last_heartbeat_ms);
  ASSERT_EQ(w.gpus.size(), g.gpus.size());
  for (size_t i = 0; i < w.gpus.size(); ++i) {
    SCOPED_TRACE("gpus[" + std::to_string(i) + "]");
    EXPECT_EQ(w.gpus[i].index, g.gpus[i].index);
    EXPECT_EQ(w.gpus[i].name, g.gpus[i].name);
    EXPECT_EQ(w.gpus[i].uuid, g.gpus[i].uuid);
    EXPECT_EQ(w.gpus[i].memory_bytes, g.gpus[i].memory_bytes);
    EXPECT_EQ(w.gpus[i].simulated, g.gpus[i].simulated);
  }
}

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cohort-store-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace cohort::store::testing
