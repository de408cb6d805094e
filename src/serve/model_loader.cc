#include "serve/model_loader.h"

#include <filesystem>
#include <system_error>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/gpt2_safetensors.h"

namespace cohort::serve {

namespace fs = std::filesystem;

namespace {

Result<std::unique_ptr<engine::Tokenizer>> LoadTokenizer(const ModelSource& src,
                                                         const std::string& kind,
                                                         const fs::path& beside) {
  if (kind == "byte") return engine::MakeByteTokenizer();
  if (kind != "gpt2") {
    return FieldError("--tokenizer", "must be auto, byte or gpt2, got '{}'", kind);
  }
  std::string vocab = src.bpe_vocab, merges = src.bpe_merges;
  if (vocab.empty()) vocab = (beside / "vocab.json").string();
  if (merges.empty()) merges = (beside / "merges.txt").string();
  return engine::LoadGpt2BpeTokenizer(vocab, merges);
}

}  // namespace

Result<LoadedModel> LoadServeModel(const ModelSource& src) {
  if (src.path.empty()) return FieldError("--model", "is required");
  std::error_code ec;
  const fs::path path(src.path);
  if (!fs::exists(path, ec)) {
    return MakeError(ErrorCode::kNotFound, "--model: " + src.path + " does not exist", "--model");
  }
  LoadedModel out;
  std::string kind = src.tokenizer;
  if (fs::is_directory(path, ec)) {
    auto loaded = engine::LoadLatestCheckpoint(src.path, std::nullopt);
    if (!loaded) return std::unexpected(WithContext(std::move(loaded.error()), "--model"));
    engine::Checkpoint ckpt = std::move(*loaded);
    out.config = ckpt.config;
    out.params = std::move(ckpt.params);
    out.description = "checkpoint " + ckpt.path;
    if (kind == "auto") {
      const auto it = ckpt.metadata.find("tokenizer");
      const std::string used = it != ckpt.metadata.end() && it->is_string() ? it->get<std::string>() : "byte";
      kind = used == "gpt2-bpe" ? "gpt2" : used;
    }
  } else {
    if (path.extension() != ".safetensors") {
      return FieldError("--model", "{} is neither a checkpoint directory nor a .safetensors file",
                        src.path);
    }
    if (src.n_head < 0) return FieldError("--n-head", "must be >= 1, got {}", src.n_head);
    auto config = engine::ReadGpt2Config(src.path, src.n_head);
    if (!config && config.error().field == "n_head") {
      return FieldError("--n-head", "{}", config.error().message);  // the flag that gives it
    }
    out.config = COHORT_TRY(std::move(config));
    engine::GptModel model = COHORT_TRY(engine::GptModel::Create(out.config));
    COHORT_TRY_VOID(engine::ImportGpt2(src.path, model));
    out.params.assign(model.params().begin(), model.params().end());
    out.description = "safetensors " + src.path;
    if (kind == "auto") kind = "gpt2";
  }
  out.tokenizer = COHORT_TRY(LoadTokenizer(src, kind, fs::is_directory(path, ec) ? path : path.parent_path()));
  if (out.tokenizer->vocab_size() > out.config.vocab_size) {
    return FieldError("--tokenizer", "the {} tokenizer has {} ids but the model has {} embeddings",
                      out.tokenizer->name(), out.tokenizer->vocab_size(), out.config.vocab_size);
  }
  return out;
}

}  // namespace cohort::serve
