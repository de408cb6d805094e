#include "sched/priority.h"

#include <algorithm>
#include <tuple>

namespace cohort::sched {

bool RunsBefore(const JobRequest& a, const JobRequest& b) {
  return std::tuple(-static_cast<int64_t>(a.priority), a.submit_ms, a.id) <
         std::tuple(-static_cast<int64_t>(b.priority), b.submit_ms, b.id);
}

std::vector<const JobRequest*> OrderQueue(std::span<const JobRequest> pending) {
  // RunsBefore's order, sorted on compact keys (through the pointers each comparison
  // would miss the cache at 10,000 pending jobs).
  std::vector<std::tuple<int64_t, int64_t, int64_t, const JobRequest*>> keys;
  keys.reserve(pending.size());
  for (const JobRequest& job : pending) {
    keys.emplace_back(-static_cast<int64_t>(job.priority), job.submit_ms, job.id, &job);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<const JobRequest*> order;
  order.reserve(pending.size());
  for (const auto& key : keys) order.push_back(std::get<3>(key));
  return order;
}

}  // namespace cohort::sched
