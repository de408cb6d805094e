// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <span>

namespace cohort::engine {

// sqrt(sum g²) accumulated in double.
double GlobalNorm(std::span<const float> grads);

// Scales grads by max_norm / (norm + 1e-6) when that factor is below 1 and returns the
// norm before clipping. max_norm <= 0 disables clipping (the norm is still returned).
double ClipGradNorm(std::span<float> grads, double max_norm);

}  // namespace cohort::engine
