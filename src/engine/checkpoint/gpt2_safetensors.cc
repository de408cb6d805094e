#include "engine/checkpoint/gpt2_safetensors.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.h"

namespace cohort::engine {
namespace {

constexpr std::string_view kPrefix = "transformer.";

// One Hugging Face tensor and where it goes in GptModel.
struct NameMap {
  std::string hf;      // "h.0.attn.c_attn.weight"
  std::string ours;    // "h.0.qkv.w"
  bool transpose = false;  // Conv1D weight: HF (in, out), ours (out, in)
};

std::vector<NameMap> Gpt2Names(int n_layer) {
  std::vector<NameMap> m = {{"wte.weight", "wte", false}, {"wpe.weight", "wpe", false}};
  struct Per {
    const char* hf;
    const char* ours;
    bool transpose;
  };
  static const Per kPer[] = {
      {"ln_1.weight", "ln1.w", false},          {"ln_1.bias", "ln1.b", false},
      {"attn.c_attn.weight", "qkv.w", true},    {"attn.c_attn.bias", "qkv.b", false},
      {"attn.c_proj.weight", "attn_proj.w", true}, {"attn.c_proj.bias", "attn_proj.b", false},
      {"ln_2.weight", "ln2.w", false},          {"ln_2.bias", "ln2.b", false},
      {"mlp.c_fc.weight", "fc.w", true},        {"mlp.c_fc.bias", "fc.b", false},
      {"mlp.c_proj.weight", "fc_proj.w", true}, {"mlp.c_proj.bias", "fc_proj.b", false},
  };
  for (int l = 0; l < n_layer; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    for (const Per& p : kPer) m.push_back({h + p.hf, h + p.ours, p.transpose});
  }
  m.push_back({"ln_f.weight", "ln_f.w", false});
  m.push_back({"ln_f.bias", "ln_f.b", false});
  return m;
}

std::string StripPrefix(const std::string& name) {
  return name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
}

// "h.<i>.<rest>" -> i, or -1.
int LayerIndex(std::string_view name, std::string_view* rest = nullptr) {
  if (!name.starts_with("h.")) return -1;
  std::string_view s = name.substr(2);
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || *p != '.') return -1;
  if (rest) *rest = std::string_view(p + 1, s.data() + s.size() - p - 1);
  return v;
}

// Buffers that GPT2Model / GPT2LMHeadModel files carry but are not parameters.
bool IsIgnored(const std::string& stripped) {
  if (stripped == "lm_head.weight") return true;
  std::string_view rest;
  if (LayerIndex(stripped, &rest) >= 0) return rest == "attn.bias" || rest == "attn.masked_bias";
  return false;
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

namespace {

// The head count `path` states, and where: its __metadata__ "n_head" (ExportGpt2 writes it),
// else "n_head" of the config.json beside it (Hugging Face's save_pretrained writes one).
// {0, ""} when neither says; kInvalidArgument for a value that is not a positive integer.
Result<std::pair<int, std::string>> StoredHeadCount(const std::string& path,
                                                    const SafeTensorFile& file) {
  if (const auto it = file.metadata.find("n_head"); it != file.metadata.end()) {
    int v = 0;
    const char* end = it->second.data() + it->second.size();
    auto [ptr, ec] = std::from_chars(it->second.data(), end, v);
    if (ec != std::errc() || ptr != end || v < 1) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: __metadata__ n_head '{}' is not a head count",
                    path, it->second);
    }
    return std::pair<int, std::string>{v, "its __metadata__"};
  }
  const std::filesystem::path json_path =
      std::filesystem::path(path).parent_path() / "config.json";
  std::ifstream in(json_path);
  if (!in) return std::pair<int, std::string>{0, ""};
  const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("n_head")) {
    const auto& v = doc["n_head"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1 << 20) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: n_head {} is not a head count",
                    json_path.string(), v.dump());
    }
    return std::pair<int, std::string>{v.get<int>(), json_path.string()};
  }
  return std::pair<int, std::string>{0, ""};
}

}  // namespace

