#include "head/core/teams.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Team;

namespace {

// The created team, other than `except`, that lists `user`; null if none.
const Team* TeamListing(const ShareState& shares, std::string_view user, std::string_view except = {}) {
  for (const auto& [name, team] : shares.teams) {
    if (name == except) continue;
    if (std::binary_search(team.users.begin(), team.users.end(), user)) return &team;
  }
  return nullptr;
}

// kFailedPrecondition if a user of `team` already belongs to another team.
Result<void> CheckUsersFree(const ShareState& shares, const Team& team) {
  for (const auto& u : team.users) {
    if (const Team* other = TeamListing(shares, u, team.name)) {
      return Errorf(ErrorCode::kFailedPrecondition,
                    "users: '{}' already belongs to team '{}' (a user is in one team; remove them there first)", u,
                    other->name);
    }
  }
  return {};
}

int ActiveJobsOf(const ClusterState& s, std::string_view team) {
  int n = 0;
  for (const auto& [id, job] : s.jobs) {
    if (!api::IsTerminal(job.state) && TeamOf(job) == team) ++n;
  }
  return n;
}

}  // namespace

std::string_view TeamOf(const api::Job& job) {
  return job.spec.team.empty() ? api::kDefaultTeam : std::string_view(job.spec.team);
}

Team TeamOrImplicit(const ShareState& shares, std::string_view name) {
  auto it = shares.teams.find(std::string(name));
  return it == shares.teams.end() ? api::ImplicitTeam(name) : it->second;
}

std::string TeamOfUser(const ShareState& shares, std::string_view user) {
  const Team* t = TeamListing(shares, user);
  return t ? t->name : std::string(api::kDefaultTeam);
}

Result<void> ResolveTeam(const ClusterState& s, api::JobSpec& spec, bool any_team) {
  if (spec.team.empty()) {
    spec.team = TeamOfUser(s.shares, spec.user);
    return {};
  }
  if (spec.team == api::kDefaultTeam) return {};
  auto it = s.shares.teams.find(spec.team);
  if (it == s.shares.teams.end()) {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("team: unknown team '{}' (see cohort team ls; an admin creates teams)", spec.team),
                     "team");
  }
  const auto& users = it->second.users;
  if (!any_team && !std::binary_search(users.begin(), users.end(), spec.user)) {
    return MakeError(ErrorCode::kPermissionDenied,
                     fmt::format("team: user '{}' is not in team '{}' (its users: {})", spec.user, spec.team,
                                 users.empty() ? std::string("none") : fmt::format("{}", fmt::join(users, ", "))),
                     "team");
  }
  return {};
}

int64_t TeamUnitsInUse(const ClusterState& s, std::string_view team) {
  int64_t units = 0;
  for (const auto& [node, ids] : s.node_jobs) {
    for (api::JobId id : ids) {
      const api::Job& job = s.jobs.at(id);
      if (TeamOf(job) != team) continue;
      for (const auto& na : job.allocation.nodes) {
        if (na.node == node) units += api::AllocationShareUnits(job.spec, na);
      }
    }
  }
  return units;
}

Result<Effects> CreateTeam(ClusterState& s, const Context& ctx, Team team, Now now) {
  std::sort(team.users.begin(), team.users.end());
  COHORT_TRY_VOID(api::ValidateTeam(team));
  if (s.shares.teams.contains(team.name)) {
    return Errorf(ErrorCode::kAlreadyExists, "team '{}' already exists (change it with cohort team set)", team.name);
  }
  if (s.shares.teams.size() >= api::kMaxTeams) {
    return Errorf(ErrorCode::kFailedPrecondition, "there are already {} teams, the most a head keeps",
                  s.shares.teams.size());
  }
  COHORT_TRY_VOID(CheckUsersFree(s.shares, team));
  Tx tx(s, ctx, now);
  team.created_ms = now.unix_ms;
  tx.fx.Info("team {} created: quota {} GPUs, borrow limit {}, weight {}, {} user(s)", team.name, team.quota_gpus,
             team.borrow_limit_gpus ? std::to_string(*team.borrow_limit_gpus) : "unlimited", team.weight,
             team.users.size());
  s.shares.teams.emplace(team.name, std::move(team));
  tx.fx.teams_changed = true;
  tx.RequestSchedule();
  return std::move(tx.fx);
}

