// GlooRingBaseline: Gloo's own ring allreduce on a plain Gloo context, the yardstick the
// allreduce benchmark holds the Cohort backends against.
//
// It opens its own tcp::Device and rendezvous (through the same comm::Store as the
// communicator under test, under its own key prefix) and calls gloo::allreduce with
// Algorithm::RING and gloo::sum — the bandwidth-optimal reduce-scatter + allgather ring
// that Gloo itself picks by default — in place, with none of Cohort's wrapping (no
// descriptor exchange, no error translation beyond the catch at this boundary).
// gloo::AllreduceRing (gloo/allreduce_ring.h) is not used: it passes the whole buffer
// around the ring (n-1 times the bytes per rank) and would flatter any comparison.
// Gloo's exceptions become Errors here. Used by one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm::bench {

class GlooRingBaseline {
 public:
  // Connects `size` ranks; `store` may be null only when size == 1. `iface_host` as in
  // CommOptions (empty: this machine's hostname).
  static Result<std::unique_ptr<GlooRingBaseline>> Connect(std::shared_ptr<Store> store,
                                                           const std::string& key_prefix,
                                                           int rank, int size, Millis timeout,
                                                           const std::string& iface_host);
  virtual ~GlooRingBaseline() = default;

  // Whether AllReduceSum supports `type` (float32, int32, int64: gloo::sum<T>).
  static bool Supports(DataType type);

  // Sums `count` elements of `buf` (host memory) across the ranks, in place.
  virtual Result<void> AllReduceSum(void* buf, size_t count, DataType type) = 0;
  // gloo::barrier.
  virtual Result<void> Barrier() = 0;
};

}  // namespace cohort::comm::bench
