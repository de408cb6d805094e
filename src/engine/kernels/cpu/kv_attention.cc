#include "engine/kernels/cpu/kv_attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "engine/kernels/cpu/fast_math.h"
#include "engine/kernels/cpu/isa.h"

namespace cohort::engine::cpu {

namespace {

// Keys in flight at once: groups of up to 16 consecutive positions of one block, four
// groups per pass (four independent fma chains hide the fma latency).
constexpr int kGroup = 16, kGroupsPerPass = 4;

struct KeyGroup {
  const float* kt;  // the block's dimension-0 row at the group's first key: kt[d·block_size + j]
  int first;        // the group's first position in the sequence
  int n;            // keys in the group (1..16)
};

// scores[g.first + j] = Σ_d q[d]·k_j[d] as one fma chain over d from 0, then · scale.
void ScoresScalar(float* scores, const float* q, const KeyGroup* groups, int count, int hs, int block_size,
                  float scale) {
  for (int g = 0; g < count; ++g) {
    for (int j = 0; j < groups[g].n; ++j) {
      float s = 0.0f;
      for (int d = 0; d < hs; ++d) s = std::fma(q[d], groups[g].kt[static_cast<size_t>(d) * block_size + j], s);
      scores[groups[g].first + j] = s * scale;
    }
  }
}

__attribute__((target("avx512f"))) void ScoresAvx512(float* scores, const float* q, const KeyGroup* groups,
                                                     int count, int hs, int block_size, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int g0 = 0; g0 < count; g0 += kGroupsPerPass) {
    const int ng = std::min(kGroupsPerPass, count - g0);
    __m512 acc[kGroupsPerPass];
    __mmask16 m[kGroupsPerPass];
#pragma GCC unroll 4
    for (int g = 0; g < kGroupsPerPass; ++g) {
      acc[g] = _mm512_setzero_ps();
      m[g] = g < ng ? static_cast<__mmask16>((1u << groups[g0 + g].n) - 1) : 0;
    }
    for (int d = 0; d < hs; ++d) {
      const __m512 x = _mm512_set1_ps(q[d]);
#pragma GCC unroll 4
      for (int g = 0; g < kGroupsPerPass; ++g) {
        if (g < ng) {
          const __m512 k = _mm512_maskz_loadu_ps(m[g], groups[g0 + g].kt + static_cast<size_t>(d) * block_size);
          acc[g] = _mm512_fmadd_ps(x, k, acc[g]);
        }
      }
    }
    for (int g = 0; g < ng; ++g) {
      _mm512_mask_storeu_ps(scores + groups[g0 + g].first, m[g], _mm512_mul_ps(acc[g], sc));
    }
  }
}

__attribute__((target("avx2,fma"))) void ScoresAvx2(float* scores, const float* q, const KeyGroup* groups,
                                                    int count, int hs, int block_size, float scale) {
  // Groups of 16 as two 8-wide halves; the partial ones through the scalar chain.
  for (int g = 0; g < count; ++g) {
    if (groups[g].n < kGroup) {
      ScoresScalar(scores, q, groups + g, 1, hs, block_size, scale);
      continue;
    }
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    const float* kt = groups[g].kt;
    for (int d = 0; d < hs; ++d) {
      const __m256 x = _mm256_set1_ps(q[d]);
      lo = _mm256_fmadd_ps(x, _mm256_loadu_ps(kt + static_cast<size_t>(d) * block_size), lo);
      hi = _mm256_fmadd_ps(x, _mm256_loadu_ps(kt + static_cast<size_t>(d) * block_size + 8), hi);
    }
    const __m256 sc = _mm256_set1_ps(scale);
    _mm256_storeu_ps(scores + groups[g].first, _mm256_mul_ps(lo, sc));
    _mm256_storeu_ps(scores + groups[g].first + 8, _mm256_mul_ps(hi, sc));
  }
}

// out[d] = Σ_j p[j]·v_j[d], one fma chain per d over j in order from 0.
void PvScalar(float* out, const float* p, const float* const* v, int ctx, int hs) {
  for (int d = 0; d < hs; ++d) out[d] = 0.0f;
  for (int j = 0; j < ctx; ++j) {
    for (int d = 0; d < hs; ++d) out[d] = std::fma(p[j], v[j][d], out[d]);
  }
}

__attribute__((target("avx512f"))) void PvAvx512(float* out, const float* p, const float* const* v, int ctx,
                                                 int hs) {
  for (int d0 = 0; d0 < hs; d0 += 4 * 16) {
    __m512 acc[4];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      acc[i] = _mm512_setzero_ps();
      const int left = hs - d0 - 16 * i;
      m[i] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    }
    for (int j = 0; j < ctx; ++j) {
      const __m512 x = _mm512_set1_ps(p[j]);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        acc[i] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m[i], v[j] + d0 + 16 * i), acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) _mm512_mask_storeu_ps(out + d0 + 16 * i, m[i], acc[i]);
  }
}

__attribute__((target("avx2,fma"))) void PvAvx2(float* out, const float* p, const float* const* v, int ctx,
                                                int hs) {
  const int vec = hs / 8 * 8;
  for (int d0 = 0; d0 < vec; d0 += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < ctx; ++j) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v[j] + d0), acc);
    _mm256_storeu_ps(out + d0, acc);
  }
  for (int d = vec; d < hs; ++d) {
    float s = 0.0f;
    for (int j = 0; j < ctx; ++j) s = std::fma(p[j], v[j][d], s);
    out[d] = s;
  }
}

