// matmul.cc (cuBLASLt) is not emulated: this stand-in lets cuda_kernels_test.cc link. Every
// Matmul test is filtered out of the emulated run (cuda_emu.cmake); BiasGradient (matmul.cu)
// runs on the emulator.
#include "engine/kernels/cuda/matmul.h"

namespace cohort::engine::cuda {

struct Matmul::Impl {};

Result<Matmul> Matmul::Create(cudaStream_t) {
  return MakeError(ErrorCode::kUnavailable, "cuBLASLt is not emulated");
}
Matmul::Matmul(Impl* impl) : impl_(impl) {}
Matmul::Matmul(Matmul&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
Matmul& Matmul::operator=(Matmul&& o) noexcept {
  if (this != &o) {
    delete impl_;
    impl_ = o.impl_;
    o.impl_ = nullptr;
  }
  return *this;
}
Matmul::~Matmul() { delete impl_; }
Result<void> Matmul::Forward(bf16*, const bf16*, const bf16*, const bf16*, int, int, int) {
  return MakeError(ErrorCode::kUnavailable, "cuBLASLt is not emulated");
}
Result<void> Matmul::Backward(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, int,
                              int, int) {
  return MakeError(ErrorCode::kUnavailable, "cuBLASLt is not emulated");
}

}  // namespace cohort::engine::cuda
