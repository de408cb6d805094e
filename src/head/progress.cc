#include "head/progress.h"

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
