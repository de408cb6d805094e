#include "engine/trainer/config.h"

#include <filesystem>

#include "common/document.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || base_dir.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

// Opens `section` of the document as a reader; an absent section reads as empty.
Result<ObjectReader> Section(ObjectReader& top, const json& empty, std::string_view name) {
  const json* raw = top.Raw(name);
  return ObjectReader::Open(raw ? *raw : empty, std::string(name));
}

// parallel.zero and parallel.offload against the device and the layout: what is built.
Result<void> CheckZero(const TrainConfig& c) {
  const ParallelConfig& p = c.parallel;
  if (p.offload != "none" && p.offload != "optimizer" && p.offload != "optimizer+params") {
    return FieldError("parallel.offload", "must be none, optimizer or optimizer+params, got '{}'",
                      p.offload);
  }
  if (p.offload != "none" && c.device == "cpu") {
    return FieldError("parallel.offload",
                      "'{}' moves GPU state to host memory; with train.device cpu everything is "
                      "already there (use none)",
                      p.offload);
  }
  if (p.offload == "optimizer+params" && p.zero != 3) {
    return FieldError("parallel.offload", "optimizer+params needs parallel.zero 3, got {}", p.zero);
  }
  // ZeRO 1-3 and both offloads run inside CUDA tensor/pipeline layouts too
  // (trainer/cuda_shard_engine.cc), optimizer+params also with one data replica.
  return {};
}

}  // namespace

Result<void> CheckDeviceBackend(const TrainConfig& c) {
  if (c.backend != "auto" && c.backend != "shm" && c.backend != "gloo" && c.backend != "nccl") {
    return FieldError("comm.backend",
                      "must be auto, shm, gloo or nccl, got '{}' (auto: shm when every rank is on "
                      "one host, else gloo)",
                      c.backend);
  }
#ifdef COHORT_CUDA_EMULATED
  // The trainer built against the CPU emulator of the CUDA engine (tests/engine/cuda_emu.cmake):
  // its device memory is host memory, so the host backends reduce it (the GPU tests'
  // stand-in for nccl).
  if (c.device == "cuda" && c.backend != "nccl") return {};
#endif
  if (c.device == "cuda" && c.backend != "nccl") {
    return FieldError("comm.backend",
                      "must be nccl when train.device is cuda (the gradients are in GPU memory), "
                      "got '{}'",
                      c.backend);
  }
  if (c.device == "cpu" && c.backend == "nccl") {
    return FieldError("comm.backend",
                      "nccl reduces GPU memory; with train.device cpu use auto, shm or gloo (or "
                      "set train.device: cuda)");
  }
  return {};
}

