// Effects: what a transition of the head's core asks the shell to do once it returns.
//
// The core never writes to the store, sends a request or logs by itself. It changes the
// ClusterState and records here which records changed (the shell stores them, in one
// batch, before it answers the request that caused them), which agents should heartbeat
// now, whose rendezvous keys to drop, whether a scheduling pass should run, the queue
// waits to observe, and the lines to log. A plain value; merged with Merge.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/types.h"

namespace cohort::head::core {

enum class LogLevel { kInfo, kWarn, kError };

struct LogLine {
  LogLevel level = LogLevel::kInfo;
  std::string text;
  bool operator==(const LogLine&) const = default;
};

struct Effects {
  std::set<api::JobId> jobs_to_store;        // changed job records
  std::set<std::string> nodes_to_store;      // changed node records (by name)
  std::set<std::string> nodes_to_remove;     // node records to delete (the node was removed)
  std::set<std::string> wake;                // agent URLs to ask for a heartbeat now
  std::vector<api::JobId> drop_rendezvous;   // jobs whose rendezvous keys go
  bool schedule = false;                     // an event may let more jobs start
  bool teams_changed = false;                // the teams (ClusterState::shares.teams) are to be stored
  std::vector<double> queue_wait_seconds;    // one per attempt started
  std::vector<LogLine> log;

  void StoreJob(const api::Job& job) { jobs_to_store.insert(job.id); }
  void StoreNode(const api::Node& node) { nodes_to_store.insert(node.name); }

  template <typename... Args>
  void Info(fmt::format_string<Args...> f, Args&&... args) {
    log.push_back({LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...)});
  }
  template <typename... Args>
  void Warn(fmt::format_string<Args...> f, Args&&... args) {
    log.push_back({LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...)});
  }

  void Merge(Effects&& o) {
    jobs_to_store.merge(o.jobs_to_store);
    nodes_to_store.merge(o.nodes_to_store);
    nodes_to_remove.merge(o.nodes_to_remove);
    wake.merge(o.wake);
    drop_rendezvous.insert(drop_rendezvous.end(), o.drop_rendezvous.begin(), o.drop_rendezvous.end());
    schedule = schedule || o.schedule;
    teams_changed = teams_changed || o.teams_changed;
    queue_wait_seconds.insert(queue_wait_seconds.end(), o.queue_wait_seconds.begin(), o.queue_wait_seconds.end());
    log.insert(log.end(), std::make_move_iterator(o.log.begin()), std::make_move_iterator(o.log.end()));
  }
};

}  // namespace cohort::head::core
