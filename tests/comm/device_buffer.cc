#include "device_buffer.h"

#include <gtest/gtest.h>

#if COHORT_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace cohort::comm::commtest {

#if COHORT_HAVE_NCCL

namespace {

class DeviceBuffer final : public TestBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    const cudaError_t s = cudaMalloc(&ptr_, bytes_);
    if (s != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc(" << bytes_ << ") failed: " << cudaGetErrorString(s);
      ptr_ = nullptr;
    }
  }
  ~DeviceBuffer() override {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  void Upload(const std::vector<std::byte>& host) override {
    ASSERT_LE(host.size(), bytes_);
    if (host.empty()) return;
    const cudaError_t s = cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice);
    EXPECT_EQ(s, cudaSuccess) << "cudaMemcpy to the device: " << cudaGetErrorString(s);
  }
  std::vector<std::byte> Download() const override {
    std::vector<std::byte> host(bytes_);
    if (bytes_ == 0) return host;
    const cudaError_t s = cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost);
    EXPECT_EQ(s, cudaSuccess) << "cudaMemcpy from the device: " << cudaGetErrorString(s);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool UseDevice(int device) {
  const cudaError_t s = cudaSetDevice(device);
  EXPECT_EQ(s, cudaSuccess) << "cudaSetDevice(" << device << "): " << cudaGetErrorString(s);
  return s == cudaSuccess;
}

std::unique_ptr<TestBuffer> MakeDeviceBuffer(size_t bytes) {
  return std::make_unique<DeviceBuffer>(bytes);
}

#else  // built without CUDA/NCCL

int CudaDeviceCount() { return 0; }

bool UseDevice(int device) {
  ADD_FAILURE() << "no CUDA in this build";
  return false;
}

std::unique_ptr<TestBuffer> MakeDeviceBuffer(size_t bytes) {
  ADD_FAILURE() << "no CUDA in this build";
  return nullptr;
}

#endif

}  // namespace cohort::comm::commtest
