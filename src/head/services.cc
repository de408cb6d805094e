#include "head/services.h"

#include <algorithm>

#include <fmt/format.h>

#include "head/cluster.h"
#include "head/gateway.h"

namespace cohort::head {

std::map<std::string, std::vector<api::Job>> Services::Active() const {
  JobFilter filter;
  filter.states = {api::JobState::kPending, api::JobState::kRunning};
  filter.services_only = true;
  std::map<std::string, std::vector<api::Job>> out;
  for (auto& j : cluster_.ListJobs(filter)) out[j.spec.service].push_back(std::move(j));
  for (auto& [name, jobs] : out) {
    std::sort(jobs.begin(), jobs.end(), [](const api::Job& a, const api::Job& b) { return a.id < b.id; });
  }
  return out;
}

api::ServiceStatus Services::StatusOf(const std::string& name, const std::vector<api::Job>& jobs) const {
  api::ServiceStatus s;
  s.name = name;
  s.replicas = static_cast<int>(jobs.size());
  if (!jobs.empty()) {
    s.model_name = jobs.front().spec.service_model;
    s.user = jobs.front().spec.user;
  }
  const std::vector<api::ReplicaStatus> seen = gateway_.Replicas(name);
  for (const auto& j : jobs) {
    auto it = std::find_if(seen.begin(), seen.end(), [&](const api::ReplicaStatus& r) {
      return r.job == j.id && r.attempt == j.attempt;
    });
    api::ReplicaStatus r;
    if (it != seen.end() && j.state == api::JobState::kRunning) {
      r = *it;
    } else {
      r.job = j.id;
      r.attempt = j.attempt;
      r.state = std::string(api::JobStateName(j.state));
      if (!j.allocation.nodes.empty()) {
        r.node = j.allocation.nodes.front().node;
        r.endpoint = fmt::format("http://{}:{}", j.allocation.master_addr, j.allocation.master_port);
      }
      r.health = j.state == api::JobState::kPending ? (j.reason.empty() ? "pending" : j.reason) : "starting";
    }
    s.healthy += r.healthy ? 1 : 0;
    s.replica_status.push_back(std::move(r));
  }
  return s;
}

std::vector<api::ServiceStatus> Services::List() const {
  std::vector<api::ServiceStatus> out;
  for (const auto& [name, jobs] : Active()) out.push_back(StatusOf(name, jobs));
  return out;
}

Result<api::ServiceStatus> Services::Get(const std::string& name) const {
  const auto active = Active();
  auto it = active.find(name);
  if (it == active.end()) return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
  return StatusOf(name, it->second);
}

Result<api::ServiceStatus> Services::Deploy(api::ServiceSpec spec) {
  MutexLock l(mu_);
  const auto active = Active();
  if (active.contains(spec.name)) {
    return MakeError(ErrorCode::kAlreadyExists,
                     fmt::format("service '{}' exists with {} replicas; scale it or remove it first", spec.name,
                                 active.at(spec.name).size()),
                     "name");
  }
  for (const auto& [name, jobs] : active) {
    if (!jobs.empty() && jobs.front().spec.service_model == spec.model_name) {
      return MakeError(ErrorCode::kAlreadyExists,
                       fmt::format("model_name '{}' is served by service '{}' already", spec.model_name, name),
                       "model_name");
    }
  }
  std::vector<api::Job> made;
  for (int i = 0; i < spec.replicas; ++i) {
    auto job = cluster_.Submit(api::ReplicaJobSpec(spec));
    if (!job) {
      for (const auto& j : made) (void)cluster_.Cancel(j.id);
      return std::unexpected(WithContext(job.error(), fmt::format("replica {} of {}", i + 1, spec.replicas)));
    }
    made.push_back(std::move(*job));
  }
  gateway_.Discover();
  return StatusOf(spec.name, made);
}

Result<api::ServiceStatus> Services::Scale(const std::string& name, int replicas, const Caller& caller) {
  if (replicas < 1 || replicas > api::kMaxReplicas) {
    return FieldError("replicas", "must be between 1 and {} (remove a service with rm), got {}", api::kMaxReplicas,
                      replicas);
  }
  MutexLock l(mu_);
  auto active = Active();
  auto it = active.find(name);
  if (it == active.end()) return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
  std::vector<api::Job>& jobs = it->second;
  if (!caller.IsAdmin() && caller.user != jobs.front().spec.user) {
    return Errorf(ErrorCode::kPermissionDenied, "{} may not scale service '{}': it belongs to {}", caller.Describe(),
                  name, jobs.front().spec.user);
  }
  while (static_cast<int>(jobs.size()) < replicas) {
    auto job = cluster_.Submit(jobs.front().spec);
    if (!job) return std::unexpected(job.error());
    jobs.push_back(std::move(*job));
  }
  while (static_cast<int>(jobs.size()) > replicas) {
    // The newest go first; a pending one before a running one.
    auto victim = std::max_element(jobs.begin(), jobs.end(), [](const api::Job& a, const api::Job& b) {
      const bool ap = a.state == api::JobState::kPending, bp = b.state == api::JobState::kPending;
      return ap != bp ? bp : a.id < b.id;
    });
    if (auto c = cluster_.Cancel(victim->id); !c && c.error().code != ErrorCode::kFailedPrecondition) {
      return std::unexpected(c.error());
    }
    jobs.erase(victim);
  }
  gateway_.Discover();
  return StatusOf(name, jobs);
}

Result<api::ServiceStatus> Services::Remove(const std::string& name, const Caller& caller) {
  MutexLock l(mu_);
  auto active = Active();
  auto it = active.find(name);
  if (it == active.end()) return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
  if (!caller.IsAdmin() && caller.user != it->second.front().spec.user) {
    return Errorf(ErrorCode::kPermissionDenied, "{} may not remove service '{}': it belongs to {}", caller.Describe(),
                  name, it->second.front().spec.user);
  }
  api::ServiceStatus s = StatusOf(name, it->second);
  for (const auto& j : it->second) {
    if (auto c = cluster_.Cancel(j.id); !c && c.error().code != ErrorCode::kFailedPrecondition) {
      return std::unexpected(c.error());
    }
  }
  gateway_.Discover();
  return s;
}

}  // namespace cohort::head
