// Adaptive heartbeat timing: the interval and timeouts the head gives its agents, chosen
// from the number of nodes so that the head's total heartbeat rate stays within a target.
//
// The operator configures a base timing (--heartbeat-interval, --failure-timeout,
// --fence-timeout) and a target rate (--heartbeat-rate-target, heartbeats per second the
// head should handle). With N nodes the interval is the base interval, or N / target
// seconds when that is longer, rounded up to a quarter of the base interval (so a few
// more nodes do not change it every time). The failure and fence timeouts grow by the
// same factor as the interval, so every relation the base keeps still holds: fence
// timeout < failure timeout, and at least two intervals in the fence timeout. The kill
// grace does not change. Within one run the interval only grows, unless an operator
// removes nodes (remove_node.h): it may shrink then, which the rule below covers.
//
// The timing travels to the agents in the registration reply and in every heartbeat
// reply; an agent uses the newest it got (its interval, its lease and its fence). The
// agent's fence must fire before the head may declare the node DOWN, also while the
// timing changes: the head holds each node to the longest failure timeout it granted
// that node within the last such timeout (Grant, NodeFailureTimeoutMs). When the timing
// grows, the node is held to the new, longer timeout at once (its agent fences earlier,
// by the old one, which is safe); when it shrinks (a head restarted with a higher target
// or shorter base), the old, longer one binds for one old failure timeout after the
// shorter one is sent, by which time the leases granted under the old one have run out.
// A restarted head, which has not granted anything yet, holds every node to the longest
// timeout it granted before the restart (stored in the state store's meta) for one such
// timeout (AdoptGrantedBeforeRestart).
//
// Pure functions over plain values (the core's rules: no clock, no lock, no I/O).
#pragma once

#include <cstdint>
#include <string>

#include "api/types.h"
#include "common/error.h"
#include "head/core/state.h"

namespace cohort::head::core {

// The default --heartbeat-rate-target: heartbeats per second one head handles with room
// to spare (bench_head_scale: 10,000 nodes on a 2-core machine).
inline constexpr double kDefaultHeartbeatRateTarget = 1000;

// The meta key under which the shell stores the longest failure timeout granted
// (milliseconds, decimal).
inline constexpr char kGrantedFailureTimeoutMeta[] = "granted_failure_timeout_ms";

// kInvalidArgument unless `per_second` is a finite number of heartbeats per second in
// [1, 1,000,000].
Result<void> ValidateHeartbeatRateTarget(double per_second);

// The timing for `nodes` nodes: `base` when nodes / rate_target fits in its interval,
// otherwise the interval that does (rounded up to a quarter of the base interval) with
// the failure and fence timeouts scaled by the same factor (failure rounded up, fence
// down). `base` must keep 2 intervals <= fence < failure (HeadServer::Start checks).
api::AgentTiming ScaledTiming(const api::AgentTiming& base, size_t nodes, double rate_target);

// The timing the head gives its agents now: ScaledTiming for the nodes it knows.
api::AgentTiming CurrentTiming(const ClusterState& s, const Context& ctx);

// The node's agent is sent `timing` now (in a registration or heartbeat reply): records
// it, and keeps a longer failure timeout granted before binding for one such timeout.
void Grant(NodeRuntime& rt, const api::AgentTiming& timing, Now now);

// How long the node may be silent before it is DOWN: the longest of the current failure
// timeout, the one last granted to the node, and a longer one granted before that is
// still within its window.
int64_t NodeFailureTimeoutMs(const ClusterState& s, const Context& ctx, const NodeRuntime& rt, Now now);
// The same with the current failure timeout given (CurrentTiming), for passes over every node.
int64_t NodeFailureTimeoutMs(int64_t current_failure_ms, const NodeRuntime& rt, Now now);

// After a restart: every node is held to `failure_timeout_ms` (the longest granted before
// the restart) for that long from `now`, as if it had just been granted and replaced.
void AdoptGrantedBeforeRestart(ClusterState& s, int64_t failure_timeout_ms, Now now);

}  // namespace cohort::head::core
