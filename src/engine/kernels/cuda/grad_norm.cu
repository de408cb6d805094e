// Global gradient norm, clip factor and in-place scaling (grad_norm.cuh).
//
// GlobalNormAndClipScale, two kernels, no atomics (deterministic for a given n):
//   1. Partials: a fixed grid of G = NumBlocks(n) blocks of kThreads (independent of the
//      device); thread j of the grid adds g² for elements j, j + G·kThreads, ... in
//      float32, the block adds its threads' sums in a fixed shared-memory tree, and block b
//      writes partial[b] (float32).
//   2. Finish: one block; thread j adds partials j, j + kThreads, ... in double, a fixed
//      shared-memory tree (double) adds those, and thread 0 writes norm_sq and the clip
//      factor min(1, max_norm / (√norm_sq + 1e-6)) computed in double as
//      engine::ClipGradNorm does (1 when max_norm <= 0).
// ScaleInPlace: grid-stride, grads[i] *= *scale.
#include "engine/kernels/cuda/grad_norm.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 1024;

int NumBlocks(size_t work) { return GridStrideBlocks(work, kThreads, kMaxBlocks); }

__global__ void __launch_bounds__(kThreads)
    NormPartialsKernel(float* __restrict__ partials, const float* __restrict__ grads, size_t n) {
  __shared__ float red[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  float sum = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + tid; i < n; i += stride) {
    const float g = grads[i];
    sum += g * g;
  }
  red[tid] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  if (tid == 0) partials[blockIdx.x] = red[0];
}

__global__ void __launch_bounds__(kThreads)
    NormFinishKernel(double* __restrict__ norm_sq, float* __restrict__ clip_scale,
                     const float* __restrict__ partials, int count, float max_norm) {
  __shared__ double red[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  double sum = 0.0;
  for (int i = tid; i < count; i += kThreads) sum += static_cast<double>(partials[i]);
  red[tid] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  if (tid == 0) {
    const double total = red[0];
    *norm_sq = total;
    float scale = 1.0f;
    if (max_norm > 0.0f) {
      const double coef = static_cast<double>(max_norm) / (sqrt(total) + 1e-6);
      if (coef < 1.0) scale = static_cast<float>(coef);
    }
    *clip_scale = scale;
  }
}

__global__ void ScaleKernel(float* __restrict__ grads, const float* __restrict__ scale, size_t n) {
  const float s = *scale;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    grads[i] *= s;
  }
}

}  // namespace

size_t GradNormScratchBytes(size_t n) { return static_cast<size_t>(NumBlocks(n)) * sizeof(float); }

void GlobalNormAndClipScale(double* norm_sq, float* clip_scale, const float* grads, size_t n,
                            float max_norm, void* scratch, cudaStream_t stream) {
  float* partials = static_cast<float*>(scratch);
  const int blocks = NumBlocks(n);
  // n == 0 still runs: one block writes a zero partial, and the finish writes 0 and 1.
  NormPartialsKernel<<<blocks, kThreads, 0, stream>>>(partials, grads, n);
  NormFinishKernel<<<1, kThreads, 0, stream>>>(norm_sq, clip_scale, partials, blocks, max_norm);
}

void ScaleInPlace(float* grads, const float* scale, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < 4096 ? blocks_needed : 4096);
  ScaleKernel<<<blocks, kThreads, 0, stream>>>(grads, scale, n);
}

}  // namespace cohort::engine::cuda
