// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <span>

namespace cohort::engine {

// sum g², accumulated in double.
double SquaredNorm(std::span<const float> grads);

// sqrt(sum g²) accumulated in double.
double GlobalNorm(std::span<const float> grads);

// The factor clipping multiplies the gradients by: max_norm / (norm + 1e-6) in double, as a
// float, when below 1; else (or max_norm <= 0) 1. The CUDA kernels' factor
// (kernels/cuda/grad_norm.cuh) is this with max_norm rounded to float first.
float ClipFactor(double norm, double max_norm);

// Scales grads by max_norm / (norm + 1e-6) when that factor is below 1, for a norm computed
// elsewhere (over every shard of a model split across ranks). max_norm <= 0: no clipping.
void ClipToNorm(std::span<float> grads, double norm, double max_norm);

// Scales grads by max_norm / (norm + 1e-6) when that factor is below 1 and returns the
// norm before clipping. max_norm <= 0 disables clipping (the norm is still returned).
double ClipGradNorm(std::span<float> grads, double max_norm);

}  // namespace cohort::engine
