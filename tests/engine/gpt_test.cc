// GptModel behaviour beyond numerical parity: gradient accumulation, the `ready`
// callback's coverage and order, the pieces BackwardToSink hands a GradSink, the parameter layout, deterministic initialisation,
// TrainingFlopsPerToken, and clear errors for bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gpt.h"

namespace cohort::engine {
namespace {

GptConfig SmallConfig() {
  GptConfig c;
  c.vocab_size = 67;
  c.max_seq_len = 12;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

GptModel MakeModel(const GptConfig& c, uint64_t seed = 7) {
  auto m = GptModel::Create(c);
  EXPECT_TRUE(m.has_value()) << m.error().ToString();
  m->InitRandom(seed);
  // Larger weights than GPT-2's init so every gradient is well above rounding.
  for (float& p : m->params()) p *= 10.0f;
  return std::move(*m);
}

std::vector<int32_t> RandomIds(size_t n, int V, uint64_t seed, bool with_ignored = false) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = with_ignored && i % 4 == 1 ? -1 : static_cast<int32_t>(rng() % V);
  }
  return v;
}

TEST(GptTest, LayoutMatchesTheHeader) {
  const GptConfig c = SmallConfig();
  auto m = GptModel::Create(c);
  ASSERT_TRUE(m.has_value());
  const int C = c.n_embd, Vp = c.padded_vocab_size();
  EXPECT_EQ(Vp, 128);
  const auto& ts = m->tensors();
  ASSERT_EQ(ts.size(), 2u + 12u * c.n_layer + 2u);
  EXPECT_EQ(ts[0].name, "wte");
  EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{Vp, C}));
  EXPECT_EQ(ts[1].name, "wpe");
  EXPECT_EQ(ts[1].shape, (std::vector<int64_t>{c.max_seq_len, C}));
  EXPECT_EQ(ts[2].name, "h.0.ln1.w");
  EXPECT_EQ(ts[4].name, "h.0.qkv.w");
  EXPECT_EQ(ts[4].shape, (std::vector<int64_t>{3 * C, C}));
  EXPECT_EQ(ts[12].name, "h.0.fc_proj.w");
  EXPECT_EQ(ts[12].shape, (std::vector<int64_t>{C, 4 * C}));
  EXPECT_EQ(ts.back().name, "ln_f.b");
  size_t offset = 0;
  for (const ParamTensor& t : ts) {
    EXPECT_EQ(t.offset, offset) << t.name;
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    EXPECT_EQ(t.numel, numel) << t.name;
    EXPECT_EQ(t.weight_decay, t.shape.size() == 2) << t.name;
    offset += t.numel;
  }
  EXPECT_EQ(offset, c.num_parameters());
  EXPECT_EQ(m->params().size(), c.num_parameters());
  EXPECT_EQ(m->grads().size(), c.num_parameters());
  ASSERT_NE(m->FindTensor("h.2.attn_proj.b"), nullptr);
  EXPECT_EQ(m->FindTensor("h.2.attn_proj.b")->numel, static_cast<size_t>(C));
  EXPECT_EQ(m->FindTensor("h.3.qkv.w"), nullptr);
}

TEST(GptTest, Gpt2SmallParameterCountAndFlops) {
  GptConfig c;  // GPT-2 124M defaults
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  EXPECT_EQ(c.num_parameters(), 124475904u);  // llm.c's figure for the padded GPT-2
  const double C = 768, L = 12;
  const double N = L * (12 * C * C + 13 * C) + 2 * C + 50257 * C;
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(c, 1024), 6 * N + 12 * L * C * 1024);
}

