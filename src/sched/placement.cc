#include "sched/placement.h"

#include <limits>
#include <tuple>

namespace cohort::sched {

bool PlacesBefore(Placement policy, const NodeFree& a, const NodeFree& b) {
  if (policy == Placement::kPack) {
    return std::tuple(a.gpus, a.cpus, a.rank) < std::tuple(b.gpus, b.cpus, b.rank);
  }
  return std::tuple(-a.gpus, -a.cpus, a.rank) < std::tuple(-b.gpus, -b.cpus, b.rank);
}

namespace {

// Start of the shortest maximal run of consecutive indices with at least `count`
// members (the earliest such run on ties), or -1 if there is none.
int ShortestRunStart(std::span<const int> free_gpus, int count) {
  int best_start = -1;
  int best_len = std::numeric_limits<int>::max();
  const int n = static_cast<int>(free_gpus.size());
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && free_gpus[j + 1] == free_gpus[j] + 1) ++j;
    const int len = j - i + 1;
    if (len >= count && len < best_len) {
      best_start = i;
      best_len = len;
    }
    i = j + 1;
  }
  return best_start;
}

}  // namespace

std::vector<int> ChooseGpus(std::span<const int> free_gpus, int count, Placement policy) {
  if (count <= 0) return {};
  int start = 0;
  if (policy == Placement::kPack) {
    const int run = ShortestRunStart(free_gpus, count);
    if (run >= 0) start = run;
  }
  return std::vector<int>(free_gpus.begin() + start, free_gpus.begin() + start + count);
}

}  // namespace cohort::sched
