// HostShardAdamW (host_shard_adamw.h): the offloaded AdamW of a rank's part. Compiled only
// with the CUDA engine.
#if COHORT_HAVE_CUDA_ENGINE
#include "engine/trainer/host_shard_adamw.h"

#include <algorithm>

#include "common/cuda_status.h"
#include "engine/model/cuda_arena.h"
#include "engine/optim/grad_clip.h"

namespace cohort::engine {

HostShardAdamW::HostShardAdamW(size_t n, AdamW adam, int device, std::vector<NormRun> runs)
    : n_(n), adam_(std::move(adam)), device_(device), runs_(std::move(runs)) {}

HostShardAdamW::~HostShardAdamW() {
  thread_.reset();  // nothing may read the buffers below any more
  if (copy_stream_ != nullptr) (void)cudaStreamSynchronize(copy_stream_);
  if (bf16_staging_ != nullptr) (void)cudaFreeHost(bf16_staging_);
  if (master_ != nullptr) (void)cudaFreeHost(master_);
  if (grads_ != nullptr) (void)cudaFreeHost(grads_);
  if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
}

Result<std::unique_ptr<HostShardAdamW>> HostShardAdamW::Create(
    size_t n, std::vector<DecayRange> decay, const AdamWConfig& config, int device,
    std::optional<std::vector<NormRun>> norm_runs) {
  std::vector<NormRun> runs = norm_runs ? std::move(*norm_runs) : std::vector<NormRun>{{0, n}};
  for (const NormRun& r : runs) {
    if (r.offset + r.count > n) {
      return Errorf(ErrorCode::kInternal, "HostShardAdamW: norm run [{}, {}) past the part's {}",
                    r.offset, r.offset + r.count, n);
    }
  }
  AdamW adam = COHORT_TRY(AdamW::Create(n, std::move(decay), config));
  std::unique_ptr<HostShardAdamW> h(new HostShardAdamW(n, std::move(adam), device, std::move(runs)));
  COHORT_CUDA_CHECK(cudaSetDevice(device));
  const size_t bytes = std::max<size_t>(1, n) * sizeof(float);
  void* pinned = nullptr;
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  h->master_ = static_cast<float*>(pinned);
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  h->grads_ = static_cast<float*>(pinned);
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&h->copy_stream_, cudaStreamNonBlocking));
  h->thread_ = std::make_unique<SerialThread>(device);
  return h;
}

Result<void> HostShardAdamW::ReserveBf16Staging() {
  if (bf16_staging_ != nullptr) return {};
  void* pinned = nullptr;
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, std::max<size_t>(1, n_) * sizeof(cuda::bf16)));
  bf16_staging_ = static_cast<uint16_t*>(pinned);
  return {};
}

size_t HostShardAdamW::pinned_bytes() const {
  return n_ * sizeof(float) * 2 + (bf16_staging_ != nullptr ? n_ * sizeof(cuda::bf16) : 0);
}

Result<void> HostShardAdamW::BeginRound() {
  // The last round's parts are dropped (its ops are done).
  COHORT_TRY_VOID(thread_->Drain());
  partials_.clear();
  copied_ = 0;
  return {};
}

Result<void> HostShardAdamW::Arrived(const float* device, size_t at, size_t count, bool norm) {
  if (count == 0) return {};
  // The caller's thread (a reducer's or a collective thread): make the device current here.
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  COHORT_CUDA_CHECK(cudaMemcpyAsync(grads_ + at, device, count * sizeof(float),
                                    cudaMemcpyDeviceToHost, copy_stream_));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  copied_ += count;
  if (norm) {
    thread_->Post([this, at, count]() -> Result<void> {
      partials_.push_back(SquaredNormOf(at, at + count));
      return {};
    });
  }
  return {};
}