TEST(GptTest, InitRandomIsDeterministicAndFollowsGpt2) {
  const GptConfig c = SmallConfig();
  auto a = GptModel::Create(c), b = GptModel::Create(c), d = GptModel::Create(c);
  a->InitRandom(42);
  b->InitRandom(42);
  d->InitRandom(43);
  EXPECT_TRUE(std::equal(a->params().begin(), a->params().end(), b->params().begin()));
  EXPECT_FALSE(std::equal(a->params().begin(), a->params().end(), d->params().begin()));
  auto stddev = [&](const char* name) {
    const ParamTensor* t = a->FindTensor(name);
    double s = 0;
    for (size_t i = 0; i < t->numel; ++i) s += a->params()[t->offset + i] * a->params()[t->offset + i];
    return std::sqrt(s / t->numel);
  };
  EXPECT_NEAR(stddev("h.0.fc.w"), 0.02, 0.002);
  EXPECT_NEAR(stddev("h.1.qkv.w"), 0.02, 0.002);
  EXPECT_NEAR(stddev("h.0.fc_proj.w"), 0.02 / std::sqrt(2.0 * c.n_layer), 0.002);
  EXPECT_NEAR(stddev("h.2.attn_proj.w"), 0.02 / std::sqrt(2.0 * c.n_layer), 0.003);
  const ParamTensor* wte = a->FindTensor("wte");
  for (size_t i = static_cast<size_t>(c.vocab_size) * c.n_embd; i < wte->numel; ++i) {
    ASSERT_EQ(a->params()[wte->offset + i], 0.0f) << "padded wte row";
  }
  for (const ParamTensor& t : a->tensors()) {
    if (t.shape.size() != 1) continue;
    const float want = t.name.ends_with(".w") ? 1.0f : 0.0f;
    for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(a->params()[t.offset + i], want) << t.name;
  }
}

TEST(GptTest, TwoHalfBatchesWithHalfScaleEqualTheWholeBatch) {
  const GptConfig c = SmallConfig();
  const int B = 4, T = 10;
  GptModel m = MakeModel(c);
  auto tokens = RandomIds(B * T, c.vocab_size, 1);
  auto targets = RandomIds(B * T, c.vocab_size, 2);

  m.ZeroGrad();
  ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
  ASSERT_TRUE(m.Backward(1.0f).has_value());
  std::vector<float> whole(m.grads().begin(), m.grads().end());

  m.ZeroGrad();
  const size_t half = static_cast<size_t>(B / 2) * T;
  for (int part = 0; part < 2; ++part) {
    std::span<const int32_t> tk(tokens.data() + part * half, half);
    std::span<const int32_t> tg(targets.data() + part * half, half);
    ASSERT_TRUE(m.Forward(tk, tg, B / 2, T).has_value());
    ASSERT_TRUE(m.Backward(0.5f).has_value());
  }
  double diff = 0, ref = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    diff += (m.grads()[i] - whole[i]) * (m.grads()[i] - whole[i]);
    ref += whole[i] * whole[i];
  }
  ASSERT_GT(ref, 0.0);
  // float32 rounding only: a batch of 4 and two of 2 go through sgemm in different blockings.
  // OpenBLAS's FMA kernels (Haswell, Zen) differ by 3.2e-5 here, its SSE3 ones by under 1e-5;
  // a mistake in accumulation or scaling differs by order 1.
  EXPECT_LT(std::sqrt(diff / ref), 1e-4);
  // Accumulation really adds: a second Backward of the same batch doubles the gradient.
  m.ZeroGrad();
  ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
  ASSERT_TRUE(m.Backward(1.0f).has_value());
  ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
  ASSERT_TRUE(m.Backward(1.0f).has_value());
  for (size_t i = 0; i < whole.size(); i += 97) {
    ASSERT_NEAR(m.grads()[i], 2 * whole[i], 1e-5f * (1 + std::abs(whole[i]))) << i;
  }
}

TEST(GptTest, ReadyCoversEveryElementOnceInOrder) {
  const GptConfig c = SmallConfig();
  GptModel m = MakeModel(c);
  const int B = 2, T = 12;
  auto tokens = RandomIds(B * T, c.vocab_size, 3);
  auto targets = RandomIds(B * T, c.vocab_size, 4, /*with_ignored=*/true);
  ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
  m.ZeroGrad();
  std::vector<std::pair<size_t, size_t>> calls;
  std::vector<int> seen(m.grads().size(), 0);
  // The slice must be final when announced: snapshot it and compare at the end.
  std::vector<float> snapshot(m.grads().size(), std::nanf(""));
  ASSERT_TRUE(m.Backward(1.0f, [&](size_t offset, size_t count) {
                 calls.emplace_back(offset, count);
                 for (size_t i = offset; i < offset + count; ++i) {
                   ++seen[i];
                   snapshot[i] = m.grads()[i];
                 }
               }).has_value());
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "element " << i;
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(snapshot[i], m.grads()[i]) << "element " << i;

  // ln_f, h.L-1 ... h.0 (each a whole block), wpe, wte.
  ASSERT_EQ(calls.size(), static_cast<size_t>(c.n_layer) + 3);
  EXPECT_EQ(calls[0], std::make_pair(m.FindTensor("ln_f.w")->offset, size_t(2 * c.n_embd)));
  for (int l = c.n_layer - 1, k = 1; l >= 0; --l, ++k) {
    const std::string p = "h." + std::to_string(l) + ".";
    const size_t begin = m.FindTensor(p + "ln1.w")->offset;
    const ParamTensor* last = m.FindTensor(p + "fc_proj.b");
    EXPECT_EQ(calls[k], std::make_pair(begin, last->offset + last->numel - begin)) << p;
  }
  EXPECT_EQ(calls[c.n_layer + 1], std::make_pair(m.FindTensor("wpe")->offset, m.FindTensor("wpe")->numel));
  EXPECT_EQ(calls[c.n_layer + 2], std::make_pair(m.FindTensor("wte")->offset, m.FindTensor("wte")->numel));
}

