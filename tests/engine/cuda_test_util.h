// Helpers for the CUDA kernel parity tests (tests/engine/cuda_*_test.cc): an owning device
// buffer, bf16 rounding of host arrays, seeded random inputs, the relative-error metric and
// the skip-without-GPU macro. Header-only, host C++ (never compiled by nvcc).
//
// Parity method (issue 5): draw fresh random inputs (never zeros), round them to bf16 on the
// host and feed the SAME rounded values to the GPU kernel and to the float32 CPU reference;
// poison every output before the launch (DeviceBuffer::Poison writes 0xFF bytes: NaN for
// float and bf16, -1 for ints) so an unwritten element makes RelError infinite; compare with
// RelError = ||out − ref|| / ||ref|| computed in double.
//
// Test failures inside the helpers are reported with ADD_FAILURE (they never throw); the
// calling test usually ASSERTs on the result afterwards. One thread at a time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "common/cuda_status.h"

// Skips the current test (GTEST_SKIP, with CudaDeviceCount()'s reason) when no CUDA device
// can be used. Call it first in every GPU test body.
#define COHORT_SKIP_WITHOUT_GPU()                                                  \
  do {                                                                             \
    auto _cohort_devices = ::cohort::CudaDeviceCount();                            \
    if (!_cohort_devices) GTEST_SKIP() << _cohort_devices.error().ToString();      \
  } while (0)

// ASSERTs that a cudaError_t expression is cudaSuccess, naming the error.
#define COHORT_ASSERT_CUDA(expr)                                                   \
  do {                                                                             \
    const cudaError_t _cohort_status = (expr);                                     \
    ASSERT_EQ(_cohort_status, cudaSuccess)                                         \
        << #expr << ": " << cudaGetErrorName(_cohort_status) << ": "               \
        << cudaGetErrorString(_cohort_status);                                     \
  } while (0)

// ASSERTs that everything launched so far succeeded: the last launch error, then a device
// synchronisation (which surfaces errors raised while the kernels ran).
#define COHORT_ASSERT_LAUNCHES_OK()                                                \
  do {                                                                             \
    COHORT_ASSERT_CUDA(cudaGetLastError());                                        \
    COHORT_ASSERT_CUDA(cudaDeviceSynchronize());                                   \
  } while (0)

namespace cohort::engine::cuda::testing {

using bf16 = __nv_bfloat16;

// The bf16 bit pattern of x, rounded to nearest even (NaN stays a quiet NaN), the rounding
// __float2bfloat16 does on the device.
inline uint16_t Bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

inline bf16 ToBf16(float x) {
  __nv_bfloat16_raw raw;
  raw.x = Bf16Bits(x);
  return bf16(raw);
}

inline float ToFloat(bf16 h) {
  const __nv_bfloat16_raw raw = h;
  return Bf16BitsToFloat(raw.x);
}

// Each value rounded to the nearest bf16 and widened back to float.
inline std::vector<float> RoundBf16(std::span<const float> x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = Bf16BitsToFloat(Bf16Bits(x[i]));
  return r;
}

// Elementwise conversions for uploads and downloads of bf16 buffers.
inline std::vector<bf16> ToBf16(std::span<const float> x) {
  std::vector<bf16> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = ToBf16(x[i]);
  return r;
}

inline std::vector<float> ToFloat(std::span<const bf16> x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = ToFloat(x[i]);
  return r;
}

// n values uniform in [-scale, scale), a pure function of (n, seed, scale) (splitmix64, so
// identical on every platform). Zero has probability ~2^-24 per element.
inline std::vector<float> RandomVector(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> r(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  for (size_t i = 0; i < n; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 40) / static_cast<double>(uint64_t{1} << 24);
    r[i] = static_cast<float>((2.0 * u - 1.0) * scale);
  }
  return r;
}

// ||a − b|| / ||b|| in double (b is the reference). +infinity when the sizes differ or any
// element of a or b is not finite (an unwritten, poisoned output); 0 when both are all zero.
inline double RelError(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      return std::numeric_limits<double>::infinity();
    }
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  if (ref == 0.0) return diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff) / std::sqrt(ref);
}

// Number of elements that are not finite (NaN: never written after Poison).
inline size_t CountNonFinite(std::span<const float> a) {
  size_t n = 0;
  for (float x : a) n += std::isfinite(x) ? 0 : 1;
  return n;
}

// n elements of T in device memory (cudaMalloc), freed on destruction. Move-only. A failed
// call records a test failure (ADD_FAILURE) with the CUDA error and leaves the buffer as it
// was; data() is null if the allocation failed.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = nullptr;
    const cudaError_t s = cudaMalloc(&p, n * sizeof(T));
    if (s != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc(" << n * sizeof(T) << " bytes): " << cudaGetErrorString(s);
      size_ = 0;
      return;
    }
    ptr_ = static_cast<T*>(p);
  }
  // Allocates host.size() elements and uploads them.
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { Upload(host); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(std::span<const T>(host)) {}

  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

  // Copies host (exactly size() elements, else a test failure) to the device; synchronous.
  void Upload(std::span<const T> host) {
    if (host.size() != size_) {
      ADD_FAILURE() << "DeviceBuffer::Upload: " << host.size() << " elements into " << size_;
      return;
    }
    if (size_ == 0) return;
    Check(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  void Upload(const std::vector<T>& host) { Upload(std::span<const T>(host)); }

  // Synchronises the device (so queued kernels finish) and returns the contents.
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    if (size_ == 0) return host;
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before download");
    Check(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

  // Fills every byte with 0xFF: NaN for float and bf16, -1 for signed ints. Synchronous.
  void Poison() {
    if (size_ == 0) return;
    Check(cudaMemset(ptr_, 0xFF, bytes()), "cudaMemset poison");
  }

 private:
  static void Check(cudaError_t s, const char* what) {
    if (s != cudaSuccess) {
      ADD_FAILURE() << what << ": " << cudaGetErrorName(s) << ": " << cudaGetErrorString(s);
    }
  }
  void Free() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// A bf16 device buffer holding ToBf16(host) and a float download of a bf16 buffer: the two
// conversions every test does.
inline DeviceBuffer<bf16> UploadBf16(std::span<const float> host) {
  return DeviceBuffer<bf16>(ToBf16(host));
}
inline std::vector<float> DownloadBf16(const DeviceBuffer<bf16>& buf) {
  return ToFloat(buf.Download());
}

}  // namespace cohort::engine::cuda::testing
