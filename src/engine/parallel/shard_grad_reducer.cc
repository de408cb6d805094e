#include "engine/parallel/shard_grad_reducer.h"

#include <algorithm>
#include <utility>

namespace cohort::engine {

ShardGradReducer::ShardGradReducer(std::span<float> grads, ShardGradPiece tied,
                                   comm::Communicator* embedding, comm::Communicator* data)
    : grads_(grads), tied_(tied), embedding_(embedding), data_(data) {}

ShardGradReducer::~ShardGradReducer() = default;

Result<std::unique_ptr<ShardGradReducer>> ShardGradReducer::Create(
    std::span<float> grads, ShardGradPiece tied, comm::Communicator* embedding,
    comm::Communicator* data, bool overlap, size_t bucket_bytes,
    DdpReducer::WaitReadyFn wait_ready, DdpReducer::ReducedFn reduced) {
  const size_t n = grads.size();
  if (tied.offset > n || tied.count > n - tied.offset) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "gradient reduction: the tied embedding copy [{}, {}) lies outside the {} "
                  "gradients",
                  tied.offset, tied.offset + tied.count, n);
  }
  std::unique_ptr<ShardGradReducer> r(new ShardGradReducer(grads, tied, embedding, data));
  if (!overlap || data == nullptr || data->size() < 2) return r;
  if (tied.count == 0) {
    r->lo_ = 0;
    r->hi_ = n;
  } else if (tied.offset == 0) {
    r->lo_ = tied.count;
    r->hi_ = n;
  } else if (tied.offset + tied.count == n) {
    r->lo_ = 0;
    r->hi_ = tied.offset;
  } else {
    return Errorf(ErrorCode::kInvalidArgument,
                  "gradient reduction: the tied embedding copy [{}, {}) is at neither end of "
                  "the {} gradients, so the overlapped buckets cannot leave it out",
                  tied.offset, tied.offset + tied.count, n);
  }
  if (r->hi_ == r->lo_) return r;  // nothing but the tied copy: reduced at the end
  const size_t lo = r->lo_;
  DdpReducer::WaitReadyFn wait;
  if (wait_ready) {
    wait = [lo, fn = std::move(wait_ready)](size_t offset, size_t count) {
      return fn(lo + offset, count);
    };
  }
  DdpReducer::ReducedFn done;
  if (reduced) {
    done = [lo, fn = std::move(reduced)](size_t offset, size_t count) {
      return fn(lo + offset, count);
    };
  }
  r->ddp_ = std::make_unique<DdpReducer>(*data, grads.subspan(lo, r->hi_ - lo), bucket_bytes,
                                         std::move(wait), std::move(done));
  return r;
}

void ShardGradReducer::Begin() {
  overlapped_ = 0;
  if (ddp_) ddp_->Begin();
}

void ShardGradReducer::Ready(size_t offset, size_t count) {
  if (!ddp_) return;
  const size_t lo = std::max(offset, lo_), hi = std::min(offset + count, hi_);
  if (lo >= hi) return;
  overlapped_ = ddp_->buckets_issued();
  ddp_->GradReady(lo - lo_, hi - lo);
}

Result<void> ShardGradReducer::Finish(const std::function<Result<void>()>& wait_all) {
  if (ddp_) COHORT_TRY_VOID(ddp_->Finish());
  if (embedding_ == nullptr && data_ == nullptr) return {};
  COHORT_TRY_VOID(wait_all());
  if (embedding_ != nullptr && tied_.count > 0) {
    float* g = grads_.data() + tied_.offset;
    COHORT_TRY_VOID(
        embedding_->AllReduce(g, g, tied_.count, comm::DataType::kFloat32, comm::ReduceOp::kSum));
  }
  if (data_ == nullptr) return {};
  // What the buckets did not average: the tied copy with overlap, everything without.
  const std::span<float> rest = ddp_ ? grads_.subspan(tied_.offset, tied_.count) : grads_;
  if (rest.empty()) return {};
  return data_->AllReduce(rest.data(), rest.data(), rest.size(), comm::DataType::kFloat32,
                          comm::ReduceOp::kAvg);
}

void ShardGradReducer::Abandon() {
  if (ddp_) (void)ddp_->Finish();
}

}  // namespace cohort::engine
