// HostShardAdamW: the offloaded AdamW of one rank's part of a flat parameter buffer
// (`parallel.offload`, Rajbhandari et al.'s ZeRO-Offload), shared by the single-device CUDA
// model's ZeRO (CudaZeroOptimizer, cuda_zero.h) and the CUDA shard engine inside
// tensor/pipeline layouts (cuda_shard_engine.cc). Built only with the CUDA engine.
//
// It owns, for a part of n values: the float32 master copy and the gradient part in pinned
// host memory (cudaMallocHost: they cross the bus every step), AdamW (optim/adamw.h, OpenMP
// threads as the CPU trainer) whose m and v never cross the bus and stay pageable, a copy
// stream and a SerialThread (cuda_zero_pieces.h) that runs the host work:
//   - the gradient part reaches the host piece by piece while the device still computes
//     (Arrived: a synchronous copy on the copy stream), and with `norm` each piece's Σ g²
//     over the values that count (the norm runs) is computed on the host thread as it
//     arrives; SquaredNorm sums those partials in their (fixed) arrival order;
//   - Step clips by a global norm the caller computed and steps the part in chunks on the host
//     thread, while the calling thread copies each finished chunk back on the copy stream
//     (float32 into the device parameters, or bf16: converted on the host thread, then copied
//     into a device bf16 part, or written straight into a pinned host bf16 part); the step's
//     tail is the slower of the two, not their sum.
// The owner keeps where the device values live; this class only ever reads or writes device
// memory at the pointers it is given, on its copy stream.
//
// Threads: the owner's training thread, except Arrived (any one thread at a time, e.g. a
// reducer's or a collective thread, between BeginRound and SquaredNorm).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"
#include "engine/optim/adamw.h"
#include "engine/trainer/cuda_zero_pieces.h"

namespace cohort::engine {

class HostShardAdamW {
 public:
  // A run of the part [offset, offset + count) whose squares count in the norm.
  struct NormRun {
    size_t offset = 0, count = 0;
  };
  // The part of `n` values with AdamW `config` over `decay` (relative to the part) on
  // `device` (its host thread makes it current). `norm_runs` (relative to the part, sorted,
  // disjoint; nullopt: the whole part) are the values Σ g² counts. Allocation failures as
  // cudaMallocHost reports them; AdamW::Create's errors.
  static Result<std::unique_ptr<HostShardAdamW>> Create(
      size_t n, std::vector<DecayRange> decay, const AdamWConfig& config, int device,
      std::optional<std::vector<NormRun>> norm_runs = std::nullopt);
  ~HostShardAdamW();
  HostShardAdamW(const HostShardAdamW&) = delete;
  HostShardAdamW& operator=(const HostShardAdamW&) = delete;

  size_t size() const { return n_; }
  // The float32 master part and the gradient part (pinned host memory, n values each).
  float* master() { return master_; }
  const float* master() const { return master_; }
  float* grads() { return grads_; }
  std::span<float> m() { return adam_.m(); }
  std::span<float> v() { return adam_.v(); }
  int64_t t() const { return adam_.t(); }
  Result<void> RestoreStep(int64_t t) { return adam_.RestoreStep(t); }
  Result<void> Restore(std::span<const float> m, std::span<const float> v, int64_t t) {
    return adam_.Restore(m, v, t);
  }

  // A new round of arrivals (the step's last backward): waits for the last round's host work,
  // drops its partials and its count of copied values.
  Result<void> BeginRound();
  // Gradient values [at, at + count) of the part lie at `device` (device memory, final):
  // copies them into grads() at `at` and returns when copied; with `norm`, posts their Σ g²
  // over the norm runs to the host thread. CUDA errors.
  Result<void> Arrived(const float* device, size_t at, size_t count, bool norm);
  // Every value of the part now (`device`: n values of device memory), on `stream`, after the
  // work queued there. CUDA errors.
  Result<void> CopyAll(const float* device, cudaStream_t stream);
  // Values copied since the last BeginRound (or the last call), and the count reset.
  size_t TakeCopied() { return copied_.exchange(0); }
  // Σ g² of the arrivals' partials (posted with `norm`), summed in their order, after the host
  // thread is done with them.
  Result<double> PartialsSquaredNorm();
  // Σ g² over the norm runs of the whole gradient part (on this thread).
  double SquaredNorm() const;

  // Where a step's chunks go: float32 values into `device_f32` (n values of device memory),
  // or bf16 values into `device_bf16` (device memory, through a pinned staging part this
  // object allocates on first use) or into `host_bf16` (n values of pinned host memory,
  // written on the host thread). At most one may be set (none: the master only).
  struct Destination {
    float* device_f32 = nullptr;
    cuda::bf16* device_bf16 = nullptr;
    uint16_t* host_bf16 = nullptr;
  };
  // Clips the gradient part by the global `norm` (ClipToNorm with `max_norm`) and steps the
  // master with `lr`, chunk by chunk on the host thread, each finished chunk copied to
  // `to` while the next one is stepped. Returns when every copy is done and no host work
  // reads the buffers. The host thread's errors; CUDA errors.
  Result<void> Step(double norm, double max_norm, float lr, const Destination& to);
  // The bf16 copy of the master into `to`'s bf16 destination (host conversion; a device
  // destination on `stream`). Returns when copied.
  Result<void> RefreshBf16(const Destination& to, cudaStream_t stream);
  // Pinned host bytes held: the master, the gradient part and (once used) the bf16 staging.
  size_t pinned_bytes() const;
  // The bf16 staging part (n bf16 values), allocated now if it is not yet: a caller whose
  // bf16 destination is device memory may allocate it up front to count it.
  Result<void> ReserveBf16Staging();
  bool has_bf16_staging() const { return bf16_staging_ != nullptr; }

 private:
  HostShardAdamW(size_t n, AdamW adam, int device, std::vector<NormRun> runs);
  // Σ g² of grads()[lo, hi) over the norm runs.
  double SquaredNormOf(size_t lo, size_t hi) const;
  uint16_t* Bf16Out(const Destination& to);

  const size_t n_;
  AdamW adam_;
  const int device_;
  const std::vector<NormRun> runs_;
  float* master_ = nullptr;            // pinned, n
  float* grads_ = nullptr;             // pinned, n
  uint16_t* bf16_staging_ = nullptr;   // pinned, n, once a device bf16 destination is used
  cudaStream_t copy_stream_ = nullptr;
  std::atomic<size_t> copied_{0};      // values Arrived copied this round
  std::vector<double> partials_;       // host thread: each arrival's Σ g²
  // Declared last: joined first, before the buffers its ops read are freed.
  std::unique_ptr<SerialThread> thread_;
};

}  // namespace cohort::engine
