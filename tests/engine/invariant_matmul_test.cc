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

namespace cohort::engine::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Shapes with every edge: C not a multiple of the lanes, OC not a multiple of the tiles
// or of the column blocks.
struct Shape {
  int C, OC;
};

class RowInvariance : public ::testing::TestWithParam<Shape> {};

TEST_P(RowInvariance, ARowHasTheSameBitsInAnyBatchAndThreadCount) {
  const auto [C, OC] = GetParam();
  const std::vector<float> w = TransposeWeights(Random(static_cast<size_t>(OC) * C, 1).data(), OC, C);
  const std::vector<float> bias = Random(OC, 2);
  const std::vector<float> row = Random(C, 3);
  std::vector<float> alone(OC);
  MatmulForwardRowInvariant(alone.data(), row.data(), w.data(), bias.data(), 1, C, OC);
  // The vector width never shows in the bits: every instruction set this CPU has, on a
  // batch with the row in the middle.
  const int n = 13;
  std::vector<float> batch = Random(static_cast<size_t>(n) * C, 7);
  std::memcpy(batch.data() + 6 * static_cast<size_t>(C), row.data(), C * sizeof(float));
  int isas = 0;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    std::vector<float> out(static_cast<size_t>(n) * OC);
    if (!MatmulForwardRowInvariantOn(isa, out.data(), batch.data(), w.data(), bias.data(), n, C, OC)) continue;
    ++isas;
    ASSERT_EQ(std::memcmp(out.data() + 6 * static_cast<size_t>(OC), alone.data(), OC * sizeof(float)), 0)
        << isa << " against " << RowInvariantMatmulIsa();
  }
  EXPECT_GE(isas, 1);
  for (int n : {2, 3, 4, 5, 8, 13, 32}) {
    for (int threads : {1, 2, 3}) {
      // `row` at every position of a batch of n rows of other values.
      for (int at : {0, n / 2, n - 1}) {
        std::vector<float> batch = Random(static_cast<size_t>(n) * C, 10 + n);
        std::memcpy(batch.data() + static_cast<size_t>(at) * C, row.data(), C * sizeof(float));
        std::vector<float> out(static_cast<size_t>(n) * OC);
        omp_set_num_threads(threads);
        MatmulForwardRowInvariant(out.data(), batch.data(), w.data(), bias.data(), n, C, OC);
        ASSERT_EQ(std::memcmp(out.data() + static_cast<size_t>(at) * OC, alone.data(), OC * sizeof(float)), 0)
            << "C " << C << " OC " << OC << ": row " << at << " of " << n << " on " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(1);
}

TEST_P(RowInvariance, ValuesAreTheBlasProducts) {
  const auto [C, OC] = GetParam();
  const int n = 7;
  const std::vector<float> w = Random(static_cast<size_t>(OC) * C, 4), bias = Random(OC, 5);
  const std::vector<float> wt = TransposeWeights(w.data(), OC, C);
  const std::vector<float> inp = Random(static_cast<size_t>(n) * C, 6);
  std::vector<float> got(static_cast<size_t>(n) * OC), blas(got.size()), no_bias(got.size());
  MatmulForwardRowInvariant(got.data(), inp.data(), wt.data(), bias.data(), n, C, OC);
  MatmulForward(blas.data(), inp.data(), w.data(), bias.data(), n, C, OC);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], blas[i], 1e-4f * (1 + std::fabs(blas[i]))) << i;
  }
  MatmulForwardRowInvariant(no_bias.data(), inp.data(), wt.data(), nullptr, n, C, OC);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(no_bias[i] + bias[i % OC], got[i], 1e-4f * (1 + std::fabs(got[i])));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RowInvariance,
                         ::testing::Values(Shape{64, 192}, Shape{37, 13}, Shape{5, 3}, Shape{100, 131},
                                           Shape{384, 1152}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "C" + std::to_string(info.param.C) + "_OC" + std::to_string(info.param.OC);
                         });

}  // namespace
}  // namespace cohort::engine::cpu
