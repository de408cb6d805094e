// Softmax cross-entropy fused with the output head's gradient (CPU reference:
// kernels/cpu/cross_entropy.h). Logits (N, Vp) bf16 with only the first V columns real;
// padded columns never enter the softmax and get zero gradient; target -1 ignores a row.
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// One pass per row: losses[i] = lse_i − logit[target_i] (float32; 0 for ignored rows), and
// logits OVERWRITTEN in place with dlogits = scale·(softmax − onehot(target)) (0 for
// ignored rows and padded columns). With scale = loss_scale / count this is the gradient
// of loss_scale × mean loss. targets: N device ints, validated (-1 or in [0, V)).
// When `write_grad` is false the logits are left untouched (evaluation).
void FusedClassifier(bf16* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float scale, bool write_grad, cudaStream_t stream);

// *out = Σ losses[i] over n rows (float32 accumulation, deterministic; one block).
void SumLosses(float* out, const float* losses, int n, cudaStream_t stream);

}  // namespace cohort::engine::cuda
