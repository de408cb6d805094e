// A harness for the head's functional core: a ClusterState, a Context whose rendezvous
// tokens and progress reports are plain maps, and a clock the test moves by hand. No
// threads, sockets, store or sleeps: each helper calls one transition and keeps its
// effects for the test to inspect.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "head/core/agents.h"
#include "head/core/drain.h"
#include "head/core/liveness.h"
#include "head/core/queries.h"
#include "head/core/schedule.h"
#include "head/core/submit.h"

namespace cohort::head::core::testing {

inline api::Registration Reg(const std::string& name, int gpus = 2, const std::string& incarnation = "inc1") {
  api::Registration r;
  r.name = name;
  r.address = "10.0.0." + name.substr(name.size() - 1);
  r.agent_url = "http://agent-" + name;
  r.incarnation = incarnation;
  r.version = "test";
  r.cpus = 8;
  for (int i = 0; i < gpus; ++i) {
    api::Gpu g;
    g.index = i;
    g.name = "sim";
    g.uuid = "GPU-" + name + "-" + std::to_string(i);
    g.memory_bytes = 1 << 30;
    g.simulated = true;
    r.gpus.push_back(g);
  }
  return r;
}

inline api::JobSpec Spec(int nodes, int gpus_per_node, int max_restarts = 0) {
  api::JobSpec s;
  s.name = "train";
  s.user = "alice";
  s.command = {"train"};
  s.nodes = nodes;
  s.gpus_per_node = gpus_per_node;
  s.max_restarts = max_restarts;
  return s;
}

inline api::TaskReport Running(api::JobId job, int attempt, int rank, std::vector<int> gpus = {}) {
  api::TaskReport t;
  t.job = job;
  t.attempt = attempt;
  t.rank = rank;
  t.running = true;
  t.gpus = std::move(gpus);
  return t;
}

inline api::TaskReport Exited(api::JobId job, int attempt, int rank, int code) {
  api::TaskReport t = Running(job, attempt, rank);
  t.running = false;
  t.exit_code = code;
  t.finished_ms = 0;  // as the head hears it (a test sets an earlier time when it matters)
  return t;
}

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    ctx_.base_timing.failure_timeout_ms = 3000;
    ctx_.head_url = "http://head:8470";
    ctx_.checkpoint_root = "/ckpt";
    ctx_.rendezvous_token = [](api::JobId j, int a) { return "tok-" + std::to_string(j) + "-" + std::to_string(a); };
    ctx_.latest_progress = [this](api::JobId j, int a) -> std::optional<ProgressPoint> {
      auto it = progress_.find({j, a});
      if (it == progress_.end()) return std::nullopt;
      return it->second;
    };
    ctx_.newest_checkpoint = [this](api::JobId j) -> std::optional<int64_t> {
      std::optional<int64_t> best;
      for (const auto& [key, p] : progress_) {
        if (key.first == j && p.checkpoint_step) best = std::max(best.value_or(-1), *p.checkpoint_step);
      }
      return best;
    };
    state_ = LoadState({}, {}, now_);
  }

  void Advance(int64_t ms) {
    now_.unix_ms += ms;
    now_.mono_ms += ms;
  }

  void Register(const api::Registration& reg) {
    auto fx = core::Register(state_, ctx_, reg, now_);
    ASSERT_TRUE(fx.has_value()) << fx.error().message;
    fx_ = std::move(fx->effects);
    timing_ = fx->timing;
  }

  // AcceptJob, then the id the store would give, then AddJob (as the shell does).
  api::JobId Submit(api::JobSpec spec) {
    auto job = AcceptJob(state_, ctx_, std::move(spec), now_);
    EXPECT_TRUE(job.has_value()) << job.error().message;
    if (!job) return 0;
    job->id = next_id_++;
    fx_ = AddJob(state_, ctx_, *job, now_);
    return job->id;
  }

  int Pass() {
    PassResult r = core::Schedule(state_, ctx_, now_);
    fx_ = std::move(r.effects);
    return r.started;
  }

  // A heartbeat from `node` that has applied everything the head sent it so far.
  api::HeartbeatReply Beat(const std::string& node, std::vector<api::TaskReport> tasks = {}) {
    api::Heartbeat hb;
    hb.incarnation = state_.nodes.at(node).incarnation;
    hb.applied_version = state_.runtime.at(node).desired_version;
    hb.tasks = std::move(tasks);
    auto r = core::Heartbeat(state_, ctx_, node, hb, now_);
    EXPECT_TRUE(r.has_value()) << r.error().message;
    if (!r) return {};
    fx_ = std::move(r->effects);
    return r->reply;
  }

  const api::Job& Job(api::JobId id) const { return state_.jobs.at(id); }

  bool Logged(const std::string& part) const {
    for (const auto& l : fx_.log) {
      if (l.text.find(part) != std::string::npos) return true;
    }
    return false;
  }

  ClusterState state_;
  Context ctx_;
  Now now_{1'700'000'000'000, 5'000'000};
  Effects fx_;  // the last transition's
  api::AgentTiming timing_;  // the last registration reply's
  std::map<std::pair<api::JobId, int>, ProgressPoint> progress_;
  api::JobId next_id_ = 1;
};

}  // namespace cohort::head::core::testing
