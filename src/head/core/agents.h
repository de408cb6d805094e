// The agent protocol's transitions in the head's core: registration and heartbeats.
//
// Exactly-once exits: an agent repeats a finished task in every heartbeat until the head
// acknowledges it, and the head acknowledges only after the exit is stored (the shell
// stores the effects before it replies). Lost tasks: every node allocation carries the
// node's assignment version; once an agent reports having applied that version, a task it
// neither runs nor reports finished is gone (the agent restarted, or the task never
// started), and its gang fails. Level-triggered: each reply carries the whole set of
// tasks the head wants on the node.
#pragma once

#include <string>

#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

struct RegisterResult {
  Effects effects;
  api::AgentTiming timing;  // for the registration reply (timing.h), valid once stored
};

// An agent (re)registers its node. A new incarnation of a known node means the previous
// agent process is gone with its tasks: their gangs fail (and are requeued). Unhealthy
// GPU marks survive (matched by UUID). kAlreadyExists, with nothing changed, if another
// live agent (a different incarnation that heartbeated within its failure timeout) holds
// the name. The reply's timing is the current one (timing.h), with this node counted.
Result<RegisterResult> Register(ClusterState& s, const Context& ctx, const api::Registration& reg, Now now);

struct HeartbeatResult {
  Effects effects;
  api::HeartbeatReply reply;  // valid once the effects are stored
};

// A heartbeat from `node`: credits the head's own gap to every node and, after a silence
// the head caused, excuses the node's fences (liveness.h); marks it alive (UP again if it
// was DOWN), records the tasks it reports, confirms stopped attempts, applies GPU
// telemetry and health, records exits of the current attempts (acknowledging every
// finished task), fails gangs whose tasks the agent no longer has, and builds the reply
// with the current timing (timing.h). kNotFound for an unknown node and
// kFailedPrecondition for another incarnation (the agent must register again); nothing
// changes then.
Result<HeartbeatResult> Heartbeat(ClusterState& s, const Context& ctx, const std::string& node,
                                  const api::Heartbeat& hb, Now now);

}  // namespace cohort::head::core
