// GatheredParams: ZeRO-3's parameter memory (Rajbhandari et al., section 5.3). A rank keeps
// only its shard of the parameters (ZeroPartition), persistently; the model
// (GptModel::SetParamSource, GptShardModel::SetParamSource) asks for each piece just before it
// computes with it (the embeddings, a layer's block, ln_f, the head: gpt.h ParamSource), and
// the piece is all-gathered from every rank's part of it into a buffer that a later piece
// reuses (the piece is freed after use). AdamW steps the shard in place (ZeroOptimizer::
// StepOwnShard): nothing is all-gathered after the step.
//
// Prefetch (`prefetch` true). While the model computes with one piece, the next piece's
// all-gather runs on this object's communication thread into the second buffer, so the
// training thread finds it gathered. The next piece is predicted from the order seen before:
// the owner starts each round of requests with BeginRound(key) (a training step, an
// evaluation, a sampling pass: a key per kind of round), this object records the round's
// order of pieces per key and, after the k-th request, prefetches the recorded (k+1)-th. A
// request that differs from the prediction waits for the prefetch in flight (its result is
// dropped), gathers what was asked and rewrites the record from there. Every rank of the
// group makes the same requests in the same order (the order depends on the config and the
// schedule only), so all predict alike and the gathers match across ranks. The values are
// those of an all-gather either way: prefetching changes when a piece is gathered, never its
// bits. The shard must not change while a prefetch reads it: Invalidate (called by shard()
// writers: the optimizer step, restore) waits for it and forgets it.
//
// Memory. The shard, 4·size(r) bytes, persistently; and the gathered pieces, each in a buffer
// of its own size, so the gathered working set is what is gathered at once: one piece without
// prefetch, the piece in use and the next one with it. A request for the piece just released
// (GptModel's head asks for wte at the end of its Forward and again first in its backward) is
// served from the buffer kept for it, without a second gather or a second buffer. Any other
// released piece's buffer is kept too, for reuse (one slot without prefetch, two with it: the
// prefetch depth): the next piece of the same size is gathered into it without an allocation
// (a model's blocks are one size, so a large buffer is not mapped and faulted in again for
// every layer of every pass); a piece of another size frees every kept buffer before its own
// is allocated, so nothing is held beyond the pieces in use and the one being gathered, and
// no buffer is ever sized for a larger piece than its own.
// gather_bytes() is the bound of that working set for the model's pieces (the largest piece,
// or the two largest with prefetch: GatherBound), peak_gathered_bytes() what was held at most.
//
// A communicator error is kept (the model computes on whatever the buffer holds) and returned
// by TakeError, which the caller checks after each Forward and backward pass.
//
// Threads: every method on the training thread. Without prefetch the gathers run there; with
// prefetch all of this object's collectives (sync gathers, prefetches, GatherAll) are issued
// one at a time, either by the training thread while the communication thread is idle or by
// the communication thread, so `comm` sees one order; with prefetch `comm` must be this
// object's alone (its collectives run on another thread than the owner's other groups').
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/parallel/zero.h"

namespace cohort::engine {

// The most floats a GatheredParams holds at once for a model whose pieces have `sizes`
// (GptModel::ParamPieceSizes, ShardParamPieceSizes): the largest piece, or with prefetch the
// sum of the two largest (the piece in use and the next; a piece asked for twice in a row is
// held once).
size_t GatherBound(std::span<const size_t> sizes, bool prefetch);

class GatheredParams final : public ParamSource {
 public:
  // Keeps this rank's shard of `whole` (all the parameters); `comm` is the data-parallel
  // group (partition.ranks == comm.size()) and must outlive this object. `pieces`: the sizes
  // of the pieces the model asks for (floats; a request for more than the largest is an
  // error), from which gather_bytes() is bounded.
  GatheredParams(comm::Communicator& comm, const ZeroPartition& partition,
                 std::span<const float> whole, std::span<const size_t> pieces,
                 bool prefetch = false);
  // As above from this rank's shard alone (partition.size(rank) floats: a sharded init that
  // never held the whole model).
  static std::unique_ptr<GatheredParams> FromShard(comm::Communicator& comm,
                                                   const ZeroPartition& partition,
                                                   std::vector<float> shard,
                                                   std::span<const size_t> pieces,
                                                   bool prefetch = false);
  ~GatheredParams() override;
  GatheredParams(const GatheredParams&) = delete;
  GatheredParams& operator=(const GatheredParams&) = delete;

  // ParamSource.
  const float* Gather(size_t offset, size_t count) override;
  void Release(size_t offset, size_t count) override;
  // The first error since the last call (a communicator's, or kInternal for a piece over
  // max_piece or a Gather without a Release).
  Result<void> TakeError();

