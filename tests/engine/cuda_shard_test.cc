// GptShardCudaModel (tensor and pipeline parallelism on CUDA) against the references:
//   a) tensor 2 against the float32 CPU model and the single-device GptCudaModel on the same
//      bf16-exact weights and micro-batches: the losses, the last position's logits
//      gathered from the tensor group, every logical gradient (kGradTol, the bound of the
//      single-device CUDA-vs-CPU test: both keep activations in bf16), and one all-reduce per
//      block half each way;
//   b) pipeline 2 against the unsplit shard, and tensor 2 x pipeline 2 against tensor 2:
//      a chunk's arithmetic does not depend on where the stage boundary falls (the pipeline
//      message is float32, bf16 -> float -> bf16 is exact), so every gradient is the same
//      bits, except wte, whose two copies' gradients are added in another order;
//   c) a micro-batch with a token outside the vocabulary is refused, naming it.
// Two micro-batches are in flight in every run (both forwards, then the backwards in
// reverse), so the stashes and the gradient accumulation are covered. The tensor group is a
// shm communicator over the emulator's host-backed device memory (cuda_emu.cmake), NCCL on
// a GPU (2 GPUs for tensor 2; the test skips with fewer).
#include "engine/model/gpt_shard_cuda.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "cuda_model_util.h"
#include "cuda_test_util.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_cuda.h"
#include "engine/model/gpt_layout.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/tensor_parallel.h"

