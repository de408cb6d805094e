// The CPU TrainModel: GptModel + AdamW + ClipGradNorm in host memory, exactly the calls the
// trainer made before it had a device choice (so CPU runs are unchanged, bitwise).
#include <algorithm>
#include <utility>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/optim/grad_clip.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

class CpuTrainModel final : public TrainModel {
 public:
  CpuTrainModel(GptModel model, AdamW optimizer)
      : model_(std::move(model)), optimizer_(std::move(optimizer)) {}

  const GptConfig& config() const override { return model_.config(); }
  size_t num_params() const override { return model_.params().size(); }

  Result<void> ZeroGrad() override {
    model_.ZeroGrad();
    return {};
  }
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T) override {
    return model_.Forward(tokens, targets, B, T);
  }
  Result<void> Backward(float loss_scale, const GradReadyFn& ready) override {
    return model_.Backward(loss_scale, ready);
  }
  Result<double> ClipAndStep(double max_norm, float lr) override {
    const double norm = ClipGradNorm(model_.grads(), max_norm);
    optimizer_.Step(model_.params(), model_.grads(), lr);
    return norm;
  }

  std::span<float> grads() override { return model_.grads(); }
  DdpReducer::WaitReadyFn grad_wait() override { return {}; }

  Result<void> BroadcastHost(comm::Communicator& comm, void* data, size_t count,
                             comm::DataType type) override {
    return comm.Broadcast(data, count, type, 0);
  }
  Result<void> AllReduceHost(comm::Communicator& comm, float* data, size_t count,
                             comm::ReduceOp op) override {
    return comm.AllReduce(data, data, count, comm::DataType::kFloat32, op);
  }

  Result<void> RestoreState(comm::Communicator* comm, Checkpoint* ckpt, int64_t adam_t) override {
    auto params = model_.params();
    std::vector<float> m(params.size()), v(params.size());
    if (ckpt) {
      std::copy(ckpt->params.begin(), ckpt->params.end(), params.begin());
      m = std::move(ckpt->adam_m);
      v = std::move(ckpt->adam_v);
    }
    if (comm) {
      COHORT_TRY_VOID(comm->Broadcast(params.data(), params.size(), comm::DataType::kFloat32, 0));
      COHORT_TRY_VOID(comm->Broadcast(m.data(), m.size(), comm::DataType::kFloat32, 0));
      COHORT_TRY_VOID(comm->Broadcast(v.data(), v.size(), comm::DataType::kFloat32, 0));
    }
    return optimizer_.Restore(m, v, adam_t);
  }
  Result<void> BroadcastParams(comm::Communicator& comm) override {
    auto params = model_.params();
    return comm.Broadcast(params.data(), params.size(), comm::DataType::kFloat32, 0);
  }
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    view.params = model_.params();
    view.adam_m = optimizer_.m();
    view.adam_v = optimizer_.v();
    view.adam_t = optimizer_.t();
    return {};
  }

  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    const GptConfig& c = model_.config();
    const int T = static_cast<int>(window.size());
    COHORT_TRY(model_.Forward(window, {}, 1, T));
    const size_t vp = c.padded_vocab_size();
    std::span<const float> last = model_.logits().subspan((T - 1) * vp, c.vocab_size);
    return std::vector<float>(last.begin(), last.end());
  }
  int max_window() const override { return model_.config().max_seq_len; }

  Result<void> Export(const std::string& path) override { return ExportGpt2(model_, path); }

 private:
  GptModel model_;
  AdamW optimizer_;
};

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeCpuTrainModel(GptModel model, const AdamWConfig& adamw) {
  std::vector<DecayRange> ranges;
  for (const auto& t : model.tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  AdamW optimizer = COHORT_TRY(AdamW::Create(model.params().size(), std::move(ranges), adamw));
  return std::unique_ptr<TrainModel>(new CpuTrainModel(std::move(model), std::move(optimizer)));
}

}  // namespace cohort::engine
