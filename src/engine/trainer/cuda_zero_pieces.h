// ZeRO-2's gradient memory and ZeRO-3's parameter memory for the CUDA model (Rajbhandari et
// al., sections 5.2 and 5.3), the device twins of parallel/zero_grads.h and zero_params.h.
// Built only with the CUDA engine; CudaZeroOptimizer (cuda_zero.h) owns them, and the CUDA
// shard engine (cuda_shard_engine.cc) inside tensor/pipeline layouts.
//
// SerialThread runs posted ops one at a time, in the order they were posted, on a thread of
// its own with the model's device current. One runs the data group's collectives of both
// classes below (an offloaded optimizer has a second for its host AdamW,
// cuda_zero.h): the model asks for its pieces in an order that depends on the config only
// (GptCudaModel::ParamPieces, GradPieces; a shard model's on its layout and the pipeline's
// schedule, the same on every rank of its data group: GptShardCudaModel::ParamPasses), so
// every rank posts the same collectives in the same order and they match, gathers and
// reduce-scatters interleaved.
// Communicator calls are synchronous on return (comm/communicator.h), so an op that returned
// has its data in device memory; ops wait for the model's kernels through CUDA events.
//
// ShardedDeviceGrads (CudaGradSink): the rank keeps its shard of the averaged gradient,
// size(r) floats of device memory, persistently. Backward writes each piece into one of two
// device piece buffers of MaxGradPiece floats (gpt_cuda.h: a layer's block or wpe; wte comes
// in chunks of rows); Done records an event behind the piece's kernels
// and posts its reduce-scatter (average over the group, counts_in of the piece) into a
// receive buffer of min(MaxGradPiece, size(r)) floats, whose values are added into the shard on
// the thread's stream (kernels/cuda/common.cuh Add) while the model writes the next piece
// into the other buffer. Every micro-batch is reduced this way (DeepSpeed's choice): gradient
// accumulation accumulates into the shard, so no whole gradient buffer exists, at the price
// of one reduce-scatter of the gradient per micro-batch rather than per step.
//
// GatheredDeviceParams (CudaParamSource): the rank keeps its shard of the bf16 parameters
// (device memory, or with `parallel.offload: optimizer+params` pinned host memory, whose
// part of each piece is copied to a device send buffer on the thread's stream just before
// the gather). Each piece is all-gathered into one of two device buffers of MaxParamPiece bf16
// values: when the model gathers piece i, piece i+1's gather is posted (the prefetch), so it
// runs on the thread while the model computes with piece i. A buffer is reused only after
// the model released its piece: Release records an event on the compute stream, which the
// gather into that buffer waits for. The model releases a piece before it asks for the
// piece after next (gpt_cuda.h), so an op waiting for a release never waits behind an op
// that the training thread waits for.
//
// Caller memory (Create's `caller_memory`, the CUDA shard engine's ZeRO-2 inside a
// tensor/pipeline layout, trainer/cuda_shard_engine.cc): the pieces already lie in a whole
// gradient buffer the model accumulates into (a pipeline interleaves micro-batches, so a piece
// is final only at its chunk's last backward of the step), and Submit posts the piece's
// reduce-scatter straight from there, behind an event recorded on the compute stream: no
// piece buffers (the device twin of zero_grads.h's Pieces::kCallerMemory).
//
// With the optimizer offloaded, the last micro-batch's round is final (Begin(true)): after a
// piece's add, its part of the shard is handed to the FinalFn on the thread, which copies it
// to the host while the backward goes on (the offloaded step starts from it).
//
// Errors: an op's error is kept (later ops are skipped: their collectives would no longer
// match) and returned by the next call that waits (Acquire, Gather, Finish) or TakeError.
//
// Threads: everything but the ops on the training thread; the communicator only on the
// SerialThread (the trainer uses it between steps, when no op is queued: Drain first).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt_cuda.h"
#include "engine/parallel/zero.h"