Result<Effects> UpdateTeam(ClusterState& s, const Context& ctx, const std::string& name, const api::TeamPatch& patch,
                           Now now) {
  auto it = s.shares.teams.find(name);
  if (it == s.shares.teams.end()) return Errorf(ErrorCode::kNotFound, "team '{}' not found", name);
  Team t = it->second;
  if (patch.quota_gpus) t.quota_gpus = *patch.quota_gpus;
  if (patch.borrow_unlimited) t.borrow_limit_gpus.reset();
  if (patch.borrow_limit_gpus) t.borrow_limit_gpus = *patch.borrow_limit_gpus;
  if (patch.weight) t.weight = *patch.weight;
  if (patch.users) t.users = *patch.users;
  for (const auto& u : patch.remove_users) {
    auto pos = std::find(t.users.begin(), t.users.end(), u);
    if (pos == t.users.end()) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("remove_users: '{}' is not in team '{}'", u, name),
                       "remove_users");
    }
    t.users.erase(pos);
  }
  for (const auto& u : patch.add_users) {
    if (std::find(t.users.begin(), t.users.end(), u) != t.users.end()) {
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("add_users: '{}' is already in team '{}'", u, name),
                       "add_users");
    }
    t.users.push_back(u);
  }
  std::sort(t.users.begin(), t.users.end());
  COHORT_TRY_VOID(api::ValidateTeam(t));
  COHORT_TRY_VOID(CheckUsersFree(s.shares, t));
  if (patch.quota_gpus) {
    const int64_t in_use = TeamUnitsInUse(s, name);
    if (t.quota_gpus * api::kGpuShareUnits < in_use) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("quota.gpus: {} is below the {:g} GPUs team '{}' holds now; lower it once some of "
                                   "its jobs end (or cancel some)",
                                   t.quota_gpus, static_cast<double>(in_use) / api::kGpuShareUnits, name),
                       "quota.gpus");
    }
  }
  Tx tx(s, ctx, now);
  tx.fx.Info("team {} changed: quota {} GPUs, borrow limit {}, weight {}, {} user(s)", name, t.quota_gpus,
             t.borrow_limit_gpus ? std::to_string(*t.borrow_limit_gpus) : "unlimited", t.weight, t.users.size());
  it->second = std::move(t);
  tx.fx.teams_changed = true;
  tx.RequestSchedule();
  return std::move(tx.fx);
}

Result<Effects> RemoveTeam(ClusterState& s, const Context& ctx, const std::string& name, Now now) {
  auto it = s.shares.teams.find(name);
  if (it == s.shares.teams.end()) return Errorf(ErrorCode::kNotFound, "team '{}' not found", name);
  if (name != api::kDefaultTeam) {
    if (const int active = ActiveJobsOf(s, name); active > 0) {
      return Errorf(ErrorCode::kFailedPrecondition,
                    "team '{}' has {} pending or running job(s); cancel them or wait for them to end first", name,
                    active);
    }
  }
  Tx tx(s, ctx, now);
  s.shares.teams.erase(it);
  if (name != api::kDefaultTeam) {
    // Its usage is forgotten, including the ended attempts not accrued yet (RebuildUsage
    // counts none of a removed team's jobs either).
    s.shares.usage.erase(name);
    std::erase_if(s.shares.accounted, [&](const auto& entry) { return entry.second.team == name; });
  }
  tx.fx.teams_changed = true;
  tx.RequestSchedule();
  tx.fx.Info("team {} removed", name);
  return std::move(tx.fx);
}

std::vector<Team> ListTeams(const ClusterState& s) {
  std::vector<Team> out;
  out.reserve(s.shares.teams.size());
  for (const auto& [name, t] : s.shares.teams) out.push_back(t);
  return out;
}

void LoadTeams(ClusterState& s, std::vector<Team> teams) {
  for (auto& t : teams) s.shares.teams[t.name] = std::move(t);
}

}  // namespace cohort::head::core
