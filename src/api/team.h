// Teams, their shares and the priority of queued jobs: the wire types of /v1/teams,
// /v1/shares and /v1/priorities.
//
// A Team is what an admin configures (`cohort team create ml --quota gpus=16
// --borrow-limit 8 --weight 2 --users alice,bob`): its nominal GPU quota (guaranteed: GPUs
// it lends while idle are reclaimed by preemption when it needs them), how many GPUs beyond
// it the team may borrow while others leave them idle (none: unlimited), its fair-share
// weight, and its users (a user belongs to at most one team; a job without `team` in its
// spec goes to its user's team, else to the implicit team "default"). A TeamPatch is a
// change to one (`cohort team set`). TeamShare is one row of `cohort shares` (Slurm's
// sshare) and JobPriority one row of `cohort queue --priority` (sprio). Decoders of input
// from outside check every field and name the bad one; views ignore fields they do not
// know. Plain values; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

// The team of jobs whose spec names none and whose user belongs to no team. It exists
// without being created (quota 0, unlimited borrowing, weight 1); an admin may create it
// to give it a quota or a weight.
inline constexpr std::string_view kDefaultTeam = "default";

inline constexpr int64_t kMaxTeamGpus = 1'000'000;  // quota and borrow limit
inline constexpr int64_t kMaxTeamWeight = 1'000'000;
inline constexpr size_t kMaxTeamUsers = 10'000;
inline constexpr size_t kMaxTeams = 10'000;

struct Team {
  std::string name;                         // as a user name: 1-64 of [A-Za-z0-9._-]
  int64_t quota_gpus = 0;                   // nominal quota: guaranteed
  std::optional<int64_t> borrow_limit_gpus;  // beyond the quota; nullopt: unlimited
  int64_t weight = 1;                       // fair-share weight, >= 1
  std::vector<std::string> users;           // sorted, unique
  int64_t created_ms = 0;

  // The most GPUs the team's running jobs may hold: quota + borrow limit (INT64_MAX when
  // borrowing is unlimited).
  int64_t LimitGpus() const;
  bool operator==(const Team&) const = default;
};

// The implicit team `name` stands for when no team of that name was created.
Team ImplicitTeam(std::string_view name);

// A change to a team; absent fields stay as they are.
struct TeamPatch {
  std::optional<int64_t> quota_gpus;
  // Set: a new limit; `borrow_unlimited`: no limit.
  std::optional<int64_t> borrow_limit_gpus;
  bool borrow_unlimited = false;
  std::optional<int64_t> weight;
  std::optional<std::vector<std::string>> users;  // replaces the list
  std::vector<std::string> add_users;
  std::vector<std::string> remove_users;
};

// {"name", "quota": {"gpus": N}, "borrow_limit": {"gpus": N} | null, "weight": N,
//  "users": [...], "created_ms"}
json ToJson(const Team& t);
// A team as an admin creates it (POST /v1/teams): name required; quota, borrow_limit,
// weight and users optional (0, unlimited, 1, none). Every field is checked and named in
// the error ("quota.gpus: must be an integer between 0 and 1000000, got -1"); unknown
// fields are refused.
Result<Team> TeamFromJson(const json& j);
// PUT /v1/teams/{name}: {"quota": {"gpus": N}, "borrow_limit": {"gpus": N} | "unlimited",
// "weight": N, "users": [...], "add_users": [...], "remove_users": [...]}, each optional.
Result<TeamPatch> TeamPatchFromJson(const json& j);
// Checks a whole team (name, ranges, users valid and unique); TeamFromJson applies it.
Result<void> ValidateTeam(const Team& t);

// Every team, as stored (the state store's meta value "teams"): {"teams": [Team...]}.
json TeamsToJson(const std::vector<Team>& teams);
Result<std::vector<Team>> TeamsFromJson(const json& j);

// One team in `cohort shares`: its configuration, what it holds now, and its fair share.
struct TeamShare {
  std::string name;
  bool implicit = false;       // the "default" team, not created by an admin
  int64_t weight = 1;
  double share = 0;            // weight / sum of the weights of the teams shown
  int64_t quota_gpus = 0;
  std::optional<int64_t> borrow_limit_gpus;
  double gpus_in_use = 0;      // GPUs its RUNNING jobs hold now (a sharing job: its parts)
  double borrowed_gpus = 0;    // of them, beyond its quota
  double usage_gpu_hours = 0;  // decayed (half-life below)
  double usage_fraction = 0;   // of all teams' decayed usage
  double fair_share_factor = 1;  // 2^(-usage_fraction / share)
  int pending_jobs = 0;
  int running_jobs = 0;
};

struct SharesReport {
  int64_t now_ms = 0;
  int64_t half_life_ms = 0;
  std::vector<TeamShare> teams;  // by name
};
json ToJson(const SharesReport& r);
Result<SharesReport> SharesReportFromJson(const json& j);

// One pending job's priority and its factors (each in [0, 1]) with their weighted points.
struct JobPriority {
  int64_t id = 0;
  std::string user;
  std::string team;
  double priority = 0;  // the sum of the weighted factors
  double fair_share = 0, age = 0, size = 0, job = 0;              // factors
  double fair_share_points = 0, age_points = 0, size_points = 0, job_points = 0;
  std::string queue_class;  // "nominated", "within quota", "borrowing": considered in that order
};

struct PriorityReport {
  int64_t now_ms = 0;
  // The configured weights (points of a factor of 1).
  double weight_fair_share = 0, weight_age = 0, weight_size = 0, weight_job = 0;
  std::vector<JobPriority> jobs;  // in the order the scheduler considers them
};
json ToJson(const PriorityReport& r);
Result<PriorityReport> PriorityReportFromJson(const json& j);

}  // namespace cohort::api
