// The NCCL backend of Communicator: device memory over NCCL.
//
// Device. A communicator works on the CUDA device that is current on the creating thread
// (a job's LOCAL_RANK GPU under its CUDA_VISIBLE_DEVICES: call cudaSetDevice first when a
// process sees several); every call makes that device current again, so the
// communicator may move between threads. Buffers are device pointers on that device.
// NCCL does not allow two ranks of one communicator on one device.
//
// Execution. Every call enqueues NCCL work on the communicator's own stream (a blocking
// stream: work the caller queued on the legacy default stream runs first; work on other
// streams must be finished by the caller) and then waits for it, polling
// cudaStreamQuery and ncclCommGetAsyncError, for at most CommOptions::timeout. The
// communicator is non-blocking (ncclConfig_t.blocking = 0), so creation too is bounded
// by the timeout. On a timeout or an NCCL error the communicator calls ncclCommAbort and
// the call fails naming the operation, its sequence number and the rank(s) involved;
// every later call fails at once with kFailedPrecondition (NCCL's rule: an aborted
// communicator is gone; create a new one). For a collective, the ranks that never
// reached it are found through the store: a rank still waiting after half the timeout
// sets "<prefix>/nccl/<group>/waiting/<rank>" to the collective's number, and a rank
// that times out reads its peers' keys (no cost unless a call is slow).
//
// Rendezvous. Group "world" first, then one path element per Split (as gloo): the
// group's rank 0 makes an ncclUniqueId and sets "<prefix>/nccl/<group>/id" (hex); the
// others Get it; then ncclCommInitRankConfig. Split makes a new communicator from a new
// id through the store, not ncclCommSplit: ncclCommSplit is a collective of the whole
// parent, while the contract lets only the members call Split.
//
// Collectives. AllReduce, Broadcast: NCCL's. ReduceScatter/AllGather with equal counts:
// ncclReduceScatter/ncclAllGather; with uneven counts (NCCL's are even-only): one
// grouped ncclReduce (resp. ncclBroadcast) per rank with a non-zero count, rooted at that
// rank, in one ncclGroupStart/End (one launch; every rank's data crosses each link once,
// as in a ring). Barrier: a one-element allreduce. avg: ncclAvg (see nccl_reduce.h).
// With check_consistency, a collective starts with an ncclAllGather of every rank's
// 48-byte descriptor (communicator_descriptor.h): a mismatch fails on every rank with
// the same kInvalidArgument and the communicator stays usable.
//
// Send/Recv. NCCL has no tags: a Send and a Recv between two ranks pair in call order.
// Tags are accepted and, with check_consistency, checked: a 16-byte header (tag, dtype,
// count) travels with the payload in one group, and a receive whose header differs
// fails with kInvalidArgument naming both sides. Without it, tags are ignored.
//
// The argument checks, broken state, sequence numbers and Split are CommunicatorBase's
// (communicator_base.h). Threading: as Communicator (one thread at a time per
// communicator). This header has no CUDA includes; the backend is compiled only with CUDA
// and NCCL.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::comm {

// CreateCommunicator's "nccl" branch; `options` are already validated by it.
// kUnavailable "no CUDA device: <cuda error>" (CudaDeviceCount, common/cuda_status.h)
// when no device can be used.
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options);

}  // namespace cohort::comm
