#include "engine/optim/grad_clip.h"

#include <cmath>
#include <cstddef>

namespace cohort::engine {

double SquaredNorm(std::span<const float> grads) {
  const float* g = grads.data();
  const size_t n = grads.size();
  double sum = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

double GlobalNorm(std::span<const float> grads) { return std::sqrt(SquaredNorm(grads)); }

double ClipGradNorm(std::span<float> grads, double max_norm) {
  const double norm = GlobalNorm(grads);
  ClipToNorm(grads, norm, max_norm);
  return norm;
}

float ClipFactor(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

void ClipToNorm(std::span<float> grads, double norm, double max_norm) {
  const float c = ClipFactor(norm, max_norm);
  if (c < 1.0f) {
    float* g = grads.data();
    const size_t n = grads.size();
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) g[i] *= c;
  }
}

}  // namespace cohort::engine
