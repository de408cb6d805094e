#include "api/team.h"

#include <algorithm>
#include <limits>
#include <set>

#include "api/types.h"
#include "api/view_reader.h"

namespace cohort::api {
namespace {

// {"gpus": N} at `key` of `r`: the GPUs, checked against [0, kMaxTeamGpus].
Result<int64_t> GpuAmount(ObjectReader& r, std::string_view key) {
  const json* v = r.Raw(key);
  auto inner = COHORT_TRY(ObjectReader::Open(*v, r.FieldName(key)));
  const int64_t gpus = COHORT_TRY(inner.Int("gpus", std::nullopt, 0, kMaxTeamGpus));
  COHORT_TRY_VOID(inner.Finish());
  return gpus;
}

// A list of user names at `key`, each valid.
Result<std::vector<std::string>> UserList(ObjectReader& r, std::string_view key) {
  auto users = COHORT_TRY(r.StringList(key, std::vector<std::string>{}));
  if (users.size() > kMaxTeamUsers) {
    return FieldError(r.FieldName(key), "has {} users; at most {}", users.size(), kMaxTeamUsers);
  }
  for (size_t i = 0; i < users.size(); ++i) {
    if (!ValidUserName(users[i])) {
      return FieldError(fmt::format("{}[{}]", r.FieldName(key), i),
                        "must be a user name of 1-64 letters, digits, '.', '_' or '-', got '{}'", users[i]);
    }
  }
  return users;
}

json BorrowJson(const std::optional<int64_t>& limit) {
  return limit ? json{{"gpus", *limit}} : json(nullptr);
}

}  // namespace

int64_t Team::LimitGpus() const {
  if (!borrow_limit_gpus) return std::numeric_limits<int64_t>::max();
  return quota_gpus + *borrow_limit_gpus;
}

Team ImplicitTeam(std::string_view name) {
  Team t;
  t.name = std::string(name);
  return t;
}

json ToJson(const Team& t) {
  return json{{"name", t.name},
              {"quota", {{"gpus", t.quota_gpus}}},
              {"borrow_limit", BorrowJson(t.borrow_limit_gpus)},
              {"weight", t.weight},
              {"users", t.users},
              {"created_ms", t.created_ms}};
}

Result<void> ValidateTeam(const Team& t) {
  if (!ValidUserName(t.name)) {
    return FieldError("name", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'", t.name);
  }
  if (t.quota_gpus < 0 || t.quota_gpus > kMaxTeamGpus) {
    return FieldError("quota.gpus", "must be an integer between 0 and {}, got {}", kMaxTeamGpus, t.quota_gpus);
  }
  if (t.borrow_limit_gpus && (*t.borrow_limit_gpus < 0 || *t.borrow_limit_gpus > kMaxTeamGpus)) {
    return FieldError("borrow_limit.gpus", "must be an integer between 0 and {}, got {}", kMaxTeamGpus,
                      *t.borrow_limit_gpus);
  }
  if (t.weight < 1 || t.weight > kMaxTeamWeight) {
    return FieldError("weight", "must be an integer between 1 and {} (a team's share of the cluster), got {}",
                      kMaxTeamWeight, t.weight);
  }
  if (t.users.size() > kMaxTeamUsers) {
    return FieldError("users", "has {} users; at most {}", t.users.size(), kMaxTeamUsers);
  }
  std::set<std::string_view> seen;
  for (const auto& u : t.users) {
    if (!ValidUserName(u)) return FieldError("users", "'{}' is not a valid user name", u);
    if (!seen.insert(u).second) return FieldError("users", "lists '{}' twice", u);
  }
  return {};
}

Result<Team> TeamFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  Team t;
  t.name = COHORT_TRY(r.String("name", std::nullopt, 64));
  if (r.Has("quota")) t.quota_gpus = COHORT_TRY(GpuAmount(r, "quota"));
  if (r.Has("borrow_limit")) {
    t.borrow_limit_gpus = COHORT_TRY(GpuAmount(r, "borrow_limit"));
  } else {
    (void)r.Raw("borrow_limit");
  }
  t.weight = COHORT_TRY(r.Int("weight", 1, 1, kMaxTeamWeight));
  t.users = COHORT_TRY(UserList(r, "users"));
  t.created_ms = COHORT_TRY(r.Int("created_ms", 0, 0, std::numeric_limits<int64_t>::max()));
  COHORT_TRY_VOID(r.Finish());
  std::sort(t.users.begin(), t.users.end());
  COHORT_TRY_VOID(ValidateTeam(t));
  return t;
}

Result<TeamPatch> TeamPatchFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  TeamPatch p;
  if (r.Has("quota")) p.quota_gpus = COHORT_TRY(GpuAmount(r, "quota"));
  if (const json* b = r.Raw("borrow_limit")) {
    if (b->is_string() && b->get<std::string>() == "unlimited") {
      p.borrow_unlimited = true;
    } else if (b->is_object()) {
      p.borrow_limit_gpus = COHORT_TRY(GpuAmount(r, "borrow_limit"));
    } else {
      return FieldError("borrow_limit", "must be {{\"gpus\": N}} or \"unlimited\", got {} {}", JsonTypeName(*b),
                        JsonValueText(*b));
    }
  }
  if (r.Has("weight")) p.weight = COHORT_TRY(r.Int("weight", std::nullopt, 1, kMaxTeamWeight));
  if (r.Has("users")) p.users = COHORT_TRY(UserList(r, "users"));
  p.add_users = COHORT_TRY(UserList(r, "add_users"));
  p.remove_users = COHORT_TRY(UserList(r, "remove_users"));
  COHORT_TRY_VOID(r.Finish());
  if (!p.quota_gpus && !p.borrow_limit_gpus && !p.borrow_unlimited && !p.weight && !p.users && p.add_users.empty() &&
      p.remove_users.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "nothing to change: give quota, borrow_limit, weight, users, add_users or remove_users");
  }
  return p;
}

