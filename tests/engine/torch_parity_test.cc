// Parity of the CPU reference (float32) with PyTorch (float64): GPT-2 logits, loss and
// every parameter gradient; AdamW against torch.optim.AdamW; ClipGradNorm against
// torch.nn.utils.clip_grad_norm_. Needs Debian's python3-torch: without it these FAIL.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"
#include "engine/optim/grad_clip.h"
#include "engine_test_util.h"

namespace cohort::engine {
namespace {

using testing::Compare;
using testing::ReadRaw;
using testing::RunTorchReference;
using testing::TempDir;
using testing::WriteRaw;
using testing::WriteText;

constexpr double kTol = 1e-5;

// Random parameters that exercise every path: non-trivial LayerNorm weights and biases,
// O(1) activations (so attention is far from uniform), and non-zero padded wte rows (so a
// softmax that wrongly included the padded logits would change the loss).
void FillParams(GptModel& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto p = model.params();
  for (const ParamTensor& t : model.tensors()) {
    const bool is_ln_w = t.name.ends_with("ln1.w") || t.name.ends_with("ln2.w") || t.name == "ln_f.w";
    float scale;
    float shift = 0.0f;
    if (t.shape.size() == 1) {
      scale = 0.1f;
      shift = is_ln_w ? 1.0f : 0.0f;
    } else if (t.name == "wte" || t.name == "wpe") {
      scale = 0.5f;
    } else {
      scale = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));
    }
    for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] = shift + scale * normal(rng);
  }
}

struct ParityCase {
  GptConfig config;
  int B, T;
};

void RunModelParity(const ParityCase& pc) {
  const GptConfig& cfg = pc.config;
  auto model = GptModel::Create(cfg);
  ASSERT_TRUE(model.has_value()) << model.error().ToString();
  FillParams(*model, 1234);
  const int B = pc.B, T = pc.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size();
  std::mt19937 rng(99);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i] = i % 5 == 3 ? -1 : static_cast<int32_t>(rng() % V);  // some ignored
  }
  targets[1] = V - 1;  // the last real column

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  WriteText(dir.File("config.json"),
            fmt::format(R"({{"vocab_size": {}, "padded_vocab_size": {}, "max_seq_len": {},
                "n_layer": {}, "n_head": {}, "n_embd": {}, "B": {}, "T": {}}})",
                        V, Vp, cfg.max_seq_len, cfg.n_layer, cfg.n_head, cfg.n_embd, B, T));
  std::vector<float> params(model->params().begin(), model->params().end());
  WriteRaw(dir.File("params.f32"), params);
  WriteRaw(dir.File("tokens.i32"), tokens);
  WriteRaw(dir.File("targets.i32"), targets);

  auto loss = model->Forward(tokens, targets, B, T);
  ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
  std::vector<float> logits(model->logits().begin(), model->logits().end());
  model->ZeroGrad();
  ASSERT_TRUE(model->Backward(1.0f).has_value());

  ASSERT_TRUE(RunTorchReference("model", dir));
  auto ref_logits = ReadRaw<double>(dir.File("logits.f64"));
  auto ref_loss = ReadRaw<double>(dir.File("loss.f64"));
  auto ref_grads = ReadRaw<double>(dir.File("grads.f64"));
  ASSERT_EQ(ref_logits.size(), logits.size());
  ASSERT_EQ(ref_loss.size(), 1u);
  ASSERT_EQ(ref_grads.size(), model->grads().size());

  auto lm = Compare(logits.data(), ref_logits.data(), logits.size());
  EXPECT_LT(lm.rel, kTol) << "logits";
  EXPECT_LT(lm.max_rel, kTol) << "logits, element " << lm.worst;
  EXPECT_LT(std::abs(*loss - ref_loss[0]) / std::abs(ref_loss[0]), kTol)
      << "loss " << *loss << " vs torch " << ref_loss[0];

  for (const ParamTensor& t : model->tensors()) {
    auto m = Compare(model->grads().data() + t.offset, ref_grads.data() + t.offset, t.numel);
    EXPECT_LT(m.rel, kTol) << "gradient of " << t.name;
    EXPECT_LT(m.max_rel, kTol) << "gradient of " << t.name << ", element " << m.worst;
    if (::testing::Test::HasFailure()) {
      std::printf("%-16s rel %.2e max_rel %.2e\n", t.name.c_str(), m.rel, m.max_rel);
    }
  }
  // The gradient must not be trivially zero (a broken backward could be "close" to 0).
  double norm = 0;
  for (double g : ref_grads) norm += g * g;
  EXPECT_GT(norm, 1e-6);
}

TEST(TorchParityTest, GptForwardBackwardMatchesTorch) {
  GptConfig cfg;
  cfg.vocab_size = 67;  // padded to 128
  cfg.max_seq_len = 16;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_embd = 32;
  RunModelParity({cfg, 3, 12});
}

TEST(TorchParityTest, GptFullContextTwoHeads) {
  GptConfig cfg;
  cfg.vocab_size = 67;
  cfg.max_seq_len = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  RunModelParity({cfg, 2, 8});
}

