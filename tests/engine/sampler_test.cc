#include "engine/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::engine {
namespace {

using ::testing::HasSubstr;

SamplerConfig Config(size_t n, int T, int64_t G, uint64_t seed = 1, bool shuffle = true) {
  SamplerConfig c;
  c.num_tokens = n;
  c.seq_len = T;
  c.global_batch = G;
  c.seed = seed;
  c.shuffle = shuffle;
  return c;
}

// All starts of global batch b, rank by rank and micro-step by micro-step.
std::vector<size_t> GlobalBatch(const DistributedSampler& s, int64_t b, int world, int accum,
                                int B) {
  std::vector<size_t> all;
  for (int a = 0; a < accum; ++a) {
    for (int r = 0; r < world; ++r) {
      auto starts = s.WindowStarts(b, r, world, accum, a, B);
      EXPECT_TRUE(starts) << starts.error().ToString();
      if (!starts) return {};
      all.insert(all.end(), starts->begin(), starts->end());
    }
  }
  return all;
}

TEST(SamplerTest, EpochWindowsAreDisjointAndCoverPG) {
  // N = 1000, T = 16: W = 999/16 = 62 windows; G = 8: P = 7 batches, 56 windows used.
  auto s = DistributedSampler::Create(Config(1000, 16, 8));
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->batches_per_epoch(), 7);
  std::set<size_t> seen;
  for (int64_t b = 0; b < 7; ++b) {
    for (size_t start : GlobalBatch(*s, b, 2, 2, 2)) {
      EXPECT_EQ(start % 16, 0u);
      EXPECT_LE(start + 17, 1000u);  // T + 1 tokens fit
      EXPECT_TRUE(seen.insert(start).second) << "window " << start << " used twice";
    }
  }
  EXPECT_EQ(seen.size(), 56u);
}

TEST(SamplerTest, LastWindowFitsExactly) {
  // N = 33, T = 16: W = 2; the last window [16, 33) ends at N.
  auto s = DistributedSampler::Create(Config(33, 16, 2, 0, false));
  ASSERT_TRUE(s);
  auto st = s->WindowStarts(0, 0, 1, 1, 0, 2);
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (std::vector<size_t>{0, 16}));
  // One token fewer: only one window, a global batch of 2 does not fit.
  EXPECT_FALSE(DistributedSampler::Create(Config(32, 16, 2)));
}

TEST(SamplerTest, SameGlobalBatchForAnyWorldTimesAccum) {
  auto s = DistributedSampler::Create(Config(5000, 8, 4, 42));
  ASSERT_TRUE(s);
  for (int64_t b : {0, 1, 5, 150, 400}) {  // also past the first epoch (P = 156)
    std::vector<size_t> ref = GlobalBatch(*s, b, 1, 4, 1);
    ASSERT_EQ(ref.size(), 4u);
    for (auto [world, accum] : {std::pair{2, 2}, std::pair{4, 1}, std::pair{1, 1}}) {
      int B = 4 / (world * accum);
      std::vector<size_t> got = GlobalBatch(*s, b, world, accum, B);
      std::vector<size_t> a = ref, g = got;
      std::sort(a.begin(), a.end());
      std::sort(g.begin(), g.end());
      EXPECT_EQ(a, g) << "batch " << b << " world " << world << " accum " << accum;
    }
  }
}

TEST(SamplerTest, RankMicroStepLayoutFollowsTheContract) {
  // Unshuffled, batch b's positions are windows [b·G, b·G + G): rank r's micro-step a
  // takes positions [(a·world + r)·B, ... + B).
  auto s = DistributedSampler::Create(Config(1001, 10, 8, 0, false));
  ASSERT_TRUE(s);
  auto st = s->WindowStarts(1, 1, 2, 2, 1, 2);  // a=1, r=1: positions 6, 7 of batch 1
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (std::vector<size_t>{140, 150}));
}

TEST(SamplerTest, DeterministicAcrossCallsCopiesAndThreads) {
  auto s1 = DistributedSampler::Create(Config(100000, 32, 16, 7));
  auto s2 = DistributedSampler::Create(Config(100000, 32, 16, 7));
  ASSERT_TRUE(s1 && s2);
  std::vector<size_t> first = GlobalBatch(*s1, 3, 2, 2, 4);
  // Touch another epoch in between, then ask again (the cache is replaced and rebuilt).
  GlobalBatch(*s1, 1000, 2, 2, 4);
  EXPECT_EQ(GlobalBatch(*s1, 3, 2, 2, 4), first);
  EXPECT_EQ(GlobalBatch(*s2, 3, 2, 2, 4), first);
  DistributedSampler copy = *s1;
  EXPECT_EQ(GlobalBatch(copy, 3, 2, 2, 4), first);
  // Concurrent callers on different epochs agree with the serial answer.
  std::vector<std::vector<size_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = s1->WindowStarts(t % 2 == 0 ? 3 : 1000 + i, 0, 2, 2, 0, 4);
        if (t % 2 == 0 && r) got[t] = *r;
      }
    });
  }
  for (auto& th : threads) th.join();
  auto want = s2->WindowStarts(3, 0, 2, 2, 0, 4);
  EXPECT_EQ(got[0], *want);
  EXPECT_EQ(got[2], *want);
}

