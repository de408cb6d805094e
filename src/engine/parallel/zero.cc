#include "engine/parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/optim/grad_clip.h"

namespace cohort::engine {

std::vector<size_t> ZeroPartition::counts() const {
  std::vector<size_t> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) out[static_cast<size_t>(r)] = size(r);
  return out;
}

std::vector<size_t> ZeroPartition::counts_in(size_t lo, size_t hi) const {
  std::vector<size_t> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const size_t a = std::max(lo, begin(r)), b = std::min(hi, end(r));
    out[static_cast<size_t>(r)] = b > a ? b - a : 0;
  }
  return out;
}

std::string ZeroDescription(int stage, int ranks) {
  if (stage == 0) return fmt::format("no ZeRO, replicated over {} rank{}", ranks, ranks == 1 ? "" : "s");
  return fmt::format("ZeRO-{} over {} rank{}", stage, ranks, ranks == 1 ? "" : "s");
}

Result<ZeroOptimizer> ZeroOptimizer::Create(comm::Communicator& comm, int stage, size_t total,
                                            const std::vector<DecayRange>& tensors,
                                            const AdamWConfig& config) {
  if (stage < 1 || stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument, "ZeroOptimizer: stage {} (built: 1 to 3)", stage);
  }
  const ZeroPartition p{total, comm.size()};
  const size_t lo = p.begin(comm.rank()), hi = p.end(comm.rank());
  AdamW adamw = COHORT_TRY(AdamW::Create(hi - lo, CutDecayRanges(tensors, lo, hi), config));
  return ZeroOptimizer(comm, stage, p, std::move(adamw));
}

Result<double> ZeroOptimizer::Step(std::span<float> params, std::span<float> grads,
                                   double max_norm, float lr) {
  if (grads.size() != partition_.total) {
    return Errorf(ErrorCode::kInternal, "ZeroOptimizer: {} gradients, want {}", grads.size(),
                  partition_.total);
  }
  return StepShard(params, grads.subspan(shard_begin(), partition_.size(rank_)), max_norm, lr);
}

Result<void> ZeroOptimizer::CheckShardSizes(size_t params, size_t params_want,
                                            size_t grads) const {
  if (params != params_want || grads != partition_.size(rank_)) {
    return Errorf(ErrorCode::kInternal,
                  "ZeroOptimizer: {} parameters and a gradient shard of {}, want {} and {}",
                  params, grads, params_want, partition_.size(rank_));
  }
  return {};
}

Result<double> ZeroOptimizer::StepShard(std::span<float> params, std::span<float> my_grads,
                                        double max_norm, float lr) {
  COHORT_TRY_VOID(CheckShardSizes(params.size(), partition_.total, my_grads.size()));
  const double norm = COHORT_TRY(GlobalNorm(my_grads));
  COHORT_TRY_VOID(StepAndGather(params, my_grads, norm, max_norm, lr));
  return norm;
}

Result<void> ZeroOptimizer::StepShardWithNorm(std::span<float> params, std::span<float> my_grads,
                                              double norm, double max_norm, float lr) {
  COHORT_TRY_VOID(CheckShardSizes(params.size(), partition_.total, my_grads.size()));
  return StepAndGather(params, my_grads, norm, max_norm, lr);
}

Result<double> ZeroOptimizer::StepOwnShard(std::span<float> my_params, std::span<float> my_grads,
                                           double max_norm, float lr) {
  COHORT_TRY_VOID(CheckShardSizes(my_params.size(), partition_.size(rank_), my_grads.size()));
  const double norm = COHORT_TRY(GlobalNorm(my_grads));
  COHORT_TRY_VOID(StepOwnShardWithNorm(my_params, my_grads, norm, max_norm, lr));
  return norm;
}

Result<void> ZeroOptimizer::StepOwnShardWithNorm(std::span<float> my_params,
                                                 std::span<float> my_grads, double norm,
                                                 double max_norm, float lr) {
  COHORT_TRY_VOID(CheckShardSizes(my_params.size(), partition_.size(rank_), my_grads.size()));
  ClipToNorm(my_grads, norm, max_norm);
  adamw_.Step(my_params, my_grads, lr);
  return {};
}

Result<double> SumOverRanks(comm::Communicator& comm, double local) {
  return SumOverRanks(
      [&comm](const float* send, float* recv, const std::vector<size_t>& counts) {
        return comm.AllGather(send, recv, counts, comm::DataType::kFloat32);
      },
      comm.size(), local);
}

Result<double> SumOverRanks(const HostAllGather& all_gather, int ranks, double local) {
  float pair[2] = {static_cast<float>(local), 0.0f};
  pair[1] = static_cast<float>(local - static_cast<double>(pair[0]));
  const std::vector<size_t> two(static_cast<size_t>(ranks), 2);
  std::vector<float> pairs(2 * two.size());
  COHORT_TRY_VOID(all_gather(pair, pairs.data(), two));
  double sum = 0;
  for (size_t r = 0; r < two.size(); ++r) {
    sum += static_cast<double>(pairs[2 * r]) + static_cast<double>(pairs[2 * r + 1]);
  }
  return sum;
}

Result<double> ZeroOptimizer::GlobalNorm(std::span<const float> my_grads) {
  // Every shard's sum of squares, summed in double over the ranks.
  const double squares = COHORT_TRY(SumOverRanks(*comm_, SquaredNorm(my_grads)));
  return std::sqrt(std::max(0.0, squares));
}

Result<void> ZeroOptimizer::StepWithNorm(std::span<float> params, std::span<float> grads,
                                         double norm, double max_norm, float lr) {
  if (params.size() != partition_.total || grads.size() != partition_.total) {
    return Errorf(ErrorCode::kInternal, "ZeroOptimizer: {} parameters and {} gradients, want {}",
                  params.size(), grads.size(), partition_.total);
  }
  return StepAndGather(params, grads.subspan(shard_begin(), partition_.size(rank_)), norm,
                       max_norm, lr);
}

Result<void> ZeroOptimizer::StepAndGather(std::span<float> params, std::span<float> my_grads,
                                          double norm, double max_norm, float lr) {
  std::span<float> my_params = params.subspan(shard_begin(), partition_.size(rank_));
  ClipToNorm(my_grads, norm, max_norm);
  adamw_.Step(my_params, my_grads, lr);
  // Every rank's updated shard into every rank's parameters (the send buffer is a copy: the
  // receive buffer holds it).
  scratch_.assign(my_params.begin(), my_params.end());
  const std::vector<size_t> counts = partition_.counts();
  return comm_->AllGather(scratch_.data(), params.data(), counts, comm::DataType::kFloat32);
}

}  // namespace cohort::engine