namespace cohort::engine {
namespace {

namespace ct = ::cohort::engine::cuda::testing;
using ::testing::HasSubstr;

#ifdef COHORT_CUDA_EMULATED
constexpr const char* kBackend = "shm";
constexpr Millis kTimeout{900'000};  // emulated kernels: a peer can be minutes behind
#else
constexpr const char* kBackend = "nccl";
constexpr Millis kTimeout{10'000};
#endif

// 2 layers, C 64, 4 heads (head size 16), vocab 100 padded to 128: at tensor 2 rank 1
// holds rows [64, 128), of which 36 are real.
GptConfig ShardConfig() {
  GptConfig c;
  c.vocab_size = 100;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  return c;
}

// One rank holding the whole model: every layer, the embedding and the head in one chunk.
ShardSpec WholeModelSpec(const GptConfig& c) {
  ShardSpec spec;
  spec.config = c;
  spec.chunks.push_back({0, c.n_layer, true, true});
  return spec;
}
constexpr int kB = 2, kT = 16, kMicro = 2;
constexpr double kGradTol = 5e-2;  // as cuda_model_test.cc: bf16 activations vs float32

// What one layout computed, in the logical model's terms.
struct LayoutRun {
  std::vector<float> losses;  // per micro-batch (the last stage's)
  std::vector<float> grads;   // logical, wte's two copies summed
  std::vector<float> logits;  // sequence 0, position T-1, of micro-batch 0
  int64_t all_reduces = 0;    // rank 0's tensor group, one chunk's forward + backward
};

// Skips (returns false) when the backend cannot give `ranks` ranks.
bool HaveRanks(int ranks) {
  if (std::string(kBackend) != "nccl") return true;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return false;
  return devices >= ranks;
}

// `tensor` ranks (threads), each holding the shards of `stages` pipeline stages (the layers
// split evenly) and driving them in order: forward through the stages for each micro-batch,
// then the backwards in reverse. Tied copies of wte are summed on the host, as the trainer's
// embedding group does.
LayoutRun RunLayout(const GptConfig& c, const std::vector<float>& params,
                    const std::vector<ct::Batch>& batches, int tensor, int stages) {
  LayoutRun out;
  std::vector<std::vector<float>> local(tensor * stages);
  std::vector<GptShardLayout> layouts(tensor * stages);
  comm::commtest::RunRanks(kBackend, tensor, [&](comm::Communicator& comm) {
    const int r = comm.rank();
    TensorParallelGroup tp(&comm);
    std::vector<std::unique_ptr<GptShardCudaModel>> shard(stages);
    for (int s = 0; s < stages; ++s) {
      ShardSpec spec;
      spec.config = c;
      spec.tensor_rank = r;
      spec.tensor_size = tensor;
      spec.chunks.push_back({s * c.n_layer / stages, (s + 1) * c.n_layer / stages, s == 0,
                             s == stages - 1});
      auto m = GptShardCudaModel::Create(spec, tp);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      shard[s] = std::move(*m);
      std::vector<float> mine(shard[s]->layout().total);
      ExtractShard(shard[s]->layout(), params, mine);
      ASSERT_TRUE(shard[s]->CopyParamsFromHost(mine).has_value());
      ASSERT_TRUE(shard[s]->ZeroGrad().has_value());
    }
    // The pipeline's messages are device memory (gpt_shard_cuda.h).
    const size_t act = static_cast<size_t>(kB) * kT * c.n_embd;
    std::vector<ct::DeviceBuffer<float>> acts;
    for (int s = 0; s < stages; ++s) acts.emplace_back(act);
    std::vector<float> losses;
    for (int mb = 0; mb < kMicro; ++mb) {
      MicrobatchTokens batch{batches[mb].tokens, batches[mb].targets, kB, kT};
      for (int s = 0; s < stages; ++s) {
        const float* in = s == 0 ? nullptr : acts[s - 1].data();
        auto loss = shard[s]->Forward(0, mb, batch, in, acts[s].data());
        ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
        if (s == stages - 1) losses.push_back(*loss);
      }
      if (mb == 0 && r == 0) out.all_reduces = tp.all_reduces();
    }
    ct::DeviceBuffer<float> grad_in(act), grad_out(act);
    for (int mb = kMicro - 1; mb >= 0; --mb) {
      for (int s = stages - 1; s >= 0; --s) {
        auto bw = shard[s]->Backward(0, mb, 1.0f / kMicro, grad_out.data(), grad_in.data());
        ASSERT_TRUE(bw.has_value()) << bw.error().ToString();
        std::swap(grad_in, grad_out);
      }
    }
    // Logits of a forward without targets, gathered from the tensor group.
    MicrobatchTokens probe{batches[0].tokens, {}, kB, kT};
    for (int s = 0; s < stages; ++s) {
      const float* in = s == 0 ? nullptr : acts[s - 1].data();
      ASSERT_TRUE(shard[s]->Forward(0, 9, probe, in, acts[s].data()).has_value());
      if (s < stages - 1) shard[s]->Release(0, 9);
    }
    auto logits = shard[stages - 1]->Logits(0, 9, kT - 1);
    ASSERT_TRUE(logits.has_value()) << logits.error().ToString();
    shard[stages - 1]->Release(0, 9);
    EXPECT_EQ(shard[stages - 1]->activation_bytes(), 0u);
    for (int s = 0; s < stages; ++s) {
      local[r * stages + s].assign(shard[s]->layout().total, std::nanf(""));
      ASSERT_TRUE(shard[s]->CopyGradsToHost(local[r * stages + s]).has_value());
      layouts[r * stages + s] = shard[s]->layout();
    }
    if (r == 0) {
      out.losses = losses;
      out.logits = *logits;
    }
  }, [](comm::CommOptions& o) { o.timeout = kTimeout; });
  // Logical gradients: every shard's slices; the head's copy of wte added to the
  // embedding's (PlaceShard writes the embedding's).
  out.grads.assign(c.num_parameters(), std::nanf(""));
  for (int r = 0; r < tensor; ++r) {
    std::vector<float>& first = local[r * stages];
    if (stages > 1) {
      const GptShardLayout& head = layouts[r * stages + stages - 1];
      const GptShardLayout& emb = layouts[r * stages];
      const size_t n = static_cast<size_t>(emb.vocab_end - emb.vocab_begin) * c.n_embd;
      for (size_t i = 0; i < n; ++i) {
        first[emb.chunks[0].wte + i] += local[r * stages + stages - 1][head.chunks[0].head_wte + i];
      }
    }
    for (int s = 0; s < stages; ++s) {
      if (!layouts[r * stages + s].tensors.empty()) {
        PlaceShard(layouts[r * stages + s], local[r * stages + s], out.grads);
      }
    }
  }
  return out;
}

struct Fixture {
  GptConfig c = ShardConfig();
  GptModel cpu = GptModel::Create(ShardConfig()).value();
  std::vector<float> params;
  std::vector<ct::Batch> batches;
  Fixture() {
    params = ct::RandomParams(cpu, 5);
    std::copy(params.begin(), params.end(), cpu.params().begin());
    for (int mb = 0; mb < kMicro; ++mb) batches.push_back(ct::MakeBatch(c, kB, kT, 70 + mb));
  }
};

// --- a) tensor 2 against the CPU and the single-device model ---------------------------

TEST(GptShardCudaTest, Tensor2MatchesTheCpuAndTheSingleDeviceModel) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveRanks(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  Fixture f;
  const GptConfig& c = f.c;
  // The CPU reference and the single-device CUDA model, the same two micro-batches.
  auto gpu = GptCudaModel::Create(c, kB, kT);
  ASSERT_TRUE(gpu.has_value()) << gpu.error().ToString();
  ASSERT_TRUE((*gpu)->CopyParamsFromHost(f.params).has_value());
  ASSERT_TRUE((*gpu)->ZeroGrad().has_value());
  f.cpu.ZeroGrad();
  std::vector<float> cpu_loss, gpu_loss;
  for (const ct::Batch& b : f.batches) {
    cpu_loss.push_back(f.cpu.Forward(b.tokens, b.targets, kB, kT).value());
    ASSERT_TRUE(f.cpu.Backward(1.0f / kMicro).has_value());
    gpu_loss.push_back((*gpu)->Forward(b.tokens, b.targets, kB, kT).value());
    ASSERT_TRUE((*gpu)->Backward(1.0f / kMicro).has_value());
  }
  std::vector<float> gpu_grads(c.num_parameters());
  ASSERT_TRUE((*gpu)->CopyGradsToHost(gpu_grads).has_value());
  ASSERT_TRUE((*gpu)->Forward(f.batches[0].tokens, {}, kB, kT).has_value());
  const std::vector<float> gpu_logits = (*gpu)->LastLogits().value();

  const LayoutRun tp2 = RunLayout(c, f.params, f.batches, 2, 1);
  ASSERT_EQ(tp2.losses.size(), static_cast<size_t>(kMicro));
  for (int mb = 0; mb < kMicro; ++mb) {
    EXPECT_NEAR(tp2.losses[mb], cpu_loss[mb], 1e-2 * cpu_loss[mb]) << "micro-batch " << mb;
    EXPECT_NEAR(tp2.losses[mb], gpu_loss[mb], 1e-2 * gpu_loss[mb]) << "micro-batch " << mb;
  }
  ct::ExpectGradsClose(f.cpu.tensors(), tp2.grads, f.cpu.grads(), kGradTol, "tensor 2 vs CPU");
  ct::ExpectGradsClose(f.cpu.tensors(), tp2.grads, gpu_grads, kGradTol,
                       "tensor 2 vs one device");
  ASSERT_EQ(tp2.logits.size(), static_cast<size_t>(c.vocab_size));
  const std::span<const float> seq0(gpu_logits.data(), c.vocab_size);
  EXPECT_LT(ct::RelError(tp2.logits, seq0), 2e-2) << "gathered logits";
  // Forward of one micro-batch: the embedding, one per block half, the loss's sums.
  EXPECT_EQ(tp2.all_reduces, 1 + 2 * c.n_layer + 1);
}

// --- b) pipeline splits give the unsplit gradients -------------------------------------

// Every value but wte's gradient is the same bits; wte's two copies are summed in another
// order (the head's contribution first on one stage, last across two).
void ExpectSameRun(const GptConfig& c, const LayoutRun& split, const LayoutRun& whole,
                   const std::string& what) {
  EXPECT_EQ(split.losses, whole.losses) << what;
  EXPECT_EQ(split.logits, whole.logits) << what;
  const GptLayout lay = GptLayout::Build(c);
  const size_t wte_end = lay.wte + static_cast<size_t>(c.padded_vocab_size()) * c.n_embd;
  size_t differ = 0;
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    if (i >= lay.wte && i < wte_end) continue;
    differ += split.grads[i] != whole.grads[i] ? 1 : 0;
  }
  EXPECT_EQ(differ, 0u) << what << ": gradients outside wte that are not the same bits";
  std::span<const float> a(split.grads.data() + lay.wte, wte_end - lay.wte);
  std::span<const float> b(whole.grads.data() + lay.wte, wte_end - lay.wte);
  EXPECT_LT(ct::RelError(a, b), 1e-6) << what << ": wte";
}

TEST(GptShardCudaTest, Pipeline2GivesTheUnsplitGradients) {
  COHORT_SKIP_WITHOUT_GPU();
  Fixture f;
  const LayoutRun whole = RunLayout(f.c, f.params, f.batches, 1, 1);
  const LayoutRun split = RunLayout(f.c, f.params, f.batches, 1, 2);
  ExpectSameRun(f.c, split, whole, "pipeline 2");
  // One rank: the CUDA kernels against the CPU, as the single-device test bounds them.
  f.cpu.ZeroGrad();
  for (const ct::Batch& b : f.batches) {
    ASSERT_TRUE(f.cpu.Forward(b.tokens, b.targets, kB, kT).has_value());
    ASSERT_TRUE(f.cpu.Backward(1.0f / kMicro).has_value());
  }
  ct::ExpectGradsClose(f.cpu.tensors(), whole.grads, f.cpu.grads(), kGradTol, "tensor 1 vs CPU");
}

TEST(GptShardCudaTest, Tensor2Pipeline2GivesTheTensor2Gradients) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveRanks(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  Fixture f;
  const LayoutRun whole = RunLayout(f.c, f.params, f.batches, 2, 1);
  const LayoutRun split = RunLayout(f.c, f.params, f.batches, 2, 2);
  ExpectSameRun(f.c, split, whole, "tensor 2 x pipeline 2");
}

// A stash kept from a larger micro-batch is carved anew for a smaller one (sampling grows
// its window a token at a time): the same loss and logits, bit for bit, as a model that
// never held the larger one.
TEST(GptShardCudaTest, AStashReusedForAnotherShapeGivesTheSameResults) {
  COHORT_SKIP_WITHOUT_GPU();
  const GptConfig c = ShardConfig();
  TensorParallelGroup tp(nullptr);
  const ShardSpec spec = WholeModelSpec(c);
  auto reused = GptShardCudaModel::Create(spec, tp);
  auto fresh = GptShardCudaModel::Create(spec, tp);
  ASSERT_TRUE(reused.has_value() && fresh.has_value());
  std::vector<float> params((*reused)->layout().total);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i] = 0.02f * static_cast<float>(static_cast<int>(i * 7919 % 101) - 50) / 50.0f;
  }
  ASSERT_TRUE((*reused)->CopyParamsFromHost(params).has_value());
  ASSERT_TRUE((*fresh)->CopyParamsFromHost(params).has_value());
  std::vector<int32_t> big_tokens(2 * 16), big_targets(2 * 16);
  for (size_t i = 0; i < big_tokens.size(); ++i) {
    big_tokens[i] = static_cast<int32_t>(i * 13 % 100);
    big_targets[i] = static_cast<int32_t>(i * 17 % 100);
  }
  ASSERT_TRUE(
      (*reused)->Forward(0, 0, {big_tokens, big_targets, 2, 16}, nullptr, nullptr).has_value());
  (*reused)->Release(0, 0);
  const std::vector<int32_t> tokens(big_tokens.begin(), big_tokens.begin() + 7);
  const std::vector<int32_t> targets(big_targets.begin(), big_targets.begin() + 7);
  auto a = (*reused)->Forward(0, 1, {tokens, targets, 1, 7}, nullptr, nullptr);
  auto b = (*fresh)->Forward(0, 1, {tokens, targets, 1, 7}, nullptr, nullptr);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(*a, *b);
  auto la = (*reused)->Logits(0, 1, 6);
  auto lb = (*fresh)->Logits(0, 1, 6);
  ASSERT_TRUE(la.has_value() && lb.has_value());
  EXPECT_EQ(*la, *lb);
  // It held the larger allocation, not a second one.
  EXPECT_EQ((*reused)->activation_bytes(), (*reused)->peak_activation_bytes());
}

// --- c) input checks -------------------------------------------------------------------

TEST(GptShardCudaTest, RefusesTokensOutsideTheVocabulary) {
  COHORT_SKIP_WITHOUT_GPU();
  const GptConfig c = ShardConfig();
  TensorParallelGroup tp(nullptr);
  const ShardSpec spec = WholeModelSpec(c);
  auto m = GptShardCudaModel::Create(spec, tp);
  ASSERT_TRUE(m.has_value()) << m.error().ToString();
  std::vector<int32_t> tokens(kB * kT, 3), targets(kB * kT, 4);
  tokens[5] = c.vocab_size;
  auto bad = (*m)->Forward(0, 0, {tokens, targets, kB, kT}, nullptr, nullptr);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.error().message, HasSubstr("token id 100 at position 5"));
  tokens[5] = 3;
  targets[7] = -2;
  auto bad_target = (*m)->Forward(0, 0, {tokens, targets, kB, kT}, nullptr, nullptr);
  ASSERT_FALSE(bad_target.has_value());
  EXPECT_THAT(bad_target.error().message, HasSubstr("target -2 at position 7"));
}

}  // namespace
}  // namespace cohort::engine
