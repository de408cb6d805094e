// Removing a node that has left the cluster (`cohort node rm`, DELETE /v1/nodes/{name}).
//
// Nodes are otherwise never forgotten: a machine retired for good stays DOWN in every list,
// and its name in the timing's node count. Removal forgets it: its record (deleted from the
// store), its runtime and its shape. Only a node that is not alive may go: DOWN, or silent
// past its failure timeout (UNREACHABLE while the unhealthy zone holds): its agent has
// fenced its tasks by then. A node still holding work (running gangs, or attempts not yet
// confirmed stopped) is kept unless forced; forced, its gangs fail as on a DOWN node
// (requeued when restarts remain) and its stopping attempts are let go, as the agent is
// gone with them. An alive node is never removed, forced or not: stop its agent first
// (drain it to let its jobs finish). The node's credential is the shell's business
// (head/auth.h retires it); the name may register again with a join token.
#pragma once

#include <string>

#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// OK if RemoveNode would remove `node` now; kNotFound for an unknown node,
// kFailedPrecondition saying why not (alive; still holding work, without `force`).
Result<void> CanRemoveNode(const ClusterState& s, const Context& ctx, const std::string& node, bool force, Now now);

// Removes `node` (CanRemoveNode's errors, with nothing changed): fails its gangs when
// forced, forgets it, and asks for its record's deletion and a scheduling pass.
Result<Effects> RemoveNode(ClusterState& s, const Context& ctx, const std::string& node, bool force, Now now);

}  // namespace cohort::head::core
