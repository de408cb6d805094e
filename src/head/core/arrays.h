// Job arrays in the head's core (`cohort submit --array 0-999%16`, api/job_array.h).
//
// An array is one job record: its spec carries `array`, and `array_left` holds the indices
// not yet started as elements, as ranges. It never enters the queue itself. Elements are
// made from it a few at a time (SettleArrays): each is an ordinary job of its own (its own
// id, attempts, logs) with `array_job_id` and `array_task_id` set, created in the same
// store commit that takes its index off the array's `array_left`, so a head restarted at
// any moment has each index exactly once, in the array or as an element: nothing lost,
// nothing run twice. A 100,000-element array therefore costs one row at submit, and the
// scheduler sees only the elements made so far: at most the throttle (`%16`) of elements
// are live (made, pending or running) at any moment, or kArrayWindow pending ones without
// a throttle. The array stays PENDING until every index has run or was cancelled; then it
// ends SUCCEEDED if every element did, else FAILED (an element failed or timed out) or
// CANCELLED. Single-threaded, like the whole core.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"
#include "head/core/tx.h"

namespace cohort::head::core {

// Elements of an unthrottled array kept made and pending at once: enough to fill the free
// GPUs of a pass, few enough that the scheduler never sees the whole array.
inline constexpr int64_t kArrayWindow = 256;

// An array's indices as its record keeps them (array_left at submit): the spec's `array`
// less its throttle, canonical; "" if the spec is no (valid) array.
std::string ArrayIndices(const api::JobSpec& spec);

// Indexes `job` if it is an array or an element (AddJob and LoadState call it).
void IndexArrayJob(ClusterState& s, const api::Job& job);

// Elements to create: each a PENDING job without an id. The array records that gave them
// their indices are already among the effects' jobs to store; both must go in one commit.
struct ArrayElements {
  std::vector<api::Job> create;
  Effects effects;
};

// Makes the elements the arrays may start now (throttle, window) and ends the arrays that
// have nothing left to run. Runs at every scheduling pass.
ArrayElements SettleArrays(ClusterState& s, const Context& ctx, Now now);

// The element's creation failed (the store did not commit it): its index goes back to its
// array, which is stored again.
Effects ReturnArrayElement(ClusterState& s, const Context& ctx, const api::Job& element, Now now);

// Takes a created and queued element into its array's index (AddJob calls it). If the
// array was cancelled while the element was being created, the element is cancelled too.
void AdoptArrayElement(Tx& tx, api::Job& element);

// The job id of element `task` of array `array`. kNotFound if `array` is not an array, if
// `task` is not one of its indices, or (naming where it is) if the element has not started.
Result<api::JobId> ArrayElementId(const ClusterState& s, api::JobId array, int64_t task);

// Cancels the whole array: every live element and every index not yet started.
Effects CancelArray(ClusterState& s, const Context& ctx, api::Job& array, Now now);

// Cancels one element: its job if it was made, else its index leaves the array (counted
// in array_cancelled). kNotFound for an index not in the array; kFailedPrecondition if
// that element has ended.
Result<Effects> CancelArrayTask(ClusterState& s, const Context& ctx, api::JobId array, int64_t task, Now now);

// A progress report (step, loss) of sweep element `job`. With the sweep's early_stop
// (ASHA): when the element first reports at or past a milestone, its loss is ranked among
// those every element reported there; once min_elements have, an element outside the best
// `keep` fraction is stopped (CANCELLED, "early-stopped at step M: loss L ranks R of N").
Effects OnSweepProgress(ClusterState& s, const Context& ctx, api::JobId job, int64_t step, std::optional<double> loss,
                        Now now);

// How many of an array's elements are in each state ("PENDING" counts indices not yet
// started too), for `cohort show`.
std::map<std::string, int64_t> ArraySummary(const ClusterState& s, const api::Job& array);

// The indices of the array's elements that ended FAILED or TIMEOUT, as an index set
// ("3,17,40-42"): what a user runs again (cohort submit --array 3,17,40-42). "" for none.
std::string FailedArrayIndices(const ClusterState& s, const api::Job& array);

}  // namespace cohort::head::core
