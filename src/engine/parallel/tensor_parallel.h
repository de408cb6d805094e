// TensorParallelGroup: the collectives of Megatron-LM's tensor parallelism, over the tensor
// group's Communicator, for any device the communicator reaches (host memory with gloo,
// device memory with nccl). The model calls them at fixed points (model/gpt_shard.h):
//   forward   one SumPartials per block half, after the row-parallel projection (Megatron's
//             g operator), one after the vocabulary-parallel embedding;
//   backward  one SumPartials per block half, on the input gradient of the column-parallel
//             layer (the f operator), one on the head's input gradient;
//   loss      Max and SumPartials over the rows' statistics (vocabulary-parallel
//             cross-entropy), never the full logits.
// A group of one (no communicator) does nothing. all_reduces() counts the SumPartials calls,
// which is how a test checks one all-reduce per block half.
//
// Threads: as the communicator (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::engine {

class TensorParallelGroup {
 public:
  // `comm` (the tensor group; may be null for a group of one) must outlive the group.
  explicit TensorParallelGroup(comm::Communicator* comm) : comm_(comm) {}

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }

  // data[0, count) = the sum over the group's ranks, in place.
  Result<void> SumPartials(float* data, size_t count);
  // data[0, count) = the elementwise maximum over the group's ranks, in place.
  Result<void> Max(float* data, size_t count);
  // out[rank · count, (rank + 1) · count) = each rank's data, on every rank. A group of one
  // copies with memmove: device memory must not come here then (the caller copies itself).
  Result<void> Gather(const float* data, size_t count, float* out);

  int64_t all_reduces() const { return all_reduces_; }

 private:
  comm::Communicator* comm_;
  int64_t all_reduces_ = 0;
};

}  // namespace cohort::engine
