#include "head/core/timing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace cohort::head::core {

Result<void> ValidateHeartbeatRateTarget(double per_second) {
  if (std::isfinite(per_second) && per_second >= 1 && per_second <= 1'000'000) return {};
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("the heartbeat rate target must be a number of heartbeats per second in [1, "
                               "1000000], got {}",
                               per_second),
                   "heartbeat_rate_target");
}

api::AgentTiming ScaledTiming(const api::AgentTiming& base, size_t nodes, double rate_target) {
  const int64_t base_ms = std::max<int64_t>(1, base.heartbeat_interval_ms);
  // The interval at which `nodes` heartbeats per interval come at `rate_target` per second.
  const double needed = static_cast<double>(nodes) * 1000.0 / std::max(rate_target, 1.0);
  if (needed <= static_cast<double>(base_ms)) return base;
  const int64_t step = std::max<int64_t>(1, base_ms / 4);
  // Bounded so that the scaled timeouts below cannot overflow: a day at most.
  const int64_t wanted = static_cast<int64_t>(std::min(std::ceil(needed), 86'400'000.0));
  const int64_t interval = std::max(base_ms, (wanted + step - 1) / step * step);
  api::AgentTiming t = base;
  t.heartbeat_interval_ms = interval;
  // failure * interval / base, rounded up; fence rounded down: fence < failure and
  // 2 intervals <= fence hold as they do in the base.
  t.failure_timeout_ms = (base.failure_timeout_ms * interval + base_ms - 1) / base_ms;
  t.fence_timeout_ms = base.fence_timeout_ms * interval / base_ms;
  return t;
}

api::AgentTiming CurrentTiming(const ClusterState& s, const Context& ctx) {
  return ScaledTiming(ctx.base_timing, s.nodes.size(), ctx.heartbeat_rate_target);
}

void Grant(NodeRuntime& rt, const api::AgentTiming& timing, Now now) {
  if (rt.previous_until_mono_ms < now.mono_ms) rt.previous_failure_timeout_ms = 0;
  if (rt.granted && rt.granted->failure_timeout_ms > timing.failure_timeout_ms) {
    // Leases granted under the longer timeout may outlive the shorter one: it binds for
    // one more of itself.
    rt.previous_failure_timeout_ms = std::max(rt.previous_failure_timeout_ms, rt.granted->failure_timeout_ms);
    rt.previous_until_mono_ms = now.mono_ms + rt.previous_failure_timeout_ms;
  }
  rt.granted = timing;
}

int64_t NodeFailureTimeoutMs(const ClusterState& s, const Context& ctx, const NodeRuntime& rt, Now now) {
  return NodeFailureTimeoutMs(CurrentTiming(s, ctx).failure_timeout_ms, rt, now);
}

int64_t NodeFailureTimeoutMs(int64_t current_failure_ms, const NodeRuntime& rt, Now now) {
  int64_t t = current_failure_ms;
  if (rt.granted) t = std::max(t, rt.granted->failure_timeout_ms);
  if (rt.previous_until_mono_ms >= now.mono_ms) t = std::max(t, rt.previous_failure_timeout_ms);
  return t;
}

void AdoptGrantedBeforeRestart(ClusterState& s, int64_t failure_timeout_ms, Now now) {
  if (failure_timeout_ms <= 0) return;
  for (auto& [name, rt] : s.runtime) {
    rt.previous_failure_timeout_ms = std::max(rt.previous_failure_timeout_ms, failure_timeout_ms);
    rt.previous_until_mono_ms = std::max(rt.previous_until_mono_ms, now.mono_ms + failure_timeout_ms);
  }
}

}  // namespace cohort::head::core