// A GradSink that keeps every piece in a whole buffer, and hands out buffers full of NaN
// (so a piece the model did not zero shows).
class CollectingSink : public GradSink {
 public:
  explicit CollectingSink(size_t total) : grads(total, 0.0f), seen(total, 0) {}
  float* Acquire(size_t offset, size_t count) override {
    EXPECT_FALSE(held) << "a second piece acquired before the first was done";
    held = true;
    buffer.assign(count, std::nanf(""));
    pieces.emplace_back(offset, count);
    return buffer.data();
  }
  void Done(size_t offset, size_t count) override {
    EXPECT_TRUE(held);
    held = false;
    EXPECT_EQ(pieces.back(), std::make_pair(offset, count));
    for (size_t i = 0; i < count; ++i) {
      grads[offset + i] += buffer[i];
      ++seen[offset + i];
    }
  }
  std::vector<float> grads, buffer;
  std::vector<int> seen;
  std::vector<std::pair<size_t, size_t>> pieces;
  bool held = false;
};

// BackwardToSink (ZeRO-2's gradient pieces): every element in exactly one piece, pieces in
// descending order and none over MaxGradPiece (wte cut into row chunks: a vocabulary
// larger than a block), and the gradient Backward writes into grads(), accumulated twice.
TEST(GptTest, BackwardToSinkHandsBackwardsGradientInBoundedPieces) {
  GptConfig c = SmallConfig();
  c.vocab_size = 2000;  // wte 2048 x 16 floats: ten pieces of at most one block's size
  GptModel m = MakeModel(c);
  const int B = 2, T = 12;
  auto tokens = RandomIds(B * T, c.vocab_size, 5);
  auto targets = RandomIds(B * T, c.vocab_size, 6, /*with_ignored=*/true);
  m.ZeroGrad();
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
    ASSERT_TRUE(m.Backward(0.5f).has_value());
  }
  const std::vector<float> want(m.grads().begin(), m.grads().end());

  CollectingSink sink(want.size());
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
    ASSERT_TRUE(m.BackwardToSink(0.5f, sink).has_value());
  }
  const size_t max_piece = GptModel::MaxGradPiece(c);
  EXPECT_EQ(max_piece, 12u * 16 * 16 + 13 * 16);  // a block
  size_t wte_pieces = 0;
  for (size_t k = 0; k < sink.pieces.size() / 2; ++k) {
    const auto [offset, count] = sink.pieces[k];
    EXPECT_LE(count, max_piece) << "piece " << k;
    if (k > 0) {
      EXPECT_EQ(offset + count, sink.pieces[k - 1].first) << "piece " << k;
    }
    if (offset < m.FindTensor("wpe")->offset) ++wte_pieces;
  }
  EXPECT_EQ(sink.pieces.back().first, 0u);
  EXPECT_EQ(wte_pieces, 10u);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(sink.seen[i], 2) << "element " << i;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(sink.grads[i])) << "element " << i << " was not zeroed";
    diff += (sink.grads[i] - want[i]) * (sink.grads[i] - want[i]);
    ref += want[i] * want[i];
  }
  ASSERT_GT(ref, 0.0);
  // The same products, wte's gradient in row blocks: rounding only.
  EXPECT_LT(std::sqrt(diff / ref), 1e-6);

  // A model whose gradient buffer is released trains through a sink only.
  m.ReleaseGradients();
  EXPECT_TRUE(m.grads().empty());
  ASSERT_TRUE(m.Forward(tokens, targets, B, T).has_value());
  EXPECT_EQ(m.Backward(1.0f).error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(m.BackwardToSink(1.0f, sink).has_value());
}

