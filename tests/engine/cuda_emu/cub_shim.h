// A host stand-in for the cub calls the kernels make (gen_cuda_emu.py includes it in place of
// <cub/...>; g++ cannot compile cub itself). DeviceRadixSort::SortPairs is cub's contract on
// host memory: the size query (temp storage null) answers a few bytes, and the sort is a
// stable sort of (key, value) pairs by the key bits [begin_bit, end_bit). It checks nothing
// about cub: the kernels around it are what the emulator runs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, int n, int begin_bit = 0,
                               int end_bit = static_cast<int>(sizeof(K) * 8),
                               cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 16;
      return cudaSuccess;
    }
    if (temp_bytes < 16 || n < 0) return cudaErrorInvalidValue;
    auto bits = [&](K k) {
      unsigned long long u = static_cast<unsigned long long>(k) >> begin_bit;
      const int width = end_bit - begin_bit;
      return width >= 64 ? u : (u & ((1ull << width) - 1));
    };
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return bits(keys_in[a]) < bits(keys_in[b]); });
    std::vector<K> k(static_cast<size_t>(n));
    std::vector<V> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      k[i] = keys_in[order[i]];
      v[i] = values_in[order[i]];
    }
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
    return cudaSuccess;
  }
};

}  // namespace cub
