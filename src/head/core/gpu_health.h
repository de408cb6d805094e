// GPU telemetry and health from the agents' heartbeats (a step of the heartbeat
// transition, agents.h).
//
// Each heartbeat carries, per GPU, the latest readings (kept in the node's runtime, shown
// by GET /v1/nodes) and a health-event counter. When the counter grows, the GPU is marked
// unhealthy with the event's text as the reason: the mark is stored with the node, the
// scheduler leaves the GPU out, and every job running on it fails its attempt (and is
// requeued while restarts remain). Only `cohort resume NODE` clears the mark; a new agent
// process on the node keeps it (matched by GPU UUID), and its counters start again at 0.
#pragma once

#include <string>
#include <vector>

#include "head/core/tx.h"

namespace cohort::head::core {

// Records telemetry and turns grown health counters into unhealthy GPUs.
void ApplyGpuReports(Tx& tx, api::Node& node, NodeRuntime& rt, const std::vector<api::GpuReport>& reports);

// Marks GPU `index` of `node` unhealthy and fails (requeues) the jobs holding it.
void MarkGpuUnhealthy(Tx& tx, api::Node& node, int index, const std::string& reason);

}  // namespace cohort::head::core
