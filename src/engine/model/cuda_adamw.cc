// CudaAdamW: the decay runs, the device state and the update launches.
#include "engine/model/cuda_adamw.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/adamw.cuh"
#include "engine/model/cuda_arena.h"

namespace cohort::engine {

namespace k = ::cohort::engine::cuda;

struct CudaAdamW::Impl {
  AdamWConfig config;
  std::vector<DecayRange> runs;  // maximal runs of tensors with the same decay flag
  bool fused = false;
  int device = 0;
  cudaStream_t stream = nullptr;
  int64_t t = 0;
  size_t n = 0;
  char* arena = nullptr;  // m, v and the run table
  float* m = nullptr;
  float* v = nullptr;
  k::AdamWRun* runs_device = nullptr;  // `runs` as AdamWUpdateRuns reads them
  size_t bytes = 0;

  ~Impl() {
    if (arena != nullptr) {
      (void)cudaSetDevice(device);
      (void)cudaStreamSynchronize(stream);
      (void)cudaFree(arena);
    }
  }
  Result<void> Use() {
    COHORT_CUDA_CHECK(cudaSetDevice(device));
    return {};
  }
};

Result<std::unique_ptr<CudaAdamW>> CudaAdamW::Create(std::vector<DecayRange> ranges,
                                                     const AdamWConfig& config, bool fused,
                                                     int device, cudaStream_t stream) {
  COHORT_TRY_VOID(config.Validate());
  auto impl = std::make_unique<Impl>();
  Impl& o = *impl;
  o.config = config;
  o.fused = fused;
  o.device = device;
  o.stream = stream;
  // Merged where neighbours agree: fewer launches, the same update.
  std::sort(ranges.begin(), ranges.end(),
            [](const DecayRange& a, const DecayRange& b) { return a.offset < b.offset; });
  for (const DecayRange& r : ranges) {
    if (r.offset != o.n) {
      return Errorf(ErrorCode::kInternal, "parameter layout has a gap or overlap at {}", r.offset);
    }
    o.n += r.count;
    if (r.count == 0) continue;
    if (!o.runs.empty() && o.runs.back().decay == r.decay) {
      o.runs.back().count += r.count;
    } else {
      o.runs.push_back(r);
    }
  }
  if (o.runs.empty()) o.runs.push_back({0, 0, false});
  std::vector<k::AdamWRun> table;
  for (const DecayRange& r : o.runs) {
    table.push_back(k::AdamWRun{r.offset + r.count, r.decay ? 1u : 0u, 0u});
  }

  COHORT_TRY_VOID(o.Use());
  auto carve = [&](Carver& cv) {
    o.m = cv.Take<float>(o.n, nullptr);
    o.v = cv.Take<float>(o.n, nullptr);
    o.runs_device = cv.Take<k::AdamWRun>(table.size(), nullptr);
  };
  Carver sizing(nullptr);
  carve(sizing);
  o.bytes = sizing.total();
  o.arena = static_cast<char*>(COHORT_TRY(DeviceAlloc(
      o.bytes, fmt::format("the AdamW state ({:.1f}M parameters: m, v)", o.n / 1e6), device)));
  Carver cv(o.arena);
  carve(cv);
  COHORT_CUDA_CHECK(cudaMemsetAsync(o.m, 0, o.n * sizeof(float), stream));
  COHORT_CUDA_CHECK(cudaMemsetAsync(o.v, 0, o.n * sizeof(float), stream));
  // Pageable source: staged before the call returns; the synchronisation below covers it.
  COHORT_CUDA_CHECK(cudaMemcpyAsync(o.runs_device, table.data(),
                                    table.size() * sizeof(k::AdamWRun), cudaMemcpyHostToDevice,
                                    stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::unique_ptr<CudaAdamW>(new CudaAdamW(std::move(impl)));
}

CudaAdamW::CudaAdamW(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaAdamW::~CudaAdamW() = default;

size_t CudaAdamW::n() const { return impl_->n; }
int64_t CudaAdamW::t() const { return impl_->t; }
std::span<float> CudaAdamW::m_device() { return {impl_->m, impl_->n}; }
std::span<float> CudaAdamW::v_device() { return {impl_->v, impl_->n}; }
size_t CudaAdamW::device_bytes() const { return impl_->bytes; }

Result<void> CudaAdamW::Step(float* params, k::bf16* params_bf16, const float* grads, float lr,
                             const float* grad_scale) {
  Impl& o = *impl_;
  COHORT_TRY_VOID(o.Use());
  ++o.t;
  k::AdamWStep s;
  s.lr = lr;
  s.beta1 = o.config.beta1;
  s.beta2 = o.config.beta2;
  s.eps = o.config.eps;
  s.weight_decay = o.config.weight_decay;
  s.t = o.t;
  s.grad_scale = grad_scale;
  if (o.n == 0) return {};
  if (o.fused) {
    k::AdamWUpdateRuns(params, params_bf16, grads, o.m, o.v, o.n, o.runs_device,
                       static_cast<int>(o.runs.size()), s, o.stream);
  } else {
    for (const DecayRange& r : o.runs) {
      s.weight_decay = r.decay ? o.config.weight_decay : 0.0f;
      k::AdamWUpdate(params + r.offset, params_bf16 ? params_bf16 + r.offset : nullptr,
                     grads + r.offset, o.m + r.offset, o.v + r.offset, r.count, s, o.stream);
    }
  }
  COHORT_CUDA_CHECK(cudaGetLastError());  // CudaAdamW::Step
  return {};
}

Result<void> CudaAdamW::CopyStateToHost(std::span<float> m, std::span<float> v) {
  Impl& o = *impl_;
  if (m.size() != o.n || v.size() != o.n) {
    return FieldError("m", "m and v need {} values each, got {} and {}", o.n, m.size(), v.size());
  }
  COHORT_TRY_VOID(o.Use());
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(m.data(), o.m, o.n * sizeof(float), cudaMemcpyDeviceToHost, o.stream));
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(v.data(), o.v, o.n * sizeof(float), cudaMemcpyDeviceToHost, o.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(o.stream));
  return {};
}

Result<void> CudaAdamW::Restore(std::span<const float> m, std::span<const float> v, int64_t t) {
  Impl& o = *impl_;
  if (m.size() != o.n) return FieldError("m", "has {} values, the optimizer {}", m.size(), o.n);
  if (v.size() != o.n) return FieldError("v", "has {} values, the optimizer {}", v.size(), o.n);
  if (t < 0) return FieldError("t", "must be >= 0, got {}", t);
  COHORT_TRY_VOID(o.Use());
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(o.m, m.data(), o.n * sizeof(float), cudaMemcpyHostToDevice, o.stream));
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(o.v, v.data(), o.n * sizeof(float), cudaMemcpyHostToDevice, o.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(o.stream));
  o.t = t;
  return {};
}

Result<void> CudaAdamW::SetStep(int64_t t) {
  if (t < 0) return FieldError("t", "must be >= 0, got {}", t);
  impl_->t = t;
  return {};
}

}  // namespace cohort::engine