Result<void> HostShardAdamW::CopyAll(const float* device, cudaStream_t stream) {
  if (n_ == 0) return {};
  COHORT_CUDA_CHECK(cudaMemcpyAsync(grads_, device, n_ * sizeof(float), cudaMemcpyDeviceToHost,
                                    stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {};
}

Result<double> HostShardAdamW::PartialsSquaredNorm() {
  COHORT_TRY_VOID(thread_->Drain());
  double squares = 0;
  for (double part : partials_) squares += part;
  return squares;
}

double HostShardAdamW::SquaredNorm() const { return SquaredNormOf(0, n_); }

double HostShardAdamW::SquaredNormOf(size_t lo, size_t hi) const {
  double squares = 0;
  for (const NormRun& r : runs_) {
    const size_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.count);
    if (b > a) squares += engine::SquaredNorm({grads_ + a, b - a});
  }
  return squares;
}

uint16_t* HostShardAdamW::Bf16Out(const Destination& to) {
  if (to.host_bf16 != nullptr) return to.host_bf16;
  return to.device_bf16 != nullptr ? bf16_staging_ : nullptr;
}

Result<void> HostShardAdamW::Step(double norm, double max_norm, float lr, const Destination& to) {
  if (to.device_bf16 != nullptr) COHORT_TRY_VOID(ReserveBf16Staging());
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  const size_t n = n_;
  uint16_t* bf16_out = Bf16Out(to);
  // Chunks of at least 64K values, at most 8 per part: enough to overlap, few enough that
  // each host step keeps its OpenMP team busy.
  const size_t chunk = std::max<size_t>(size_t{1} << 16, (n + 7) / 8);
  adam_.BeginStep();
  struct Part {
    size_t lo, hi;
    uint64_t ticket;
  };
  std::vector<Part> parts;
  for (size_t lo = 0; lo < n; lo += chunk) {
    const size_t hi = std::min(n, lo + chunk);
    const uint64_t ticket =
        thread_->Post([this, n, lo, hi, norm, max_norm, lr, bf16_out]() -> Result<void> {
          ClipToNorm({grads_ + lo, hi - lo}, norm, max_norm);
          adam_.StepRange({master_, n}, {grads_, n}, lr, lo, hi);
          if (bf16_out != nullptr) {
            for (size_t i = lo; i < hi; ++i) bf16_out[i] = FloatToBf16Bits(master_[i]);
          }
          return {};
        });
    parts.push_back({lo, hi, ticket});
  }
  // Each chunk back to the device as soon as it is stepped, while the next one is.
  Result<void> status;
  for (const Part& p : parts) {
    status = thread_->WaitFor(p.ticket);
    if (!status) break;
    const size_t count = p.hi - p.lo;
    cudaError_t copied = cudaSuccess;
    if (to.device_f32 != nullptr) {
      copied = cudaMemcpyAsync(to.device_f32 + p.lo, master_ + p.lo, count * sizeof(float),
                               cudaMemcpyHostToDevice, copy_stream_);
    } else if (to.device_bf16 != nullptr) {
      copied = cudaMemcpyAsync(to.device_bf16 + p.lo, bf16_staging_ + p.lo,
                               count * sizeof(cuda::bf16), cudaMemcpyHostToDevice, copy_stream_);
    }
    if (copied != cudaSuccess) {
      status = Errorf(ErrorCode::kInternal, "optimizer offload: copying parameters back: {}",
                      cudaGetErrorString(copied));
      break;
    }
  }
  // Nothing may still read the host buffers when this returns.
  Result<void> drained = thread_->Drain();
  COHORT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  COHORT_TRY_VOID(status);
  return drained;
}

Result<void> HostShardAdamW::RefreshBf16(const Destination& to, cudaStream_t stream) {
  if (to.device_bf16 != nullptr) COHORT_TRY_VOID(ReserveBf16Staging());
  uint16_t* out = Bf16Out(to);
  if (out == nullptr) return {};
  for (size_t i = 0; i < n_; ++i) out[i] = FloatToBf16Bits(master_[i]);
  if (to.device_bf16 == nullptr || n_ == 0) return {};
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  COHORT_CUDA_CHECK(cudaMemcpyAsync(to.device_bf16, out, n_ * sizeof(cuda::bf16),
                                    cudaMemcpyHostToDevice, stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {};
}

}  // namespace cohort::engine
#endif  // COHORT_HAVE_CUDA_ENGINE
