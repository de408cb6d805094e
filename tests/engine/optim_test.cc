// AdamW, gradient clipping and the learning-rate schedule beyond the PyTorch parity
// test: hand-computed values, validation errors that name the field, Restore.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/optim/adamw.h"
#include "engine/optim/grad_clip.h"
#include "engine/optim/lr_schedule.h"

namespace cohort::engine {
namespace {

TEST(AdamWTest, FirstStepByHand) {
  AdamWConfig c;
  c.beta1 = 0.9f;
  c.beta2 = 0.99f;
  c.eps = 1e-8f;
  c.weight_decay = 0.5f;
  auto opt = AdamW::Create(2, {{0, 1, true}, {1, 1, false}}, c);
  ASSERT_TRUE(opt.has_value());
  std::vector<float> p = {2.0f, 2.0f}, g = {0.3f, -0.3f};
  opt->Step(p, g, 0.1f);
  // t = 1: m̂ = g, v̂ = g², so the Adam step is lr · sign(g) (up to eps).
  EXPECT_NEAR(p[0], 2.0f * (1 - 0.1f * 0.5f) - 0.1f, 1e-6f);
  EXPECT_NEAR(p[1], 2.0f + 0.1f, 1e-6f);
  EXPECT_EQ(opt->t(), 1);
  EXPECT_NEAR(opt->m()[0], 0.1f * 0.3f, 1e-7f);
  EXPECT_NEAR(opt->v()[1], 0.01f * 0.09f, 1e-8f);
}

TEST(AdamWTest, RejectsBadConfigAndRanges) {
  auto bad = [](AdamWConfig c, const char* field) {
    auto v = c.Validate();
    ASSERT_FALSE(v.has_value()) << field;
    EXPECT_EQ(v.error().field, field);
    auto o = AdamW::Create(1, {{0, 1, true}}, c);
    ASSERT_FALSE(o.has_value());
    EXPECT_EQ(o.error().field, field);
  };
  AdamWConfig c;
  c.beta1 = 1.0f;
  bad(c, "beta1");
  c = {};
  c.beta2 = -0.1f;
  bad(c, "beta2");
  c = {};
  c.eps = 0.0f;
  bad(c, "eps");
  c = {};
  c.weight_decay = -1.0f;
  bad(c, "weight_decay");

  EXPECT_EQ(AdamW::Create(10, {{0, 5, true}, {6, 4, false}}, {}).error().field, "ranges");  // gap
  EXPECT_EQ(AdamW::Create(10, {{0, 6, true}, {5, 5, false}}, {}).error().field, "ranges");  // overlap
  EXPECT_EQ(AdamW::Create(10, {{0, 5, true}}, {}).error().field, "ranges");  // short
  EXPECT_TRUE(AdamW::Create(10, {{5, 5, true}, {0, 5, false}}, {}).has_value());
}

TEST(AdamWTest, RestoreContinuesTheSameTrajectory) {
  const size_t n = 64;
  std::vector<DecayRange> ranges = {{0, 32, true}, {32, 32, false}};
  auto a = AdamW::Create(n, ranges, {});
  auto b = AdamW::Create(n, ranges, {});
  std::vector<float> pa(n, 1.0f), g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(i));
  for (int s = 0; s < 3; ++s) a->Step(pa, g, 1e-2f);
  std::vector<float> pb = pa;
  ASSERT_TRUE(b->Restore(a->m(), a->v(), a->t()).has_value());
  a->Step(pa, g, 1e-2f);
  b->Step(pb, g, 1e-2f);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(b->t(), 4);
  std::vector<float> short_m(n - 1);
  EXPECT_EQ(b->Restore(short_m, a->v(), 1).error().field, "m");
  EXPECT_EQ(b->Restore(a->m(), short_m, 1).error().field, "v");
  EXPECT_EQ(b->Restore(a->m(), a->v(), -1).error().field, "t");
}

TEST(GradClipTest, NormAndClipping) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(GlobalNorm(g), 5.0);
  EXPECT_DOUBLE_EQ(ClipGradNorm(g, 10.0), 5.0);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(ClipGradNorm(g, 0.0), 5.0);  // disabled
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(ClipGradNorm(g, 1.0), 5.0);
  EXPECT_NEAR(g[0], 3.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(g[1], 4.0 / (5.0 + 1e-6), 1e-7);
  // Large buffers (the OpenMP path) agree with a serial double sum.
  std::vector<float> big(1 << 20);
  double ref = 0;
  for (size_t i = 0; i < big.size(); ++i) {
    big[i] = std::cos(static_cast<float>(i));
    ref += static_cast<double>(big[i]) * big[i];
  }
  EXPECT_NEAR(GlobalNorm(big), std::sqrt(ref), 1e-9 * std::sqrt(ref));
}

TEST(LrScheduleTest, WarmupThenCosine) {
  LrSchedule s;
  s.max_lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_steps = 10;
  s.total_steps = 110;
  ASSERT_TRUE(s.Validate().has_value());
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 4), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(s, 10), 1.0);
  EXPECT_NEAR(LearningRate(s, 60), 0.55, 1e-12);  // halfway: (max + min) / 2
  EXPECT_NEAR(LearningRate(s, 109), 0.1 + 0.45 * (1 + std::cos(M_PI * 99 / 100)), 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(s, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1000), 0.1);
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(LearningRate(s, t), LearningRate(s, t + 1));
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 1.0);
}

TEST(LrScheduleTest, ValidateNamesTheField) {
  LrSchedule s;
  s.min_lr = -1;
  EXPECT_EQ(s.Validate().error().field, "min_lr");
  s = {};
  s.max_lr = 1e-5;  // below min_lr
  EXPECT_EQ(s.Validate().error().field, "max_lr");
  s = {};
  s.warmup_steps = -1;
  EXPECT_EQ(s.Validate().error().field, "warmup_steps");
  s = {};
  s.total_steps = 0;
  EXPECT_EQ(s.Validate().error().field, "total_steps");
}

}  // namespace
}  // namespace cohort::engine
