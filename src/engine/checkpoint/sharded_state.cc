#include "engine/checkpoint/sharded_state.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/model/gpt_shard_layout.h"

namespace cohort::engine {
namespace {

Result<void> CheckSize(const ShardState& s, size_t total, int rank) {
  if (s.params.size() != total || s.adam_m.size() != total || s.adam_v.size() != total) {
    return Errorf(ErrorCode::kInternal,
                  "sharded state of rank {}: {} parameters, {} and {} moments; its shard has {}",
                  rank, s.params.size(), s.adam_m.size(), s.adam_v.size(), total);
  }
  return {};
}

}  // namespace

Result<LogicalState> GatherShardedState(comm::Communicator& world, const ParallelLayout& layout,
                                        const GptConfig& model, const ShardState& mine) {
  const int rank = world.rank();
  const GptShardLayout own = GptShardLayout::Build(ShardSpecFor(layout, model, rank));
  COHORT_TRY_VOID(CheckSize(mine, own.total, rank));
  LogicalState full;
  if (rank != 0) {
    if (layout.CoordsOf(rank).data != 0) return full;
    for (std::span<float> part : {mine.params, mine.adam_m, mine.adam_v}) {
      COHORT_TRY_VOID(world.Send(part.data(), part.size(), comm::DataType::kFloat32, 0, 0));
    }
    return full;
  }
  const size_t n = model.num_parameters();
  full.params.assign(n, 0.0f);
  full.adam_m.assign(n, 0.0f);
  full.adam_v.assign(n, 0.0f);
  PlaceShard(own, mine.params, full.params);
  PlaceShard(own, mine.adam_m, full.adam_m);
  PlaceShard(own, mine.adam_v, full.adam_v);
  std::vector<float> buf;
  for (int r = 1; r < layout.pipeline * layout.tensor; ++r) {
    const GptShardLayout theirs = GptShardLayout::Build(ShardSpecFor(layout, model, r));
    buf.resize(theirs.total);
    for (std::vector<float>* dst : {&full.params, &full.adam_m, &full.adam_v}) {
      COHORT_TRY_VOID(world.Recv(buf.data(), buf.size(), comm::DataType::kFloat32, r, 0));
      PlaceShard(theirs, buf, *dst);
    }
  }
  return full;
}

}  // namespace cohort::engine
