#include "sched/priority.h"

#include <algorithm>
#include <tuple>

namespace cohort::sched {

bool RunsBefore(const JobRequest& a, const JobRequest& b) {
  return std::tuple(-static_cast<int64_t>(a.priority), a.submit_ms, a.id) <
         std::tuple(-static_cast<int64_t>(b.priority), b.submit_ms, b.id);
}

std::vector<const JobRequest*> OrderQueue(std::span<const JobRequest> pending) {
  std::vector<const JobRequest*> order;
  order.reserve(pending.size());
  for (const JobRequest& job : pending) order.push_back(&job);
  std::sort(order.begin(), order.end(),
            [](const JobRequest* a, const JobRequest* b) { return RunsBefore(*a, *b); });
  return order;
}

}  // namespace cohort::sched