TEST(SamplerTest, EpochsAndSeedsShuffleDifferently) {
  auto s = DistributedSampler::Create(Config(10000, 10, 10, 3));
  ASSERT_TRUE(s);
  int64_t P = s->batches_per_epoch();
  EXPECT_EQ(P, 99);
  EXPECT_NE(GlobalBatch(*s, 0, 1, 1, 10), GlobalBatch(*s, P, 1, 1, 10));
  auto other = DistributedSampler::Create(Config(10000, 10, 10, 4));
  EXPECT_NE(GlobalBatch(*s, 0, 1, 1, 10), GlobalBatch(*other, 0, 1, 1, 10));
  // Shuffled: not the identity order.
  auto plain = DistributedSampler::Create(Config(10000, 10, 10, 3, false));
  EXPECT_NE(GlobalBatch(*s, 0, 1, 1, 10), GlobalBatch(*plain, 0, 1, 1, 10));
  // Each epoch is a permutation: its batches cover P·G distinct windows again.
  std::set<size_t> epoch1;
  for (int64_t b = P; b < 2 * P; ++b) {
    for (size_t x : GlobalBatch(*s, b, 1, 1, 10)) epoch1.insert(x);
  }
  EXPECT_EQ(epoch1.size(), static_cast<size_t>(P * 10));
}

TEST(SamplerTest, BadArguments) {
  EXPECT_FALSE(DistributedSampler::Create(Config(1000, 0, 1)));
  EXPECT_FALSE(DistributedSampler::Create(Config(1000, 8, 0)));
  EXPECT_FALSE(DistributedSampler::Create(Config(0, 8, 1)));
  auto small = DistributedSampler::Create(Config(100, 10, 10));
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(small.error().message, HasSubstr("9 windows"));
  EXPECT_THAT(small.error().message, HasSubstr("needs 10"));

  auto s = DistributedSampler::Create(Config(1000, 10, 8));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->WindowStarts(0, 0, 2, 2, 0, 2));
  EXPECT_FALSE(s->WindowStarts(0, 0, 2, 2, 0, 3));   // 2·2·3 != 8
  EXPECT_FALSE(s->WindowStarts(0, 2, 2, 2, 0, 2));   // rank >= world
  EXPECT_FALSE(s->WindowStarts(0, -1, 2, 2, 0, 2));
  EXPECT_FALSE(s->WindowStarts(0, 0, 2, 2, 2, 2));   // micro_step >= accum
  EXPECT_FALSE(s->WindowStarts(-1, 0, 2, 2, 0, 2));  // negative batch
  EXPECT_FALSE(s->WindowStarts(0, 0, 0, 2, 0, 2));
}

TEST(SamplerTest, LoadBatchShiftsTargetsByOne) {
  std::vector<int32_t> toks(50);
  std::iota(toks.begin(), toks.end(), 0);
  TokenDataset ds = TokenDataset::FromTokens(toks);
  std::vector<size_t> starts = {20, 4};
  std::vector<int32_t> in(8), tgt(8);
  ASSERT_TRUE(LoadBatch(ds, starts, 4, in, tgt));
  EXPECT_EQ(in, (std::vector<int32_t>{20, 21, 22, 23, 4, 5, 6, 7}));
  EXPECT_EQ(tgt, (std::vector<int32_t>{21, 22, 23, 24, 5, 6, 7, 8}));
  // Wrong output sizes and a window past the end.
  std::vector<int32_t> short_in(7);
  EXPECT_FALSE(LoadBatch(ds, starts, 4, short_in, tgt));
  std::vector<size_t> past = {46};
  std::vector<int32_t> in1(4), tgt1(4);
  EXPECT_FALSE(LoadBatch(ds, past, 4, in1, tgt1));
  past = {45};
  EXPECT_TRUE(LoadBatch(ds, past, 4, in1, tgt1));
}

}  // namespace
}  // namespace cohort::engine
