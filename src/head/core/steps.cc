#include "head/core/steps.h"

#include <algorithm>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "api/step.h"
#include "head/core/lifecycle.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

Result<Effects> AddStep(ClusterState& s, const Context& ctx, api::JobId id, api::StepRecord& step, Now now) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  if (!job.spec.is_allocation() || job.state != JobState::kRunning) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} is not a running allocation", id);
  }
  Tx tx(s, ctx, now);
  step.id = job.steps.empty() ? 1 : job.steps.back().id + 1;
  step.start_ms = now.unix_ms;
  step.end_ms = 0;
  job.steps.push_back(step);
  if (job.steps.size() > api::kMaxSteps) {
    job.steps.erase(job.steps.begin(), job.steps.begin() + static_cast<std::ptrdiff_t>(job.steps.size() - api::kMaxSteps));
  }
  tx.fx.StoreJob(job);
  tx.fx.Info("allocation {}: step {} started on {} task(s)", id, step.id, step.tasks.size());
  return std::move(tx.fx);
}

Effects RecordStepExit(ClusterState& s, const Context& ctx, api::JobId id, const std::string& session, int exit_code,
                       Now now) {
  Tx tx(s, ctx, now);
  auto it = s.jobs.find(id);
  if (it == s.jobs.end() || session.empty()) return std::move(tx.fx);
  Job& job = it->second;
  for (auto& step : job.steps) {
    for (auto& task : step.tasks) {
      if (task.session != session || task.exit_code) continue;
      task.exit_code = exit_code;
      if (std::all_of(step.tasks.begin(), step.tasks.end(), [](const api::StepTask& t) { return t.exit_code; })) {
        step.end_ms = now.unix_ms;
      }
      tx.fx.StoreJob(job);
      return std::move(tx.fx);
    }
  }
  return std::move(tx.fx);
}

Result<Effects> EndAllocation(ClusterState& s, const Context& ctx, api::JobId id, int exit_code, int signal, Now now) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  if (!job.spec.is_allocation()) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} is not an allocation: only an allocation is ended by its "
                                                  "holder (cancel a job with cohort cancel)", id);
  }
  if (api::IsTerminal(job.state)) {
    return Errorf(ErrorCode::kFailedPrecondition, "allocation {} has already ended ({})", id,
                  api::JobStateName(job.state));
  }
  Tx tx(s, ctx, now);
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    FinishJob(tx, job, JobState::kCancelled,
              fmt::format("released: cohort alloc was stopped by SIG{}", name ? name : std::to_string(signal).c_str()),
              exit_code);
  } else if (exit_code == 0) {
    FinishJob(tx, job, JobState::kSucceeded, "released: the command exited 0", 0);
  } else {
    FinishJob(tx, job, JobState::kFailed, fmt::format("released: the command exited {}", exit_code), exit_code);
  }
  return std::move(tx.fx);
}

}  // namespace cohort::head::core
