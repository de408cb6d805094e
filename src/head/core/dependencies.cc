#include "head/core/dependencies.h"

#include <algorithm>

#include "api/job_dependency.h"
#include "head/core/arrays.h"
#include "head/core/lifecycle.h"

namespace cohort::head::core {

using api::DependencyKind;
using api::Job;
using api::JobId;
using api::JobState;

namespace {

std::string RefText(const api::JobRef& r) {
  return r.is_element() ? fmt::format("{}_{}", r.job, r.task) : std::to_string(r.job);
}

// Whether `target` has started: an attempt began, or (an array) an element was made.
bool Started(const ClusterState& s, const Job& target) {
  if (target.state == JobState::kRunning || !target.history.empty()) return true;
  if (target.spec.is_array()) {
    auto rt = s.arrays.find(target.id);
    return rt != s.arrays.end() && !rt->second.elements.empty();
  }
  return false;
}

DependencyVerdict Verdict(DependencyState st, const api::DependencyCondition& c, const api::JobRef& r,
                          std::string_view what) {
  const char* label = st == DependencyState::kNever ? "DependencyNeverSatisfied" : "Dependency";
  return {st, fmt::format("{} ({}:{}: {})", label, api::DependencyKindName(c.kind), RefText(r), what)};
}

// One job of one condition.
DependencyVerdict EvaluateOne(const ClusterState& s, const api::DependencyCondition& c, const api::JobRef& r) {
  const Job* target = nullptr;
  if (r.is_element()) {
    auto id = ArrayElementId(s, r.job, r.task);
    if (!id) {
      // Not made yet, it waits in its array; otherwise it will never exist.
      const bool waits = id.error().message.find("has not started yet") != std::string::npos;
      return Verdict(waits ? DependencyState::kWaiting : DependencyState::kNever, c, r,
                     waits ? "not started" : "no such element");
    }
    target = &s.jobs.at(*id);
  } else {
    auto it = s.jobs.find(r.job);
    if (it == s.jobs.end()) return Verdict(DependencyState::kNever, c, r, "no such job");
    target = &it->second;
  }
  const JobState st = target->state;
  const bool ended = api::IsTerminal(st);
  const std::string state(api::JobStateName(st));
  switch (c.kind) {
    case DependencyKind::kAfter:
      if (Started(s, *target) || st == JobState::kCancelled) return {};
      return Verdict(DependencyState::kWaiting, c, r, "not started");
    case DependencyKind::kAfterAny:
      if (ended) return {};
      return Verdict(DependencyState::kWaiting, c, r, state);
    case DependencyKind::kAfterOk:
      if (st == JobState::kSucceeded) return {};
      return Verdict(ended ? DependencyState::kNever : DependencyState::kWaiting, c, r, state);
    case DependencyKind::kAfterNotOk:
      if (ended && st != JobState::kSucceeded) return {};
      return Verdict(ended ? DependencyState::kNever : DependencyState::kWaiting, c, r, state);
    case DependencyKind::kSingleton:
      break;
  }
  return {};
}

// Singleton: an earlier job (lower id) of the same name and user that is still active, or
// any such job running.
DependencyVerdict Singleton(const ClusterState& s, const Job& job) {
  auto blocks = [&](const Job& other) {
    return other.id != job.id && other.spec.name == job.spec.name && other.spec.user == job.spec.user &&
           (other.state == JobState::kRunning || (other.state == JobState::kPending && other.id < job.id));
  };
  for (const auto& [node, ids] : s.node_jobs) {
    for (JobId id : ids) {
      if (blocks(s.jobs.at(id))) {
        return {DependencyState::kWaiting, fmt::format("Dependency (singleton: job {} of {} named {} is RUNNING)", id,
                                                       job.spec.user, job.spec.name)};
      }
    }
  }
  for (JobId id : s.pending) {
    if (id >= job.id) break;  // ascending ids: only earlier ones block
    if (blocks(s.jobs.at(id))) {
      return {DependencyState::kWaiting, fmt::format("Dependency (singleton: job {} of {} named {} is PENDING)", id,
                                                     job.spec.user, job.spec.name)};
    }
  }
  return {};
}

}  // namespace

Result<void> CheckDependencyTargets(const ClusterState& s, const api::JobSpec& spec) {
  if (spec.dependency.empty()) return {};
  auto conditions = COHORT_TRY(api::ParseDependency(spec.dependency, "dependency"));
  for (const auto& c : conditions) {
    for (const auto& r : c.jobs) {
      auto it = s.jobs.find(r.job);
      if (it == s.jobs.end()) {
        return FieldError("dependency", "{}:{}: there is no job {}", api::DependencyKindName(c.kind), RefText(r), r.job);
      }
      if (r.is_element()) {
        if (!it->second.spec.is_array()) {
          return FieldError("dependency", "{}:{}: job {} is not a job array", api::DependencyKindName(c.kind),
                            RefText(r), r.job);
        }
        auto indices = api::ParseArraySpec(it->second.spec.array, "array");
        if (indices && !indices->indices.contains(r.task)) {
          return FieldError("dependency", "{}:{}: array {} has no element {} (its indices: {})",
                            api::DependencyKindName(c.kind), RefText(r), r.job, r.task, it->second.spec.array);
        }
      }
    }
  }
  return {};
}

DependencyVerdict EvaluateDependency(const ClusterState& s, const Job& job) {
  if (job.spec.dependency.empty()) return {};
  auto conditions = api::ParseDependency(job.spec.dependency, "dependency");  // checked at submit
  if (!conditions) return {DependencyState::kNever, "DependencyNeverSatisfied (" + conditions.error().message + ")"};
  DependencyVerdict waiting;
  for (const auto& c : *conditions) {
    if (c.kind == DependencyKind::kSingleton) {
      DependencyVerdict v = Singleton(s, job);
      if (v.state != DependencyState::kSatisfied && waiting.state == DependencyState::kSatisfied) waiting = v;
      continue;
    }
    for (const auto& r : c.jobs) {
      DependencyVerdict v = EvaluateOne(s, c, r);
      if (v.state == DependencyState::kNever) return v;  // all must hold: one never does
      if (v.state == DependencyState::kWaiting && waiting.state == DependencyState::kSatisfied) waiting = v;
    }
  }
  return waiting;
}

void WithholdForDependencies(Tx& tx, SchedulerInput& in) {
  std::vector<sched::JobRequest>& pending = in.snapshot.pending;
  std::erase_if(pending, [&](const sched::JobRequest& r) {
    Job& job = tx.s.jobs.at(r.id);
    if (job.spec.dependency.empty()) return false;
    DependencyVerdict v = EvaluateDependency(tx.s, job);
    if (v.state == DependencyState::kSatisfied) return false;
    if (v.state == DependencyState::kNever && job.spec.kill_on_invalid_dep) {
      FinishJob(tx, job, JobState::kCancelled, v.reason, std::nullopt);
    } else {
      in.dependency_reasons[r.id] = std::move(v.reason);
    }
    return true;
  });
  // Held and stopping jobs are left out before this; their dependency still shows nowhere,
  // their own reason does.
}

}  // namespace cohort::head::core
