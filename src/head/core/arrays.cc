#include "head/core/arrays.h"

#include <cmath>

#include "api/job_array.h"
#include "api/sweep.h"
#include "head/core/job_limits.h"
#include "head/core/lifecycle.h"

namespace cohort::head::core {

using api::Job;
using api::JobId;
using api::JobState;

namespace {

constexpr std::string_view kEarlyStopped = "early-stopped";

// Element `task` of `array`: the array's spec less `array`, queued as of the array's
// submission (its place in the queue is the array's).
Job MakeElement(const Job& array, int64_t task) {
  Job e;
  e.spec = array.spec;
  e.spec.array.clear();
  e.spec.sweep = nullptr;
  api::ApplySweepElement(array.spec.sweep, task, e.spec, e.sweep_values);  // a sweep's point
  e.submit_ms = array.submit_ms;
  e.state = JobState::kPending;
  e.reason = "waiting for the scheduler";
  e.array_job_id = array.id;
  e.array_task_id = task;
  return e;
}

// The array's indices not yet started; empty (and a warning) if its record is unreadable.
api::ArrayIndexSet Left(Tx& tx, const Job& array) {
  if (array.array_left.empty()) return {};
  auto left = api::ArrayIndexSet::Parse(array.array_left, "array_left");
  if (!left) {
    tx.fx.Warn("job array {}: its indices left ('{}') are unreadable: {}", array.id, array.array_left.substr(0, 64),
               left.error().ToString());
    return {};
  }
  return std::move(*left);
}

// Ends an array none of whose indices is left to run or running.
void EndArray(Tx& tx, Job& array) {
  const ArrayRuntime& rt = tx.s.arrays[array.id];
  int64_t failed = 0, cancelled = array.array_cancelled, stopped = 0;
  std::optional<int> exit_code = 0;
  for (const auto& [task, id] : rt.elements) {
    const Job& e = tx.s.jobs.at(id);
    if (e.state == JobState::kFailed || e.state == JobState::kTimeout) {
      if (failed++ == 0) exit_code = e.exit_code;
    } else if (e.state == JobState::kCancelled) {
      ++(e.reason.starts_with(kEarlyStopped) ? stopped : cancelled);  // a sweep's early stop is no failure
    }
  }
  const int64_t total = static_cast<int64_t>(rt.elements.size()) + array.array_cancelled;
  tx.s.open_arrays.erase(array.id);
  if (failed > 0) {
    FinishJob(tx, array, JobState::kFailed, fmt::format("{} of {} elements failed", failed, total), exit_code);
  } else if (cancelled > 0) {
    FinishJob(tx, array, JobState::kCancelled, fmt::format("{} of {} elements cancelled", cancelled, total),
              std::nullopt);
  } else {
    FinishJob(tx, array, JobState::kSucceeded,
              stopped > 0 ? fmt::format("{} of {} elements succeeded, {} stopped early", total - stopped, total, stopped)
                          : fmt::format("all {} elements succeeded", total),
              0);
  }
}

}  // namespace

std::string ArrayIndices(const api::JobSpec& spec) {
  auto a = api::ParseArraySpec(spec.array, "array");
  return a ? a->indices.ToString() : std::string();
}

void IndexArrayJob(ClusterState& s, const Job& job) {
  if (job.spec.is_array()) {
    s.arrays[job.id];
    if (!api::IsTerminal(job.state)) s.open_arrays.insert(job.id);
  }
  if (job.is_array_element()) {
    ArrayRuntime& rt = s.arrays[job.array_job_id];
    rt.elements[job.array_task_id] = job.id;
    if (!api::IsTerminal(job.state)) rt.live.insert(job.id);
  }
}

ArrayElements SettleArrays(ClusterState& s, const Context& ctx, Now now) {
  ArrayElements out;
  Tx tx(s, ctx, now);
  std::vector<JobId> ended;
  for (JobId id : s.open_arrays) {
    Job& array = s.jobs.at(id);
    ArrayRuntime& rt = s.arrays[id];
    int64_t pending = 0;
    for (auto it = rt.live.begin(); it != rt.live.end();) {
      const JobState st = s.jobs.at(*it).state;
      if (api::IsTerminal(st)) {
        it = rt.live.erase(it);
        continue;
      }
      if (st == JobState::kPending) ++pending;
      ++it;
    }
    if (!array.array_left.empty()) {
      api::ArrayIndexSet left = Left(tx, array);
      auto spec = api::ParseArraySpec(array.spec.array, "array");  // checked at submit
      const int throttle = spec ? spec->throttle : 1;
      // The throttle counts every element made and not ended, so it holds at every moment
      // whatever the scheduler does with them; without one, a window of pending elements.
      const int64_t creating = static_cast<int64_t>(rt.creating.size());
      const int64_t live = static_cast<int64_t>(rt.live.size()) + creating;
      int64_t budget = throttle > 0 ? throttle - live : kArrayWindow - pending - creating;
      // Each element is an open job of the array's user (job_limits.h): past the limits
      // the next ones wait, and the array's pending reason says so.
      const int64_t room = OpenJobRoom(s, ctx.job_limits, array.spec.user);
      rt.waits_for_room.clear();
      if (array.held) budget = 0;  // cohort hold of the array: no new elements until released
      if (budget > 0 && room < budget) {
        budget = room;
        if (room == 0) rt.waits_for_room = "its next elements wait: " + NoRoomReason(s, ctx.job_limits, array.spec.user);
      }
      if (budget > 0 || left.empty()) {
        for (int64_t task : left.TakeFirst(std::max<int64_t>(budget, 0))) {
          out.create.push_back(MakeElement(array, task));
          CountOpenJob(s, array.spec.user, +1);  // open from now on; a failed commit drops it (DropNewJob)
          rt.creating.insert(task);
        }
        array.array_left = left.ToString();
        tx.fx.StoreJob(array);
      }
    }
    if (array.array_left.empty() && rt.live.empty() && rt.creating.empty()) ended.push_back(id);
  }
  for (JobId id : ended) EndArray(tx, s.jobs.at(id));
  out.effects = std::move(tx.fx);
  return out;
}

Effects ReturnArrayElement(ClusterState& s, const Context& ctx, const Job& element, Now now) {
  Tx tx(s, ctx, now);
  auto it = s.jobs.find(element.array_job_id);
  if (it == s.jobs.end()) return std::move(tx.fx);
  Job& array = it->second;
  ArrayRuntime& rt = s.arrays[array.id];
  rt.creating.erase(element.array_task_id);
  if (api::IsTerminal(array.state)) {
    array.array_cancelled += 1;  // cancelled while it was being created
  } else {
    api::ArrayIndexSet left = Left(tx, array);
    left.Add(element.array_task_id);
    array.array_left = left.ToString();
  }
  tx.fx.StoreJob(array);
  tx.RequestSchedule();  // the next pass makes it again
  return std::move(tx.fx);
}

void AdoptArrayElement(Tx& tx, Job& element) {
  ArrayRuntime& rt = tx.s.arrays[element.array_job_id];
  rt.creating.erase(element.array_task_id);
  IndexArrayJob(tx.s, element);
  auto array = tx.s.jobs.find(element.array_job_id);
  if (array != tx.s.jobs.end() && api::IsTerminal(array->second.state)) {
    FinishJob(tx, element, JobState::kCancelled, "its array was cancelled", std::nullopt);
    rt.live.erase(element.id);
  }
}

Result<JobId> ArrayElementId(const ClusterState& s, JobId array, int64_t task) {
  auto a = s.jobs.find(array);
  if (a == s.jobs.end() || !a->second.spec.is_array()) {
    return Errorf(ErrorCode::kNotFound, "job {} is not a job array, so it has no element {}", array, task);
  }
  auto rt = s.arrays.find(array);
  if (rt != s.arrays.end()) {
    if (auto e = rt->second.elements.find(task); e != rt->second.elements.end()) return e->second;
  }
  if (!a->second.array_left.empty()) {
    auto left = api::ArrayIndexSet::Parse(a->second.array_left, "array_left");
    if (left && left->contains(task)) {
      return Errorf(ErrorCode::kNotFound, "element {}_{} has not started yet: it waits in its array", array, task);
    }
  }
  if (rt != s.arrays.end() && rt->second.creating.contains(task)) {
    // Taken from the waiting indices, its job not yet committed (a moment): cohort logs -f
    // looks again on this text (cli/logs.cc).
    return Errorf(ErrorCode::kNotFound, "element {}_{} is being made: it exists once its commit is done", array,
                  task);
  }
  if (auto spec = api::ParseArraySpec(a->second.spec.array, "array"); spec && spec->indices.contains(task)) {
    // One of its indices, neither waiting, being made nor made: taken out before it started.
    return Errorf(ErrorCode::kNotFound, "element {}_{} was cancelled before it started", array, task);
  }
  return Errorf(ErrorCode::kNotFound, "job array {} has no element {} (its indices: {})", array, task,
                a->second.spec.array);
}

Effects CancelArray(ClusterState& s, const Context& ctx, Job& array, Now now) {
  Tx tx(s, ctx, now);
  ArrayRuntime& rt = s.arrays[array.id];
  for (JobId id : rt.live) {
    Job& e = s.jobs.at(id);
    if (!api::IsTerminal(e.state)) FinishJob(tx, e, JobState::kCancelled, "its array was cancelled", std::nullopt);
  }
  rt.live.clear();
  array.array_cancelled += Left(tx, array).size();
  array.array_left.clear();
  s.open_arrays.erase(array.id);
  FinishJob(tx, array, JobState::kCancelled, "cancelled by request", std::nullopt);
  tx.RequestSchedule();
  return std::move(tx.fx);
}

Result<Effects> CancelArrayTask(ClusterState& s, const Context& ctx, JobId array, int64_t task, Now now) {
  auto it = s.jobs.find(array);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", array);
  Job& a = it->second;
  auto id = ArrayElementId(s, array, task);
  if (id) {
    Job& e = s.jobs.at(*id);
    if (api::IsTerminal(e.state)) {
      return Errorf(ErrorCode::kFailedPrecondition, "element {}_{} (job {}) has already ended ({})", array, task, *id,
                    api::JobStateName(e.state));
    }
    Tx tx(s, ctx, now);
    FinishJob(tx, e, JobState::kCancelled, "cancelled by request", std::nullopt);
    return std::move(tx.fx);
  }
  if (!a.spec.is_array() || a.array_left.empty()) return std::unexpected(id.error());
  Tx tx(s, ctx, now);
  api::ArrayIndexSet left = Left(tx, a);
  if (!left.Remove(task)) return std::unexpected(id.error());
  a.array_left = left.ToString();
  a.array_cancelled += 1;
  tx.fx.StoreJob(a);
  tx.fx.Info("job array {}: element {} cancelled before it started", array, task);
  tx.RequestSchedule();  // the array may have nothing left
  return std::move(tx.fx);
}

Effects OnSweepProgress(ClusterState& s, const Context& ctx, JobId job, int64_t step, std::optional<double> loss,
                        Now now) {
  Tx tx(s, ctx, now);
  auto e = s.jobs.find(job);
  if (!loss || e == s.jobs.end() || !e->second.is_array_element() || e->second.state != JobState::kRunning) {
    return std::move(tx.fx);
  }
  auto a = s.jobs.find(e->second.array_job_id);
  if (a == s.jobs.end() || !a->second.spec.sweep.contains("early_stop")) return std::move(tx.fx);
  const json& rule = a->second.spec.sweep["early_stop"];
  ArrayRuntime& rt = s.arrays[a->first];
  for (const auto& m : rule["milestones"]) {
    const int64_t milestone = m.get<int64_t>();
    if (step < milestone) break;
    auto& losses = rt.milestone_losses[milestone];
    if (!losses.emplace(job, *loss).second) continue;  // judged at this milestone already
    const auto n = static_cast<int64_t>(losses.size());
    if (n < rule.value("min_elements", int64_t{3})) continue;
    int64_t rank = 1;
    for (const auto& [other, l] : losses) rank += l < *loss;
    const auto kept = std::max<int64_t>(1, static_cast<int64_t>(std::floor(rule.value("keep", 0.5) * n)));
    if (rank <= kept) continue;
    FinishJob(tx, e->second, JobState::kCancelled,
              fmt::format("{} at step {}: loss {:.4f} ranks {} of {} (keeps the best {})", kEarlyStopped, milestone,
                          *loss, rank, n, kept),
              std::nullopt);
    tx.RequestSchedule();  // its GPUs, and its array's next element
    break;
  }
  return std::move(tx.fx);
}

std::map<std::string, int64_t> ArraySummary(const ClusterState& s, const Job& array) {
  std::map<std::string, int64_t> out;
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                      JobState::kCancelled, JobState::kTimeout}) {
    out[std::string(api::JobStateName(st))] = 0;
  }
  int64_t creating = 0;
  if (auto rt = s.arrays.find(array.id); rt != s.arrays.end()) {
    for (const auto& [task, id] : rt->second.elements) out[std::string(api::JobStateName(s.jobs.at(id).state))] += 1;
    creating = static_cast<int64_t>(rt->second.creating.size());
  }
  int64_t left = 0;
  if (!array.array_left.empty()) {
    if (auto l = api::ArrayIndexSet::Parse(array.array_left, "array_left")) left = l->size();
  }
  out["PENDING"] += left + creating;
  out["CANCELLED"] += array.array_cancelled;
  return out;
}

std::string FailedArrayIndices(const ClusterState& s, const Job& array) {
  api::ArrayIndexSet failed;
  if (auto rt = s.arrays.find(array.id); rt != s.arrays.end()) {
    for (const auto& [task, id] : rt->second.elements) {
      const JobState st = s.jobs.at(id).state;
      if (st == JobState::kFailed || st == JobState::kTimeout) failed.Add(task);
    }
  }
  return failed.ToString();
}

}  // namespace cohort::head::core