namespace cohort::engine {

class SerialThread {
 public:
  using Op = std::function<Result<void>()>;
  // Makes `device` current on its thread.
  explicit SerialThread(int device);
  // Skips the ops not yet started and joins.
  ~SerialThread();
  SerialThread(const SerialThread&) = delete;
  SerialThread& operator=(const SerialThread&) = delete;

  // Queues `op`; returns its ticket (1, 2, ...).
  uint64_t Post(Op op);
  // Blocks until op `ticket` is done (ran or was skipped); the first error so far.
  Result<void> WaitFor(uint64_t ticket);
  // Blocks until every posted op is done; the first error so far.
  Result<void> Drain();
  // The first error since the last call, cleared (ops run again after it).
  Result<void> TakeError();
  // Whether op `ticket` is done, without waiting.
  bool IsDone(uint64_t ticket);

 private:
  void Loop();

  const int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, Op>> queue_;  // guarded by mu_
  uint64_t posted_ = 0;                        // guarded by mu_
  uint64_t done_ = 0;                          // guarded by mu_: every op <= done_ is done
  Result<void> status_;                        // guarded by mu_
  bool stop_ = false;                          // guarded by mu_
  std::thread thread_;
};

class ShardedDeviceGrads final : public CudaGradSink {
 public:
  // `comm` (null: one rank) is the data group, partition.ranks == its size. `stream` is the
  // model's compute stream. Allocation failures name the bytes (kResourceExhausted).
  // `caller_memory`: pieces come by Submit only (no piece buffers are allocated; max_piece
  // bounds the receive buffer).
  static Result<std::unique_ptr<ShardedDeviceGrads>> Create(comm::Communicator* comm,
                                                            const ZeroPartition& partition,
                                                            size_t max_piece, int device,
                                                            cudaStream_t stream,
                                                            SerialThread& thread,
                                                            bool caller_memory = false);
  ~ShardedDeviceGrads() override;

  // The shard to 0 on the compute stream (the step's first micro-batch).
  Result<void> ZeroShard();
  // Called on the thread after a final round's piece is in the shard, with its range in
  // the shard [lo, hi) (relative to begin(rank)); an error fails the round.
  using FinalFn = std::function<Result<void>(size_t lo, size_t hi)>;
  void set_final(FinalFn fn) { final_fn_ = std::move(fn); }
  // Starts a micro-batch's round of pieces; `final`: the step's last (FinalFn runs).
  void Begin(bool final = false);
  // CudaGradSink (training thread). Acquire waits until the buffer's last reduce is done.
  Result<float*> Acquire(size_t offset, size_t count) override;
  Result<void> Done(size_t offset, size_t count) override;
  // Caller memory (training thread): gradient elements [offset, offset + count) lie at `src`
  // (device memory, written by kernels queued on the compute stream so far, unchanged until
  // Finish); their reduce-scatter waits for an event recorded now. kInternal for a piece
  // above max_piece or on a model with piece buffers.
  Result<void> Submit(const float* src, size_t offset, size_t count);
  // Waits until every piece of the round is in the shard: the first error, or kInternal if
  // the pieces did not cover the buffer exactly once or one exceeded max_piece.
  Result<void> Finish();

  // This rank's gradient shard (device memory): elements [begin(rank), end(rank)).
  float* shard() { return shard_; }
  size_t shard_size() const { return partition_.size(rank_); }
  // The piece and receive buffers, bytes.
  size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  ShardedDeviceGrads(comm::Communicator* comm, const ZeroPartition& partition, size_t max_piece,
                     int device, cudaStream_t stream, SerialThread& thread);
  // The thread: reduces `piece` (behind `written`) into the shard.
  Result<void> Reduce(const float* piece, cudaEvent_t written, size_t offset, size_t count,
                      bool final);

