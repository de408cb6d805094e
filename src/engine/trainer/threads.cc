#include "engine/trainer/threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/cpu_set.h"

namespace cohort::engine {

int UsableCpus() {
  auto mask = AffinityCpus();
  if (mask && !mask->empty()) return static_cast<int>(mask->size());
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool RankIsBound() {
  const char* bind = std::getenv("COHORT_CPU_BIND");
  return bind != nullptr && *bind != '\0';
}

int ConfigureThreads(int requested, int local_ranks) {
  int n = requested;
  if (n <= 0 && std::getenv("OMP_NUM_THREADS") != nullptr) n = omp_get_max_threads();
  if (n <= 0) n = RankIsBound() ? UsableCpus() : std::max(1, UsableCpus() / std::max(1, local_ranks));
  omp_set_num_threads(n);
  return n;
}

}  // namespace cohort::engine
