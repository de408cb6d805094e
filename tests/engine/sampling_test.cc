// Sampling: the generator's determinism and state round trip, greedy and top-k choices,
// and the temperature's effect on the distribution.
#include "engine/trainer/sampling.h"

#include <map>

#include <gtest/gtest.h>

#include "engine/trainer/rng.h"

namespace cohort::engine {
namespace {

TEST(RngTest, SameSeedSameStreamAndStateRoundTrips) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.Next(), b.Next());
  EXPECT_NE(a.Next(), c.Next());
  Rng d(1);
  ASSERT_TRUE(d.Restore(a.state()).has_value());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.Next(), d.Next());
  const uint64_t zero[4] = {0, 0, 0, 0};
  EXPECT_FALSE(d.Restore(zero).has_value());
  EXPECT_FALSE(d.Restore(std::span<const uint64_t>(zero, 3)).has_value());
  for (int i = 0; i < 1000; ++i) {
    double u = a.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SampleTokenTest, GreedyTopKAndTemperature) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.9f, -5.0f};
  Rng rng(7);
  EXPECT_EQ(SampleToken(logits, 0.0, 0, rng), 1);  // temperature 0: argmax
  EXPECT_EQ(SampleToken(logits, 1.0, 1, rng), 1);  // top-1 is greedy too
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) counts[SampleToken(logits, 1.0, 2, rng)]++;
  EXPECT_EQ(counts.size(), 2u);  // only ids 1 and 3 under top-2
  // p(1)/p(3) = e^0.1 ≈ 1.105 at temperature 1.
  EXPECT_NEAR(double(counts[1]) / counts[3], 1.105, 0.12);
  counts.clear();
  for (int i = 0; i < 4000; ++i) counts[SampleToken(logits, 0.05, 0, rng)]++;
  EXPECT_GT(counts[1], 3500);  // a low temperature sharpens towards the argmax
}

}  // namespace
}  // namespace cohort::engine
