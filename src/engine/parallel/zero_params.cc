#include "engine/parallel/zero_params.h"

#include <algorithm>
#include <chrono>

namespace cohort::engine {
namespace {

std::vector<float> ShardOf(const ZeroPartition& p, int rank, std::span<const float> whole) {
  return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(p.begin(rank)),
                            whole.begin() + static_cast<std::ptrdiff_t>(p.end(rank)));
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

size_t GatherBound(std::span<const size_t> sizes, bool prefetch) {
  size_t first = 0, second = 0;
  for (size_t s : sizes) {
    if (s > first) {
      second = first;
      first = s;
    } else if (s > second) {
      second = s;
    }
  }
  return prefetch ? first + second : first;
}

GatheredParams::GatheredParams(comm::Communicator& comm, const ZeroPartition& partition,
                               std::span<const float> whole, std::span<const size_t> pieces,
                               bool prefetch)
    : GatheredParams(OwnShard{}, comm, partition, ShardOf(partition, comm.rank(), whole), pieces,
                     prefetch) {}

std::unique_ptr<GatheredParams> GatheredParams::FromShard(comm::Communicator& comm,
                                                          const ZeroPartition& partition,
                                                          std::vector<float> shard,
                                                          std::span<const size_t> pieces,
                                                          bool prefetch) {
  return std::unique_ptr<GatheredParams>(
      new GatheredParams(OwnShard{}, comm, partition, std::move(shard), pieces, prefetch));
}

GatheredParams::GatheredParams(OwnShard, comm::Communicator& comm,
                               const ZeroPartition& partition, std::vector<float> shard,
                               std::span<const size_t> pieces, bool prefetch)
    : comm_(comm),
      partition_(partition),
      rank_(comm.rank()),
      prefetch_(prefetch),
      shard_(std::move(shard)),
      max_piece_(std::max<size_t>(1, GatherBound(pieces, false))),
      bound_floats_(GatherBound(pieces, prefetch)) {
  if (prefetch_) thread_ = std::thread([this] { Loop(); });  // last: it reads the members above
  if (shard_.size() != partition_.size(rank_)) {
    status_ = Errorf(ErrorCode::kInternal, "ZeRO-3: a parameter shard of {}, want {}",
                     shard_.size(), partition_.size(rank_));
    shard_.resize(partition_.size(rank_));
  }
}

float* GatheredParams::Allocate(int buf, size_t count) {
  Buffer& b = buffers_[buf];
  if (b.data && !b.used && b.size == count) {
    // A buffer of this size kept from an earlier piece: no allocation, no page faults.
    b.used = true;
    return b.data.get();
  }
  // Every kept buffer goes before a new one comes, so that what is held is never more than
  // the pieces in use and the one allocated.
  for (int i = 0; i < 2; ++i) {
    if (!buffers_[i].used) Drop(i);
  }
  // Not zeroed: the all-gather writes every value.
  b.data = std::make_unique_for_overwrite<float[]>(std::max<size_t>(1, count));
  b.size = count;
  b.used = true;
  ++allocations_;
  held_floats_ += count;
  peak_floats_ = std::max(peak_floats_, held_floats_);
  return b.data.get();
}

void GatheredParams::Free(int buf) { buffers_[buf].used = false; }

void GatheredParams::Drop(int buf) {
  Buffer& b = buffers_[buf];
  held_floats_ -= b.size;
  b.data.reset();
  b.size = 0;
  b.used = false;
}

int GatheredParams::FreeSlot(size_t count) const {
  if (!prefetch_) return 0;  // one buffer at a time
  for (int i = 0; i < 2; ++i) {
    if (!buffers_[i].used && buffers_[i].data && buffers_[i].size == count) return i;
  }
  return buffers_[0].used ? 1 : 0;
}

GatheredParams::~GatheredParams() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<void> GatheredParams::GatherInto(int buf, const Piece& p) {
  // Every rank's part of the piece into the buffer, in rank order (the parts are contiguous
  // and in order: the piece). The shard is not the buffer, so it is sent as it is.
  const size_t lo =
      std::min(std::max(p.offset, partition_.begin(rank_)), partition_.end(rank_));
  const float* mine = shard_.data() + (lo - partition_.begin(rank_));
  return comm_.AllGather(mine, buffers_[buf].data.get(),
                         partition_.counts_in(p.offset, p.offset + p.count),
                         comm::DataType::kFloat32);
}

void GatheredParams::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_; });
    if (stop_) return;
    const Piece p = job_piece_;
    const int buf = job_buf_;
    lock.unlock();
    Result<void> r = GatherInto(buf, p);
    lock.lock();
    job_status_ = std::move(r);
    job_ = false;
    cv_.notify_all();
  }
}