Result<GptConfig> ReadGpt2Config(const std::string& path, int n_head) {
  // Validates the whole header but reads only the two embeddings (for their shapes),
  // collecting the other names on the way.
  auto want = [](const std::string& n) {
    std::string s = StripPrefix(n);
    return s == "wte.weight" || s == "wpe.weight";
  };
  std::set<int> layers;
  std::set<std::string> names;
  auto all = ReadSafeTensors(path, [&](const std::string& n) {
    names.insert(StripPrefix(n));
    return want(n);
  });
  if (!all) return std::unexpected(all.error());
  const SafeTensor* wte = nullptr;
  const SafeTensor* wpe = nullptr;
  for (const auto& [name, t] : all->tensors) {
    std::string s = StripPrefix(name);
    if (s == "wte.weight") wte = &t;
    if (s == "wpe.weight") wpe = &t;
  }
  for (const std::string& n : names) {
    int l = LayerIndex(n);
    if (l >= 0) layers.insert(l);
  }
  if (wte == nullptr || wte->shape.size() != 2) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: no 2-D tensor wte.weight", path);
  }
  if (wpe == nullptr || wpe->shape.size() != 2 || wpe->shape[1] != wte->shape[1]) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{}: no tensor wpe.weight of shape (T, {}) to match wte.weight", path,
                  wte->shape[1]);
  }
  int n_layer = static_cast<int>(layers.size());
  if (n_layer == 0 || *layers.rbegin() != n_layer - 1) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{}: transformer blocks h.<i> must be numbered 0..L-1 ({} found)", path,
                  n_layer);
  }
  const auto [stored, where] = COHORT_TRY(StoredHeadCount(path, *all));
  if (n_head == 0 && stored == 0) {
    return FieldError("n_head", "{} does not say its number of attention heads (no n_head in its "
                      "__metadata__ or in a config.json beside it); give it (GPT-2 124M: 12)",
                      path);
  }
  if (n_head > 0 && stored > 0 && n_head != stored) {
    return FieldError("n_head", "{}, but {} has {} attention heads ({} says so)", n_head, path,
                      stored, where);
  }
  if (n_head == 0) n_head = stored;
  GptConfig c;
  c.vocab_size = static_cast<int>(wte->shape[0]);
  c.n_embd = static_cast<int>(wte->shape[1]);
  c.max_seq_len = static_cast<int>(wpe->shape[0]);
  c.n_layer = n_layer;
  c.n_head = n_head;
  if (n_head < 1 || c.n_embd % n_head != 0) {
    return FieldError("n_head", "n_embd {} of {} is not divisible by n_head {}", c.n_embd, path,
                      n_head);
  }
  COHORT_TRY_VOID(c.Validate());
  return c;
}

Result<void> ImportGpt2(const std::string& path, GptModel& model) {
  const GptConfig& cfg = model.config();
  SafeTensorFile f = COHORT_TRY(
      ReadSafeTensors(path, [](const std::string& n) { return !IsIgnored(StripPrefix(n)); }));
  std::map<std::string, const SafeTensor*> by_name;
  for (const auto& [name, t] : f.tensors) {
    std::string s = StripPrefix(name);
    if (!by_name.emplace(s, &t).second) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: tensor '{}' appears twice", path, s);
    }
  }
  std::vector<NameMap> names = Gpt2Names(cfg.n_layer);
  std::set<std::string> known;
  for (const NameMap& m : names) known.insert(m.hf);
  for (const auto& [name, t] : by_name) {
    if (!known.contains(name)) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}: unknown tensor '{}' for a GPT-2 model of {} layers", path, name,
                    cfg.n_layer);
    }
  }
  // Fill a copy; the model changes only once every tensor has been checked.
  std::vector<float> params(model.params().size(), 0.0f);
  for (const NameMap& m : names) {
    auto it = by_name.find(m.hf);
    if (it == by_name.end()) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: tensor '{}' is missing", path, m.hf);
    }
    const SafeTensor& t = *it->second;
    const ParamTensor* p = model.FindTensor(m.ours);
    if (p == nullptr) {
      return Errorf(ErrorCode::kInternal, "GptModel has no tensor '{}'", m.ours);
    }
    std::vector<int64_t> want = p->shape;
    if (m.ours == "wte") want[0] = cfg.vocab_size;  // padded rows are not in the file
    if (m.transpose) std::reverse(want.begin(), want.end());
    if (t.shape != want) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: tensor '{}' has shape {}, expected {}",
                    path, m.hf, ShapeString(t.shape), ShapeString(want));
    }
    float* dst = params.data() + p->offset;
    if (m.transpose) {
      const size_t in = static_cast<size_t>(want[0]), out = static_cast<size_t>(want[1]);
      for (size_t i = 0; i < in; ++i) {
        for (size_t o = 0; o < out; ++o) dst[o * in + i] = t.data[i * out + o];
      }
    } else {
      std::copy(t.data.begin(), t.data.end(), dst);
    }
  }
  std::copy(params.begin(), params.end(), model.params().begin());
  return {};
}

Result<void> ExportGpt2(const GptModel& model, const std::string& path) {
  const GptConfig& cfg = model.config();
  std::span<const float> params = model.params();
  SafeTensorFile f;
  f.metadata["format"] = "pt";  // what transformers' from_pretrained expects
  // Not in the tensors' shapes: without it the file could be read back with other heads.
  f.metadata["n_head"] = std::to_string(cfg.n_head);
  for (const NameMap& m : Gpt2Names(cfg.n_layer)) {
    const ParamTensor* p = model.FindTensor(m.ours);
    if (p == nullptr) return Errorf(ErrorCode::kInternal, "GptModel has no tensor '{}'", m.ours);
    SafeTensor t;
    t.dtype = "F32";
    t.shape = p->shape;
    const float* src = params.data() + p->offset;
    if (m.ours == "wte") {
      t.shape[0] = cfg.vocab_size;
      t.data.assign(src, src + static_cast<size_t>(cfg.vocab_size) * cfg.n_embd);
    } else if (m.transpose) {
      const size_t out = static_cast<size_t>(p->shape[0]), in = static_cast<size_t>(p->shape[1]);
      t.shape = {p->shape[1], p->shape[0]};
      t.data.resize(p->numel);
      for (size_t o = 0; o < out; ++o) {
        for (size_t i = 0; i < in; ++i) t.data[i * out + o] = src[o * in + i];
      }
    } else {
      t.data.assign(src, src + p->numel);
    }
    f.tensors.emplace(m.hf, std::move(t));
  }
  return WriteSafeTensors(path, f);
}

}  // namespace cohort::engine
