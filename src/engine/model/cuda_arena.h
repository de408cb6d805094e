// Device-memory helpers shared by the CUDA models (gpt_cuda.cc, gpt_shard_cuda.cc): an
// arena carver that hands out 256-byte aligned pieces of one allocation (or only counts
// them), cudaMalloc with an "out of device memory" error that names what needed the bytes,
// the shape checks every CUDA model makes, and bf16 bits to float on the host.
//
// Host C++23 (returns Result); never compiled by nvcc. Threads: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "engine/model/gpt.h"

namespace cohort::engine {

inline constexpr size_t kArenaAlign = 256;  // every buffer of an arena starts on this boundary

inline size_t ArenaAlignUp(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Hands out aligned pieces of one allocation. With a null base it only counts bytes (the
// returned pointers are then null and never used).
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  // `count` values of T; their aligned bytes are added to *category when it is not null.
  template <typename T>
  T* Take(size_t count, size_t* category) {
    offset_ = ArenaAlignUp(offset_);
    const size_t bytes = count * sizeof(T);
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += bytes;
    if (category != nullptr) *category += ArenaAlignUp(bytes);
    return p;
  }
  size_t total() const { return ArenaAlignUp(offset_); }

 private:
  char* base_;
  size_t offset_ = 0;
};

// "1.23 GiB".
std::string GiB(size_t bytes);

// cudaMalloc on the current device; kResourceExhausted "out of device memory: <what> needs
// N bytes (X GiB) on device d (Y GiB free of Z)" when it is full, other CUDA failures as
// COHORT_CUDA_CHECK classifies them.
Result<void*> DeviceAlloc(size_t bytes, const std::string& what, int device);

// The checks of a model's shape that the CUDA kernels impose, naming the field:
// `channels` (n_embd, or a tensor rank's n_embd / tensor) a multiple of 8 (16-byte vector
// access of bf16 rows) and a head size n_embd / n_head the attention kernel supports.
Result<void> CheckCudaChannels(const GptConfig& config, int channels);

// bf16 bits to float (exact: a bf16 is the high half of a float).
float Bf16BitsToFloat(uint16_t bits);
// The bf16 bits of `f`, rounded to nearest even as the device's __float2bfloat16_rn (a NaN
// stays a quiet NaN): the host side of an offloaded bf16 parameter copy.
uint16_t FloatToBf16Bits(float f);

}  // namespace cohort::engine
