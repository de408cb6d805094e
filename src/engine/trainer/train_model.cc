// TrainModel's default step: the data-parallel micro-batch loop every single-device model
// shares.
#include "engine/trainer/train_model.h"

#include <vector>

namespace cohort::engine {

Result<double> TrainModel::TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                             DdpReducer* reducer) {
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  COHORT_TRY_VOID(ZeroGrad());
  double loss_sum = 0;
  const float scale = 1.0f / static_cast<float>(count);
  for (int a = 0; a < count; ++a) {
    COHORT_TRY_VOID(load(a, inputs, targets));
    loss_sum += COHORT_TRY(Forward(inputs, targets, B, T));
    if (reducer && a == count - 1) {
      reducer->Begin();
      auto backward = Backward(scale, [&](size_t offset, size_t n) { reducer->GradReady(offset, n); });
      auto reduced = reducer->Finish();
      COHORT_TRY_VOID(backward);
      COHORT_TRY_VOID(reduced);
    } else {
      COHORT_TRY_VOID(Backward(scale, {}));
    }
  }
  return loss_sum / count;
}

Result<double> TrainModel::EvalMicrobatches(int count, int B, int T, const LoadMicrobatch& load) {
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  double sum = 0;
  for (int a = 0; a < count; ++a) {
    COHORT_TRY_VOID(load(a, inputs, targets));
    sum += COHORT_TRY(Forward(inputs, targets, B, T));
  }
  return sum / count;
}

}  // namespace cohort::engine
