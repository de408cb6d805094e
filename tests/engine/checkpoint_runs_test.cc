// The slices a tensor × pipeline shard writes into a checkpoint (gpt_shard_layout.h
// CheckpointRuns) and their cut to a ZeRO part of the shard (CutRuns): over the ranks of one
// replica the runs cover every logical value exactly once, each from the right place of the
// shard, and cutting a shard's runs into parts loses and duplicates nothing.
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/layout.h"

namespace cohort::engine {
namespace {

GptConfig Small() {
  GptConfig c;
  c.vocab_size = 61;
  c.max_seq_len = 16;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 16;
  return c;
}

// Every element of `runs` as logical index -> local index.
std::map<size_t, size_t> Expand(const std::vector<ShardRun>& runs) {
  std::map<size_t, size_t> out;
  for (const ShardRun& r : runs) {
    for (size_t k = 0; k < r.runs; ++k) {
      for (size_t j = 0; j < r.width; ++j) {
        EXPECT_TRUE(out.emplace(r.logical + k * r.stride + j, r.local + k * r.width + j).second)
            << "logical " << r.logical + k * r.stride + j << " twice";
      }
    }
  }
  return out;
}

TEST(CheckpointRunsTest, ShardsOfAReplicaCoverTheModelOnceAndCutsKeepEveryValue) {
  const GptConfig c = Small();
  ParallelConfig pc;
  pc.tensor = 2;
  pc.pipeline = 2;
  const ParallelLayout layout = MakeParallelLayout(pc, c, 4).value();
  std::vector<float> logical(c.num_parameters());
  for (size_t i = 0; i < logical.size(); ++i) logical[i] = static_cast<float>(i);
  size_t covered = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, c, rank));
    std::vector<float> local(shard.total);
    ExtractShard(shard, logical, local);
    const std::vector<ShardRun> runs = CheckpointRuns(shard);
    const std::map<size_t, size_t> all = Expand(runs);
    for (const auto& [g, l] : all) ASSERT_EQ(local[l], logical[g]) << "rank " << rank;
    covered += all.size();
    // Cut into 3 uneven parts (a ZeRO partition of the shard): the same elements, once.
    std::map<size_t, size_t> parts;
    const size_t cuts[] = {0, shard.total / 3 + 1, 2 * shard.total / 3 + 5, shard.total};
    for (int p = 0; p < 3; ++p) {
      const std::vector<ShardRun> cut = CutRuns(runs, cuts[p], cuts[p + 1]);
      for (const auto& [g, l] : Expand(cut)) {
        EXPECT_GE(l, cuts[p]);
        EXPECT_LT(l, cuts[p + 1]);
        EXPECT_TRUE(parts.emplace(g, l).second);
      }
    }
    EXPECT_EQ(parts, all) << "rank " << rank;
  }
  EXPECT_EQ(covered, c.num_parameters());
}

}  // namespace
}  // namespace cohort::engine
