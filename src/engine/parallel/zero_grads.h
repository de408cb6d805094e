// ShardedGradients: ZeRO-2's gradient memory (Rajbhandari et al., section 5.2). A rank keeps
// only its shard of the averaged gradient (ZeroPartition), persistently; the backward pass
// (GptModel::BackwardToSink) writes each piece of this micro-batch's gradient into
// bucket-sized scratch, which is reduce-scattered (average over the data-parallel group) as
// soon as the piece is done and then reused. The rank's part of every piece is added into
// its shard, so gradient accumulation accumulates into the shard: after the step's last
// micro-batch the shard holds the shard of the averaged, accumulated gradient (DDP's, summed
// in another order).
//
// Memory, counted where allocated: the shard, 4·size(r) bytes, and the scratch: two piece
// buffers of max_piece floats (the model writes one while the other is reduce-scattered on
// the communication thread) and a receive buffer of min(max_piece, size(r)) floats; without
// overlap one piece buffer, and on one rank no receive buffer (the piece is added in place).
//
// A model that keeps its whole gradient buffer (the tensor/pipeline shard model, whose
// micro-batches accumulate there) hands pieces over in place instead (Submit, `kCallerMemory`):
// the piece is reduce-scattered from the caller's memory, which must stay unchanged until
// Finish, and the object holds no piece buffers, only the receive buffer.
//
// Collectives are issued in the order pieces are Done (or Submitted), the same on every rank (the model's
// piece order is fixed), so they match across ranks whatever the timing. After a
// communicator error the remaining pieces of the round are skipped and Finish returns the
// error (the other ranks' collectives fail or time out as theirs do).
//
// Threads: ZeroShard, Begin, Acquire, Done, Submit, Finish and shard() on the training thread; the
// communicator is used by this object's thread between Begin and Finish only.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/parallel/zero.h"

namespace cohort::engine {

class ShardedGradients final : public GradSink {
 public:
  // Where the pieces are: buffers this object hands out (GradSink) or the caller's (Submit).
  enum class Pieces { kOwnBuffers, kCallerMemory };
  // `comm` is the data-parallel group (partition.ranks == comm.size()); it must outlive
  // this object. max_piece >= 1: the largest piece Acquire (or Submit) is given. `overlap`
  // false: each piece is reduce-scattered in Done, on the training thread (ZeRO-3, whose
  // parameter gathers share the communicator and must stay in the same order on every rank).
  ShardedGradients(comm::Communicator& comm, const ZeroPartition& partition, size_t max_piece,
                   bool overlap = true, Pieces pieces = Pieces::kOwnBuffers);
  ~ShardedGradients() override;
  ShardedGradients(const ShardedGradients&) = delete;
  ShardedGradients& operator=(const ShardedGradients&) = delete;

  // The shard to 0 (the step's first micro-batch).
  void ZeroShard();
  // Starts a round of pieces: a micro-batch's, whose pieces tile [0, total) once, or one
  // of `expected` elements in all (a step of several micro-batches whose pieces are handed
  // over as each micro-batch finishes them: the tensor/pipeline shard, trainer/shard_zero.h).
  void Begin(size_t expected = 0);
  // GradSink. Acquire blocks while the buffer it will hand out is still being sent.
  float* Acquire(size_t offset, size_t count) override;
  void Done(size_t offset, size_t count) override;
  // Reduce-scatters `data`, this round's gradient of elements [offset, offset + count), from
  // where it is (on the communication thread when overlapping); `data` must stay unchanged
  // until Finish. count <= max_piece; in either mode (kOwnBuffers: beside the pieces of
  // Acquire and Done).
  void Submit(const float* data, size_t offset, size_t count);
  // Waits until every piece handed back is in the shard; the first communicator error of
  // the round, or kInternal if a piece was larger than max_piece or pieces did not tile the
  // buffer (each element of [0, total) exactly once).
  Result<void> Finish();

  // This rank's gradient shard: elements [partition.begin(rank), partition.end(rank)).
  std::span<float> shard() { return shard_; }
  // The scratch (piece and receive buffers), bytes.
  size_t scratch_bytes() const;

 private:
  struct Piece {
    int slot;  // -1: the caller's memory at `data`
    size_t offset, count;
    const float* data = nullptr;
  };
  void Enqueue(const Piece& p);
  void Reduce(const Piece& p);  // the communication thread (or inline on one rank)
  void Loop();

  comm::Communicator& comm_;
  const ZeroPartition partition_;
  const int rank_;
  const size_t max_piece_;
  std::vector<float> shard_;                // training thread, or this thread during a round
  std::vector<std::vector<float>> slots_;   // piece buffers: one written, one being sent
  std::vector<float> received_;             // this thread only: a piece's part in the shard
  int next_slot_ = 0;                       // training thread only
  size_t reported_ = 0;                     // training thread only: elements Done this round
  size_t expected_ = 0;                     // training thread only: elements the round needs
  bool oversize_ = false;                   // training thread only: a piece over max_piece

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;   // guarded by mu_: pieces to reduce, in order
  std::vector<bool> busy_;    // guarded by mu_: slot handed out or not yet sent
  const bool caller_memory_;  // Pieces::kCallerMemory
  Result<void> status_;       // guarded by mu_: first error this round
  bool stop_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace cohort::engine
