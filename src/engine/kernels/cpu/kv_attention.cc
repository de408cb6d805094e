#include "engine/kernels/cpu/kv_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "engine/kernels/cpu/fast_math.h"

namespace cohort::engine::cpu {

void KvCacheWrite(float* k_cache, float* v_cache, const float* qkv, const KvChunk* chunks,
                  int num_chunks, int block_size, int C) {
  const size_t C3 = 3 * static_cast<size_t>(C);
  for (int c = 0; c < num_chunks; ++c) {
    const KvChunk& ch = chunks[c];
    for (int i = 0; i < ch.n; ++i) {
      const int pos = ch.start + i;
      const size_t slot =
          static_cast<size_t>(ch.blocks[pos / block_size]) * block_size + pos % block_size;
      const float* src = qkv + static_cast<size_t>(ch.row + i) * C3;
      std::memcpy(k_cache + slot * C, src + C, sizeof(float) * C);
      std::memcpy(v_cache + slot * C, src + 2 * static_cast<size_t>(C), sizeof(float) * C);
    }
  }
}

void KvAttentionForward(float* out, const float* qkv, const float* k_cache,
                        const float* v_cache, const KvChunk* chunks, int num_chunks,
                        int block_size, int C, int NH) {
  const int hs = C / NH;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Work items: (chunk row, head), longest contexts spread by dynamic scheduling.
  std::vector<std::pair<int, int>> rows;  // (chunk, i)
  int max_ctx = 0;
  for (int c = 0; c < num_chunks; ++c) {
    for (int i = 0; i < chunks[c].n; ++i) rows.emplace_back(c, i);
    max_ctx = std::max(max_ctx, chunks[c].start + chunks[c].n);
  }
  const long items = static_cast<long>(rows.size()) * NH;
#pragma omp parallel if (items > 1)
  {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
    std::vector<float> acc(static_cast<size_t>(hs));
#pragma omp for schedule(dynamic, 4)
    for (long w = 0; w < items; ++w) {
      const auto [c, i] = rows[static_cast<size_t>(w / NH)];
      const int h = static_cast<int>(w % NH);
      const KvChunk& ch = chunks[c];
      const int ctx = ch.start + i + 1;  // positions 0..start+i
      const float* q = qkv + static_cast<size_t>(ch.row + i) * C3 + static_cast<size_t>(h) * hs;
      float mx = -INFINITY;
      for (int j = 0; j < ctx; ++j) {
        const size_t slot =
            static_cast<size_t>(ch.blocks[j / block_size]) * block_size + j % block_size;
        const float* k = k_cache + slot * C + static_cast<size_t>(h) * hs;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
        scores[j] = dot * scale;
        mx = std::max(mx, scores[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j < ctx; ++j) {
        scores[j] = FastExp(scores[j] - mx);
        sum += scores[j];
      }
      const float inv = 1.0f / sum;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = 0; j < ctx; ++j) {
        const size_t slot =
            static_cast<size_t>(ch.blocks[j / block_size]) * block_size + j % block_size;
        const float* v = v_cache + slot * C + static_cast<size_t>(h) * hs;
        const float p = scores[j] * inv;
        float* a = acc.data();
#pragma omp simd
        for (int d = 0; d < hs; ++d) a[d] += p * v[d];
      }
      float* o = out + static_cast<size_t>(ch.row + i) * C + static_cast<size_t>(h) * hs;
      std::memcpy(o, acc.data(), sizeof(float) * hs);
    }
  }
}

}  // namespace cohort::engine::cpu