Result<TrainConfig> TrainConfigFromJson(const json& doc, const std::string& base_dir) {
  if (doc.is_null()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the config is empty; it needs at least train.steps and data");
  }
  if (!doc.is_object()) {
    // (ObjectReader would call the document "body", as an HTTP request's.)
    return Errorf(ErrorCode::kInvalidArgument,
                  "the config must be a mapping of sections (model, data, train, ...), got {}",
                  JsonTypeName(doc));
  }
  const json empty = json::object();
  TrainConfig c;
  ObjectReader top = COHORT_TRY(ObjectReader::Open(doc, ""));

  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "model"));
    c.n_layer = static_cast<int>(COHORT_TRY(r.Int("n_layer", c.n_layer, 1, 1024)));
    c.n_head = static_cast<int>(COHORT_TRY(r.Int("n_head", c.n_head, 1, 1024)));
    c.n_embd = static_cast<int>(COHORT_TRY(r.Int("n_embd", c.n_embd, 1, 65536)));
    c.seq_len = static_cast<int>(COHORT_TRY(r.Int("seq_len", c.seq_len, 1, 65536)));
    c.init_from = Resolve(COHORT_TRY(r.String("init_from", "")), base_dir);
    COHORT_TRY_VOID(r.Finish());
    if (!c.init_from.empty()) {
      // The file decides the shape: an absent field is 0, "the file's" (the trainer checks a
      // given one against it). The defaults stood in for them: n_head 4 trained the file's
      // weights with another head count than theirs, and n_head 12 (GPT-2's) was refused
      // as not dividing the default n_embd 128.
      const json* model = top.Raw("model");
      auto given = [&](const char* key) { return model && model->contains(key); };
      if (!given("n_layer")) c.n_layer = 0;
      if (!given("n_head")) c.n_head = 0;
      if (!given("n_embd")) c.n_embd = 0;
    } else if (c.n_embd % c.n_head != 0) {
      return FieldError("model.n_embd", "{} is not divisible by model.n_head {}", c.n_embd,
                        c.n_head);
    }
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "tokenizer"));
    c.tokenizer = COHORT_TRY(r.String("type", c.tokenizer));
    c.bpe_vocab = Resolve(COHORT_TRY(r.String("vocab", "")), base_dir);
    c.bpe_merges = Resolve(COHORT_TRY(r.String("merges", "")), base_dir);
    COHORT_TRY_VOID(r.Finish());
    if (c.tokenizer != "byte" && c.tokenizer != "gpt2") {
      return FieldError("tokenizer.type", "must be 'byte' or 'gpt2', got '{}'", c.tokenizer);
    }
    if (c.tokenizer == "gpt2" && (c.bpe_vocab.empty() || c.bpe_merges.empty())) {
      return FieldError("tokenizer.vocab",
                        "the gpt2 tokenizer needs tokenizer.vocab (vocab.json) and "
                        "tokenizer.merges (merges.txt)");
    }
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "data"));
    c.data_text = Resolve(COHORT_TRY(r.String("text", "")), base_dir);
    c.data_train = Resolve(COHORT_TRY(r.String("train", "")), base_dir);
    c.data_val = Resolve(COHORT_TRY(r.String("val", "")), base_dir);
    c.val_fraction = COHORT_TRY(r.Double("val_fraction", c.val_fraction, 0.0, 0.5));
    c.shuffle = COHORT_TRY(r.Bool("shuffle", c.shuffle));
    COHORT_TRY_VOID(r.Finish());
    if (c.data_text.empty() == c.data_train.empty()) {
      return FieldError("data", "give exactly one of data.text (text files) or data.train "
                                "(token shards)");
    }
    if (!c.data_val.empty() && c.data_train.empty()) {
      return FieldError("data.val", "needs data.train (with data.text, validation is the "
                                    "last data.val_fraction of the text)");
    }
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "train"));
    c.steps = COHORT_TRY(r.Int("steps", std::nullopt, 1, int64_t{1} << 40));
    c.micro_batch = static_cast<int>(COHORT_TRY(r.Int("micro_batch", c.micro_batch, 1, 65536)));
    c.global_batch_tokens =
        COHORT_TRY(r.Int("global_batch_tokens", c.global_batch_tokens, 0, int64_t{1} << 40));
    c.lr = COHORT_TRY(r.Double("lr", c.lr, 0.0, 10.0));
    c.min_lr = COHORT_TRY(r.Double("min_lr", std::min(c.min_lr, c.lr), 0.0, 10.0));
    c.warmup_steps = COHORT_TRY(r.Int("warmup_steps", c.warmup_steps, 0, int64_t{1} << 40));
    c.weight_decay = COHORT_TRY(r.Double("weight_decay", c.weight_decay, 0.0, 10.0));
    c.beta1 = COHORT_TRY(r.Double("beta1", c.beta1, 0.0, 0.999999));
    c.beta2 = COHORT_TRY(r.Double("beta2", c.beta2, 0.0, 0.999999));
    c.eps = COHORT_TRY(r.Double("eps", c.eps, 1e-30, 1.0));
    c.grad_clip = COHORT_TRY(r.Double("grad_clip", c.grad_clip, 0.0, 1e9));
    c.seed = static_cast<uint64_t>(COHORT_TRY(r.Int("seed", int64_t(c.seed), 0, INT64_MAX)));
    c.bucket_mb = COHORT_TRY(r.Double("bucket_mb", c.bucket_mb, 0.001, 4096));
    c.threads = static_cast<int>(COHORT_TRY(r.Int("threads", c.threads, 0, 4096)));
    c.device = COHORT_TRY(r.String("device", c.device));
    COHORT_TRY_VOID(r.Finish());
    if (c.device != "cpu" && c.device != "cuda") {
      return FieldError("train.device", "must be 'cpu' or 'cuda', got '{}'", c.device);
    }
    if (c.min_lr > c.lr) {
      return FieldError("train.min_lr", "{} is above train.lr {}", c.min_lr, c.lr);
    }
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "eval"));
    c.eval_every = COHORT_TRY(r.Int("every", c.eval_every, 0, int64_t{1} << 40));
    c.eval_batches = static_cast<int>(COHORT_TRY(r.Int("batches", c.eval_batches, 1, 1 << 20)));
    COHORT_TRY_VOID(r.Finish());
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "checkpoint"));
    SetCheckpointDir(c, COHORT_TRY(r.String("dir", "")), base_dir);
    c.checkpoint_every = COHORT_TRY(r.Int("every", c.checkpoint_every, 0, int64_t{1} << 40));
    c.checkpoint_keep = static_cast<int>(COHORT_TRY(r.Int("keep", c.checkpoint_keep, 0, 1 << 20)));
    COHORT_TRY_VOID(r.Finish());
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "sample"));
    c.sample_every = COHORT_TRY(r.Int("every", c.sample_every, 0, int64_t{1} << 40));
    c.sample_prompt = COHORT_TRY(r.String("prompt", c.sample_prompt));
    c.sample_tokens = static_cast<int>(COHORT_TRY(r.Int("tokens", c.sample_tokens, 0, 1 << 20)));
    c.temperature = COHORT_TRY(r.Double("temperature", c.temperature, 0.0, 100.0));
    c.top_k = static_cast<int>(COHORT_TRY(r.Int("top_k", c.top_k, 0, 1 << 24)));
    COHORT_TRY_VOID(r.Finish());
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "log"));
    c.log_every = COHORT_TRY(r.Int("every", c.log_every, 1, int64_t{1} << 40));
    c.log_file = Resolve(COHORT_TRY(r.String("file", "")), base_dir);
    COHORT_TRY_VOID(r.Finish());
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "parallel"));
    ParallelConfig& p = c.parallel;
    p.tensor = static_cast<int>(COHORT_TRY(r.Int("tensor", p.tensor, 1, 4096)));
    p.pipeline = static_cast<int>(COHORT_TRY(r.Int("pipeline", p.pipeline, 1, 4096)));
    p.schedule = COHORT_TRY(r.String("schedule", p.schedule));
    p.virtual_stages =
        static_cast<int>(COHORT_TRY(r.Int("virtual_stages", p.virtual_stages, 1, 1024)));
    p.microbatches = static_cast<int>(COHORT_TRY(r.Int("microbatches", p.microbatches, 0, 1 << 20)));
    if (const json* layers = r.Raw("pipeline_layers")) {
      if (!layers->is_array()) {
        return FieldError("parallel.pipeline_layers", "must be a list of layer counts, got {}",
                          JsonTypeName(*layers));
      }
      for (size_t i = 0; i < layers->size(); ++i) {
        const json& v = (*layers)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1 << 20) {
          return FieldError("parallel.pipeline_layers",
                            "entry {} must be a layer count >= 1, got {}", i, v.dump());
        }
        p.pipeline_layers.push_back(v.get<int>());
      }
    }
    p.zero = static_cast<int>(COHORT_TRY(r.Int("zero", p.zero, 0, 3)));
    p.overlap_grad_reduce = COHORT_TRY(r.Bool("overlap_grad_reduce", p.overlap_grad_reduce));
    p.offload = COHORT_TRY(r.String("offload", p.offload));
    p.prefetch = COHORT_TRY(r.Bool("prefetch", p.prefetch));
    COHORT_TRY_VOID(r.Finish());
    COHORT_TRY_VOID(CheckZero(c));
    if (p.schedule != "gpipe" && p.schedule != "1f1b" && p.schedule != "interleaved") {
      return FieldError("parallel.schedule", "must be gpipe, 1f1b or interleaved, got '{}'",
                        p.schedule);
    }
    if (p.tensor > 1 && c.n_head % p.tensor != 0 && c.init_from.empty()) {
      return FieldError("parallel.tensor", "{} does not divide n_head {}", p.tensor, c.n_head);
    }
  }
  {
    ObjectReader r = COHORT_TRY(Section(top, empty, "comm"));
    // The default backend is the one that reaches the device's gradients.
    c.backend = COHORT_TRY(r.String("backend", c.device == "cuda" ? "nccl" : "auto"));
    c.comm_timeout_s = COHORT_TRY(r.Double("timeout_s", c.comm_timeout_s, 0.1, 86400));
    COHORT_TRY_VOID(r.Finish());
    COHORT_TRY_VOID(CheckDeviceBackend(c));
  }
  COHORT_TRY_VOID(top.Finish());
  return c;
}

