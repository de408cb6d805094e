#include "engine/parallel/tensor_parallel.h"

#include <cstring>
#include <vector>

namespace cohort::engine {

Result<void> TensorParallelGroup::SumPartials(float* data, size_t count) {
  ++all_reduces_;
  if (size() == 1 || count == 0) return {};
  return comm_->AllReduce(data, data, count, comm::DataType::kFloat32, comm::ReduceOp::kSum);
}

Result<void> TensorParallelGroup::Max(float* data, size_t count) {
  if (size() == 1 || count == 0) return {};
  return comm_->AllReduce(data, data, count, comm::DataType::kFloat32, comm::ReduceOp::kMax);
}

Result<void> TensorParallelGroup::Gather(const float* data, size_t count, float* out) {
  if (size() == 1) {
    if (out != data) std::memmove(out, data, count * sizeof(float));
    return {};
  }
  std::vector<size_t> counts(size(), count);
  return comm_->AllGather(data, out, counts, comm::DataType::kFloat32);
}

}  // namespace cohort::engine
