// Queue order: which pending job the scheduler considers first.
//
// Jobs run in priority order (larger first); equal priorities run in submit order
// (earlier `submit_ms` first), and the job id breaks the remaining ties, so the order is
// total and the same snapshot always yields the same decision. Pure functions.
#pragma once

#include <span>
#include <vector>

#include "sched/snapshot.h"

namespace cohort::sched {

// True if `a` is considered before `b`: priority descending, then submit_ms ascending,
// then id ascending.
bool RunsBefore(const JobRequest& a, const JobRequest& b);

// The pending jobs in the order the scheduler considers them. The pointers point into
// `pending`, which must outlive the result.
std::vector<const JobRequest*> OrderQueue(std::span<const JobRequest> pending);

}  // namespace cohort::sched
