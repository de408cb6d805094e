#include "engine/checkpoint/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/checkpoint/gpt2_safetensors.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafeTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort-st-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes a file by hand: header length (or `length_override`), header text, data.
  std::string WriteRaw(const std::string& name, const std::string& header,
                       const std::vector<uint8_t>& data, int64_t length_override = -1) {
    std::ofstream f(Path(name), std::ios::binary);
    uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    return Path(name);
  }
  std::string dir_;
};

TEST_F(SafeTensorsTest, RoundTrip) {
  SafeTensorFile f;
  f.metadata["format"] = "pt";
  f.tensors["b"] = SafeTensor{"F32", {2, 3}, {1, 2, 3, 4, 5, -6.5f}};
  f.tensors["a"] = SafeTensor{"F32", {1}, {42}};
  f.tensors["scalar"] = SafeTensor{"F32", {}, {7}};
  f.tensors["empty"] = SafeTensor{"F32", {0, 4}, {}};
  ASSERT_TRUE(WriteSafeTensors(Path("x.safetensors"), f));
  std::ifstream in(Path("x.safetensors"), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";

  auto r = ReadSafeTensors(Path("x.safetensors"));
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->metadata, f.metadata);
  ASSERT_EQ(r->tensors.size(), 4u);
  for (const auto& [name, t] : f.tensors) {
    ASSERT_TRUE(r->tensors.contains(name)) << name;
    EXPECT_EQ(r->tensors[name].shape, t.shape) << name;
    EXPECT_EQ(r->tensors[name].data, t.data) << name;
    EXPECT_EQ(r->tensors[name].dtype, "F32");
  }
  // The filter loads only what it accepts.
  auto only_a = ReadSafeTensors(Path("x.safetensors"), [](const std::string& s) { return s == "a"; });
  ASSERT_TRUE(only_a);
  EXPECT_EQ(only_a->tensors.size(), 1u);
}

TEST_F(SafeTensorsTest, WriteRejectsLengthShapeMismatch) {
  SafeTensorFile f;
  f.tensors["w"] = SafeTensor{"F32", {2, 2}, {1, 2, 3}};
  auto r = WriteSafeTensors(Path("bad.safetensors"), f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr("'w'"));
  EXPECT_FALSE(fs::exists(Path("bad.safetensors")));
}

TEST_F(SafeTensorsTest, ReadsF16AndBf16) {
  const uint16_t f16[] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7C00, 0x8000, 0x7BFF, 0x0400};
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049};
  std::vector<uint8_t> data(sizeof(f16) + sizeof(bf16));
  std::memcpy(data.data(), f16, sizeof(f16));
  std::memcpy(data.data() + sizeof(f16), bf16, sizeof(bf16));
  std::string header =
      R"({"h":{"dtype":"F16","shape":[2,4],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";
  auto r = ReadSafeTensors(WriteRaw("half.safetensors", header, data));
  ASSERT_TRUE(r) << r.error().ToString();
  const SafeTensor& h = r->tensors["h"];
  EXPECT_EQ(h.dtype, "F16");
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(h.data.size(), 8u);
  EXPECT_EQ(h.data[0], 1.0f);
  EXPECT_EQ(h.data[1], -2.0f);
  EXPECT_EQ(h.data[2], 0.333251953125f);
  EXPECT_EQ(h.data[3], std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(h.data[4]) && h.data[4] > 0);
  EXPECT_TRUE(std::signbit(h.data[5]) && h.data[5] == 0.0f);
  EXPECT_EQ(h.data[6], 65504.0f);
  EXPECT_EQ(h.data[7], std::ldexp(1.0f, -14));  // smallest normal
  const SafeTensor& b = r->tensors["b"];
  EXPECT_EQ(b.dtype, "BF16");
  EXPECT_EQ(b.data, (std::vector<float>{1.0f, -3.0f, 3.140625f}));
}

