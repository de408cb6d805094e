// Token + position embedding: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]. float32, OpenMP.
// Token ids must already be validated (0 <= id < rows of wte); the kernel does not check.
#pragma once

#include <cstdint>

namespace cohort::engine::cpu {

// out (B, T, C).
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int B, int T, int C);
// dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += Σ_b dout[b,t,:]. Deterministic: the
// result does not depend on the thread count.
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                     int B, int T, int C);

// Vocabulary-parallel pieces (tensor parallelism, model/gpt_shard.h): wte_rows holds rows
// [v0, v0 + rows) of the token embedding. out[n,:] = wte_rows[tok[n] − v0,:] for the ids in
// that range and 0 for the others (the tensor group sums the partial embeddings).
void EmbeddingShardForward(float* out, const int32_t* tokens, const float* wte_rows, int v0,
                           int rows, int N, int C);
// dwte_rows[tok[n] − v0,:] += dout[n,:] for the ids in range; deterministic as
// EncoderBackward.
void EmbeddingShardBackward(float* dwte_rows, const float* dout, const int32_t* tokens, int v0,
                            int rows, int N, int C);
// out[b,t,:] += wpe[t,:].
void PositionForward(float* out, const float* wpe, int B, int T, int C);
// dwpe[t,:] += Σ_b dout[b,t,:] (deterministic).
void PositionBackward(float* dwpe, const float* dout, int B, int T, int C);

}  // namespace cohort::engine::cpu
