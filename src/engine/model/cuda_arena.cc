#include "engine/model/cuda_arena.h"

#include <cuda_runtime.h>

#include <cstring>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/attention.cuh"

namespace cohort::engine {

namespace k = ::cohort::engine::cuda;

namespace {

// The head sizes the attention kernel supports, for error messages ("16, 32, 64, 128").
std::string SupportedHeadSizes() {
  std::string out;
  for (int hs = 1; hs <= 1024; ++hs) {
    if (!k::AttentionSupportsHeadSize(hs)) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(hs);
  }
  return out.empty() ? "none" : out;
}

Error OutOfMemory(const std::string& what, size_t bytes, int device) {
  size_t free_bytes = 0, total_bytes = 0;
  std::string where = fmt::format("device {}", device);
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    where += fmt::format(" ({} free of {})", GiB(free_bytes), GiB(total_bytes));
  }
  (void)cudaGetLastError();  // a failed cudaMalloc leaves its error in the last-error slot
  return Error(ErrorCode::kResourceExhausted,
               fmt::format("out of device memory: {} needs {} bytes ({}) on {}", what, bytes,
                           GiB(bytes), where));
}

}  // namespace

std::string GiB(size_t bytes) { return fmt::format("{:.2f} GiB", bytes / double(1 << 30)); }

Result<void*> DeviceAlloc(size_t bytes, const std::string& what, int device) {
  void* p = nullptr;
  const cudaError_t st = cudaMalloc(&p, bytes);
  if (st == cudaErrorMemoryAllocation) return std::unexpected(OutOfMemory(what, bytes, device));
  if (st != cudaSuccess) return std::unexpected(CudaError(st, "cudaMalloc", __FILE__, __LINE__));
  return p;
}

Result<void> CheckCudaChannels(const GptConfig& config, int channels) {
  if (channels % 8 != 0) {
    if (channels == config.n_embd) {
      return FieldError("model.n_embd",
                        "must be a multiple of 8 on CUDA (16-byte vector access of bf16 rows), "
                        "got {}",
                        config.n_embd);
    }
    return FieldError("model.n_embd",
                      "n_embd / parallel.tensor = {} must be a multiple of 8 on CUDA (16-byte "
                      "vector access of bf16 rows)",
                      channels);
  }
  const int hs = config.n_embd / config.n_head;
  if (!k::AttentionSupportsHeadSize(hs)) {
    return FieldError("model.n_head",
                      "the head size model.n_embd / model.n_head = {} / {} = {} is not supported "
                      "by the CUDA attention kernel (supported: {})",
                      config.n_embd, config.n_head, hs, SupportedHeadSizes());
  }
  return {};
}

float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

uint16_t FloatToBf16Bits(float f) {
  uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x40);  // NaN
  word += 0x7fffu + ((word >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(word >> 16);
}

}  // namespace cohort::engine
