// How the Communicator's element types and reduce operations map onto NCCL's.
//
// float32, bfloat16, float16, int32, int64 -> ncclFloat32, ncclBfloat16, ncclFloat16,
// ncclInt32, ncclInt64. sum, max, min -> ncclSum, ncclMax, ncclMin. avg -> ncclAvg for
// every type: NCCL (>= 2.10) computes it for floating types by pre-multiplying each
// input by 1/size (in the element type; exact for power-of-two sizes, within the
// suite's tolerance otherwise) and for integers as a sum followed by a division by
// size that truncates toward zero — the Communicator contract's "integers: truncating".
// No CUDA kernel of our own is needed. Like gloo, half types use NCCL's own
// accumulation (fp16/bf16 arithmetic on the device, rounded to nearest even per step).
// Only compiled with NCCL. Pure functions: any thread.
#pragma once

#include <nccl.h>

#include "comm/communicator.h"

namespace cohort::comm::nccl_backend {

ncclDataType_t ToNccl(DataType type);
ncclRedOp_t ToNccl(ReduceOp op);

}  // namespace cohort::comm::nccl_backend
