#include "engine/parallel/zero_params.h"

#include <algorithm>

namespace cohort::engine {

GatheredParams::GatheredParams(comm::Communicator& comm, const ZeroPartition& partition,
                               std::span<const float> whole, size_t max_piece)
    : comm_(comm),
      partition_(partition),
      rank_(comm.rank()),
      shard_(whole.begin() + static_cast<std::ptrdiff_t>(partition.begin(comm.rank())),
             whole.begin() + static_cast<std::ptrdiff_t>(partition.end(comm.rank()))),
      buffer_(std::max<size_t>(1, max_piece)) {}

const float* GatheredParams::Gather(size_t offset, size_t count) {
  if (held_ && status_) {
    status_ = MakeError(ErrorCode::kInternal,
                        "ZeRO-3: a piece gathered before the last was released");
  }
  held_ = true;
  if (count > buffer_.size()) {
    if (status_) {
      status_ = Errorf(ErrorCode::kInternal, "ZeRO-3: a piece of {} parameters, more than {}",
                       count, buffer_.size());
    }
    buffer_.resize(count);
  }
  // Every rank's part of the piece into the buffer, in rank order (the parts are contiguous
  // and in order: the piece). The shard is not the buffer, so it is sent as it is.
  const size_t lo = std::min(std::max(offset, partition_.begin(rank_)), partition_.end(rank_));
  const float* mine = shard_.data() + (lo - partition_.begin(rank_));
  if (status_) {
    auto r = comm_.AllGather(mine, buffer_.data(), partition_.counts_in(offset, offset + count),
                             comm::DataType::kFloat32);
    if (!r) status_ = std::unexpected(r.error());
  }
  return buffer_.data();
}

void GatheredParams::Release(size_t, size_t) { held_ = false; }

Result<void> GatheredParams::TakeError() {
  Result<void> r = std::move(status_);
  status_ = {};
  return r;
}

Result<std::vector<float>> GatheredParams::GatherAll() {
  std::vector<float> all(partition_.total);
  COHORT_TRY_VOID(comm_.AllGather(shard_.data(), all.data(), partition_.counts(),
                                  comm::DataType::kFloat32));
  return all;
}

}  // namespace cohort::engine