const Isa kIsa = BestIsa();

// Softmax of scores[0, ctx) in place into probabilities (baseline code on every CPU: the
// same bits whatever the instruction set).
void Softmax(float* scores, int ctx) {
  float mx = -INFINITY;
  for (int j = 0; j < ctx; ++j) mx = std::max(mx, scores[j]);
  float sum = 0.0f;
  for (int j = 0; j < ctx; ++j) {
    scores[j] = FastExp(scores[j] - mx);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < ctx; ++j) scores[j] *= inv;
}

// One (query row, head): the work of KvAttentionForward for it.
struct Scratch {
  std::vector<float> scores;
  std::vector<KeyGroup> groups;
  std::vector<const float*> values;
};

void Head(Isa isa, float* o, const float* q, const float* k_cache, const float* v_cache, const int* blocks,
          int ctx, int h, int block_size, int C, int hs, float scale, Scratch& s) {
  s.groups.clear();
  s.values.resize(static_cast<size_t>(ctx));
  for (int first = 0; first < ctx;) {
    const int b = first / block_size, off = first % block_size;
    const int n = std::min({kGroup, block_size - off, ctx - first});
    const float* block_k = k_cache + static_cast<size_t>(blocks[b]) * block_size * C;
    s.groups.push_back({block_k + static_cast<size_t>(h) * hs * block_size + off, first, n});
    for (int j = 0; j < n; ++j) {
      s.values[static_cast<size_t>(first + j)] =
          v_cache + (static_cast<size_t>(blocks[b]) * block_size + off + j) * C + static_cast<size_t>(h) * hs;
    }
    first += n;
  }
  const int count = static_cast<int>(s.groups.size());
  switch (isa) {
    case Isa::kAvx512: ScoresAvx512(s.scores.data(), q, s.groups.data(), count, hs, block_size, scale); break;
    case Isa::kAvx2: ScoresAvx2(s.scores.data(), q, s.groups.data(), count, hs, block_size, scale); break;
    case Isa::kScalar: ScoresScalar(s.scores.data(), q, s.groups.data(), count, hs, block_size, scale); break;
  }
  Softmax(s.scores.data(), ctx);
  switch (isa) {
    case Isa::kAvx512: PvAvx512(o, s.scores.data(), s.values.data(), ctx, hs); break;
    case Isa::kAvx2: PvAvx2(o, s.scores.data(), s.values.data(), ctx, hs); break;
    case Isa::kScalar: PvScalar(o, s.scores.data(), s.values.data(), ctx, hs); break;
  }
}

void Forward(Isa isa, float* out, const float* qkv, const float* k_cache, const float* v_cache,
             const KvChunk* chunks, int num_chunks, int block_size, int C, int NH) {
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
  auto item = [&](long w, Scratch& s) {
    const auto [c, i] = rows[static_cast<size_t>(w / NH)];
    const int h = static_cast<int>(w % NH);
    const KvChunk& ch = chunks[c];
    const float* q = qkv + static_cast<size_t>(ch.row + i) * C3 + static_cast<size_t>(h) * hs;
    float* o = out + static_cast<size_t>(ch.row + i) * C + static_cast<size_t>(h) * hs;
    Head(isa, o, q, k_cache, v_cache, ch.blocks, ch.start + i + 1, h, block_size, C, hs, scale, s);
  };
  if (items <= 1 || omp_get_max_threads() == 1) {
    Scratch s;
    s.scores.resize(static_cast<size_t>(max_ctx));
    for (long w = 0; w < items; ++w) item(w, s);
    return;
  }
#pragma omp parallel
  {
    Scratch s;
    s.scores.resize(static_cast<size_t>(max_ctx));
#pragma omp for schedule(dynamic, 4)
    for (long w = 0; w < items; ++w) item(w, s);
  }
}

}  // namespace

void KvCacheWrite(float* k_cache, float* v_cache, const float* qkv, const KvChunk* chunks,
                  int num_chunks, int block_size, int C) {
  const size_t C3 = 3 * static_cast<size_t>(C);
  for (int c = 0; c < num_chunks; ++c) {
    const KvChunk& ch = chunks[c];
    for (int i = 0; i < ch.n; ++i) {
      const int pos = ch.start + i, off = pos % block_size;
      const size_t block = static_cast<size_t>(ch.blocks[pos / block_size]);
      const float* src = qkv + static_cast<size_t>(ch.row + i) * C3;
      float* kt = k_cache + block * block_size * C + off;  // the key as a column of its block
      for (int d = 0; d < C; ++d) kt[static_cast<size_t>(d) * block_size] = src[C + d];
      std::memcpy(v_cache + (block * block_size + off) * C, src + 2 * static_cast<size_t>(C), sizeof(float) * C);
    }
  }
}

void KvAttentionForward(float* out, const float* qkv, const float* k_cache,
                        const float* v_cache, const KvChunk* chunks, int num_chunks,
                        int block_size, int C, int NH) {
  Forward(kIsa, out, qkv, k_cache, v_cache, chunks, num_chunks, block_size, C, NH);
}

bool KvAttentionForwardOn(std::string_view isa, float* out, const float* qkv, const float* k_cache,
                          const float* v_cache, const KvChunk* chunks, int num_chunks, int block_size, int C,
                          int NH) {
  const std::optional<Isa> chosen = NamedIsa(isa);
  if (!chosen) return false;
  Forward(*chosen, out, qkv, k_cache, v_cache, chunks, num_chunks, block_size, C, NH);
  return true;
}

}  // namespace cohort::engine::cpu