namespace {

// Applies one "section.key=value" override to the document.
Result<void> ApplyOverride(json& doc, const std::string& setting) {
  const size_t eq = setting.find('=');
  const std::string key = setting.substr(0, eq);
  const size_t dot = key.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == key.size() ||
      key.find('.', dot + 1) != std::string::npos) {
    return FieldError("--set", "'{}' is not section.key=value (e.g. parallel.tensor=2)", setting);
  }
  const std::string text = setting.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  if (doc.is_null()) doc = json::object();
  if (!doc.is_object()) return FieldError("--set", "the config is not a mapping");
  json& section = doc[key.substr(0, dot)];
  if (section.is_null()) section = json::object();
  if (!section.is_object()) {
    return FieldError("--set", "'{}' is not a section of the config", key.substr(0, dot));
  }
  section[key.substr(dot + 1)] = std::move(value);
  return {};
}

}  // namespace

Result<TrainConfig> LoadTrainConfig(const std::string& path,
                                    const std::vector<std::string>& overrides) {
  json doc = COHORT_TRY(LoadDocument(path, {}, 1 << 20));
  for (const std::string& o : overrides) COHORT_TRY_VOID(ApplyOverride(doc, o));
  auto c = TrainConfigFromJson(doc, fs::path(path).parent_path().string());
  if (!c) return std::unexpected(WithContext(c.error(), path));
  return c;
}

void SetCheckpointDir(TrainConfig& c, const std::string& dir, const std::string& base_dir) {
  c.checkpoints_off = dir == "none";
  c.checkpoint_dir = c.checkpoints_off ? std::string() : Resolve(dir, base_dir);
}

Result<int> AccumulationSteps(const TrainConfig& c, int world) {
  const int64_t per_micro = int64_t{world} * c.micro_batch * c.seq_len;
  if (c.global_batch_tokens == 0) return 1;
  if (c.global_batch_tokens % per_micro != 0 || c.global_batch_tokens < per_micro) {
    return FieldError("train.global_batch_tokens",
                      "{} is not a positive multiple of world size {} x train.micro_batch {} x "
                      "model.seq_len {} = {}",
                      c.global_batch_tokens, world, c.micro_batch, c.seq_len, per_micro);
  }
  const int64_t accum = c.global_batch_tokens / per_micro;
  if (accum > 1 << 20) {
    return FieldError("train.global_batch_tokens", "needs {} accumulation steps; at most {}",
                      accum, 1 << 20);
  }
  return static_cast<int>(accum);
}

}  // namespace cohort::engine
