// TrainModel's default step: the data-parallel micro-batch loop every single-device model
// shares.
#include "engine/trainer/train_model.h"

#include <utility>
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

Result<std::vector<CheckpointRange>> TrainModel::CheckpointRanges(int replica, int replicas,
                                                                  int64_t* adam_t) {
  CheckpointView view;
  COHORT_TRY_VOID(StateForCheckpoint(view));
  *adam_t = view.adam_t;
  const size_t n = view.params.size();
  const size_t lo = n * replica / replicas, hi = n * (replica + 1) / replicas;
  std::vector<CheckpointRange> out;
  if (hi == lo) return out;
  const std::pair<CheckpointArray, std::span<const float>> arrays[] = {
      {CheckpointArray::kParams, view.params},
      {CheckpointArray::kAdamM, view.adam_m},
      {CheckpointArray::kAdamV, view.adam_v}};
  for (const auto& [array, values] : arrays) {
    out.push_back({array, lo, hi - lo, hi - lo, 1, values.subspan(lo, hi - lo)});
  }
  return out;
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
