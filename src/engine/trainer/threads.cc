#include "engine/trainer/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace cohort::engine {

int UsableCpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    const int n = CPU_COUNT(&mask);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int ConfigureThreads(int requested, int local_ranks) {
  int n = requested;
  if (n <= 0 && std::getenv("OMP_NUM_THREADS") != nullptr) n = omp_get_max_threads();
  if (n <= 0) n = std::max(1, UsableCpus() / std::max(1, local_ranks));
  omp_set_num_threads(n);
  return n;
}

}  // namespace cohort::engine
