// The serving product (kernels/cpu/invariant_matmul.h): a row's bits do not depend on the
// batch it comes in, and the values are those of the BLAS product.
#include "engine/kernels/cpu/invariant_matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/cpu/matmul.h"
#include "normal_random.h"

namespace cohort::engine::cpu {
namespace {

using testing::NormalRandom;

// Shapes with every edge: C not a multiple of the lanes, OC not a multiple of the tiles
// or of the column blocks.
struct Shape {
  int C, OC;
};

class RowInvariance : public ::testing::TestWithParam<Shape> {};

TEST_P(RowInvariance, ARowHasTheSameBitsInAnyBatchAndThreadCount) {
  const auto [C, OC] = GetParam();
  const RowInvariantWeights w = PackRowInvariantWeights(NormalRandom(static_cast<size_t>(OC) * C, 1).data(), OC, C);
  const std::vector<float> bias = NormalRandom(OC, 2);
  const std::vector<float> row = NormalRandom(C, 3);
  std::vector<float> alone(OC);
  MatmulForwardRowInvariant(alone.data(), row.data(), w, bias.data(), 1);
  // The vector width never shows in the bits: every instruction set this CPU has, on a
  // batch with the row in the middle.
  const int n = 13;
  std::vector<float> batch = NormalRandom(static_cast<size_t>(n) * C, 7);
  std::memcpy(batch.data() + 6 * static_cast<size_t>(C), row.data(), C * sizeof(float));
  int isas = 0;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    std::vector<float> out(static_cast<size_t>(n) * OC);
    if (!MatmulForwardRowInvariantOn(isa, out.data(), batch.data(), w, bias.data(), n)) continue;
    ++isas;
    ASSERT_EQ(std::memcmp(out.data() + 6 * static_cast<size_t>(OC), alone.data(), OC * sizeof(float)), 0)
        << isa << " against " << RowInvariantMatmulIsa();
  }
  EXPECT_GE(isas, 1);
  // Every batch size up to 33 (each tile of 6, 4, 2 and 1 rows and their mixes), and
  // more; `row` at the first, a middle and the last position.
  for (int n = 2; n <= 40; n += n < 33 ? 1 : 7) {
    for (int threads : {1, 2, 3}) {
      for (int at : {0, n / 2, n - 1}) {
        std::vector<float> batch = NormalRandom(static_cast<size_t>(n) * C, 10 + n);
        std::memcpy(batch.data() + static_cast<size_t>(at) * C, row.data(), C * sizeof(float));
        std::vector<float> out(static_cast<size_t>(n) * OC);
        omp_set_num_threads(threads);
        MatmulForwardRowInvariant(out.data(), batch.data(), w, bias.data(), n);
        ASSERT_EQ(std::memcmp(out.data() + static_cast<size_t>(at) * OC, alone.data(), OC * sizeof(float)), 0)
            << "C " << C << " OC " << OC << ": row " << at << " of " << n << " on " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(1);
}

// The definition itself: each output is the one fma chain over k in order from zero, then
// + bias, whatever tile of rows and panels computed it (a kernel that split the sum over k,
// or reordered it, would differ in the last bits here).
TEST_P(RowInvariance, EachOutputIsOneFmaChainOverKInOrder) {
  const auto [C, OC] = GetParam();
  const std::vector<float> w = NormalRandom(static_cast<size_t>(OC) * C, 21), bias = NormalRandom(OC, 22);
  const RowInvariantWeights packed = PackRowInvariantWeights(w.data(), OC, C);
  EXPECT_EQ(packed.C(), C);
  EXPECT_EQ(packed.OC(), OC);
  for (int n : {1, 6, 8, 11, 32}) {
    const std::vector<float> inp = NormalRandom(static_cast<size_t>(n) * C, 23 + n);
    std::vector<float> want(static_cast<size_t>(n) * OC);
    for (int r = 0; r < n; ++r) {
      for (int o = 0; o < OC; ++o) {
        float s = 0.0f;
        for (int k = 0; k < C; ++k) s = std::fma(inp[static_cast<size_t>(r) * C + k], w[static_cast<size_t>(o) * C + k], s);
        want[static_cast<size_t>(r) * OC + o] = s + bias[o];
      }
    }
    for (const char* isa : {"avx512", "avx2", "scalar"}) {
      std::vector<float> got(want.size(), -1.0f);
      if (!MatmulForwardRowInvariantOn(isa, got.data(), inp.data(), packed, bias.data(), n)) continue;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << isa << " C " << C << " OC " << OC << " n " << n << ": output (" << i / OC << ", " << i % OC
            << ") is " << got[i] << ", the chain gives " << want[i];
      }
    }
  }
}

TEST_P(RowInvariance, ValuesAreTheBlasProducts) {
  const auto [C, OC] = GetParam();
  for (int n : {1, 7, 32}) {
    SCOPED_TRACE("n " + std::to_string(n));
  const std::vector<float> w = NormalRandom(static_cast<size_t>(OC) * C, 4), bias = NormalRandom(OC, 5);
  const RowInvariantWeights wt = PackRowInvariantWeights(w.data(), OC, C);
  const std::vector<float> inp = NormalRandom(static_cast<size_t>(n) * C, 6);
  std::vector<float> got(static_cast<size_t>(n) * OC), blas(got.size()), no_bias(got.size());
  MatmulForwardRowInvariant(got.data(), inp.data(), wt, bias.data(), n);
  MatmulForward(blas.data(), inp.data(), w.data(), bias.data(), n, C, OC);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], blas[i], 1e-4f * (1 + std::fabs(blas[i]))) << i;
  }
  MatmulForwardRowInvariant(no_bias.data(), inp.data(), wt, nullptr, n);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(no_bias[i] + bias[i % OC], got[i], 1e-4f * (1 + std::fabs(got[i])));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RowInvariance,
                         // The serving model's products (qkv, projection, MLP up and down, the
                         // byte-vocabulary head); a panel and one column; an odd panel count.
                         ::testing::Values(Shape{64, 192}, Shape{37, 13}, Shape{5, 3}, Shape{100, 131},
                                           Shape{384, 1152}, Shape{384, 384}, Shape{384, 1536},
                                           Shape{1536, 384}, Shape{384, 256}, Shape{48, 33}, Shape{16, 65}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "C" + std::to_string(info.param.C) + "_OC" + std::to_string(info.param.OC);
                         });

}  // namespace
}  // namespace cohort::engine::cpu
