// TrainModel's default step: the data-parallel micro-batch loop every single-device model
// shares; the default checkpoint ranges; and the in-memory resume over RestoreRequest.
#include "engine/trainer/train_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace cohort::engine {

Result<double> TrainModel::MicrobatchLoop(int count, int B, int T, const LoadMicrobatch& load,
                                          const MicrobatchBackward& backward) {
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  COHORT_TRY_VOID(ZeroGrad());
  double loss_sum = 0;
  const float scale = 1.0f / static_cast<float>(count);
  for (int a = 0; a < count; ++a) {
    COHORT_TRY_VOID(load(a, inputs, targets));
    loss_sum += COHORT_TRY(Forward(inputs, targets, B, T));
    COHORT_TRY_VOID(backward(scale, a == count - 1));
  }
  return loss_sum / count;
}

Result<double> TrainModel::TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                             DdpReducer* reducer) {
  return MicrobatchLoop(count, B, T, load, [&](float scale, bool last) -> Result<void> {
    if (!reducer || !last) return Backward(scale, {});
    reducer->Begin();
    auto backward = Backward(scale, [&](size_t offset, size_t n) { reducer->GradReady(offset, n); });
    auto reduced = reducer->Finish();
    COHORT_TRY_VOID(backward);
    return reduced;
  });
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

Result<void> TrainModel::RestoreState(comm::Communicator* comm, Checkpoint* ckpt,
                                      int64_t adam_t) {
  const size_t n = num_params();
  const bool root = !comm || comm->rank() == 0;
  // Rank 0 says whether it holds a whole checkpoint first, so that no rank waits for arrays
  // that never come.
  int64_t whole = 0;
  std::string why;
  if (root) {
    if (!ckpt) {
      why = "rank 0 holds no checkpoint";
    } else if (ckpt->params.size() != n || ckpt->adam_m.size() != n ||
               ckpt->adam_v.size() != n) {
      why = fmt::format("checkpoint arrays of {}, {} and {} values (params, adam_m, adam_v), the "
                        "model {}",
                        ckpt->params.size(), ckpt->adam_m.size(), ckpt->adam_v.size(), n);
    } else {
      whole = 1;
    }
  }
  if (comm) COHORT_TRY_VOID(BroadcastHost(*comm, &whole, 1, comm::DataType::kInt64));
  if (whole != 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "restore: " + (root ? why : std::string("rank 0 holds no whole checkpoint")));
  }
  const CheckpointReadRequest request = RestoreRequest();
  std::vector<float> chunk(std::min(n, kRestoreChunk));
  const std::pair<const std::vector<ParamRun>*, const std::vector<float>*> arrays[] = {
      {&request.params, ckpt ? &ckpt->params : nullptr},
      {&request.adam_m, ckpt ? &ckpt->adam_m : nullptr},
      {&request.adam_v, ckpt ? &ckpt->adam_v : nullptr}};
  for (const auto& [runs, values] : arrays) {
    for (size_t lo = 0; lo < n; lo += chunk.size()) {
      const size_t k = std::min(chunk.size(), n - lo);
      if (root) std::copy_n(values->begin() + static_cast<std::ptrdiff_t>(lo), k, chunk.begin());
      if (comm) {
        auto sent = BroadcastHost(*comm, chunk.data(), k, comm::DataType::kFloat32);
        if (!sent) {
          DropRestore();
          return sent;
        }
      }
      // The chunk [lo, lo + k) into every run that overlaps it.
      for (const ParamRun& run : *runs) {
        const size_t a = std::max(lo, run.offset), b = std::min(lo + k, run.offset + run.count);
        if (a < b) std::copy(chunk.begin() + (a - lo), chunk.begin() + (b - lo), run.out + (a - run.offset));
      }
    }
  }
  return FinishRestore(adam_t);
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
