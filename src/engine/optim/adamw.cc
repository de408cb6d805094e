#include "engine/optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/kernels/cpu/fast_math.h"  // COHORT_CPU_CLONES

namespace cohort::engine {

Result<void> AdamWConfig::Validate() const {
  if (!(beta1 >= 0.0f && beta1 < 1.0f)) return FieldError("beta1", "must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0.0f && beta2 < 1.0f)) return FieldError("beta2", "must be in [0, 1), got {}", beta2);
  if (!(eps > 0.0f)) return FieldError("eps", "must be > 0, got {}", eps);
  if (!(weight_decay >= 0.0f)) {
    return FieldError("weight_decay", "must be >= 0, got {}", weight_decay);
  }
  return {};
}

std::vector<DecayRange> CutDecayRanges(const std::vector<DecayRange>& ranges, size_t lo,
                                       size_t hi) {
  std::vector<DecayRange> out;
  for (const DecayRange& t : ranges) {
    const size_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.count);
    if (b > a) out.push_back({a - lo, b - a, t.decay});
  }
  return out;
}

Result<AdamW> AdamW::Create(size_t num_params, std::vector<DecayRange> ranges,
                            const AdamWConfig& config) {
  COHORT_TRY_VOID(config.Validate());
  std::sort(ranges.begin(), ranges.end(),
            [](const DecayRange& a, const DecayRange& b) { return a.offset < b.offset; });
  size_t covered = 0;
  for (const DecayRange& r : ranges) {
    if (r.offset != covered) {
      return FieldError("ranges", "must cover [0, {}) exactly once: {} at offset {}",
                        num_params, r.offset < covered ? "overlap" : "gap", std::min(r.offset, covered));
    }
    covered += r.count;
  }
  if (covered != num_params) {
    return FieldError("ranges", "cover [0, {}) but the parameters number {}", covered,
                      num_params);
  }
  AdamW opt;
  opt.config_ = config;
  opt.ranges_ = std::move(ranges);
  opt.m_.assign(num_params, 0.0f);
  opt.v_.assign(num_params, 0.0f);
  return opt;
}

namespace {

// The update of elements [0, n) of one range (pointers already offset).
COHORT_CPU_CLONES void AdamWRange(float* p, const float* g, float* m, float* v, size_t n,
                                  float b1, float b2, float eps, float step_size,
                                  float bc2_sqrt, float keep) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] * keep - step_size * mi / denom;
  }
}

}  // namespace

void AdamW::Step(std::span<float> params, std::span<const float> grads, float lr) {
  BeginStep();
  StepRange(params, grads, lr, 0, m_.size());
}

void AdamW::BeginStep() { ++t_; }

void AdamW::StepRange(std::span<float> params, std::span<const float> grads, float lr, size_t lo,
                      size_t hi) {
  // As torch.optim.AdamW (single-tensor path): decay first, then the Adam update with
  // step_size = lr / (1 − β1^t) and denom = √v / √(1 − β2^t) + eps.
  const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  float* p = params.data();
  const float* g = grads.data();
  float* m = m_.data();
  float* v = v_.data();
  // One team for all ranges; each thread updates its share of every range's part in
  // [lo, hi). The update is elementwise: how the elements are shared changes no bit.
#pragma omp parallel if (hi - lo >= (size_t{1} << 14))
  {
    const size_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
    for (const DecayRange& r : ranges_) {
      const size_t rb = std::max(r.offset, lo), re = std::min(r.offset + r.count, hi);
      if (re <= rb) continue;
      const float keep = r.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
      const size_t count = re - rb;
      const size_t per = (count + nth - 1) / nth;
      const size_t b = std::min(count, tid * per), e = std::min(count, b + per);
      const size_t o = rb + b;
      AdamWRange(p + o, g + o, m + o, v + o, e - b, b1, b2, eps, step_size, bc2_sqrt, keep);
    }
  }
}

size_t AdamW::num_params() const { return m_.size(); }
int64_t AdamW::t() const { return t_; }
std::span<float> AdamW::m() { return m_; }
std::span<float> AdamW::v() { return v_; }

Result<void> AdamW::Restore(std::span<const float> m, std::span<const float> v, int64_t t) {
  if (m.size() != m_.size()) {
    return FieldError("m", "has {} values, the optimizer {}", m.size(), m_.size());
  }
  if (v.size() != v_.size()) {
    return FieldError("v", "has {} values, the optimizer {}", v.size(), v_.size());
  }
  if (t < 0) return FieldError("t", "must be >= 0, got {}", t);
  std::copy(m.begin(), m.end(), m_.begin());
  std::copy(v.begin(), v.end(), v_.begin());
  t_ = t;
  return {};
}

Result<void> AdamW::RestoreStep(int64_t t) {
  if (t < 0) return FieldError("t", "must be >= 0, got {}", t);
  t_ = t;
  return {};
}

}  // namespace cohort::engine
