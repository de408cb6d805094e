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

// Runs `body` with OMP_NUM_THREADS unset, COHORT_CPU_BIND set to `bind` (nullptr: unset)
// and this thread bound to the first `cpus` CPUs of its current mask; restores all three
// after (the test itself may run as a bound task).
template <class F>
void WithCpus(int cpus, F body, const char* bind = nullptr) {
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
  std::optional<std::string> old_bind;
  if (const char* v = std::getenv("COHORT_CPU_BIND")) old_bind = v;
  unsetenv("OMP_NUM_THREADS");
  if (bind) {
    setenv("COHORT_CPU_BIND", bind, 1);
  } else {
    unsetenv("COHORT_CPU_BIND");
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(mask), &mask), 0);
  body();
  sched_setaffinity(0, sizeof(old_mask), &old_mask);
  if (omp) setenv("OMP_NUM_THREADS", omp->c_str(), 1);
  if (old_bind) {
    setenv("COHORT_CPU_BIND", old_bind->c_str(), 1);
  } else {
    unsetenv("COHORT_CPU_BIND");
  }
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
    EXPECT_FALSE(RankIsBound());
  });
  // An empty COHORT_CPU_BIND binds nothing: the two CPUs are still shared.
  WithCpus(2, [] { EXPECT_EQ(ConfigureThreads(0, 2), 1); }, "");
}

// A rank the agent bound (--cpu-bind cores: COHORT_CPU_BIND names its CPUs) already has its
// share as its mask; dividing that by the local ranks again would leave it one thread of
// the two CPUs it was given.
TEST(ThreadsTest, ABoundRankUsesAllOfItsOwnCpus) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  if (CPU_COUNT(&mask) < 2) GTEST_SKIP() << "one usable CPU: a bound rank's two CPUs cannot be made";
  WithCpus(2, [] {
    EXPECT_TRUE(RankIsBound());
    EXPECT_EQ(ConfigureThreads(0, 2), 2);
    EXPECT_EQ(ConfigureThreads(0, 8), 2);
    EXPECT_EQ(omp_get_max_threads(), 2);
    EXPECT_EQ(ConfigureThreads(3, 2), 3);  // an explicit count still wins
    setenv("OMP_NUM_THREADS", "1", 1);     // and so does the job's OMP_NUM_THREADS
    omp_set_num_threads(1);
    EXPECT_EQ(ConfigureThreads(0, 2), 1);
    unsetenv("OMP_NUM_THREADS");
  }, "0-1");
}

}  // namespace
}  // namespace cohort::engine
