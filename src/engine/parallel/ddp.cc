#include "engine/parallel/ddp.h"

#include <algorithm>
#include <utility>

namespace cohort::engine {

DdpReducer::DdpReducer(comm::Communicator& comm, std::span<float> grads, size_t bucket_bytes,
                       WaitReadyFn wait_ready, ReducedFn reduced)
    : comm_(comm),
      grads_(grads),
      wait_ready_(std::move(wait_ready)),
      reduced_(std::move(reduced)) {
  const size_t per = std::max<size_t>(1, bucket_bytes / sizeof(float));
  for (size_t end = grads_.size(); end > 0;) {
    const size_t begin = end > per ? end - per : 0;
    buckets_.push_back({begin, end, end - begin});
    end = begin;
  }
  // Last: the thread reads the members above.
  if (comm_.size() > 1) thread_ = std::thread([this] { Loop(); });
}

DdpReducer::~DdpReducer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DdpReducer::Begin() {
  std::lock_guard lock(mu_);
  for (auto& b : buckets_) b.pending = b.end - b.begin;
  next_to_issue_ = 0;
  done_ = 0;
  status_ = {};
  queue_.clear();
}

void DdpReducer::GradReady(size_t offset, size_t count) {
  if (comm_.size() == 1) return;
  const size_t end = std::min(offset + count, grads_.size());
  std::lock_guard lock(mu_);
  // Buckets are sorted by descending offset; visit those overlapping [offset, end).
  for (auto& b : buckets_) {
    if (b.end <= offset) break;
    if (b.begin >= end) continue;
    const size_t lo = std::max(b.begin, offset), hi = std::min(b.end, end);
    b.pending -= std::min(b.pending, hi - lo);
  }
  Issue();
}

void DdpReducer::Issue() {
  bool pushed = false;
  while (next_to_issue_ < buckets_.size() && buckets_[next_to_issue_].pending == 0) {
    queue_.push_back(next_to_issue_++);
    pushed = true;
  }
  if (pushed) cv_.notify_all();
}

void DdpReducer::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t index = queue_.front();
    queue_.pop_front();
    const bool failed = !status_.has_value();
    lock.unlock();
    Result<void> r;
    if (!failed) {
      const Bucket& b = buckets_[index];
      // Pointer arithmetic only: the elements may be device memory.
      float* data = grads_.data() + b.begin;
      if (wait_ready_) r = wait_ready_(b.begin, b.end - b.begin);
      if (r) {
        r = comm_.AllReduce(data, data, b.end - b.begin, comm::DataType::kFloat32,
                            comm::ReduceOp::kAvg);
      }
      if (r && reduced_) r = reduced_(b.begin, b.end - b.begin);
    }
    lock.lock();
    if (!r && status_) status_ = std::unexpected(r.error());
    ++done_;
    cv_.notify_all();
  }
}

Result<void> DdpReducer::Finish() {
  if (comm_.size() == 1) return {};
  std::unique_lock lock(mu_);
  if (next_to_issue_ < buckets_.size()) {
    size_t missing = 0;
    for (const auto& b : buckets_) missing += b.pending;
    // Let the issued buckets drain so the communicator is idle before returning.
    cv_.wait(lock, [&] { return done_ == next_to_issue_; });
    return Errorf(ErrorCode::kFailedPrecondition,
                  "data-parallel reduction: {} gradient elements were never reported final",
                  missing);
  }
  cv_.wait(lock, [&] { return done_ == buckets_.size(); });
  return status_;
}

}  // namespace cohort::engine
