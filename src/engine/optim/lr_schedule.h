// Learning-rate schedule: linear warmup, then cosine decay to a floor.
#pragma once

#include <cstdint>

#include "common/error.h"

namespace cohort::engine {

struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;        // the floor reached at total_steps
  int64_t warmup_steps = 0;    // lr = max_lr · (step + 1) / warmup_steps for step < warmup_steps
  int64_t total_steps = 1;     // cosine from max_lr (at warmup_steps) to min_lr (at total_steps)
  // kInvalidArgument naming the field: 0 <= min_lr <= max_lr, warmup_steps >= 0,
  // total_steps >= 1.
  Result<void> Validate() const;
};

// Learning rate for 0-based `step`; min_lr for steps at or beyond total_steps.
double LearningRate(const LrSchedule& schedule, int64_t step);

}  // namespace cohort::engine