void GatheredParams::Launch(const Piece& p, int buf) {
  {
    std::lock_guard lock(mu_);
    job_ = true;
    job_piece_ = p;
    job_buf_ = buf;
  }
  cv_.notify_all();
  in_flight_ = true;
  flight_piece_ = p;
  flight_buf_ = buf;
}

std::optional<std::pair<GatheredParams::Piece, int>> GatheredParams::WaitPrefetch() {
  if (!in_flight_) return std::nullopt;
  in_flight_ = false;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !job_; });
  if (!job_status_ && status_) status_ = std::unexpected(job_status_.error());
  job_status_ = {};
  return std::make_pair(flight_piece_, flight_buf_);
}

void GatheredParams::Invalidate() {
  if (const auto flown = WaitPrefetch()) Free(flown->second);
  if (kept_buf_ >= 0) Free(kept_buf_);
  kept_buf_ = -1;
  keep_next_ = false;
}

void GatheredParams::BeginRound(int key) {
  Invalidate();
  key_ = key;
  cursor_ = 0;
  const std::vector<Piece>& order = rounds_[key_];
  if (prefetch_ && !order.empty() && order[0].count <= max_piece_ && status_) {
    const int buf = FreeSlot(order[0].count);
    Allocate(buf, order[0].count);
    Launch(order[0], buf);
  }
}

const float* GatheredParams::Gather(size_t offset, size_t count) {
  const auto t0 = std::chrono::steady_clock::now();
  if (held_ && status_) {
    status_ = MakeError(ErrorCode::kInternal,
                        "ZeRO-3: a piece gathered before the last was released");
  }
  if (held_) Release(offset, count);  // the model broke the contract: the buffer goes
  held_ = true;
  const Piece want{offset, count};
  const auto flown = WaitPrefetch();  // the communication thread is idle from here
  if (count > max_piece_ && status_) {
    // Gathered all the same (the buffer is the piece's size): the round fails in TakeError.
    status_ = Errorf(ErrorCode::kInternal, "ZeRO-3: a piece of {} parameters, more than {}",
                     count, max_piece_);
  }
  // The record of this kind of round: kept if the request is the one seen here last time,
  // rewritten from here otherwise.
  std::vector<Piece>& order = rounds_[key_];
  if (cursor_ >= order.size() || !(order[cursor_] == want)) {
    order.resize(cursor_);
    order.push_back(want);
  }
  ++cursor_;
  int buf = -1;
  if (kept_buf_ >= 0 && kept_piece_ == want) {
    buf = kept_buf_;  // released just before: still in its buffer
    if (prefetch_) ++hits_;
  } else if (flown && flown->first == want) {
    buf = flown->second;
    ++hits_;
  }
  // What this request does not use goes: a kept piece or a prefetch it did not ask for.
  if (kept_buf_ >= 0 && kept_buf_ != buf) Free(kept_buf_);
  if (flown && flown->second != buf) Free(flown->second);
  kept_buf_ = -1;
  if (buf < 0) {
    if (prefetch_) ++misses_;
    buf = FreeSlot(count);
    Allocate(buf, count);
    if (status_) {
      if (auto r = GatherInto(buf, want); !r) status_ = std::unexpected(r.error());
    }
  }
  held_buf_ = buf;
  // The next recorded request: the same piece is kept on Release; another is prefetched.
  keep_next_ = cursor_ < order.size() && order[cursor_] == want;
  if (prefetch_ && !keep_next_ && cursor_ < order.size() && order[cursor_].count <= max_piece_ &&
      status_) {
    const int next = 1 - buf;
    Allocate(next, order[cursor_].count);
    Launch(order[cursor_], next);
  }
  wait_seconds_ += Since(t0);
  return buffers_[buf].data.get();
}

void GatheredParams::Release(size_t, size_t) {
  if (!held_) return;
  held_ = false;
  if (keep_next_) {
    kept_buf_ = held_buf_;
    kept_piece_ = rounds_[key_][cursor_ - 1];
  } else {
    Free(held_buf_);
  }
  keep_next_ = false;
  held_buf_ = -1;
}

Result<void> GatheredParams::TakeError() {
  Result<void> r = std::move(status_);
  status_ = {};
  return r;
}

Result<std::vector<float>> GatheredParams::GatherAll() {
  Invalidate();
  std::vector<float> all(partition_.total);
  COHORT_TRY_VOID(comm_.AllGather(shard_.data(), all.data(), partition_.counts(),
                                  comm::DataType::kFloat32));
  return all;
}

}  // namespace cohort::engine
