#include "head/progress.h"

#include <cmath>

#include <algorithm>
#include <climits>

namespace cohort::head {

Result<ProgressPoint> ProgressReportFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  ProgressPoint p;
  p.step = COHORT_TRY(r.Int("step", std::nullopt, 0, INT64_MAX));
  p.rank = static_cast<int>(COHORT_TRY(r.Int("rank", 0, 0, 1 << 30)));
  auto opt = [&](const char* key, double min) -> Result<std::optional<double>> {
    if (!r.Has(key)) {
      (void)r.Raw(key);
      return std::optional<double>();
    }
    return std::optional<double>(COHORT_TRY(r.Double(key, std::nullopt, min, 1e300)));
  };
  p.loss = COHORT_TRY(opt("loss", -1e300));
  p.samples_per_s = COHORT_TRY(opt("samples_per_s", 0));
  p.tokens_per_s = COHORT_TRY(opt("tokens_per_s", 0));
  if (r.Has("checkpoint_step")) p.checkpoint_step = COHORT_TRY(r.Int("checkpoint_step", std::nullopt, 0, INT64_MAX));
  if (r.Has("total_steps")) p.total_steps = COHORT_TRY(r.Int("total_steps", std::nullopt, 1, INT64_MAX));
  p.val_loss = COHORT_TRY(opt("val_loss", -1e300));
  COHORT_TRY_VOID(r.Finish());
  return p;
}

void ProgressLog::Add(api::JobId job, ProgressPoint p) {
  MutexLock lock(mu_);
  if (p.checkpoint_step) {
    auto [c, fresh] = newest_checkpoint_.try_emplace(job, *p.checkpoint_step);
    if (!fresh) c->second = std::max(c->second, *p.checkpoint_step);
  }
  auto& q = points_[job];
  // A second report of the newest point's step (a validation loss measured after the
  // step's report) completes that point instead of adding one: one point per step.
  if (!q.empty() && q.back().attempt == p.attempt && q.back().rank == p.rank && q.back().step == p.step) {
    ProgressPoint& last = q.back();
    last.time_ms = p.time_ms;
    for (auto [to, from] : {std::pair{&last.loss, &p.loss}, {&last.samples_per_s, &p.samples_per_s},
                            {&last.tokens_per_s, &p.tokens_per_s}, {&last.val_loss, &p.val_loss}}) {
      if (*from) *to = *from;
    }
    if (p.checkpoint_step) last.checkpoint_step = p.checkpoint_step;
    if (p.total_steps) last.total_steps = p.total_steps;
    return;
  }
  q.push_back(std::move(p));
  while (q.size() > kMaxPoints) q.pop_front();
}

std::vector<ProgressPoint> ProgressLog::Get(api::JobId job, size_t limit) const {
  MutexLock lock(mu_);
  auto it = points_.find(job);
  if (it == points_.end()) return {};
  size_t n = std::min(limit, it->second.size());
  return std::vector<ProgressPoint>(it->second.end() - static_cast<std::ptrdiff_t>(n), it->second.end());
}

std::optional<ProgressPoint> ProgressLog::Latest(api::JobId job) const {
  MutexLock lock(mu_);
  auto it = points_.find(job);
  if (it == points_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::optional<int64_t> ProgressLog::NewestCheckpoint(api::JobId job) const {
  MutexLock lock(mu_);
  auto it = newest_checkpoint_.find(job);
  if (it == newest_checkpoint_.end()) return std::nullopt;
  return it->second;
}

std::optional<ProgressPoint> ProgressLog::LatestOfAttempt(api::JobId job, int attempt) const {
  MutexLock lock(mu_);
  auto it = points_.find(job);
  if (it == points_.end()) return std::nullopt;
  for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
    if (p->attempt == attempt) return *p;
    if (p->attempt < attempt) break;  // points arrive in attempt order
  }
  return std::nullopt;
}

std::optional<api::ProgressEta> EstimateProgress(const std::vector<ProgressPoint>& newest_first) {
  if (newest_first.empty()) return std::nullopt;
  const ProgressPoint& newest = newest_first.front();
  api::ProgressEta e;
  e.step = newest.step;
  e.updated_ms = newest.time_ms;
  const ProgressPoint* oldest = &newest;
  size_t same_rank = 0;
  for (const ProgressPoint& p : newest_first) {
    if (!e.total_steps && p.total_steps) e.total_steps = p.total_steps;
    if (p.rank == newest.rank && same_rank < kEtaWindow) {
      oldest = &p;
      ++same_rank;
    }
  }
  if (oldest->time_ms < newest.time_ms && oldest->step <= newest.step) {
    e.steps_per_s = static_cast<double>(newest.step - oldest->step) * 1000.0 /
                    static_cast<double>(newest.time_ms - oldest->time_ms);
  }
  if (e.total_steps) {
    e.percent = std::min(100.0, 100.0 * static_cast<double>(e.step) / static_cast<double>(*e.total_steps));
    if (e.step >= *e.total_steps) {
      e.eta_s = 0;
    } else if (e.steps_per_s && *e.steps_per_s > 0) {
      e.eta_s = static_cast<int64_t>(std::ceil(static_cast<double>(*e.total_steps - e.step) / *e.steps_per_s));
    }
  }
  return e;
}

std::optional<api::ProgressEta> ProgressLog::Eta(api::JobId job, int attempt) const {
  std::vector<ProgressPoint> recent;
  {
    MutexLock lock(mu_);
    auto it = points_.find(job);
    if (it == points_.end()) return std::nullopt;
    // Bounded: ranks interleave, so a few windows' worth covers the newest rank's window.
    for (auto p = it->second.rbegin(); p != it->second.rend() && recent.size() < 8 * kEtaWindow; ++p) {
      if (p->attempt == attempt) recent.push_back(*p);
      if (p->attempt < attempt) break;  // points arrive in attempt order
    }
  }
  return EstimateProgress(recent);
}

std::vector<LossPoint> DownsampleLoss(const std::vector<LossPoint>& points, size_t max_points) {
  max_points = std::max<size_t>(max_points, 2);
  const size_t n = points.size();
  if (n <= max_points) return points;
  std::vector<LossPoint> out;
  out.reserve(max_points);
  for (size_t b = 0; b < max_points; ++b) {
    size_t begin = b * n / max_points;
    size_t end = (b + 1) * n / max_points;  // the last run ends at n: the newest point
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += points[i].loss;
    out.push_back({points[end - 1].step, sum / static_cast<double>(end - begin)});
  }
  out.back() = points.back();
  return out;
}

LossSeries ProgressLog::Loss(api::JobId job, size_t max_points) const {
  LossSeries s;
  std::vector<LossPoint> raw;
  {
    MutexLock lock(mu_);
    auto it = points_.find(job);
    if (it == points_.end()) return s;
    int rank = INT32_MAX;
    for (const auto& p : it->second) {
      if (p.loss && p.rank < rank) rank = p.rank;
    }
    if (rank == INT32_MAX) return s;
    s.rank = rank;
    for (const auto& p : it->second) {
      if (p.loss && p.rank == rank) raw.push_back({p.step, *p.loss});
    }
  }
  s.total = raw.size();
  s.points = DownsampleLoss(raw, max_points);
  return s;
}

}  // namespace cohort::head
