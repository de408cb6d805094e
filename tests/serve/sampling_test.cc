// Greedy decoding's argmax (serve/sampling.h) against std::max_element: the first index of
// the largest value, at every length around the lane width, with ties, -inf and NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "serve/sampling.h"

namespace cohort::serve {
namespace {

int32_t Reference(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(ArgmaxTest, FirstLargestLikeMaxElement) {
  std::mt19937 rng(11);
  for (size_t n : {1u, 2u, 15u, 16u, 17u, 31u, 33u, 257u, 50257u}) {
    for (int trial = 0; trial < 20; ++trial) {
      // Few distinct values, so the maximum is often tied at several places.
      std::uniform_int_distribution<int> pick(-4, trial % 2 ? 3 : 100);
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(pick(rng)) * 0.5f;
      EXPECT_EQ(Argmax(v), Reference(v)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(ArgmaxTest, MaximumInTheTailAndInfinities) {
  std::vector<float> v(35, 1.0f);
  v[34] = 2.0f;  // past the last whole group of lanes
  EXPECT_EQ(Argmax(v), 34);
  std::vector<float> neg(20, -INFINITY);
  EXPECT_EQ(Argmax(neg), 0);
  neg[7] = INFINITY;
  EXPECT_EQ(Argmax(neg), 7);
}

TEST(ArgmaxTest, NaNsAreNeverTheLargest) {
  std::vector<float> v(40, 0.0f);
  v[3] = std::nanf("");
  v[20] = 1.0f;
  EXPECT_EQ(Argmax(v), 20);
  std::vector<float> all(5, std::nanf(""));
  EXPECT_EQ(Argmax(all), 0);
}

TEST(ArgmaxTest, GreedySamplingUsesIt) {
  std::vector<float> v(100, 0.0f);
  v[42] = 3.0f;
  v[77] = 3.0f;
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(SampleToken(v, greedy, 0), 42);
  SamplingParams top1;
  top1.top_k = 1;
  EXPECT_EQ(SampleToken(v, top1, 5), 42);
}

}  // namespace
}  // namespace cohort::serve