json TeamsToJson(const std::vector<Team>& teams) {
  json list = json::array();
  for (const auto& t : teams) list.push_back(ToJson(t));
  return json{{"teams", std::move(list)}};
}

Result<std::vector<Team>> TeamsFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  auto teams = COHORT_TRY(view_reader::List<Team>(r, "teams", true, [](const json& e, const std::string& name) {
    auto t = TeamFromJson(e);
    if (!t) return Result<Team>(std::unexpected(WithContext(t.error(), name)));
    return t;
  }));
  (void)r.Finish();  // a newer head's fields are ignored
  return teams;
}

// ---- views ----

json ToJson(const SharesReport& r) {
  json teams = json::array();
  for (const auto& t : r.teams) {
    teams.push_back({{"name", t.name},
                     {"implicit", t.implicit},
                     {"weight", t.weight},
                     {"share", t.share},
                     {"quota", {{"gpus", t.quota_gpus}}},
                     {"borrow_limit", BorrowJson(t.borrow_limit_gpus)},
                     {"gpus_in_use", t.gpus_in_use},
                     {"borrowed_gpus", t.borrowed_gpus},
                     {"usage_gpu_hours", t.usage_gpu_hours},
                     {"usage_fraction", t.usage_fraction},
                     {"fair_share_factor", t.fair_share_factor},
                     {"pending_jobs", t.pending_jobs},
                     {"running_jobs", t.running_jobs}});
  }
  return json{{"now_ms", r.now_ms}, {"half_life_ms", r.half_life_ms}, {"teams", std::move(teams)}};
}

Result<SharesReport> SharesReportFromJson(const json& j) {
  constexpr double kBig = 1e18;
  auto r = COHORT_TRY(ObjectReader::Open(j));
  SharesReport out;
  out.now_ms = COHORT_TRY(r.Int("now_ms", 0, 0, std::numeric_limits<int64_t>::max()));
  out.half_life_ms = COHORT_TRY(r.Int("half_life_ms", 0, 0, std::numeric_limits<int64_t>::max()));
  out.teams = COHORT_TRY(view_reader::List<TeamShare>(r, "teams", true, [&](const json& e, const std::string& name)
                                                                               -> Result<TeamShare> {
    auto t = COHORT_TRY(ObjectReader::Open(e, name));
    TeamShare s;
    s.name = COHORT_TRY(t.String("name", std::nullopt, 64));
    s.implicit = COHORT_TRY(t.Bool("implicit", false));
    s.weight = COHORT_TRY(t.Int("weight", 1, 0, kMaxTeamWeight));
    s.share = COHORT_TRY(t.Double("share", 0, 0, 1));
    if (t.Has("quota")) s.quota_gpus = COHORT_TRY(GpuAmount(t, "quota"));
    if (t.Has("borrow_limit")) s.borrow_limit_gpus = COHORT_TRY(GpuAmount(t, "borrow_limit"));
    s.gpus_in_use = COHORT_TRY(t.Double("gpus_in_use", 0, 0, kBig));
    s.borrowed_gpus = COHORT_TRY(t.Double("borrowed_gpus", 0, 0, kBig));
    s.usage_gpu_hours = COHORT_TRY(t.Double("usage_gpu_hours", 0, 0, kBig));
    s.usage_fraction = COHORT_TRY(t.Double("usage_fraction", 0, 0, 1));
    s.fair_share_factor = COHORT_TRY(t.Double("fair_share_factor", 1, 0, 1));
    s.pending_jobs = static_cast<int>(COHORT_TRY(t.Int("pending_jobs", 0, 0, INT32_MAX)));
    s.running_jobs = static_cast<int>(COHORT_TRY(t.Int("running_jobs", 0, 0, INT32_MAX)));
    return s;
  }));
  return out;
}

