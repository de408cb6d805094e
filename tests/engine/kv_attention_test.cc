// The serving attention over the block cache (kernels/cpu/kv_attention.h): its values are
// causal softmax attention's, and a (row, head)'s bits do not depend on the chunk or batch
// it comes in, the threads or the instruction set.
#include "engine/kernels/cpu/kv_attention.h"
#include "normal_random.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace cohort::engine::cpu {
namespace {

using testing::NormalRandom;

struct Shape {
  int C, NH, block_size;
};

// One sequence of `len` positions, qkv rows given, stored through a shuffled block table.
struct Sequence {
  int len;
  std::vector<float> qkv;  // (len, 3C)
  std::vector<int> blocks;
};

class KvAttention : public ::testing::TestWithParam<Shape> {
 protected:
  static constexpr int kBlocks = 256;  // enough for 161 positions in blocks of 1
  void SetUp() override {
    const auto [C, NH, bs] = GetParam();
    k_.assign(static_cast<size_t>(kBlocks) * bs * C, 0.0f);
    v_.assign(k_.size(), 0.0f);
    free_.resize(kBlocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(5));
  }
  Sequence Make(int len, uint32_t seed) {
    const auto [C, NH, bs] = GetParam();
    Sequence s{len, NormalRandom(static_cast<size_t>(len) * 3 * C, seed), {}};
    for (int b = 0; b < (len + bs - 1) / bs; ++b) {
      EXPECT_FALSE(free_.empty()) << "the test's cache is too small";
      if (free_.empty()) break;
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    return s;
  }
  // Runs positions [from, to) of each sequence as one step (a chunk each), after their
  // earlier positions were written; returns the step's output rows.
  std::vector<float> Step(const std::vector<Sequence*>& seqs, const std::vector<std::pair<int, int>>& ranges,
                          const char* isa = nullptr) {
    const auto [C, NH, bs] = GetParam();
    std::vector<KvChunk> chunks;
    std::vector<float> qkv;
    int row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto [from, to] = ranges[i];
      chunks.push_back({row, to - from, from, seqs[i]->blocks.data()});
      qkv.insert(qkv.end(), seqs[i]->qkv.begin() + static_cast<size_t>(from) * 3 * C,
                 seqs[i]->qkv.begin() + static_cast<size_t>(to) * 3 * C);
      row += to - from;
    }
    std::vector<float> out(static_cast<size_t>(row) * C, -1.0f);
    KvCacheWrite(k_.data(), v_.data(), qkv.data(), chunks.data(), static_cast<int>(chunks.size()), bs, C);
    if (isa == nullptr) {
      KvAttentionForward(out.data(), qkv.data(), k_.data(), v_.data(), chunks.data(), static_cast<int>(chunks.size()),
                         bs, C, NH);
    } else if (!KvAttentionForwardOn(isa, out.data(), qkv.data(), k_.data(), v_.data(), chunks.data(),
                                     static_cast<int>(chunks.size()), bs, C, NH)) {
      return {};
    }
    return out;
  }
  std::vector<float> k_, v_;
  std::vector<int> free_;
};

TEST_P(KvAttention, ValuesAreCausalSoftmaxAttention) {
  const auto [C, NH, bs] = GetParam();
  const int hs = C / NH;
  for (int len : {1, 7, bs + 1, 3 * bs + 5, 161}) {
    SetUp();
    Sequence s = Make(len, 11 + len);
    const std::vector<float> out = Step({&s}, {{0, len}});
    for (int t = 0; t < len; ++t) {
      for (int h = 0; h < NH; ++h) {
        const float* q = s.qkv.data() + static_cast<size_t>(t) * 3 * C + h * hs;
        std::vector<double> w(static_cast<size_t>(t) + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          const float* k = s.qkv.data() + static_cast<size_t>(j) * 3 * C + C + h * hs;
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += static_cast<double>(q[d]) * k[d];
          w[j] = dot / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, w[j]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hs; ++d) {
          double want = 0;
          for (int j = 0; j <= t; ++j) want += w[j] / sum * s.qkv[static_cast<size_t>(j) * 3 * C + 2 * C + h * hs + d];
          ASSERT_NEAR(out[static_cast<size_t>(t) * C + h * hs + d], want, 2e-5 * (1 + std::fabs(want)))
              << "len " << len << " position " << t << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST_P(KvAttention, ARowHasTheSameBitsDecodedOrPrefilledInAnyBatchThreadsAndIsa) {
  const auto [C, NH, bs] = GetParam();
  const int len = 2 * bs + 9;
  // The sequence prefilled in one chunk, alone.
  Sequence a = Make(len, 3);
  const std::vector<float> whole = Step({&a}, {{0, len}});
  // The same tokens read one position at a time (decoding), beside two other sequences
  // in every step, on 1 to 3 threads.
  SetUp();
  Sequence b = Make(len, 3), x = Make(len, 4), y = Make(len, 5);
  for (int t = 0; t < len; ++t) {
    omp_set_num_threads(1 + t % 3);
    const std::vector<float> out = Step({&x, &b, &y}, {{t, t + 1}, {t, t + 1}, {t, t + 1}});
    ASSERT_EQ(std::memcmp(out.data() + C, whole.data() + static_cast<size_t>(t) * C, sizeof(float) * C), 0)
        << "position " << t;
  }
  omp_set_num_threads(1);
  // In uneven chunks, each instruction set this CPU has.
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    SetUp();
    Sequence c = Make(len, 3);
    int ran = 0;
    for (int from = 0; from < len;) {
      const int to = std::min(len, from + 1 + from % 5);
      const std::vector<float> out = Step({&c}, {{from, to}}, isa);
      if (out.empty()) break;
      ran = to;
      ASSERT_EQ(std::memcmp(out.data(), whole.data() + static_cast<size_t>(from) * C,
                            sizeof(float) * C * (to - from)), 0)
          << isa << ": positions " << from << ".." << to - 1;
      from = to;
    }
    EXPECT_TRUE(ran == 0 || ran == len) << isa;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvAttention,
                         // The serving model's heads (hs 64, blocks of 16); odd head sizes
                         // (15, 96: a masked and a second vector pass); blocks of 1, 5 and 64.
                         ::testing::Values(Shape{384, 6, 16}, Shape{30, 2, 5}, Shape{96, 1, 16}, Shape{64, 4, 1},
                                           Shape{128, 2, 64}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "C" + std::to_string(info.param.C) + "_NH" + std::to_string(info.param.NH) +
                                  "_B" + std::to_string(info.param.block_size);
                         });

}  // namespace
}  // namespace cohort::engine::cpu
