// DdpReducer: data-parallel gradient averaging, overlapped with the backward pass.
//
// The flat gradient buffer is cut into buckets of about `bucket_bytes`, from the end of
// the buffer towards the start (the model finishes gradients in that order: ln_f and the
// last layer first, the embeddings last). During the last micro-batch's Backward the
// model reports each finished slice through GradReady(); when a bucket's every element
// has been reported it is handed to a communication thread that all-reduces it (average)
// in place while the backward pass goes on. Buckets are issued in a fixed order (last
// bucket first) on every rank, so collectives match across ranks whatever the timing.
// Finish() waits for every bucket and returns the first communication error.
//
// Memory. The reducer never reads or writes a gradient itself: it hands pointers into
// `grads` to the communicator, so `grads` is host memory for gloo and may be device memory
// for nccl (a GPU model's gradient buffer). A GPU backward pass reports a slice when its
// kernels are queued, not when they have run: `wait_ready` (optional) is called on the
// communication thread before each bucket's collective with the bucket's range, and blocks
// until those gradients are in memory (GptCudaModel::WaitGradsReady: it synchronises on the
// CUDA events recorded behind the slices' last kernels). NCCL's communicator orders its
// own stream only, so without the wait it could read gradients still being written.
//
// Threads: Begin/GradReady/Finish on the training thread; the Communicator and
// `wait_ready` are used only by the reducer's thread between Begin and Finish, so the
// caller must not use the communicator then. A world of 1 reduces nothing and starts no
// thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::engine {

class DdpReducer {
 public:
  // Blocks until grads[offset, offset + count) is final in memory; an error fails the
  // round (Finish returns it) and skips the bucket's collective.
  using WaitReadyFn = std::function<Result<void>(size_t offset, size_t count)>;
  // Called on the reducer's thread after a bucket's collective succeeded, with the bucket's
  // range: its average is final in `grads`. An error fails the round as a collective's
  // does. (The CUDA optimizer offload of ZeRO-1 copies the bucket's part of its shard to the
  // host here, while the backward pass goes on.)
  using ReducedFn = std::function<Result<void>(size_t offset, size_t count)>;

  // `grads` must outlive the reducer. bucket_bytes >= 4. `wait_ready` may be empty (host
  // gradients are final when reported). `reduced` (optional): see ReducedFn.
  DdpReducer(comm::Communicator& comm, std::span<float> grads, size_t bucket_bytes,
             WaitReadyFn wait_ready = {}, ReducedFn reduced = {});
  ~DdpReducer();
  DdpReducer(const DdpReducer&) = delete;
  DdpReducer& operator=(const DdpReducer&) = delete;

  // Starts a reduction round: every element must then be reported exactly once.
  void Begin();
  // Marks grads[offset, offset + count) final for this round (the GradReadyFn).
  void GradReady(size_t offset, size_t count);
  // Waits until every bucket is reduced. kFailedPrecondition if some elements were never
  // reported; otherwise the first error of the communicator (later buckets are skipped
  // after an error).
  Result<void> Finish();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets issued to the communication thread so far this round (training thread).
  size_t buckets_issued() const { return next_to_issue_; }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;
    size_t pending = 0;  // elements not yet reported this round
  };
  void Issue();  // launches complete buckets in order; caller holds mu_
  void Loop();

  comm::Communicator& comm_;
  std::span<float> grads_;
  WaitReadyFn wait_ready_;  // reducer thread only (set at construction)
  ReducedFn reduced_;                  // reducer thread only (set at construction)
  std::vector<Bucket> buckets_;  // buckets_[0] is the end of the buffer
  size_t next_to_issue_ = 0;     // training thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;   // guarded by mu_: bucket indices to reduce
  size_t done_ = 0;            // guarded by mu_: buckets reduced (or skipped) this round
  Result<void> status_;        // guarded by mu_: first error this round
  bool stop_ = false;          // guarded by mu_
  std::thread thread_;
};

}  // namespace cohort::engine
