#include "engine/parallel/pipeline_messages.h"

#include <algorithm>
#include <new>

namespace cohort::engine {

Result<float*> HostMessageMemory::Allocate(size_t count) {
  float* p = new (std::nothrow) float[count];
  if (p == nullptr) {
    return Errorf(ErrorCode::kResourceExhausted,
                  "pipeline message buffer: cannot allocate {} floats of host memory", count);
  }
  return p;
}

void HostMessageMemory::Free(float* data) { delete[] data; }

MessagePool::~MessagePool() {
  for (Buffer& b : all_) memory_.Free(b.data);
}

Result<void> MessagePool::Reserve(size_t count) {
  if (count == 0) return MakeError(ErrorCode::kInvalidArgument, "pipeline messages of 0 floats");
  std::lock_guard lock(mu_);
  for (const Buffer& b : all_) {
    if (b.out) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "pipeline message pool: a buffer is still being sent");
    }
  }
  auto small = std::partition(all_.begin(), all_.end(),
                              [count](const Buffer& b) { return b.capacity >= count; });
  for (auto it = small; it != all_.end(); ++it) memory_.Free(it->data);
  all_.erase(small, all_.end());
  count_ = count;
  return {};
}

Result<float*> MessagePool::Take() {
  {
    std::lock_guard lock(mu_);
    for (Buffer& b : all_) {
      if (!b.out && b.capacity >= count_) {
        b.out = true;
        return b.data;
      }
    }
  }
  float* data = COHORT_TRY(memory_.Allocate(count_));
  std::lock_guard lock(mu_);
  all_.push_back({data, count_, true});
  return data;
}

void MessagePool::Give(float* data) {
  std::lock_guard lock(mu_);
  for (Buffer& b : all_) {
    if (b.data == data) b.out = false;
  }
}

size_t MessagePool::buffers() const {
  std::lock_guard lock(mu_);
  return all_.size();
}

}  // namespace cohort::engine
