#include "engine/trainer/threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace cohort::engine {

int ConfigureThreads(int requested, int local_ranks) {
  int n = requested;
  if (n <= 0 && std::getenv("OMP_NUM_THREADS") != nullptr) n = omp_get_max_threads();
  if (n <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n = std::max(1, cores / std::max(1, local_ranks));
  }
  omp_set_num_threads(n);
  return n;
}

}  // namespace cohort::engine
