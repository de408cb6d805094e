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

GatheredParams::GatheredParams(comm::Communicator& comm, const ZeroPartition& partition,
                               std::span<const float> whole, size_t max_piece, bool prefetch)
    : GatheredParams(OwnShard{}, comm, partition, ShardOf(partition, comm.rank(), whole),
                     max_piece, prefetch) {}

std::unique_ptr<GatheredParams> GatheredParams::FromShard(comm::Communicator& comm,
                                                          const ZeroPartition& partition,
                                                          std::vector<float> shard,
                                                          size_t max_piece, bool prefetch) {
  return std::unique_ptr<GatheredParams>(
      new GatheredParams(OwnShard{}, comm, partition, std::move(shard), max_piece, prefetch));
}

GatheredParams::GatheredParams(OwnShard, comm::Communicator& comm,
                               const ZeroPartition& partition, std::vector<float> shard,
                               size_t max_piece, bool prefetch)
    : comm_(comm),
      partition_(partition),
      rank_(comm.rank()),
      prefetch_(prefetch),
      shard_(std::move(shard)) {
  buffers_[0].resize(std::max<size_t>(1, max_piece));
  if (prefetch_) {
    buffers_[1].resize(buffers_[0].size());
    thread_ = std::thread([this] { Loop(); });  // last: it reads the members above
  }
  if (shard_.size() != partition_.size(rank_)) {
    status_ = Errorf(ErrorCode::kInternal, "ZeRO-3: a parameter shard of {}, want {}",
                     shard_.size(), partition_.size(rank_));
    shard_.resize(partition_.size(rank_));
  }
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
  return comm_.AllGather(mine, buffers_[buf].data(),
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

void GatheredParams::Invalidate() { (void)WaitPrefetch(); }

void GatheredParams::BeginRound(int key) {
  Invalidate();
  key_ = key;
  cursor_ = 0;
  const std::vector<Piece>& order = rounds_[key_];
  if (prefetch_ && !order.empty() && order[0].count <= buffers_[0].size() && status_) {
    Launch(order[0], 0);
  }
}

const float* GatheredParams::Gather(size_t offset, size_t count) {
  const auto t0 = std::chrono::steady_clock::now();
  if (held_ && status_) {
    status_ = MakeError(ErrorCode::kInternal,
                        "ZeRO-3: a piece gathered before the last was released");
  }
  held_ = true;
  const Piece want{offset, count};
  const auto flown = WaitPrefetch();  // the communication thread is idle from here
  if (count > buffers_[0].size()) {
    if (status_) {
      status_ = Errorf(ErrorCode::kInternal, "ZeRO-3: a piece of {} parameters, more than {}",
                       count, buffers_[0].size());
    }
    for (auto& b : buffers_) {
      if (!b.empty()) b.resize(count);
    }
  }
  // The record of this kind of round: kept if the request is the one seen here last time,
  // rewritten from here otherwise.
  std::vector<Piece>& order = rounds_[key_];
  if (cursor_ >= order.size() || !(order[cursor_] == want)) {
    order.resize(cursor_);
    order.push_back(want);
  }
  ++cursor_;
  int buf = 0;
  if (flown && flown->first == want) {
    buf = flown->second;
    ++hits_;
  } else {
    if (prefetch_) ++misses_;
    if (status_) {
      if (auto r = GatherInto(buf, want); !r) status_ = std::unexpected(r.error());
    }
  }
  if (prefetch_ && cursor_ < order.size() && order[cursor_].count <= buffers_[0].size() &&
      status_) {
    Launch(order[cursor_], 1 - buf);
  }
  wait_seconds_ += Since(t0);
  return buffers_[buf].data();
}

void GatheredParams::Release(size_t, size_t) { held_ = false; }

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
