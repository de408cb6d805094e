// Fair share and multifactor priority (Slurm's priority/multifactor), as pure functions.
//
// Usage: a team's usage is GPU-seconds decayed with a half-life: a GPU-second used `t` ago
// counts 2^(-t / half_life). `DecayUsage` ages a total; `DecayedGpuSeconds` is the exact
// decayed worth of holding `gpus` GPUs over an interval, so that usage accrued pass by
// pass equals usage rebuilt from job history. A job sharing GPUs holds a fraction: half a
// GPU for an hour is 1,800 GPU-seconds.
//
// Fair-share factor (Slurm's classic formula): F = 2^(-U / S), where S is the team's
// weight over the sum of the weights of the teams that count, and U its decayed usage over
// all of theirs. A team that used exactly its share gets 0.5; one that used nothing, 1;
// one that used all of it (S < 1) tends to 0. With no usage at all every team gets 1.
//
// A pending job's priority is the sum of weighted factors, each in [0, 1]
// (PriorityWeights in snapshot.h): its team's fair-share factor; its age (waiting time
// over max_age, capped at 1); its size (its GPUs over the cluster's); and its own priority
// ((priority + 1000) / 2000). A job's GPUs, for its size and its queue class, count its
// parts of GPUs (gpu_units.h). The queue runs in descending priority, submit order and id
// breaking ties. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/quota.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// `usage_gpu_s` aged by `elapsed_ms` under `half_life_ms` (<= 0: no decay).
double DecayUsage(double usage_gpu_s, int64_t elapsed_ms, int64_t half_life_ms);

// The decayed worth at `now_ms` of `gpus` GPUs (a fraction for a sharing job) held over [from_ms, to_ms] (to_ms <=
// now_ms), in GPU-seconds; 0 for an empty interval.
double DecayedGpuSeconds(double gpus, int64_t from_ms, int64_t to_ms, int64_t now_ms, int64_t half_life_ms);

// One team's standing: its normalized share, its part of the usage, and its factor.
struct TeamStanding {
  std::string name;
  double share = 0;           // weight / sum of weights
  double usage_fraction = 0;  // usage / sum of usage (0 when nobody used anything)
  double factor = 1;          // 2^(-usage_fraction / share)
};

// The standing of every team of `teams` (same order). Every weight must be >= 1.
std::vector<TeamStanding> FairShares(std::span<const TeamView> teams);

struct PriorityFactors {
  double fair_share = 0, age = 0, size = 0, job = 0;  // each in [0, 1]
  double total = 0;                                   // weighted sum, in points
};

// Multifactor priorities of one snapshot's pending jobs: the teams' factors computed once.
class PriorityModel {
 public:
  // `teams` are the snapshot's (the head lists every team that has jobs or usage); a job
  // whose team is not among them has the factor of a team without usage, 1.
  PriorityModel(const SharePolicy& policy, int64_t now_ms, int64_t cluster_gpus);

  // `units`: the GPUs the job asks for, in share units (RequestUnits, gpu_units.h).
  PriorityFactors Of(const JobRequest& job, int64_t units) const;
  // The fair-share factor of `team`.
  double FactorOf(std::string_view team) const;
  const std::vector<TeamStanding>& standings() const { return standings_; }

 private:
  PriorityWeights weights_;
  int64_t now_ms_;
  int64_t cluster_gpus_;
  std::vector<TeamStanding> standings_;
  std::unordered_map<std::string, double, StringHash, std::equal_to<>> factor_;
};

// The whole GPUs a job asks for in all (nodes x gpus_per_node; 0 for an invalid request
// and for a job that shares GPUs: RequestUnits counts those).
int64_t RequestedGpus(const JobRequest& job);

// With shares, the queue runs in three classes, each by descending priority: jobs that
// preempted others and wait for their GPUs (they get the GPUs freed for them), then jobs
// whose team stays within its quota with them (guaranteed GPUs come before borrowed ones,
// as in Kueue), then jobs that would borrow.
enum class QueueClass { kNominated = 0, kWithinQuota = 1, kBorrowing = 2 };
std::string_view QueueClassName(QueueClass c);  // "nominated", "within quota", "borrowing"

struct RankedJob {
  const JobRequest* job = nullptr;
  PriorityFactors factors;
  QueueClass queue_class = QueueClass::kBorrowing;
};

// The pending jobs of `snapshot` (which must have shares) in the order the scheduler
// considers them: class, then priority descending, then submit_ms, then id. `quotas`
// holds what the running jobs use. Pointers point into `snapshot.pending`.
std::vector<RankedJob> RankQueue(const Snapshot& snapshot, const QuotaBook& quotas);

}  // namespace cohort::sched
