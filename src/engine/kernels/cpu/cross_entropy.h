// Softmax cross-entropy over padded logits, float32 CPU reference. Logits are (N, Vp) with
// only the first V columns real: the padded columns never enter the softmax and get zero
// gradient. A target of -1 ignores its row (no loss, zero gradient). OpenMP over rows;
// exponentials use the vectorised FastExp (fast_math.h, relative error < 3e-7).
#pragma once

#include <cstdint>

namespace cohort::engine::cpu {

// Writes each row's log-sum-exp over the first V logits into lse (N) and returns the sum
// over rows with target >= 0 of (lse − logit[target]) (double accumulation). `count`
// receives the number of such rows. Targets must be validated (-1 or in [0, V)).
double CrossEntropyForward(float* lse, const float* logits, const int32_t* targets, int N,
                           int V, int Vp, int* count);

// Overwrites logits (N, Vp) IN PLACE with scale · (softmax − onehot(target)) for rows with
// target >= 0 (using the forward's lse) and with 0 elsewhere, padded columns included.
// With scale = 1/count this is d(mean loss)/d(logits).
void CrossEntropyBackwardInPlace(float* logits, const float* lse, const int32_t* targets,
                                 int N, int V, int Vp, float scale);

// Vocabulary-parallel cross-entropy (Megatron-LM; model/gpt_shard.h): logits (N, Vs) hold
// columns [v0, v0 + Vs) of the padded vocabulary, and only columns below V are real. The
// tensor group combines the pieces: max over ranks of row_max, then lse = max +
// log(Σ over ranks of sum_exp), and the target's logit summed over ranks (exactly one
// rank holds it). The full logits are never gathered.

// row_max[n] = the largest real logit of the row in this shard (-inf when it has none).
void CrossEntropyShardMax(float* row_max, const float* logits, int N, int Vs, int v0, int V);
// sum_exp[n] = Σ e^{logit − max[n]} over the shard's real columns; target_logit[n] = the
// logit of targets[n] when this shard holds it, else 0 (also 0 for targets of -1).
void CrossEntropyShardSums(float* sum_exp, float* target_logit, const float* logits,
                           const int32_t* targets, const float* max, int N, int Vs, int v0,
                           int V);
// As CrossEntropyBackwardInPlace on the shard's columns: scale · (softmax − onehot) from the
// global lse, 0 for padding and for rows with target -1.
void CrossEntropyShardBackwardInPlace(float* logits, const float* lse, const int32_t* targets,
                                      int N, int Vs, int v0, int V, float scale);

}  // namespace cohort::engine::cpu
