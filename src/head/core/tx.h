// Tx: one transition of the head's core in progress (internal to src/head/core).
//
// Bundles what every step of a transition touches: the state it changes, the context it
// reads, the event's time and the effects it collects. Public transitions make one, run
// their steps on it and return its effects. Single-threaded, like the whole core.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

struct Tx {
  Tx(ClusterState& state, const Context& context, Now time) : s(state), ctx(context), now(time) {}

  ClusterState& s;
  const Context& ctx;
  const Now now;
  Effects fx;

  // A scheduling pass should run (something freed resources or joined the queue).
  void RequestSchedule() { fx.schedule = true; }
  // Asks the node's agent for a heartbeat now (if it is UP and has a URL).
  void Wake(const std::string& node);
  // Gives the node a new assignment version (its set of tasks changed) and wakes it.
  void BumpVersion(const std::string& node);
  // Counts a job state change for /metrics (no `from` for a new job).
  void CountTransition(std::optional<api::JobState> from, api::JobState to);
};

}  // namespace cohort::head::core
