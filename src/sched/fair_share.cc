#include "sched/fair_share.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "sched/gpu_units.h"

namespace cohort::sched {

double DecayUsage(double usage_gpu_s, int64_t elapsed_ms, int64_t half_life_ms) {
  if (half_life_ms <= 0 || elapsed_ms <= 0) return usage_gpu_s;
  return usage_gpu_s * std::exp2(-static_cast<double>(elapsed_ms) / static_cast<double>(half_life_ms));
}

double DecayedGpuSeconds(double gpus, int64_t from_ms, int64_t to_ms, int64_t now_ms, int64_t half_life_ms) {
  if (!(gpus > 0) || to_ms <= from_ms) return 0;
  const double g = gpus;
  if (half_life_ms <= 0) return g * static_cast<double>(to_ms - from_ms) / 1000.0;
  // g * integral over [from, to] of 2^(-(now - t) / h) dt, in seconds.
  const double h = static_cast<double>(half_life_ms);
  const double to_age = static_cast<double>(now_ms - to_ms);
  const double from_age = static_cast<double>(now_ms - from_ms);
  return g * (h / 1000.0 / std::log(2.0)) * (std::exp2(-to_age / h) - std::exp2(-from_age / h));
}

std::vector<TeamStanding> FairShares(std::span<const TeamView> teams) {
  double weights = 0, usage = 0;
  for (const TeamView& t : teams) {
    weights += static_cast<double>(std::max<int64_t>(t.weight, 1));
    usage += std::max(0.0, t.usage_gpu_s);
  }
  std::vector<TeamStanding> out;
  out.reserve(teams.size());
  for (const TeamView& t : teams) {
    TeamStanding s;
    s.name = t.name;
    s.share = static_cast<double>(std::max<int64_t>(t.weight, 1)) / weights;
    s.usage_fraction = usage > 0 ? std::max(0.0, t.usage_gpu_s) / usage : 0;
    s.factor = std::exp2(-s.usage_fraction / s.share);
    out.push_back(std::move(s));
  }
  return out;
}

int64_t RequestedGpus(const JobRequest& job) {
  if (job.nodes < 1 || job.gpus_per_node < 0) return 0;
  return static_cast<int64_t>(job.nodes) * job.gpus_per_node;
}

PriorityModel::PriorityModel(const SharePolicy& policy, int64_t now_ms, int64_t cluster_gpus)
    : weights_(policy.weights), now_ms_(now_ms), cluster_gpus_(cluster_gpus) {
  standings_ = FairShares(policy.teams);
  for (const TeamStanding& s : standings_) factor_.emplace(s.name, s.factor);
}

double PriorityModel::FactorOf(std::string_view team) const {
  auto it = factor_.find(team);
  return it == factor_.end() ? 1.0 : it->second;  // no usage of its own: 2^0
}

PriorityFactors PriorityModel::Of(const JobRequest& job, int64_t units) const {
  PriorityFactors f;
  f.fair_share = FactorOf(job.team);
  const int64_t waited = std::max<int64_t>(0, now_ms_ - job.submit_ms);
  f.age = weights_.max_age_ms > 0 ? std::min(1.0, static_cast<double>(waited) / static_cast<double>(weights_.max_age_ms))
                                  : 0;
  f.size = cluster_gpus_ > 0 ? std::min(1.0, static_cast<double>(units) / static_cast<double>(UnitsOfGpus(cluster_gpus_)))
                            : 0;
  f.job = std::clamp((static_cast<double>(job.priority) + 1000.0) / 2000.0, 0.0, 1.0);
  f.total = weights_.fair_share * f.fair_share + weights_.age * f.age + weights_.size * f.size + weights_.job * f.job;
  return f;
}

std::string_view QueueClassName(QueueClass c) {
  switch (c) {
    case QueueClass::kNominated: return "nominated";
    case QueueClass::kWithinQuota: return "within quota";
    case QueueClass::kBorrowing: return "borrowing";
  }
  return "borrowing";
}

std::vector<RankedJob> RankQueue(const Snapshot& snapshot, const QuotaBook& quotas) {
  int64_t cluster_gpus = 0;
  for (const NodeView& n : snapshot.nodes) cluster_gpus += n.total_gpus;
  const PriorityModel model(*snapshot.shares, snapshot.now_ms, cluster_gpus);
  const RequestUnits units(snapshot.nodes);
  std::vector<RankedJob> ranked;
  ranked.reserve(snapshot.pending.size());
  // The sort runs on compact keys: comparing through the jobs' pointers costs a cache miss
  // per comparison at 10,000 pending jobs.
  struct Key {
    int queue_class;
    double minus_total;
    int64_t submit_ms, id;
    size_t index;  // into `ranked`
    auto operator<=>(const Key&) const = default;
  };
  std::vector<Key> keys;
  keys.reserve(snapshot.pending.size());
  for (const JobRequest& job : snapshot.pending) {
    RankedJob r;
    r.job = &job;
    const int64_t asked = units.Of(job);
    r.factors = model.Of(job, asked);
    r.queue_class = job.nominated                        ? QueueClass::kNominated
                    : quotas.WithinQuota(job.team, asked) ? QueueClass::kWithinQuota
                                                          : QueueClass::kBorrowing;
    keys.push_back(Key{static_cast<int>(r.queue_class), -r.factors.total, job.submit_ms, job.id, ranked.size()});
    ranked.push_back(r);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<RankedJob> out;
  out.reserve(ranked.size());
  for (const Key& k : keys) out.push_back(ranked[k.index]);
  return out;
}

}  // namespace cohort::sched
