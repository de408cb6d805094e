// Small helpers shared by the CPU kernels (internal to kernels/cpu): splitting a range
// across the threads of an OpenMP team.
#pragma once

#include <algorithm>
#include <cstddef>

namespace cohort::engine::cpu {

// The half-open slice [begin, end) of [0, n) that thread `tid` of `nth` owns, with the
// boundaries rounded to multiples of `align` (the last slice takes the remainder).
// Below this many elements an elementwise kernel runs on the calling thread: waking the
// team costs more than the work.
inline constexpr size_t kParallelMinElements = size_t{1} << 14;

struct Slice {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

inline Slice SliceFor(size_t n, int tid, int nth, size_t align = 1) {
  size_t blocks = (n + align - 1) / align;
  size_t per = blocks / nth, extra = blocks % nth;
  size_t b0 = tid * per + std::min<size_t>(tid, extra);
  size_t b1 = b0 + per + (static_cast<size_t>(tid) < extra ? 1 : 0);
  return Slice{std::min(n, b0 * align), std::min(n, b1 * align)};
}

}  // namespace cohort::engine::cpu
