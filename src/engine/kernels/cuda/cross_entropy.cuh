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
// last_rows (null to skip; DEVICE memory of (N / T, Vp) bf16): row b receives a copy of the
// logits row b·T + T − 1 (the last position of sequence b when the N rows are N / T
// sequences of T), read in the same pass before it is overwritten, so that the logits
// that sample the next token survive the gradient (GptCudaModel's single-pass classifier).
// T >= 1 when last_rows is non-null (else nothing is launched), and N a multiple of T.
void FusedClassifier(bf16* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float scale, bool write_grad, bf16* last_rows, int T, cudaStream_t stream);

// *out = Σ losses[i] over n rows (float32 accumulation, deterministic; one block).
void SumLosses(float* out, const float* losses, int n, cudaStream_t stream);

// Vocabulary-parallel cross-entropy (tensor parallelism; CPU reference and the way the
// tensor group combines the pieces: CrossEntropyShard* in kernels/cpu/cross_entropy.h).
// logits (N, Vs) bf16 hold columns [v0, v0 + Vs) of the padded vocabulary; only columns
// below V are real (real = clamp(V − v0, 0, Vs)). Row statistics are float32, one block per
// row, reduced in a fixed order (deterministic). The full logits are never gathered.

// row_max[n] = the largest real logit of row n in this shard (-inf when it has none).
void CrossEntropyShardMax(float* row_max, const bf16* logits, int N, int Vs, int v0, int V,
                          cudaStream_t stream);
// sum_exp[n] = Σ e^{logit − max[n]} over the shard's real columns; target_logit[n] = the
// logit of targets[n] when this shard holds it, else 0 (also 0 for targets of -1).
// `max` is the row maximum over the whole tensor group.
void CrossEntropyShardSums(float* sum_exp, float* target_logit, const bf16* logits,
                           const int32_t* targets, const float* max, int N, int Vs, int v0,
                           int V, cudaStream_t stream);
// logits OVERWRITTEN with scale·(e^{logit − lse[n]} − [column == target]) on the real
// columns, 0 on padded columns and on rows whose target is -1; lse is the group's.
void CrossEntropyShardBackward(bf16* logits, const float* lse, const int32_t* targets, int N,
                               int Vs, int v0, int V, float scale, cudaStream_t stream);

}  // namespace cohort::engine::cuda
