// CudaInferenceModel: the InferenceModel on a GPU (the CUDA device current on the calling
// thread): bf16 weights, activations and key/value cache, float32 statistics and
// accumulation, through the engine's CUDA kernels (cuBLASLt matmuls, LayerNorm, GELU,
// residual) and the cache's own ops (kernels/cuda/kv_attention.cuh). Same contract as
// the CPU backend (inference_model.h), which it is checked against.
//
// Without CUDA in the build, Create returns kUnavailable saying so.
#pragma once

#include <memory>
#include <span>

#include "common/error.h"
#include "serve/inference_model.h"

namespace cohort::serve {

// kInvalidArgument naming the field for a shape the kernels do not support (n_embd not a
// multiple of 8, a head size other than 16, 32, 64 or 128); kResourceExhausted when the
// weights, cache and activations do not fit in device memory; kUnavailable without a
// device or without CUDA in this build.
Result<std::unique_ptr<InferenceModel>> CreateCudaInferenceModel(const engine::GptConfig& config,
                                                                 std::span<const float> params,
                                                                 const KvCachePlan& cache,
                                                                 int max_step_tokens);

}  // namespace cohort::serve
