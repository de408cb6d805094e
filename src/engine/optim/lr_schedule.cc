#include "engine/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace cohort::engine {

Result<void> LrSchedule::Validate() const {
  if (!(min_lr >= 0.0)) return FieldError("min_lr", "must be >= 0, got {}", min_lr);
  if (!(max_lr >= min_lr)) {
    return FieldError("max_lr", "must be >= min_lr ({}), got {}", min_lr, max_lr);
  }
  if (warmup_steps < 0) return FieldError("warmup_steps", "must be >= 0, got {}", warmup_steps);
  if (total_steps < 1) return FieldError("total_steps", "must be >= 1, got {}", total_steps);
  return {};
}

double LearningRate(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.max_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (step >= s.total_steps) return s.min_lr;
  const double ratio = static_cast<double>(step - s.warmup_steps) /
                       static_cast<double>(s.total_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return s.min_lr + coeff * (s.max_lr - s.min_lr);
}

}  // namespace cohort::engine
