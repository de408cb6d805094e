#include "head/usage.h"

#include <algorithm>
#include <map>
#include <string>

#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "api/team.h"

namespace cohort::head {

int AttemptGpus(const api::Job& job, const api::AttemptRecord& attempt) {
  if (attempt.gpus >= 0) return attempt.gpus;
  return job.spec.nodes * job.spec.gpus_per_node;
}

namespace {

// Milliseconds of [start, end) inside the window; an attempt still running ends at now.
int64_t OverlapMs(const api::AttemptRecord& a, int64_t now_ms, const UsageWindow& w) {
  if (a.start_ms <= 0) return 0;
  int64_t end = a.end_ms > 0 ? a.end_ms : now_ms;
  int64_t lo = std::max(a.start_ms, w.since_ms);
  int64_t hi = std::min(end, w.until_ms);
  return hi > lo ? hi - lo : 0;
}

bool Overlaps(const api::AttemptRecord& a, int64_t now_ms, const UsageWindow& w) {
  if (a.start_ms <= 0) return false;
  int64_t end = a.end_ms > 0 ? a.end_ms : now_ms;
  return a.start_ms < w.until_ms && end >= w.since_ms;
}

}  // namespace

double JobGpuSeconds(const api::Job& job, int64_t now_ms, UsageWindow window) {
  double s = 0;
  for (const auto& a : job.history) {
    // A sharing attempt counts its parts of GPUs (issue 18).
    const double gpus = api::AttemptGpuAmount(job.spec, a);
    s += gpus * (OverlapMs(a, now_ms, window) / 1000.0);
  }
  return s;
}

UsageReport ComputeUsage(const std::vector<api::Job>& jobs, int64_t now_ms, UsageWindow window,
                         std::string_view user) {
  UsageReport r;
  r.window = window;
  r.now_ms = now_ms;
  std::map<std::string, UserUsage> users;
  std::map<std::string, api::TeamUsage> teams;
  for (const auto& job : jobs) {
    if (!user.empty() && job.spec.user != user) continue;
    JobUsage u;
    for (const auto& a : job.history) {
      if (!Overlaps(a, now_ms, window)) continue;
      u.attempts += 1;
      u.gpus = api::AttemptGpuAmount(job.spec, a);
    }
    if (u.attempts == 0) continue;
    u.id = job.id;
    u.name = job.spec.name;
    u.user = job.spec.user;
    u.team = job.spec.team.empty() ? std::string(api::kDefaultTeam) : job.spec.team;
    u.state = job.state;
    u.gpu_seconds = JobGpuSeconds(job, now_ms, window);
    UserUsage& uu = users[u.user];
    uu.user = u.user;
    uu.gpu_seconds += u.gpu_seconds;
    uu.jobs += 1;
    api::TeamUsage& tu = teams[u.team];
    tu.team = u.team;
    tu.gpu_seconds += u.gpu_seconds;
    tu.jobs += 1;
    r.total_gpu_seconds += u.gpu_seconds;
    r.jobs.push_back(std::move(u));
  }
  std::sort(r.jobs.begin(), r.jobs.end(), [](const JobUsage& a, const JobUsage& b) { return a.id < b.id; });
  for (auto& [name, t] : teams) r.teams.push_back(std::move(t));
  std::sort(r.teams.begin(), r.teams.end(), [](const api::TeamUsage& a, const api::TeamUsage& b) {
    return a.gpu_seconds != b.gpu_seconds ? a.gpu_seconds > b.gpu_seconds : a.team < b.team;
  });
  for (auto& [name, u] : users) r.users.push_back(std::move(u));
  std::sort(r.users.begin(), r.users.end(), [](const UserUsage& a, const UserUsage& b) {
    return a.gpu_seconds != b.gpu_seconds ? a.gpu_seconds > b.gpu_seconds : a.user < b.user;
  });
  return r;
}

api::JobStatus JobStatusAt(const api::Job& job, int64_t now_ms, const std::vector<api::TaskUsage>* tasks) {
  api::JobStatus s{job, JobGpuSeconds(job, now_ms), std::nullopt, std::nullopt};
  if (job.state == api::JobState::kRunning) s.tasks_usage = tasks ? *tasks : std::vector<api::TaskUsage>{};
  return s;
}

}  // namespace cohort::head
