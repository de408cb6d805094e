// What the head's Cluster tests play an agent with: a node's registration and the task
// reports of a reply's tasks, running.
#pragma once

#include <string>
#include <vector>

#include "api/types.h"

namespace cohort::head::test_agent {

// A node of 8 CPUs and one simulated GPU (uuid "GPU-<name>").
inline api::Registration Reg(const std::string& name, const std::string& incarnation = "inc1") {
  api::Registration r;
  r.name = name;
  r.address = "127.0.0.1";
  r.incarnation = incarnation;
  r.cpus = 8;
  api::Gpu g;
  g.index = 0;
  g.name = "sim";
  g.uuid = "GPU-" + name;
  g.memory_bytes = 1 << 30;
  g.simulated = true;
  r.gpus.push_back(g);
  return r;
}

// The agent's view after a reply: the tasks it was told to run, running.
inline std::vector<api::TaskReport> Running(const api::HeartbeatReply& reply) {
  std::vector<api::TaskReport> out;
  for (const auto& t : reply.tasks) {
    api::TaskReport r;
    r.job = t.job;
    r.attempt = t.attempt;
    r.rank = t.rank;
    r.gpus = t.gpus;
    r.cpus = t.cpus;
    out.push_back(r);
  }
  return out;
}

}  // namespace cohort::head::test_agent
