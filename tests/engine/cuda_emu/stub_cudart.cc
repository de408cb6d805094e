// Host-memory stand-ins for the CUDA runtime calls the emulated tests, launchers and the
// GPU model make. Everything is synchronous (the emulator runs each launch to completion),
// so stream and event calls only check their arguments; an ordering mistake between streams
// cannot show here.
//
// "Device" memory is host memory, but every cudaMalloc'd range is recorded, and the copies
// and memsets are checked against their kind (stricter than the runtime, which with
// unified addressing tolerates some mix-ups): a host-to-device copy whose destination is not
// inside one device allocation, or whose source is, fails with cudaErrorInvalidValue, and so
// on for every kind; so does a copy running past the end of its allocation, a memset of host
// memory and a cudaFree of a pointer cudaMalloc did not return. One device.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace {

struct Allocations {
  std::mutex mu;
  std::map<uintptr_t, size_t> device, pinned;  // start → bytes
  size_t device_bytes = 0;
};
Allocations& Allocs() {
  static Allocations a;
  return a;
}

// Whether [p, p + n) lies inside one range of `ranges` (n = 0: p inside or at its end).
bool Inside(const std::map<uintptr_t, size_t>& ranges, const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}

cudaError_t g_last = cudaSuccess;

cudaError_t Fail(cudaError_t e) {
  g_last = e;
  return e;
}

// 256-byte aligned like cudaMalloc, and exactly n bytes long, so that AddressSanitizer
// reports any access past the end (no rounding slack to hide it in).
void* AlignedAlloc(size_t n) {
  void* p = nullptr;
  return posix_memalign(&p, 256, n == 0 ? 1 : n) == 0 ? p : nullptr;
}

cudaError_t CheckCopy(void* d, const void* s, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (d == nullptr || s == nullptr) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(Allocs().mu);
  const auto& dev = Allocs().device;
  const bool d_dev = Inside(dev, d, 1), s_dev = Inside(dev, s, 1);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = !s_dev && d_dev; break;
    case cudaMemcpyDeviceToHost: ok = s_dev && !d_dev; break;
    case cudaMemcpyDeviceToDevice: ok = s_dev && d_dev; break;
    case cudaMemcpyHostToHost: ok = !s_dev && !d_dev; break;
    case cudaMemcpyDefault: break;
    default: ok = false;
  }
  if (!ok) return Fail(cudaErrorInvalidMemcpyDirection);
  if ((d_dev && !Inside(dev, d, n)) || (s_dev && !Inside(dev, s, n))) {
    return Fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** p, size_t n) {
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  *p = AlignedAlloc(n);
  if (*p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(Allocs().mu);
  Allocs().device[reinterpret_cast<uintptr_t>(*p)] = n;
  Allocs().device_bytes += n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(Allocs().mu);
  auto it = Allocs().device.find(reinterpret_cast<uintptr_t>(p));
  if (it == Allocs().device.end()) return Fail(cudaErrorInvalidValue);
  Allocs().device_bytes -= it->second;
  Allocs().device.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) {
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  *p = AlignedAlloc(n);
  if (*p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(Allocs().mu);
  Allocs().pinned[reinterpret_cast<uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(Allocs().mu);
  if (Allocs().pinned.erase(reinterpret_cast<uintptr_t>(p)) != 1) return Fail(cudaErrorInvalidValue);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  constexpr size_t kTotal = size_t{80} << 30;
  std::lock_guard<std::mutex> lock(Allocs().mu);
  *total = kTotal;
  *free_bytes = kTotal - Allocs().device_bytes;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind kind) {
  if (cudaError_t e = CheckCopy(d, s, n, kind); e != cudaSuccess) return e;
  if (n > 0) std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(d, s, n, kind);
}
cudaError_t cudaMemcpy2D(void* d, size_t dpitch, const void* s, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return Fail(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r) {
    char* dr = static_cast<char*>(d) + r * dpitch;
    const char* sr = static_cast<const char*>(s) + r * spitch;
    if (cudaError_t e = CheckCopy(dr, sr, width, kind); e != cudaSuccess) return e;
    std::memmove(dr, sr, width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* d, size_t dpitch, const void* s, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy2D(d, dpitch, s, spitch, width, height, k);
}
cudaError_t cudaMemset(void* d, int v, size_t n) {
  if (n == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(Allocs().mu);
    if (!Inside(Allocs().device, d, n)) return Fail(cudaErrorInvalidValue);
  }
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { return cudaMemset(d, v, n); }

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (s == nullptr) return Fail(cudaErrorInvalidValue);
  *s = reinterpret_cast<cudaStream_t>(new int(0));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}
// An event is an int: 0 created, 1 recorded.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  if (e == nullptr) return Fail(cudaErrorInvalidValue);
  *e = reinterpret_cast<cudaEvent_t>(new int(0));
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<int*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (e == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  *reinterpret_cast<int*>(e) = 1;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned int) {
  return e == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaGetLastError() { return std::exchange(g_last, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return g_last; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
// An H100-sized device named as what it is (the trainer's peak table does not know it, so
// no MFU is printed).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Fail(cudaErrorInvalidValue);
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "CPU emulator");
  prop->totalGlobalMem = size_t{80} << 30;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->warpSize = 32;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int v) {
  return v <= 227 * 1024 ? cudaSuccess : Fail(cudaErrorInvalidValue);
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaError (emulator: other)";
  }
}
const char* cudaGetErrorString(cudaError_t) { return "reported by the emulator's runtime stand-in"; }
