// CudaInferenceModel: the InferenceModel on a GPU (the CUDA device current on the calling
// thread): bf16 weights, activations and key/value cache, float32 statistics and
// accumulation, through the engine's CUDA kernels (cuBLASLt matmuls, LayerNorm, GELU,
// residual) and the cache's own ops (kernels/cuda/kv_attention.cuh). Same contract as
// the CPU backend (inference_model.h), which it is checked against.
//
// Without CUDA in the build, Create returns kUnavailable saying so.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "common/error.h"
#include "serve/inference_model.h"

namespace cohort::serve {

// max_step_tokens kAutoStepTokens (0): AutoCudaStepTokens with the device's free memory.
// kInvalidArgument naming the field for a shape the kernels do not support (n_embd not a
// multiple of 8, an odd head size or one over 256) or a negative max_step_tokens;
// kResourceExhausted when the weights, cache and activations do not fit in device memory;
// kUnavailable without a device or without CUDA in this build.
// The GPU's step budget when none is given: every position the cache holds, at most 16384,
// and no more rows than an eighth of `free_device_bytes` holds activations for (a step of a
// few thousand tokens costs a GPU little more than one of a hundred, so a burst of prompts
// prefills in one step).
int AutoCudaStepTokens(const engine::GptConfig& config, const KvCachePlan& cache, size_t free_device_bytes);

Result<std::unique_ptr<InferenceModel>> CreateCudaInferenceModel(const engine::GptConfig& config,
                                                                 std::span<const float> params,
                                                                 const KvCachePlan& cache,
                                                                 int max_step_tokens);

}  // namespace cohort::serve
