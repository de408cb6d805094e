// Codec of the usage view (usage.h).
#include "api/usage.h"

#include <climits>

#include "api/view_reader.h"

namespace cohort::api {

namespace vr = view_reader;

json ToJson(const UsageReport& r) {
  json users = json::array();
  for (const auto& u : r.users) {
    users.push_back({{"user", u.user}, {"gpu_seconds", u.gpu_seconds}, {"gpu_hours", u.gpu_seconds / 3600.0},
                     {"jobs", u.jobs}});
  }
  json teams = json::array();
  for (const auto& t : r.teams) {
    teams.push_back({{"team", t.team}, {"gpu_seconds", t.gpu_seconds}, {"gpu_hours", t.gpu_seconds / 3600.0},
                     {"jobs", t.jobs}});
  }
  json jobs = json::array();
  for (const auto& j : r.jobs) {
    jobs.push_back({{"id", j.id},
                    {"name", j.name},
                    {"user", j.user},
                    {"team", j.team},
                    {"state", JobStateName(j.state)},
                    {"gpus", j.gpus},
                    {"attempts", j.attempts},
                    {"gpu_seconds", j.gpu_seconds},
                    {"gpu_hours", j.gpu_seconds / 3600.0}});
  }
  bool open = r.window.until_ms == std::numeric_limits<int64_t>::max();
  return json{{"since_ms", r.window.since_ms},
              {"until_ms", open ? json(nullptr) : json(r.window.until_ms)},
              {"now_ms", r.now_ms},
              {"total_gpu_seconds", r.total_gpu_seconds},
              {"total_gpu_hours", r.total_gpu_seconds / 3600.0},
              {"teams", std::move(teams)},
              {"users", std::move(users)},
              {"jobs", std::move(jobs)}};
}

namespace {

Result<UserUsage> UserUsageFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  UserUsage u;
  u.user = COHORT_TRY(r.String("user"));
  u.gpu_seconds = COHORT_TRY(r.Double("gpu_seconds", std::nullopt, 0, 1e300));
  u.jobs = static_cast<int>(COHORT_TRY(r.Int("jobs", std::nullopt, 0, INT_MAX)));
  return u;
}

Result<TeamUsage> TeamUsageFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  TeamUsage t;
  t.team = COHORT_TRY(r.String("team"));
  t.gpu_seconds = COHORT_TRY(r.Double("gpu_seconds", std::nullopt, 0, 1e300));
  t.jobs = static_cast<int>(COHORT_TRY(r.Int("jobs", std::nullopt, 0, INT_MAX)));
  return t;
}

Result<JobUsage> JobUsageFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  JobUsage u;
  u.id = COHORT_TRY(r.Int("id", std::nullopt, 1, INT64_MAX));
  u.name = COHORT_TRY(r.String("name"));
  u.user = COHORT_TRY(r.String("user"));
  u.team = COHORT_TRY(r.String("team", ""));
  std::string state = COHORT_TRY(r.String("state"));
  auto parsed = ParseJobState(state);
  if (!parsed) return FieldError(r.FieldName("state"), "{}", parsed.error().message);
  u.state = *parsed;
  u.gpus = COHORT_TRY(r.Double("gpus", std::nullopt, 0, INT_MAX));
  u.attempts = static_cast<int>(COHORT_TRY(r.Int("attempts", std::nullopt, 0, INT_MAX)));
  u.gpu_seconds = COHORT_TRY(r.Double("gpu_seconds", std::nullopt, 0, 1e300));
  return u;
}

}  // namespace

Result<UsageReport> UsageReportFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  UsageReport u;
  u.window.since_ms = COHORT_TRY(r.Int("since_ms", std::nullopt, 0, INT64_MAX));
  if (!j.contains("until_ms")) return FieldError("until_ms", "is required (null when open)");
  u.window.until_ms = COHORT_TRY(r.Int("until_ms", std::numeric_limits<int64_t>::max(), 1, INT64_MAX));
  u.now_ms = COHORT_TRY(r.Int("now_ms", std::nullopt, 0, INT64_MAX));
  u.total_gpu_seconds = COHORT_TRY(r.Double("total_gpu_seconds", std::nullopt, 0, 1e300));
  u.teams = COHORT_TRY(vr::List<TeamUsage>(r, "teams", false, TeamUsageFromJson));
  u.users = COHORT_TRY(vr::List<UserUsage>(r, "users", true, UserUsageFromJson));
  u.jobs = COHORT_TRY(vr::List<JobUsage>(r, "jobs", true, JobUsageFromJson));
  return u;
}

}  // namespace cohort::api