  // Starts a round of requests whose order is recorded under `key` (see above); with
  // prefetch the round's first recorded piece is gathered at once.
  void BeginRound(int key);
  // Waits for a prefetch in flight and forgets it: call before changing shard().
  void Invalidate();

  // This rank's shard: parameters [partition.begin(rank), partition.end(rank)).
  std::span<float> shard() { return shard_; }
  // Every parameter, all-gathered into a new buffer (checkpoints by any layout, export):
  // a collective.
  Result<std::vector<float>> GatherAll();
  // The bound of the gathered working set (see above), bytes; what is held now (pieces in use
  // and buffers kept for the next one), and the most held at once since this object was made
  // or ResetPeak.
  size_t gather_bytes() const { return bound_floats_ * sizeof(float); }
  size_t gathered_bytes() const { return held_floats_ * sizeof(float); }
  size_t peak_gathered_bytes() const { return peak_floats_ * sizeof(float); }
  void ResetPeak() { peak_floats_ = held_floats_; }

  // Prefetch's record: requests served by a prefetch, requests gathered on demand, and the
  // seconds the training thread spent waiting for gathers (either kind).
  int64_t prefetch_hits() const { return hits_; }
  // Piece buffers allocated since this object was made (the others reused a kept buffer).
  int64_t allocations() const { return allocations_; }
  int64_t prefetch_misses() const { return misses_; }
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct OwnShard {};  // picks the constructor that takes the shard itself
  GatheredParams(OwnShard, comm::Communicator& comm, const ZeroPartition& partition,
                 std::vector<float> shard, std::span<const size_t> pieces, bool prefetch);
  struct Piece {
    size_t offset = 0, count = 0;
    bool operator==(const Piece&) const = default;
  };
  // A gathered piece's buffer, exactly its size (no data: none), in use or kept for reuse.
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
    bool used = false;
  };
  // All-gathers `p` into buffers_[buf] (the training thread while no prefetch is in flight,
  // or the communication thread).
  Result<void> GatherInto(int buf, const Piece& p);
  // Training thread: a buffer of `count` floats in slot `buf` (the kept one when it has that
  // size, else a new one, every kept buffer freed first); Free keeps a slot's buffer for
  // reuse, Drop frees it; the slot for a piece of `count` floats (one not in use, a kept
  // buffer of that size first; slot 0 without prefetch).
  float* Allocate(int buf, size_t count);
  void Free(int buf);
  void Drop(int buf);
  int FreeSlot(size_t count) const;
  // Waits for the prefetch in flight; its piece and buffer, or nullopt if none was.
  std::optional<std::pair<Piece, int>> WaitPrefetch();
  void Launch(const Piece& p, int buf);
  void Loop();

  comm::Communicator& comm_;
  const ZeroPartition partition_;
  const int rank_;
  const bool prefetch_;
  std::vector<float> shard_;
  const size_t max_piece_;         // the largest piece the model asks for
  const size_t bound_floats_;      // gather_bytes() / 4
  // The gathered pieces: the one in use (or kept for the next request) and the prefetched
  // one. A slot in flight belongs to the communication thread until WaitPrefetch.
  Buffer buffers_[2];
  size_t held_floats_ = 0, peak_floats_ = 0;  // training thread: buffers' sizes now, at most
  bool held_ = false;              // training thread: a piece is held
  int held_buf_ = -1;              // training thread: its slot
  bool keep_next_ = false;         // training thread: the next request is the held piece
  int kept_buf_ = -1;              // training thread: a released piece kept for it
  Piece kept_piece_;               // training thread
  Result<void> status_;            // training thread
  // The record of each kind of round: training thread only.
  std::map<int, std::vector<Piece>> rounds_;
  int key_ = 0;
  size_t cursor_ = 0;
  bool in_flight_ = false;  // training thread: a prefetch was launched and not yet waited for
  Piece flight_piece_;      // training thread
  int flight_buf_ = 0;      // training thread
  int64_t hits_ = 0, misses_ = 0;  // training thread
  int64_t allocations_ = 0;        // training thread
  double wait_seconds_ = 0;        // training thread

  std::mutex mu_;
  std::condition_variable cv_;
  bool job_ = false;          // guarded by mu_: a prefetch for the thread to run
  Piece job_piece_;           // guarded by mu_
  int job_buf_ = 0;           // guarded by mu_
  Result<void> job_status_;   // guarded by mu_: the last prefetch's result
  bool stop_ = false;         // guarded by mu_
  std::thread thread_;        // with prefetch
};

}  // namespace cohort::engine
