#include "engine/parallel/zero_grads.h"

#include <algorithm>
#include <cstring>

namespace cohort::engine {

ShardedGradients::ShardedGradients(comm::Communicator& comm, const ZeroPartition& partition,
                                   size_t max_piece, bool overlap, Pieces pieces)
    : comm_(comm),
      partition_(partition),
      rank_(comm.rank()),
      max_piece_(std::max<size_t>(1, max_piece)),
      shard_(partition.size(comm.rank())),
      caller_memory_(pieces == Pieces::kCallerMemory) {
  const bool alone = comm.size() == 1;
  const bool threaded = overlap && !alone;
  slots_.resize(caller_memory_ ? 0 : threaded ? 2 : 1);
  for (auto& s : slots_) s.resize(max_piece_);
  busy_.assign(slots_.size(), false);
  if (!alone) received_.resize(std::min(max_piece_, shard_.size()));
  // Last: the thread reads the members above.
  if (threaded) thread_ = std::thread([this] { Loop(); });
}

ShardedGradients::~ShardedGradients() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t ShardedGradients::scratch_bytes() const {
  size_t floats = received_.size();
  for (const auto& s : slots_) floats += s.size();
  return floats * sizeof(float);
}

void ShardedGradients::ZeroShard() { std::fill(shard_.begin(), shard_.end(), 0.0f); }

void ShardedGradients::Begin(size_t expected) {
  std::lock_guard lock(mu_);
  status_ = {};
  reported_ = 0;
  expected_ = expected > 0 ? expected : partition_.total;
  oversize_ = false;
}

float* ShardedGradients::Acquire(size_t offset, size_t count) {
  (void)offset;
  if (caller_memory_) {
    // Not this object's contract: a buffer of its own (the round fails in Finish).
    oversize_ = true;
    slots_.emplace_back(count);
    return slots_.back().data();
  }
  const size_t slot = static_cast<size_t>(next_slot_);
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !busy_[slot]; });
    busy_[slot] = true;
  }
  if (count > max_piece_) {
    // A model that breaks its contract: the piece is written into a buffer of its own size
    // (so nothing overflows) and the round fails in Finish.
    oversize_ = true;
    if (count > slots_[slot].size()) slots_[slot].resize(count);
  }
  return slots_[slot].data();
}

void ShardedGradients::Done(size_t offset, size_t count) {
  if (caller_memory_) return;  // Acquire's misuse, reported by Finish
  const Piece p{next_slot_, offset, count};
  next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
  Enqueue(p);
}

void ShardedGradients::Submit(const float* data, size_t offset, size_t count) {
  if (count > max_piece_) {
    // Not reduced (every rank of the group skips it alike); Finish fails the round.
    oversize_ = true;
    reported_ += count;
    return;
  }
  Enqueue(Piece{-1, offset, count, data});
}

void ShardedGradients::Enqueue(const Piece& p) {
  reported_ += p.count;
  if (!thread_.joinable()) {  // no thread: reduced here, before the next piece
    Reduce(p);
    std::lock_guard lock(mu_);
    if (p.slot >= 0) busy_[static_cast<size_t>(p.slot)] = false;
    return;
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(p);
  }
  cv_.notify_all();
}

void ShardedGradients::Reduce(const Piece& p) {
  const float* piece = p.slot < 0 ? p.data : slots_[static_cast<size_t>(p.slot)].data();
  const size_t lo = std::max(p.offset, partition_.begin(rank_));
  const size_t hi = std::min(p.offset + p.count, partition_.end(rank_));
  const float* mine = piece + (lo - p.offset);
  if (comm_.size() > 1) {
    const std::vector<size_t> counts = partition_.counts_in(p.offset, p.offset + p.count);
    Result<void> r = comm_.ReduceScatter(piece, received_.data(), counts,
                                         comm::DataType::kFloat32, comm::ReduceOp::kAvg);
    if (!r) {
      std::lock_guard lock(mu_);
      if (status_) status_ = std::unexpected(r.error());
      return;
    }
    mine = received_.data();
  }
  float* out = shard_.data();
  for (size_t i = lo; i < hi; ++i) out[i - partition_.begin(rank_)] += mine[i - lo];
}

void ShardedGradients::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Piece p = queue_.front();
    const bool failed = !status_.has_value();
    lock.unlock();
    if (!failed) Reduce(p);
    lock.lock();
    // Popped only now: Finish waits for an empty queue, so a piece is in the shard first.
    queue_.pop_front();
    if (p.slot >= 0) busy_[static_cast<size_t>(p.slot)] = false;
    cv_.notify_all();
  }
}

Result<void> ShardedGradients::Finish() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    return queue_.empty() && std::none_of(busy_.begin(), busy_.end(), [](bool b) { return b; });
  });
  if (!status_) return status_;
  if (oversize_) {
    return Errorf(ErrorCode::kInternal,
                  "ZeRO gradients: a piece was larger than {} floats or not where the pieces "
                  "were said to be ({})",
                  max_piece_, caller_memory_ ? "the caller's memory" : "this object's buffers");
  }
  if (reported_ != expected_) {
    return Errorf(ErrorCode::kInternal,
                  "ZeRO gradients: the backward pass reported {} gradient elements of {}",
                  reported_, expected_);
  }
  return {};
}

}  // namespace cohort::engine
