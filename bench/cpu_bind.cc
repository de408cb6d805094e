// CPU binding (agent/cpu_allocator.h): what it changes for two CPU jobs on one agent, and
// what it costs at launch.
//
// Effect: two tasks run at once under one Executor, each an OpenMP loop of fixed steps
// (this program with --worker: a parallel sum over 4 M doubles per step, with the
// implicit barrier every OpenMP step has, as a BLAS call or a training step does), for
// --seconds each; the figure is each task's steps/s and their sum, in three setups:
//   before: the agent before binding (no mask, no OMP_NUM_THREADS: OpenMP starts a thread
//           per CPU of the machine in each task);
//   none:   `--cpu-bind none` (no mask; OMP_NUM_THREADS = cpus_per_task);
//   cores:  `--cpu-bind cores` (each task bound to its own cpus_per_task CPUs).
// Each task asks for half the machine's CPUs (cpus_per_task = CPUs / 2, at least 1).
//
// Cost: --launches tasks (`true`) started one after another, launch to exit, with and
// without a pool (cpus_per_task 1), median and p90; and CpuAllocator::Allocate plus
// Release alone on a 256-CPU two-socket layout.
//
//   bench_cpu_bind [--seconds 10] [--launches 200]
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/cpu_allocator.h"
#include "agent/executor.h"
#include "common/cpu_set.h"

using namespace cohort::agent;
using Clock = std::chrono::steady_clock;

namespace {

int Worker(double seconds) {
  constexpr int kN = 4 << 20;
  std::vector<double> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = i * 1e-6;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  double sink = 0;
  const auto t0 = Clock::now();
  while (Clock::now() < end) {
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int i = 0; i < kN; ++i) s += std::sqrt(v[i] + steps);
    sink += s;
    ++steps;
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("threads=%d steps_per_s=%.2f sink=%g\n", omp_get_max_threads(), steps / took, sink > 0 ? 1.0 : 0.0);
  return 0;
}

std::string SelfExe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

TaskStatus WaitDone(Executor& ex, const TaskKey& key) {
  while (true) {
    for (const auto& s : ex.Snapshot()) {
      if (s.key == key && !s.running) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::unique_ptr<Executor> MakeExecutor(const std::string& dir, bool bind, const std::vector<int>& usable) {
  Executor::Options o;
  o.work_dir = dir;
  o.shim_path = COHORT_TASK_SHIM;
  o.kill_grace = std::chrono::milliseconds(1000);
  if (bind) o.cpu_pool = ReadCpuTopology(usable);
  return std::make_unique<Executor>(o);
}

double StepsPerS(const std::string& log, int& threads) {
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (std::sscanf(line.c_str(), "threads=%d", &threads) == 1) {
      const auto at = line.find("steps_per_s=");
      if (at != std::string::npos) return std::atof(line.c_str() + at + 12);
    }
  }
  return 0;
}

void Effect(const std::string& dir, const std::vector<int>& usable, double seconds) {
  const int per_task = std::max(1, static_cast<int>(usable.size()) / 2);
  std::printf("effect: 2 tasks, each an OpenMP loop for %.0f s, cpus_per_task %d, %zu CPUs (%s)\n", seconds, per_task,
              usable.size(), cohort::FormatCpuList(usable).c_str());
  std::printf("  %-8s %-16s %-16s %-10s\n", "setup", "task 0 steps/s", "task 1 steps/s", "sum");
  int64_t job = 1;
  for (const char* setup : {"before", "none", "cores", "before", "none", "cores"}) {
    const bool bind = std::strcmp(setup, "cores") == 0;
    auto ex = MakeExecutor(dir, bind, usable);
    std::vector<TaskKey> keys;
    for (int r = 0; r < 2; ++r) {
      TaskSpec s;
      s.key = {job, 0, r};
      s.command = {SelfExe(), "--worker", std::to_string(seconds)};
      s.cpus = std::strcmp(setup, "before") == 0 ? 0 : per_task;
      keys.push_back(s.key);
      if (!ex->Launch(s)) std::abort();
    }
    double rate[2];
    int threads[2] = {0, 0};
    std::string masks[2];
    for (int r = 0; r < 2; ++r) {
      TaskStatus st = WaitDone(*ex, keys[r]);
      rate[r] = StepsPerS(st.log_path, threads[r]);
      masks[r] = st.cpu_list.empty() ? "all" : cohort::FormatCpuList(st.cpu_list);
    }
    std::printf("  %-8s %6.2f (%d thr, %-4s) %6.2f (%d thr, %-4s) %6.2f\n", setup, rate[0], threads[0],
                masks[0].c_str(), rate[1], threads[1], masks[1].c_str(), rate[0] + rate[1]);
    ++job;
  }
}

void LaunchCost(const std::string& dir, const std::vector<int>& usable, int launches) {
  std::printf("cost: %d tasks (`true`) one after another, launch to exit\n", launches);
  for (bool bind : {false, true, false, true}) {
    auto ex = MakeExecutor(dir, bind, usable);
    std::vector<double> ms;
    for (int i = 0; i < launches; ++i) {
      TaskSpec s;
      s.key = {1000 + i, 0, 0};
      s.command = {"true"};
      s.cpus = 1;
      const auto t0 = Clock::now();
      if (!ex->Launch(s)) std::abort();
      WaitDone(*ex, s.key);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      ex->Forget(s.key);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  %-6s median %.2f ms  p90 %.2f ms\n", bind ? "cores" : "none", ms[ms.size() / 2],
                ms[ms.size() * 9 / 10]);
  }
  std::vector<CpuPlace> big;
  for (int cpu = 0; cpu < 256; ++cpu) big.push_back({cpu, cpu % 128, (cpu % 128) / 64, (cpu % 128) / 64});
  CpuAllocator a(big);
  std::vector<std::vector<int>> held;
  for (int i = 0; i < 60; ++i) held.push_back(a.Allocate(4));  // a node 94% full
  constexpr int kRounds = 20000;
  const auto t0 = Clock::now();
  for (int i = 0; i < kRounds; ++i) a.Release(a.Allocate(4));
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kRounds;
  std::printf("  Allocate(4) + Release on 256 CPUs, 240 held: %.2f us\n", us);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  int launches = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--worker") == 0) return Worker(std::atof(argv[i + 1]));
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--launches") == 0) launches = std::atoi(argv[i + 1]);
  }
  auto usable = cohort::AffinityCpus();
  if (!usable || usable->size() < 2) {
    std::printf("needs 2 CPUs in this process's mask\n");
    return 1;
  }
  char tmpl[] = "/tmp/cpubind-bench-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) return 1;
  std::ifstream load("/proc/loadavg");
  std::string l;
  std::getline(load, l);
  std::printf("load before: %s\n", l.c_str());
  Effect(dir, *usable, seconds);
  LaunchCost(dir, *usable, launches);
  std::ifstream load2("/proc/loadavg");
  std::getline(load2, l);
  std::printf("load after: %s\n", l.c_str());
  std::filesystem::remove_all(dir);
  return 0;
}
