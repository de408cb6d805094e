// Teams in the head's core: creating, changing and removing them (admins), and the team
// a submitted job counts against.
//
// A team (api/team.h) has a nominal GPU quota, a borrow limit, a fair-share weight and
// users; a user belongs to at most one team. A job names its team in its spec, or gets
// its user's, else "default" (which exists without being created). Every change is
// checked whole before anything changes: on error the state is as it was. Changes are
// stored with the next group commit (Effects::teams_changed). Single-threaded like the
// whole core.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/team.h"
#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// The meta key the teams are stored under (api::TeamsToJson).
inline constexpr char kTeamsMeta[] = "teams";

// The team `job` counts against: its spec's, or "default" (jobs stored before teams).
std::string_view TeamOf(const api::Job& job);

// The created team `name`, or the implicit one (quota 0, unlimited borrowing, weight 1).
api::Team TeamOrImplicit(const ShareState& shares, std::string_view name);

// The team `user` belongs to, or "default".
std::string TeamOfUser(const ShareState& shares, std::string_view user);

// Fills in a submission's team: the spec's, which must exist (or be "default") and, unless
// `any_team` (admins), list the job's user; else the user's team, else "default".
// kNotFound for an unknown team, kPermissionDenied for a team the user is not in.
Result<void> ResolveTeam(const ClusterState& s, api::JobSpec& spec, bool any_team);

// GPU share units (api::kGpuShareUnits per GPU) the RUNNING jobs of `team` hold now: a
// sharing job counts its parts of GPUs (api::AllocationShareUnits).
int64_t TeamUnitsInUse(const ClusterState& s, std::string_view team);

// kAlreadyExists for a name taken; kFailedPrecondition for a user already in another team
// or too many teams; kInvalidArgument for a team api::ValidateTeam refuses.
Result<Effects> CreateTeam(ClusterState& s, const Context& ctx, api::Team team, Now now);

// Applies `patch` to team `name`. kNotFound for an unknown team; kInvalidArgument for a
// result api::ValidateTeam refuses, for removing a user the team does not have, and for a
// quota below the GPUs the team's running jobs hold now; kFailedPrecondition for adding a
// user of another team. Returns the effects and the team as changed.
Result<Effects> UpdateTeam(ClusterState& s, const Context& ctx, const std::string& name, const api::TeamPatch& patch,
                           Now now);

// Removes team `name`; its users belong to no team, its usage is forgotten. kNotFound for
// an unknown team; kFailedPrecondition while jobs of it are pending or running (except
// "default", whose jobs stay in the implicit team).
Result<Effects> RemoveTeam(ClusterState& s, const Context& ctx, const std::string& name, Now now);

// Every created team, by name.
std::vector<api::Team> ListTeams(const ClusterState& s);

// Takes the stored teams into a state that has none yet.
void LoadTeams(ClusterState& s, std::vector<api::Team> teams);

}  // namespace cohort::head::core
