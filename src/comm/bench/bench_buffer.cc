#include "comm/bench/bench_buffer.h"

#include <cstring>
#include <vector>

#if COHORT_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#endif

namespace cohort::comm::bench {

namespace {

class HostBuffer final : public BenchBuffer {
 public:
  explicit HostBuffer(size_t bytes) : mem_(bytes) {}
  void* data() override { return mem_.data(); }
  size_t bytes() const override { return mem_.size(); }
  Result<void> Upload(const void* host, size_t n) override {
    std::memcpy(mem_.data(), host, n);
    return {};
  }
  Result<void> Download(void* host, size_t n) const override {
    std::memcpy(host, mem_.data(), n);
    return {};
  }

 private:
  std::vector<std::byte> mem_;
};

#if COHORT_HAVE_NCCL
class DeviceBuffer final : public BenchBuffer {
 public:
  static Result<std::unique_ptr<BenchBuffer>> Allocate(size_t bytes) {
    void* p = nullptr;
    COHORT_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
    return std::unique_ptr<BenchBuffer>(new DeviceBuffer(p, bytes));
  }
  ~DeviceBuffer() override { (void)cudaFree(ptr_); }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  Result<void> Upload(const void* host, size_t n) override {
    COHORT_CUDA_CHECK(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice));
    return {};
  }
  Result<void> Download(void* host, size_t n) const override {
    COHORT_CUDA_CHECK(cudaMemcpy(host, ptr_, n, cudaMemcpyDeviceToHost));
    return {};
  }

 private:
  DeviceBuffer(void* p, size_t bytes) : ptr_(p), bytes_(bytes) {}
  void* ptr_;
  size_t bytes_;
};
#endif

}  // namespace

Result<std::unique_ptr<BenchBuffer>> AllocateBenchBuffer(std::string_view backend, size_t bytes) {
  if (backend != "nccl") return std::unique_ptr<BenchBuffer>(new HostBuffer(bytes));
#if COHORT_HAVE_NCCL
  return DeviceBuffer::Allocate(bytes);
#else
  return Errorf(ErrorCode::kUnavailable, "device memory: this binary was built without CUDA/NCCL");
#endif
}

Result<void> UseLocalDevice(std::string_view backend, int local_rank) {
  if (backend != "nccl") return {};
#if COHORT_HAVE_NCCL
  const int n = COHORT_TRY(CudaDeviceCount());
  COHORT_CUDA_CHECK(cudaSetDevice(local_rank % n));
  return {};
#else
  return Errorf(ErrorCode::kUnavailable, "the nccl backend is not built into this binary (it was built without CUDA/NCCL)");
#endif
}

}  // namespace cohort::comm::bench
