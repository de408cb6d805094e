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

}  // namespace cohort::engine::cpu
