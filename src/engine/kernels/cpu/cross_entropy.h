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

}  // namespace cohort::engine::cpu
