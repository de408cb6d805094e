// The data x pipeline x tensor layout (rank order, groups, stage balance, every impossible
// layout's error) and the pipeline schedules (complete for every p, v, m; the bubble and the
// stashed micro-batches each schedule promises), as pure functions.
#include "engine/parallel/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/parallel/pipeline_schedule.h"

namespace cohort::engine {
namespace {

using ::testing::HasSubstr;

GptConfig Model(int layers, int heads = 4, int embd = 64, int vocab = 256, int seq = 64) {
  GptConfig c;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  return c;
}

ParallelConfig Par(int t, int p, std::string schedule = "1f1b", int v = 1) {
  ParallelConfig c;
  c.tensor = t;
  c.pipeline = p;
  c.schedule = std::move(schedule);
  c.virtual_stages = v;
  return c;
}

std::vector<int> Sizes(const ParallelLayout& l) {
  std::vector<int> s;
  for (const ModelChunk& c : l.chunks) s.push_back(c.end_layer - c.begin_layer);
  return s;
}

TEST(ParallelLayoutTest, RanksPutTensorGroupsTogetherThenStagesThenReplicas) {
  auto l = MakeParallelLayout(Par(2, 2), Model(4), 8).value();
  EXPECT_EQ(l.data, 2);
  // rank = (data · pipeline + stage) · tensor + tensor_rank
  EXPECT_EQ(l.TensorGroup(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(l.PipelineGroup(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.DataGroup(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.ModelGroup(5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(l.EmbeddingGroup(6), (std::vector<int>{4, 6}));
  const RankCoords c = l.CoordsOf(6);
  EXPECT_EQ(c.data, 1);
  EXPECT_EQ(c.stage, 1);
  EXPECT_EQ(c.tensor, 0);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(l.RankOf(l.CoordsOf(r)), r);
  EXPECT_EQ(l.Describe(),
            "8 ranks = data 2 x pipeline 2 x tensor 2 (1f1b schedule); stage 0: embedding + "
            "layers 0-1; stage 1: layers 2-3 + head");
}

TEST(ParallelLayoutTest, StagesAreBalancedWithTheEmbeddingAndTheHeadCounted) {
  // Tiny vocabulary: the head costs under a block, so layers split as evenly as they can.
  EXPECT_EQ(Sizes(MakeParallelLayout(Par(1, 2), Model(5, 4, 64, 64, 8), 2).value()),
            (std::vector<int>{3, 2}));
  EXPECT_EQ(Sizes(MakeParallelLayout(Par(1, 4), Model(7, 4, 64, 64, 8), 4).value()),
            (std::vector<int>{2, 2, 2, 1}));
  // GPT-2 small's head (2·C·Vp) costs ~4.5 blocks: the last stage gets fewer layers.
  auto gpt2 = MakeParallelLayout(Par(1, 2), Model(12, 12, 768, 50257, 1024), 2).value();
  EXPECT_EQ(Sizes(gpt2), (std::vector<int>{8, 4}));
  EXPECT_EQ(gpt2.Describe(),
            "2 ranks = data 1 x pipeline 2 x tensor 1 (1f1b schedule); stage 0: embedding + "
            "layers 0-7; stage 1: layers 8-11 + head");
  // Interleaved: chunk c on stage c % p.
  auto il = MakeParallelLayout(Par(1, 2, "interleaved", 2), Model(8, 4, 64, 64, 8), 2).value();
  EXPECT_EQ(il.ChunksOf(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(il.ChunksOf(1), (std::vector<int>{1, 3}));
  EXPECT_THAT(il.Describe(), HasSubstr("stage 0: chunk 0 embedding + layers 0-1, chunk 2 layers 4-5"));
  // An explicit split wins.
  ParallelConfig explicit_split = Par(1, 2);
  explicit_split.pipeline_layers = {1, 4};
  EXPECT_EQ(Sizes(MakeParallelLayout(explicit_split, Model(5), 2).value()),
            (std::vector<int>{1, 4}));
}

TEST(ParallelLayoutTest, EveryImpossibleLayoutNamesTheFieldAndTheNumbers) {
  struct Bad {
    ParallelConfig config;
    GptConfig model;
    int world;
    std::string message;
  };
  ParallelConfig short_list = Par(1, 2);
  short_list.pipeline_layers = {5};
  ParallelConfig zero_entry = Par(1, 2);
  zero_entry.pipeline_layers = {0, 5};
  ParallelConfig wrong_sum = Par(1, 2);
  wrong_sum.pipeline_layers = {2, 2};
  const std::vector<Bad> bad = {
      {Par(3, 1), Model(4), 3, "parallel.tensor: 3 does not divide n_head 4"},
      {Par(2, 2), Model(4), 6,
       "parallel: tensor 2 x pipeline 2 = 4 ranks per replica does not divide the world size 6"},
      {Par(1, 2, "zigzag"), Model(4), 2,
       "parallel.schedule: must be gpipe, 1f1b or interleaved, got 'zigzag'"},
      {Par(1, 2, "1f1b", 2), Model(4), 2,
       "parallel.virtual_stages: 2 chunks per stage need parallel.schedule interleaved (it is "
       "1f1b)"},
      {Par(1, 2, "interleaved", 1), Model(4), 2,
       "parallel.virtual_stages: the interleaved schedule needs at least 2 chunks per stage, got 1"},
      {Par(1, 1, "interleaved", 2), Model(4), 1,
       "parallel.schedule: interleaved needs parallel.pipeline >= 2, got 1"},
      {Par(1, 4, "interleaved", 2), Model(7), 4,
       "parallel.pipeline: pipeline 4 x virtual_stages 2 = 8 chunks, but n_layer 7 gives each "
       "chunk less than one layer"},
      {short_list, Model(5), 2,
       "parallel.pipeline_layers: has 1 entries; pipeline 2 x virtual_stages 1 needs 2"},
      {zero_entry, Model(5), 2, "parallel.pipeline_layers: entry 0 is 0; every chunk needs a layer"},
      {wrong_sum, Model(5), 2, "parallel.pipeline_layers: sums to 4 layers; n_layer is 5"},
      {Par(256, 1), Model(4, 256, 256, 100), 256,
       "parallel.tensor: 256 does not divide the padded vocabulary 128"},
  };
  for (const Bad& b : bad) {
    auto l = MakeParallelLayout(b.config, b.model, b.world);
    ASSERT_FALSE(l.has_value()) << b.message;
    EXPECT_EQ(l.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(l.error().message, b.message);
  }
}

TEST(PipelineScheduleTest, EveryScheduleCompletesForAnyStagesChunksAndMicrobatches) {
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"}) {
    for (int p = 1; p <= 5; ++p) {
      for (int v : {1, 2, 3}) {
        const bool interleaved = std::string(schedule) == "interleaved";
        if (interleaved != (v > 1) || (interleaved && p < 2)) continue;
        auto layout = MakeParallelLayout(Par(1, p, schedule, v), Model(p * v), p).value();
        for (int m = 1; m <= 11; ++m) {
          auto sim = SimulateSchedule(layout, m, 1.0, 2.0);
          ASSERT_TRUE(sim.has_value()) << sim.error().ToString();
          // Each stage runs every forward and backward of its chunks exactly once.
          for (int s = 0; s < p; ++s) {
            auto ops = BuildSchedule(layout, s, m);
            EXPECT_EQ(ops.size(), size_t(2 * m * v));
            for (const PipelineOp& op : ops) EXPECT_EQ(layout.chunks[op.chunk].stage, s);
          }
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, BubblesAndStashesAreWhatEachSchedulePromises) {
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      auto gpipe = MakeParallelLayout(Par(1, p, "gpipe"), Model(8), p).value();
      auto onefoneb = MakeParallelLayout(Par(1, p, "1f1b"), Model(8), p).value();
      auto inter = MakeParallelLayout(Par(1, p, "interleaved", 2), Model(8), p).value();
      auto g = SimulateSchedule(gpipe, m, 1.0, 2.0).value();
      auto o = SimulateSchedule(onefoneb, m, 1.0, 2.0).value();
      auto i = SimulateSchedule(inter, m, 1.0, 2.0).value();
      // GPipe and 1F1B: exactly (p − 1) / (m + p − 1); 1F1B stashes at most p micro-batches,
      // GPipe all m.
      EXPECT_NEAR(g.bubble, TheoreticalBubble(gpipe, m), 1e-9) << p << " " << m;
      EXPECT_NEAR(o.bubble, TheoreticalBubble(onefoneb, m), 1e-9) << p << " " << m;
      EXPECT_EQ(g.peak_in_flight[0], m);
      for (int s = 0; s < p; ++s) EXPECT_LE(o.peak_in_flight[s], std::min(p - s, m));
      // Interleaving (m a multiple of p) shrinks the bubble by v.
      EXPECT_NEAR(i.bubble, TheoreticalBubble(inter, m), 0.01) << p << " " << m;
      EXPECT_LT(i.bubble, o.bubble);
    }
  }
}

}  // namespace
}  // namespace cohort::engine