TEST_F(SafeTensorsTest, BadFilesGiveClearErrors) {
  std::vector<uint8_t> data(16, 0);
  struct Case {
    const char* name;
    std::string header;
    int64_t length;
    const char* says;
  } cases[] = {
      {"range", R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", -1,
       "outside the data"},
      {"overlap",
       R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       -1, "overlap"},
      {"count", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", -1,
       "needs 12"},
      {"json", R"({"w":{"dtype":"F32",)", -1, "not a valid JSON"},
      {"length", R"({})", 1 << 20, "larger than the file"},
      {"dtype", R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", -1,
       "unknown dtype"},
      {"i64", R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", -1,
       "unsupported dtype"},
      {"shape", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", -1, "shape"},
  };
  for (const Case& c : cases) {
    std::string path = WriteRaw(std::string(c.name) + ".safetensors", c.header, data, c.length);
    auto r = ReadSafeTensors(path);
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << c.name;
    EXPECT_THAT(r.error().message, HasSubstr(path)) << c.name;
    EXPECT_THAT(r.error().message, HasSubstr(c.says)) << c.name << ": " << r.error().message;
  }
  auto missing = ReadSafeTensors(Path("missing.safetensors"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  std::ofstream(Path("tiny.safetensors")) << "abc";
  EXPECT_FALSE(ReadSafeTensors(Path("tiny.safetensors")));
}

// ---- GPT-2 name mapping ----

GptConfig TinyConfig() {
  GptConfig c;
  c.vocab_size = 50;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

GptModel MakeModel(const GptConfig& c, uint64_t seed) {
  auto m = GptModel::Create(c);
  EXPECT_TRUE(m) << m.error().ToString();
  m->InitRandom(seed);
  return std::move(*m);
}

TEST_F(SafeTensorsTest, Gpt2ExportImportRoundTrip) {
  GptModel a = MakeModel(TinyConfig(), 1);
  ASSERT_TRUE(ExportGpt2(a, Path("gpt2.safetensors")));
  auto cfg = ReadGpt2Config(Path("gpt2.safetensors"), 2);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->vocab_size, 50);
  EXPECT_EQ(cfg->max_seq_len, 8);
  EXPECT_EQ(cfg->n_layer, 2);
  EXPECT_EQ(cfg->n_embd, 8);
  EXPECT_EQ(cfg->n_head, 2);
  auto file = ReadSafeTensors(Path("gpt2.safetensors"));
  ASSERT_TRUE(file);
  EXPECT_EQ(file->tensors.size(), 2u + 12u * 2 + 2u);
  EXPECT_EQ(file->tensors["wte.weight"].shape, (std::vector<int64_t>{50, 8}));
  EXPECT_EQ(file->tensors["h.1.mlp.c_fc.weight"].shape, (std::vector<int64_t>{8, 32}));

  GptModel b = MakeModel(TinyConfig(), 2);
  auto r = ImportGpt2(Path("gpt2.safetensors"), b);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(a.params().size(), b.params().size());
  EXPECT_EQ(std::memcmp(a.params().data(), b.params().data(), a.params().size_bytes()), 0);
  EXPECT_FALSE(ReadGpt2Config(Path("gpt2.safetensors"), 3));  // 8 % 3 != 0
}

// The head count, which no tensor's shape gives, travels in the file (ExportGpt2's
// __metadata__) or beside it (Hugging Face's config.json): a reader that does not give one
// takes it, one that gives another is refused. Before, the caller's count was taken as is:
// `cohort train` fine-tuned an exported 2-head model with its default 4 heads.
TEST_F(SafeTensorsTest, Gpt2HeadCountComesFromTheFile) {
  GptModel a = MakeModel(TinyConfig(), 1);
  ASSERT_TRUE(ExportGpt2(a, Path("gpt2.safetensors")));
  auto file = ReadSafeTensors(Path("gpt2.safetensors"), [](const std::string&) { return false; });
  ASSERT_TRUE(file);
  EXPECT_EQ(file->metadata["n_head"], "2");
  auto from_file = ReadGpt2Config(Path("gpt2.safetensors"), 0);
  ASSERT_TRUE(from_file) << from_file.error().ToString();
  EXPECT_EQ(from_file->n_head, 2);
  auto other = ReadGpt2Config(Path("gpt2.safetensors"), 4);  // 8 % 4 == 0, but not its count
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().field, "n_head");
  EXPECT_THAT(other.error().message, HasSubstr("has 2 attention heads (its __metadata__ says so)"));

  // Hugging Face's layout: no metadata, config.json beside the weights.
  const std::string fixture = std::string(COHORT_ENGINE_TESTDATA) + "/gpt2_tiny_hf.safetensors";
  fs::create_directories(Path("hf"));
  fs::copy_file(fixture, Path("hf/model.safetensors"));
  auto none = ReadGpt2Config(Path("hf/model.safetensors"), 0);
  ASSERT_FALSE(none);
  EXPECT_THAT(none.error().message, HasSubstr("does not say its number of attention heads"));
  std::ofstream(Path("hf/config.json")) << R"({"model_type": "gpt2", "n_head": 2, "n_embd": 4})";
  auto beside = ReadGpt2Config(Path("hf/model.safetensors"), 0);
  ASSERT_TRUE(beside) << beside.error().ToString();
  EXPECT_EQ(beside->n_head, 2);
  EXPECT_FALSE(ReadGpt2Config(Path("hf/model.safetensors"), 4));
}

// The fixture written by testdata/make_gpt2_tiny_hf.py: tensor k holds k*1000 + i at
// flat index i, in Hugging Face's layout (Conv1D weights (in, out)).
TEST_F(SafeTensorsTest, Gpt2ImportsHuggingFaceLayout) {
  const std::string fixture = std::string(COHORT_ENGINE_TESTDATA) + "/gpt2_tiny_hf.safetensors";
  auto cfg = ReadGpt2Config(fixture, 2);
  ASSERT_TRUE(cfg) << cfg.error().ToString();
  EXPECT_EQ(cfg->vocab_size, 5);
  EXPECT_EQ(cfg->max_seq_len, 3);
  EXPECT_EQ(cfg->n_layer, 1);
  EXPECT_EQ(cfg->n_embd, 4);
  GptModel m = MakeModel(*cfg, 3);
  auto r = ImportGpt2(fixture, m);
  ASSERT_TRUE(r) << r.error().ToString();
  const int C = 4;
  auto at = [&](const char* name, size_t i) {
    const ParamTensor* t = m.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? m.params()[t->offset + i] : NAN;
  };
  // wte: (V, C) as is; padded rows (5..127) are zero.
  EXPECT_EQ(at("wte", 0), 0.0f);
  EXPECT_EQ(at("wte", 2 * C + 3), 11.0f);
  EXPECT_EQ(at("wte", 5 * C), 0.0f);
  EXPECT_EQ(at("wte", 127 * C + 3), 0.0f);
  EXPECT_EQ(at("wpe", 2 * C + 1), 1000.0f + 9);
  EXPECT_EQ(at("h.0.ln1.w", 3), 2003.0f);
  EXPECT_EQ(at("h.0.ln1.b", 1), 3001.0f);
  // c_attn.weight is (in C, out 3C): HF [i][o] (value 4000 + i*3C + o) lands at qkv.w[o][i].
  for (int i = 0; i < C; ++i) {
    for (int o = 0; o < 3 * C; ++o) {
      EXPECT_EQ(at("h.0.qkv.w", static_cast<size_t>(o * C + i)), 4000.0f + i * 3 * C + o)
          << "i=" << i << " o=" << o;
    }
  }
  EXPECT_EQ(at("h.0.qkv.b", 11), 5011.0f);
  // c_proj (C, C): [i][o] = 6000 + i*C + o -> attn_proj.w[o][i].
  EXPECT_EQ(at("h.0.attn_proj.w", 1 * C + 2), 6000.0f + 2 * C + 1);
  EXPECT_EQ(at("h.0.attn_proj.b", 0), 7000.0f);
  EXPECT_EQ(at("h.0.ln2.w", 2), 8002.0f);
  EXPECT_EQ(at("h.0.ln2.b", 2), 9002.0f);
  // mlp.c_fc (C, 4C): [i][o] = 10000 + i*4C + o -> fc.w (4C, C) [o][i].
  EXPECT_EQ(at("h.0.fc.w", 13 * C + 3), 10000.0f + 3 * 4 * C + 13);
  EXPECT_EQ(at("h.0.fc.b", 15), 11015.0f);
  // mlp.c_proj (4C, C): [i][o] = 12000 + i*C + o -> fc_proj.w (C, 4C) [o][i].
  EXPECT_EQ(at("h.0.fc_proj.w", 2 * 4 * C + 9), 12000.0f + 9 * C + 2);
  EXPECT_EQ(at("h.0.fc_proj.b", 3), 13003.0f);
  EXPECT_EQ(at("ln_f.w", 1), 14001.0f);
  EXPECT_EQ(at("ln_f.b", 1), 15001.0f);

  // Export writes the same convention back: the fixture's weights come out unchanged.
  ASSERT_TRUE(ExportGpt2(m, Path("again.safetensors")));
  auto orig = ReadSafeTensors(fixture);
  auto back = ReadSafeTensors(Path("again.safetensors"));
  ASSERT_TRUE(orig && back);
  for (const auto& [name, t] : back->tensors) {
    const SafeTensor& o = orig->tensors["transformer." + name];
    EXPECT_EQ(t.shape, o.shape) << name;
    EXPECT_EQ(t.data, o.data) << name;
  }
}

TEST_F(SafeTensorsTest, Gpt2ImportErrorsNameTheTensorAndLeaveTheModelUnchanged) {
  GptModel src = MakeModel(TinyConfig(), 1);
  ASSERT_TRUE(ExportGpt2(src, Path("good.safetensors")));
  auto good = ReadSafeTensors(Path("good.safetensors"));
  ASSERT_TRUE(good);

  struct Case {
    const char* name;
    std::function<void(SafeTensorFile&)> edit;
    const char* says;
  } cases[] = {
      {"missing", [](SafeTensorFile& f) { f.tensors.erase("h.1.ln_2.bias"); },
       "'h.1.ln_2.bias' is missing"},
      {"misshaped",
       [](SafeTensorFile& f) {
         SafeTensor& t = f.tensors["h.0.mlp.c_fc.weight"];
         t.shape = {32, 8};  // (out, in): not Hugging Face's convention
       },
       "'h.0.mlp.c_fc.weight' has shape (32, 8), expected (8, 32)"},
      {"vocab",
       [](SafeTensorFile& f) {
         SafeTensor& t = f.tensors["wte.weight"];
         t.shape = {49, 8};
         t.data.resize(49 * 8);
       },
       "'wte.weight'"},
      {"unknown",
       [](SafeTensorFile& f) { f.tensors["h.2.ln_1.weight"] = SafeTensor{"F32", {8}, std::vector<float>(8)}; },
       "unknown tensor 'h.2.ln_1.weight'"},
  };
  for (const Case& c : cases) {
    SafeTensorFile f = *good;
    c.edit(f);
    std::string path = Path(std::string(c.name) + ".safetensors");
    ASSERT_TRUE(WriteSafeTensors(path, f)) << c.name;
    GptModel m = MakeModel(TinyConfig(), 9);
    std::vector<float> before(m.params().begin(), m.params().end());
    auto r = ImportGpt2(path, m);
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << c.name;
    EXPECT_THAT(r.error().message, HasSubstr(c.says)) << c.name;
    EXPECT_TRUE(std::equal(before.begin(), before.end(), m.params().begin())) << c.name;
  }
}

}  // namespace
}  // namespace cohort::engine