// A ParamSource that serves pieces of a whole copy, each into a buffer of its own that
// Release frees, and counts what is held.
class CopyingSource : public ParamSource {
 public:
  explicit CopyingSource(std::vector<float> all) : all_(std::move(all)) {}
  const float* Gather(size_t offset, size_t count) override {
    EXPECT_TRUE(held_.empty()) << "a second piece gathered before the first was released";
    EXPECT_LE(offset + count, all_.size());
    held_.assign(all_.begin() + offset, all_.begin() + offset + count);
    pieces.emplace_back(offset, count);
    peak = std::max(peak, held_.size());
    return held_.data();
  }
  void Release(size_t offset, size_t count) override {
    EXPECT_EQ(pieces.back(), std::make_pair(offset, count));
    held_.clear();
    held_.shrink_to_fit();
  }
  bool holds_nothing() const { return held_.empty(); }
  std::vector<std::pair<size_t, size_t>> pieces;
  size_t peak = 0;

 private:
  std::vector<float> all_, held_;
};

// ZeRO-3's model side: a model without its parameters (ReleaseParams) computes every piece
// from a ParamSource's gathered buffer, one piece held at a time and released after use,
// and gets the losses and gradients of the model holding them, bit for bit.
TEST(GptTest, ParamSourcePiecesGiveTheSameLossAndGradients) {
  GptConfig c = SmallConfig();
  c.vocab_size = 2000;
  GptModel whole = MakeModel(c);
  GptModel sharded = MakeModel(c);
  CopyingSource source(std::vector<float>(whole.params().begin(), whole.params().end()));
  sharded.ReleaseParams();
  EXPECT_TRUE(sharded.params().empty());
  sharded.SetParamSource(&source);
  const int B = 2, T = 12;
  auto tokens = RandomIds(B * T, c.vocab_size, 7);
  auto targets = RandomIds(B * T, c.vocab_size, 8, /*with_ignored=*/true);
  CollectingSink want(whole.grads().size()), got(whole.grads().size());
  const float loss_whole = whole.Forward(tokens, targets, B, T).value();
  const float loss_sharded = sharded.Forward(tokens, targets, B, T).value();
  EXPECT_EQ(loss_sharded, loss_whole);
  ASSERT_TRUE(whole.BackwardToSink(1.0f, want).has_value());
  ASSERT_TRUE(sharded.BackwardToSink(1.0f, got).has_value());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i], want.grads[i]) << "element " << i;
  }
  EXPECT_TRUE(source.holds_nothing());
  // Forward: wte, wpe, blocks 0..L-1, ln_f, wte; backward: wte, ln_f, blocks L-1..0.
  const size_t wte = whole.FindTensor("wte")->numel, wpe = whole.FindTensor("wpe")->numel;
  ASSERT_EQ(source.pieces.size(), 2 * static_cast<size_t>(c.n_layer) + 6);
  EXPECT_EQ(source.pieces[0], std::make_pair(size_t{0}, wte));
  EXPECT_EQ(source.pieces[1], std::make_pair(wte, wpe));
  EXPECT_EQ(source.pieces[c.n_layer + 3], std::make_pair(size_t{0}, wte));
  EXPECT_EQ(source.pieces[c.n_layer + 4], std::make_pair(size_t{0}, wte));
  EXPECT_EQ(source.pieces.back().first, whole.FindTensor("h.0.ln1.w")->offset);
  // The most held at once: wte (the embeddings are two pieces), not the model.
  EXPECT_EQ(source.peak, wte);
  EXPECT_LT(source.peak, whole.grads().size());
}

