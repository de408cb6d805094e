// Sharded training state <-> the logical model. Checkpoints always hold the logical model
// (the single-rank GptModel layout of params.bin and optim.bin, checkpoint.h), whatever
// layout wrote them, so one written by data × pipeline × tensor ranks resumes on any other
// layout. Ranks write their own slices of a checkpoint by range (checkpoint.h,
// SaveCheckpointRanges) and read their own back (LoadCheckpointRanges, through the logical
// runs of gpt_shard_layout.h LogicalRunsOf); this function moves a whole state to world
// rank 0 (the export of a split model, its StateForCheckpoint, and the layout tests): the
// ranks of data replica 0 send their slices (parameters, AdamW m and v) to world rank 0,
// which places them into logical buffers (gpt_shard_layout.h); the tied output head's copy
// of wte is not sent (the embedding's slice is the same value). It goes over the world
// communicator's point-to-point calls, one message per buffer and rank, so it runs on the
// training thread while no other collective of `world` is in flight.
//
// Threads: the training thread of every rank, at the same point of the run.
#pragma once

#include <span>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/parallel/layout.h"

namespace cohort::engine {

// This rank's state: spans of its shard's length (GptShardLayout::total).
struct ShardState {
  std::span<float> params, adam_m, adam_v;
};

// The logical state, on world rank 0.
struct LogicalState {
  std::vector<float> params, adam_m, adam_v;
};

// Every rank calls it; rank 0 returns the logical state of replica 0 (others an empty one).
// kInternal when a rank's shard size disagrees with the layout; the communicator's errors.
Result<LogicalState> GatherShardedState(comm::Communicator& world, const ParallelLayout& layout,
                                        const GptConfig& model, const ShardState& mine);

}  // namespace cohort::engine