json ToJson(const PriorityReport& r) {
  json jobs = json::array();
  for (const auto& p : r.jobs) {
    jobs.push_back({{"id", p.id},
                    {"user", p.user},
                    {"team", p.team},
                    {"priority", p.priority},
                    {"queue_class", p.queue_class},
                    {"factors", {{"fair_share", p.fair_share}, {"age", p.age}, {"size", p.size}, {"job", p.job}}},
                    {"points",
                     {{"fair_share", p.fair_share_points},
                      {"age", p.age_points},
                      {"size", p.size_points},
                      {"job", p.job_points}}}});
  }
  return json{{"now_ms", r.now_ms},
              {"weights",
               {{"fair_share", r.weight_fair_share},
                {"age", r.weight_age},
                {"size", r.weight_size},
                {"job", r.weight_job}}},
              {"jobs", std::move(jobs)}};
}

Result<PriorityReport> PriorityReportFromJson(const json& j) {
  constexpr double kBig = 1e18;
  auto r = COHORT_TRY(ObjectReader::Open(j));
  PriorityReport out;
  out.now_ms = COHORT_TRY(r.Int("now_ms", 0, 0, std::numeric_limits<int64_t>::max()));
  if (const json* w = r.Raw("weights")) {
    auto wr = COHORT_TRY(ObjectReader::Open(*w, "weights"));
    out.weight_fair_share = COHORT_TRY(wr.Double("fair_share", 0, 0, kBig));
    out.weight_age = COHORT_TRY(wr.Double("age", 0, 0, kBig));
    out.weight_size = COHORT_TRY(wr.Double("size", 0, 0, kBig));
    out.weight_job = COHORT_TRY(wr.Double("job", 0, 0, kBig));
  }
  out.jobs = COHORT_TRY(view_reader::List<JobPriority>(r, "jobs", true, [&](const json& e, const std::string& name)
                                                                              -> Result<JobPriority> {
    auto t = COHORT_TRY(ObjectReader::Open(e, name));
    JobPriority p;
    p.id = COHORT_TRY(t.Int("id", std::nullopt, 1, std::numeric_limits<int64_t>::max()));
    p.user = COHORT_TRY(t.String("user", ""));
    p.team = COHORT_TRY(t.String("team", ""));
    p.priority = COHORT_TRY(t.Double("priority", 0, -kBig, kBig));
    p.queue_class = COHORT_TRY(t.String("queue_class", ""));
    const auto factors = [&](std::string_view key, double& fs, double& age, double& size, double& job,
                             double lo) -> Result<void> {
      const json* f = t.Raw(key);
      if (!f) return {};
      auto fr = COHORT_TRY(ObjectReader::Open(*f, t.FieldName(key)));
      fs = COHORT_TRY(fr.Double("fair_share", 0, lo, kBig));
      age = COHORT_TRY(fr.Double("age", 0, lo, kBig));
      size = COHORT_TRY(fr.Double("size", 0, lo, kBig));
      job = COHORT_TRY(fr.Double("job", 0, lo, kBig));
      return {};
    };
    COHORT_TRY_VOID(factors("factors", p.fair_share, p.age, p.size, p.job, 0));
    COHORT_TRY_VOID(factors("points", p.fair_share_points, p.age_points, p.size_points, p.job_points, -kBig));
    return p;
  }));
  return out;
}

}  // namespace cohort::api
