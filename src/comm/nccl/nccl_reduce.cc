#include "comm/nccl/nccl_reduce.h"

namespace cohort::comm::nccl_backend {

ncclDataType_t ToNccl(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

}  // namespace cohort::comm::nccl_backend
