#include "head/services.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
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

std::map<std::string, IdleService> ScaledToZeroServices(Cluster& cluster) {
  std::map<std::string, IdleService> out;
  auto stored = cluster.GetMeta(kZeroReplicaServicesMeta);
  if (!stored) {
    LOG_WARN("services: cannot read the services scaled to 0: {}", stored.error().message);
    return out;
  }
  if (!*stored) return out;
  auto j = ParseJson(**stored, "the services scaled to 0");
  if (!j || !j->is_object()) return out;
  for (auto it = j->begin(); it != j->end(); ++it) {
    if (!it.value().is_object() || !it.value().contains("spec")) continue;
    auto spec = api::JobSpecFromJson(it.value()["spec"]);
    if (!spec) continue;
    out[it.key()] = IdleService{std::move(*spec), it.value().value("created", int64_t{0})};
  }
  return out;
}

Result<void> Services::SaveScaledToZero(const std::map<std::string, Idle>& idle) {
  json j = json::object();
  for (const auto& [name, i] : idle) j[name] = {{"spec", api::ToJson(i.spec)}, {"created", i.created}};
  return cluster_.PutMeta(kZeroReplicaServicesMeta, j.dump());
}

api::ServiceStatus Services::IdleStatus(const std::string& name, const Idle& idle) {
  api::ServiceStatus s;
  s.name = name;
  s.model_name = idle.spec.service_model;
  s.user = idle.spec.user;
  return s;
}

std::vector<api::ServiceStatus> Services::List() const {
  std::vector<api::ServiceStatus> out;
  const auto active = Active();
  for (const auto& [name, jobs] : active) out.push_back(StatusOf(name, jobs));
  for (const auto& [name, idle] : ScaledToZero()) {
    if (!active.contains(name)) out.push_back(IdleStatus(name, idle));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

Result<api::ServiceStatus> Services::Get(const std::string& name) const {
  const auto active = Active();
  auto it = active.find(name);
  if (it != active.end()) return StatusOf(name, it->second);
  const auto idle = ScaledToZero();
  if (auto i = idle.find(name); i != idle.end()) return IdleStatus(name, i->second);
  return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
}

Result<api::ServiceStatus> Services::Deploy(api::ServiceSpec spec) {
  MutexLock l(mu_);
  const auto active = Active();
  const auto idle = ScaledToZero();
  if (active.contains(spec.name) || idle.contains(spec.name)) {
    return MakeError(ErrorCode::kAlreadyExists,
                     fmt::format("service '{}' exists with {} replicas; scale it or remove it first", spec.name,
                                 active.contains(spec.name) ? active.at(spec.name).size() : 0),
                     "name");
  }
  for (const auto& [name, jobs] : active) {
    if (!jobs.empty() && jobs.front().spec.service_model == spec.model_name) {
      return MakeError(ErrorCode::kAlreadyExists,
                       fmt::format("model_name '{}' is served by service '{}' already", spec.model_name, name),
                       "model_name");
    }
  }
  for (const auto& [name, i] : idle) {
    if (i.spec.service_model == spec.model_name) {
      return MakeError(ErrorCode::kAlreadyExists,
                       fmt::format("model_name '{}' is served by service '{}' already (scaled to 0)",
                                   spec.model_name, name),
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
  if (replicas < 0 || replicas > api::kMaxReplicas) {
    return FieldError("replicas", "must be between 0 and {} (remove a service with rm), got {}", api::kMaxReplicas,
                      replicas);
  }
  MutexLock l(mu_);
  auto active = Active();
  auto idle = ScaledToZero();
  auto it = active.find(name);
  auto was_idle = idle.find(name);
  if (it == active.end() && was_idle == idle.end()) return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
  std::vector<api::Job> none;
  std::vector<api::Job>& jobs = it == active.end() ? none : it->second;
  const api::JobSpec spec = jobs.empty() ? was_idle->second.spec : jobs.front().spec;
  if (!caller.IsAdmin() && caller.user != spec.user) {
    return Errorf(ErrorCode::kPermissionDenied, "{} may not scale service '{}': it belongs to {}", caller.Describe(),
                  name, spec.user);
  }
  if (replicas == 0 && jobs.empty()) return IdleStatus(name, was_idle->second);
  if (replicas == 0) {
    // Kept before its replicas go, so that the service never disappears in between.
    int64_t created = INT64_MAX;
    for (const auto& j : jobs) created = std::min(created, j.submit_ms / 1000);
    idle[name] = Idle{spec, created};
    COHORT_TRY_VOID(SaveScaledToZero(idle));
  }
  while (static_cast<int>(jobs.size()) < replicas) {
    auto job = cluster_.Submit(spec);
    if (!job) return std::unexpected(job.error());
    jobs.push_back(std::move(*job));
  }
  if (replicas > 0 && idle.erase(name) > 0) COHORT_TRY_VOID(SaveScaledToZero(idle));
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
  if (jobs.empty()) return IdleStatus(name, idle.at(name));
  return StatusOf(name, jobs);
}

Result<api::ServiceStatus> Services::Remove(const std::string& name, const Caller& caller) {
  MutexLock l(mu_);
  auto active = Active();
  auto idle = ScaledToZero();
  auto it = active.find(name);
  if (it == active.end()) {
    auto i = idle.find(name);
    if (i == idle.end()) return Errorf(ErrorCode::kNotFound, "no service named '{}'", name);
    if (!caller.IsAdmin() && caller.user != i->second.spec.user) {
      return Errorf(ErrorCode::kPermissionDenied, "{} may not remove service '{}': it belongs to {}",
                    caller.Describe(), name, i->second.spec.user);
    }
    api::ServiceStatus s = IdleStatus(name, i->second);
    idle.erase(i);
    COHORT_TRY_VOID(SaveScaledToZero(idle));
    gateway_.Discover();
    return s;
  }
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