TEST(GptTest, LossIsLogVocabForZeroWeightsAndIgnoresMaskedTargets) {
  const GptConfig c = SmallConfig();
  auto m = GptModel::Create(c);  // all zero: uniform softmax over the V real tokens
  const int B = 1, T = 4;
  std::vector<int32_t> tokens = {1, 2, 3, 4}, targets = {5, -1, 66, -1};
  auto loss = m->Forward(tokens, targets, B, T);
  ASSERT_TRUE(loss.has_value());
  EXPECT_NEAR(*loss, std::log(67.0), 1e-5);
  EXPECT_EQ(m->logits().size(), static_cast<size_t>(B * T * c.padded_vocab_size()));
  // Without targets: logits only, loss 0, and Backward is refused.
  auto no_targets = m->Forward(tokens, {}, B, T);
  ASSERT_TRUE(no_targets.has_value());
  EXPECT_EQ(*no_targets, 0.0f);
  auto bw = m->Backward(1.0f);
  ASSERT_FALSE(bw.has_value());
  EXPECT_EQ(bw.error().code, ErrorCode::kFailedPrecondition);
}

TEST(GptTest, BadInputsGiveClearErrors) {
  const GptConfig c = SmallConfig();
  GptModel m = MakeModel(c);
  std::vector<int32_t> tokens(2 * 4, 1), targets(2 * 4, 2);
  auto expect_field = [](const Result<float>& r, const std::string& field) {
    ASSERT_FALSE(r.has_value()) << field;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << field;
    EXPECT_EQ(r.error().field, field);
    EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
  };
  // Backward before any Forward.
  auto bw = m.Backward(1.0f);
  ASSERT_FALSE(bw.has_value());
  EXPECT_EQ(bw.error().code, ErrorCode::kFailedPrecondition);

  std::vector<int32_t> bad = tokens;
  bad[5] = c.vocab_size;
  expect_field(m.Forward(bad, targets, 2, 4), "tokens");
  bad[5] = -1;
  expect_field(m.Forward(bad, targets, 2, 4), "tokens");
  std::vector<int32_t> bad_targets = targets;
  bad_targets[0] = c.vocab_size;
  expect_field(m.Forward(tokens, bad_targets, 2, 4), "targets");
  bad_targets[0] = -2;
  expect_field(m.Forward(tokens, bad_targets, 2, 4), "targets");
  std::vector<int32_t> long_tokens(c.max_seq_len + 1, 1);
  expect_field(m.Forward(long_tokens, {}, 1, c.max_seq_len + 1), "T");
  expect_field(m.Forward({}, {}, 0, 4), "B");
  expect_field(m.Forward(tokens, {}, 2, 3), "tokens");  // size != B*T
  expect_field(m.Forward(tokens, std::span<const int32_t>(targets.data(), 3), 2, 4), "targets");

  // A failed Forward changes nothing: a good Forward + Backward still work, and each
  // Forward can be back-propagated once.
  ASSERT_TRUE(m.Forward(tokens, targets, 2, 4).has_value());
  EXPECT_FALSE(m.Forward(bad, targets, 2, 4).has_value());
  EXPECT_TRUE(m.Backward(1.0f).has_value());
  EXPECT_EQ(m.Backward(1.0f).error().code, ErrorCode::kFailedPrecondition);
}

TEST(GptTest, InvalidConfigNamesTheField) {
  struct Case {
    const char* field;
    void (*mutate)(GptConfig&);
  };
  const Case cases[] = {
      {"vocab_size", [](GptConfig& c) { c.vocab_size = 0; }},
      {"max_seq_len", [](GptConfig& c) { c.max_seq_len = -3; }},
      {"n_layer", [](GptConfig& c) { c.n_layer = 0; }},
      {"n_head", [](GptConfig& c) { c.n_head = 0; }},
      {"n_embd", [](GptConfig& c) { c.n_embd = 0; }},
      {"n_embd", [](GptConfig& c) { c.n_embd = 30; c.n_head = 4; }},
      {"n_layer", [](GptConfig& c) { c.n_layer = 1 << 30; c.n_embd = 1 << 14; c.n_head = 1; }},
  };
  for (const Case& k : cases) {
    GptConfig c = SmallConfig();
    k.mutate(c);
    auto v = c.Validate();
    ASSERT_FALSE(v.has_value()) << k.field;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(v.error().field, k.field) << v.error().message;
    auto m = GptModel::Create(c);
    ASSERT_FALSE(m.has_value());
    EXPECT_EQ(m.error().field, k.field);
  }
  EXPECT_TRUE(SmallConfig().Validate().has_value());
}

}  // namespace
}  // namespace cohort::engine
