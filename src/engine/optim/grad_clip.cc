#include "engine/optim/grad_clip.h"

#include <cmath>
#include <cstddef>

namespace cohort::engine {

double GlobalNorm(std::span<const float> grads) {
  const float* g = grads.data();
  const size_t n = grads.size();
  double sum = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return std::sqrt(sum);
}

double ClipGradNorm(std::span<float> grads, double max_norm) {
  const double norm = GlobalNorm(grads);
  if (max_norm <= 0.0) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    float* g = grads.data();
    const size_t n = grads.size();
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) g[i] *= c;
  }
  return norm;
}

}  // namespace cohort::engine
