#include "head/progress.h"

namespace cohort::head {

json ToJson(const ProgressPoint& p) {
  json j = {{"time_ms", p.time_ms}, {"attempt", p.attempt}, {"rank", p.rank}, {"step", p.step}};
  if (p.loss) j["loss"] = *p.loss;
  if (p.samples_per_s) j["samples_per_s"] = *p.samples_per_s;
  if (p.tokens_per_s) j["tokens_per_s"] = *p.tokens_per_s;
  return j;
}

Result<ProgressPoint> ProgressPointFromJson(const json& j) {
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
  COHORT_TRY_VOID(r.Finish());
  return p;
}

void ProgressLog::Add(api::JobId job, ProgressPoint p) {
  std::lock_guard lock(mu_);
  auto& q = points_[job];
  q.push_back(std::move(p));
  while (q.size() > kMaxPoints) q.pop_front();
}

std::vector<ProgressPoint> ProgressLog::Get(api::JobId job, size_t limit) const {
  std::lock_guard lock(mu_);
  auto it = points_.find(job);
  if (it == points_.end()) return {};
  size_t n = std::min(limit, it->second.size());
  return std::vector<ProgressPoint>(it->second.end() - static_cast<std::ptrdiff_t>(n), it->second.end());
}

std::optional<ProgressPoint> ProgressLog::Latest(api::JobId job) const {
  std::lock_guard lock(mu_);
  auto it = points_.find(job);
  if (it == points_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

}  // namespace cohort::head
