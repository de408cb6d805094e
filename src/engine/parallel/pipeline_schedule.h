// Pipeline schedules: the order in which one stage runs the forward and backward passes
// of its chunks over the micro-batches of a step (pure functions, the same on every rank).
//
//   gpipe        every forward, then every backward (Huang et al. 2019): m micro-batches of
//                activations stashed at once.
//   1f1b         PipeDream-Flush (Narayanan et al. 2021): stage s runs p − s − 1 forwards,
//                then alternates one forward and one backward, then drains the backwards;
//                at most p micro-batches stashed, the same bubble as GPipe.
//   interleaved  1F1B over v chunks per stage (Megatron-LM): micro-batches go in groups of
//                p (the last group may be smaller); within a group a stage runs its chunks
//                in model order for the forwards and in reverse for the backwards; the
//                warm-up is 2·(p − s − 1) + (v − 1)·g forwards (g the group size). The
//                bubble shrinks by v.
// Every stage's forward order (and backward order) of a given chunk is the same micro-batch
// order, so activations and gradients between two stages arrive in the order they are
// consumed. SimulateSchedule runs all stages against each other (unit costs) and reports a
// deadlock by name, which is how the tests prove each schedule complete for every p, v, m.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/parallel/layout.h"

namespace cohort::engine {

struct PipelineOp {
  bool forward = true;
  int chunk = 0;       // global chunk index (layout.chunks)
  int microbatch = 0;  // 0..m-1
  bool operator==(const PipelineOp&) const = default;
};

// "F3.1" (forward of chunk 3 on micro-batch 1) or "B3.1".
std::string OpName(const PipelineOp& op);

// The ops `stage` runs in one step of `microbatches` (>= 1) micro-batches, in order.
// forward_only: just the forwards (evaluation and sampling), in the forward order.
std::vector<PipelineOp> BuildSchedule(const ParallelLayout& layout, int stage, int microbatches,
                                      bool forward_only = false);

struct ScheduleSimulation {
  double makespan = 0;             // the step's length
  std::vector<double> busy;        // per stage: time spent computing
  double bubble = 0;               // 1 − Σ busy / (stages · makespan)
  std::vector<int> peak_in_flight;  // per stage: most chunk micro-batches stashed at once
};

// Runs every stage's schedule with a forward costing `forward` and a backward `backward`
// time units per chunk (a chunk's cost is its stage's divided by v), each op starting as
// soon as its stage is free and its input exists. kInternal "pipeline schedule deadlocks:
// stage 1 waits at B1.0 ..." when some stage can never go on.
Result<ScheduleSimulation> SimulateSchedule(const ParallelLayout& layout, int microbatches,
                                            double forward, double backward);

}  // namespace cohort::engine
