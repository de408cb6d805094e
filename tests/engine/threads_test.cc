// A rank's thread count follows the CPUs it may run on (its affinity mask), not the
// machine's core count: under taskset, a cgroup cpuset or a scheduler's CPU binding, a rank
// that started one OpenMP thread per machine core would oversubscribe the CPUs it was given.
#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "engine/trainer/threads.h"

namespace cohort::engine {
namespace {

// Runs `body` with OMP_NUM_THREADS unset and this thread bound to the first `cpus` CPUs of
// its current mask; restores both after.
template <class F>
void WithCpus(int cpus, F body) {
  cpu_set_t old_mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old_mask), &old_mask), 0);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  int taken = 0;
  for (int c = 0; c < CPU_SETSIZE && taken < cpus; ++c) {
    if (CPU_ISSET(c, &old_mask)) {
      CPU_SET(c, &mask);
      ++taken;
    }
  }
  ASSERT_EQ(taken, cpus);
  std::optional<std::string> omp;
  if (const char* v = std::getenv("OMP_NUM_THREADS")) omp = v;
  unsetenv("OMP_NUM_THREADS");
  ASSERT_EQ(sched_setaffinity(0, sizeof(mask), &mask), 0);
  body();
  sched_setaffinity(0, sizeof(old_mask), &old_mask);
  if (omp) setenv("OMP_NUM_THREADS", omp->c_str(), 1);
}

TEST(ThreadsTest, ARankUsesTheCpusItMayRunOnSharedAmongTheLocalRanks) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  const int all = CPU_COUNT(&mask);
  EXPECT_EQ(UsableCpus(), all);
  if (all < 2) GTEST_SKIP() << "one usable CPU: binding to fewer cannot be told apart";
  WithCpus(1, [] {
    EXPECT_EQ(UsableCpus(), 1);
    EXPECT_EQ(ConfigureThreads(0, 1), 1);  // the machine's cores would say more
    EXPECT_EQ(omp_get_max_threads(), 1);
  });
  WithCpus(2, [] {
    EXPECT_EQ(ConfigureThreads(0, 1), 2);
    EXPECT_EQ(ConfigureThreads(0, 2), 1);  // two ranks share the two CPUs
    EXPECT_EQ(ConfigureThreads(0, 4), 1);  // never fewer than one
    EXPECT_EQ(ConfigureThreads(3, 1), 3);  // an explicit count wins
  });
}

}  // namespace
}  // namespace cohort::engine