TEST(TorchParityTest, AdamWMatchesTorchOverTenSteps) {
  const size_t n = 1000;
  // Four ranges, given out of order, two decaying and two not.
  std::vector<DecayRange> ranges = {{600, 400, false}, {0, 300, true}, {300, 100, false},
                                    {400, 200, true}};
  AdamWConfig ac;
  ac.beta1 = 0.9f;
  ac.beta2 = 0.95f;
  ac.eps = 1e-8f;
  ac.weight_decay = 0.1f;
  auto opt = AdamW::Create(n, ranges, ac);
  ASSERT_TRUE(opt.has_value()) << opt.error().ToString();
  const int steps = 10;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> params(n), grads(steps * n);
  for (auto& p : params) p = normal(rng);
  for (size_t i = 0; i < grads.size(); ++i) {
    // Varied magnitudes, including tiny ones where eps matters.
    grads[i] = normal(rng) * (i % 7 == 0 ? 1e-6f : 0.1f);
  }
  std::vector<float> lrs;
  for (int s = 0; s < steps; ++s) lrs.push_back(1e-3f * (1.0f + 0.3f * s));

  TempDir dir;
  std::string ranges_json, lrs_json;
  for (const auto& r : ranges) {
    ranges_json += fmt::format("{}[{}, {}, {}]", ranges_json.empty() ? "" : ", ", r.offset,
                               r.count, r.decay ? "true" : "false");
  }
  for (float lr : lrs) lrs_json += fmt::format("{}{}", lrs_json.empty() ? "" : ", ", lr);
  WriteText(dir.File("config.json"),
            fmt::format(R"({{"num_params": {}, "steps": {}, "ranges": [{}], "lrs": [{}],
                "beta1": {}, "beta2": {}, "eps": {}, "weight_decay": {}}})",
                        n, steps, ranges_json, lrs_json, ac.beta1, ac.beta2, ac.eps,
                        ac.weight_decay));
  WriteRaw(dir.File("params.f32"), params);
  WriteRaw(dir.File("grads.f32"), grads);

  for (int s = 0; s < steps; ++s) {
    opt->Step(params, std::span<const float>(grads.data() + s * n, n), lrs[s]);
  }
  EXPECT_EQ(opt->t(), steps);
  ASSERT_TRUE(RunTorchReference("adamw", dir));
  auto ref_p = ReadRaw<double>(dir.File("params.f64"));
  auto ref_m = ReadRaw<double>(dir.File("m.f64"));
  auto ref_v = ReadRaw<double>(dir.File("v.f64"));
  ASSERT_EQ(ref_p.size(), n);
  auto mp = Compare(params.data(), ref_p.data(), n);
  auto mm = Compare(opt->m().data(), ref_m.data(), n);
  auto mv = Compare(opt->v().data(), ref_v.data(), n);
  EXPECT_LT(mp.rel, kTol);
  EXPECT_LT(mp.max_rel, kTol) << "element " << mp.worst;
  EXPECT_LT(mm.rel, kTol);
  EXPECT_LT(mv.rel, kTol);
  // The update moved the parameters by much more than the tolerance (the test can fail).
  std::vector<float> start(n);
  std::mt19937_64 rng2(5);
  for (auto& p : start) p = normal(rng2);
  EXPECT_GT(Compare(start.data(), ref_p.data(), n).rel, 100 * kTol);
}

void RunClipParity(double max_norm, bool expect_clipped) {
  const std::vector<std::pair<size_t, size_t>> ranges = {{0, 100}, {100, 50}, {150, 250}};
  std::vector<float> grads(400);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (auto& g : grads) g = normal(rng);
  TempDir dir;
  std::string rj;
  for (auto [o, c] : ranges) rj += fmt::format("{}[{}, {}]", rj.empty() ? "" : ", ", o, c);
  WriteText(dir.File("config.json"),
            fmt::format(R"({{"ranges": [{}], "max_norm": {}}})", rj, max_norm));
  WriteRaw(dir.File("grads.f32"), grads);
  std::vector<float> before = grads;
  const double norm = ClipGradNorm(grads, max_norm);
  ASSERT_TRUE(RunTorchReference("clip", dir));
  auto ref_norm = ReadRaw<double>(dir.File("norm.f64"));
  auto ref_grads = ReadRaw<double>(dir.File("grads.f64"));
  ASSERT_EQ(ref_norm.size(), 1u);
  EXPECT_LT(std::abs(norm - ref_norm[0]) / ref_norm[0], 1e-7);
  auto m = Compare(grads.data(), ref_grads.data(), grads.size());
  EXPECT_LT(m.max_rel, kTol);
  EXPECT_EQ(expect_clipped, before != grads);
}

TEST(TorchParityTest, ClipGradNormClipsLikeTorch) { RunClipParity(1.0, true); }
TEST(TorchParityTest, ClipGradNormLeavesSmallGradients) { RunClipParity(1e3, false); }

}  // namespace
}  // namespace cohort::engine