  comm::Communicator* comm_;
  const ZeroPartition partition_;
  const int rank_;
  const size_t max_piece_;
  const int device_;
  cudaStream_t stream_;          // the model's
  SerialThread& thread_;
  float* shard_ = nullptr;       // device, size(r)
  float* slots_[2] = {nullptr, nullptr};  // device, max_piece each (none: caller memory)
  float* received_ = nullptr;    // device, min(max_piece, size(r)); ranks > 1
  size_t scratch_bytes_ = 0;
  cudaEvent_t written_[2] = {nullptr, nullptr};  // behind each slot's kernels
  cudaStream_t add_stream_ = nullptr;            // the thread's Add
  FinalFn final_fn_;              // set before the first round
  bool final_ = false;            // training thread; copied into each op
  uint64_t slot_op_[2] = {0, 0};  // training thread: the op that reads each slot
  std::vector<cudaEvent_t> submitted_;  // caller memory: one per Submit of a round, reused
  size_t submits_ = 0;                  // training thread: Submits this round
  int next_ = 0;                  // training thread
  size_t reported_ = 0;           // training thread
  bool oversize_ = false;         // training thread
};

class GatheredDeviceParams final : public CudaParamSource {
 public:
  // `shard`: this rank's size(r) bf16 parameters, device memory or (on_host) pinned host
  // memory, owned by the caller and stable. `passes`: the model's list of passes, each its
  // pieces in the order the model asks for them (CudaParamSource: GptCudaModel's two,
  // ParamPieces; GptShardCudaModel::ParamPasses); the gather buffers hold the largest piece.
  static Result<std::unique_ptr<GatheredDeviceParams>> Create(
      comm::Communicator* comm, const ZeroPartition& partition,
      std::vector<std::vector<ParamPiece>> passes, const cuda::bf16* shard, bool on_host,
      int device, cudaStream_t stream, SerialThread& thread);
  ~GatheredDeviceParams() override;

  // CudaParamSource (training thread).
  Result<void> BeginPass(size_t pass) override;
  Result<const cuda::bf16*> Gather(size_t offset, size_t count) override;
  Result<void> Release(size_t offset, size_t count) override;

  // Stops ops waiting for a release (before the thread is joined on an error path).
  void Abort();
  // The gather buffers and (on_host over two or more ranks) the device send buffer, bytes.
  size_t scratch_bytes() const { return scratch_bytes_; }
  // Pieces the model asked for (since Create), and of them those whose gather had already
  // finished on the thread when it asked (the prefetch hid it).
  uint64_t asked() const { return asked_; }
  uint64_t prefetched() const { return prefetched_; }

 private:
  GatheredDeviceParams(comm::Communicator* comm, const ZeroPartition& partition,
                       std::vector<std::vector<ParamPiece>> passes, const cuda::bf16* shard,
                       bool on_host, int device, cudaStream_t stream, SerialThread& thread);
  void Post(size_t index);                                   // training thread
  Result<void> GatherInto(int buffer, const ParamPiece& p);  // the thread

  comm::Communicator* comm_;
  const ZeroPartition partition_;
  const int rank_;
  const size_t max_piece_;
  const cuda::bf16* shard_;
  const bool on_host_;
  const int device_;
  cudaStream_t stream_;  // the model's
  SerialThread& thread_;
  const std::vector<std::vector<ParamPiece>> passes_;
  cuda::bf16* buffers_[2] = {nullptr, nullptr};  // device, max_piece each
  cuda::bf16* send_ = nullptr;  // device, on_host over two or more ranks: this rank's part
  size_t scratch_bytes_ = 0;
  cudaEvent_t released_event_[2] = {nullptr, nullptr};
  cudaStream_t copy_stream_ = nullptr;  // the thread's copies (on_host; one rank)

  // Training thread.
  const std::vector<ParamPiece>* pass_ = nullptr;
  size_t index_ = 0;    // the next piece the model asks for
  size_t posted_ = 0;   // pieces of this pass posted
  uint64_t ticket_[2] = {0, 0};
  ParamPiece given_[2];  // the piece each buffer holds for the model (count 0: none)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool free_[2] = {true, true};  // guarded by mu_: the buffer's piece was released
  bool aborted_ = false;         // guarded by mu_
  uint64_t asked_ = 0, prefetched_ = 0;  // training thread
};

}  // namespace cohort::engine
