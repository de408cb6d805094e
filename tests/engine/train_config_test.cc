// TrainConfig decoding: defaults, every section, and errors that name the field.
#include "engine/trainer/config.h"

#include <cstdio>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/document.h"

namespace cohort::engine {
namespace {

using ::testing::HasSubstr;

Result<TrainConfig> FromYaml(const std::string& yaml, const std::string& base = "/base") {
  auto doc = YamlToJson(yaml, "train.yaml");
  if (!doc) return std::unexpected(doc.error());
  return TrainConfigFromJson(*doc, base);
}

std::string ErrorOf(const std::string& yaml) {
  auto c = FromYaml(yaml);
  EXPECT_FALSE(c.has_value()) << yaml;
  return c ? std::string() : c.error().message;
}

TEST(TrainConfigTest, ReadsEverySection) {
  auto c = FromYaml(R"(
model: {n_layer: 2, n_head: 2, n_embd: 64, seq_len: 32}
tokenizer: {type: byte}
data: {text: corpus.txt, val_fraction: 0.2, shuffle: false}
train: {steps: 50, micro_batch: 4, global_batch_tokens: 512, lr: 3e-3, min_lr: 3e-4,
        warmup_steps: 5, weight_decay: 0.05, beta1: 0.8, beta2: 0.99, eps: 1e-7,
        grad_clip: 0.5, seed: 7, bucket_mb: 1, threads: 2}
eval: {every: 10, batches: 3}
checkpoint: {dir: /ckpt, every: 25, keep: 2}
sample: {every: 0, prompt: "Hello", tokens: 64, temperature: 0.5, top_k: 5}
log: {every: 5, file: log.jsonl}
comm: {backend: gloo, timeout_s: 30}
)");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->n_layer, 2);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->seq_len, 32);
  EXPECT_EQ(c->data_text, "/base/corpus.txt");
  EXPECT_DOUBLE_EQ(c->val_fraction, 0.2);
  EXPECT_FALSE(c->shuffle);
  EXPECT_EQ(c->steps, 50);
  EXPECT_EQ(c->global_batch_tokens, 512);
  EXPECT_DOUBLE_EQ(c->lr, 3e-3);
  EXPECT_DOUBLE_EQ(c->beta2, 0.99);
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->eval_every, 10);
  EXPECT_EQ(c->checkpoint_dir, "/ckpt");
  EXPECT_EQ(c->checkpoint_keep, 2);
  EXPECT_EQ(c->sample_prompt, "Hello");
  EXPECT_EQ(c->top_k, 5);
  EXPECT_EQ(c->log_file, "/base/log.jsonl");
  EXPECT_DOUBLE_EQ(c->comm_timeout_s, 30);
}

// checkpoint.dir: none means no checkpoints, not a directory named "none" beside the config.
TEST(TrainConfigTest, CheckpointDirNoneTurnsCheckpointsOff) {
  auto off = FromYaml("train: {steps: 3}\ndata: {text: c.txt}\ncheckpoint: {dir: none, every: 5}\n");
  ASSERT_TRUE(off.has_value()) << off.error().message;
  EXPECT_TRUE(off->checkpoints_off);
  EXPECT_EQ(off->checkpoint_dir, "");
  auto dir = FromYaml("train: {steps: 3}\ndata: {text: c.txt}\ncheckpoint: {dir: none/x}\n");
  ASSERT_TRUE(dir.has_value()) << dir.error().message;
  EXPECT_FALSE(dir->checkpoints_off);
  EXPECT_EQ(dir->checkpoint_dir, "/base/none/x");
  SetCheckpointDir(*dir, "none", "");
  EXPECT_TRUE(dir->checkpoints_off);
  EXPECT_EQ(dir->checkpoint_dir, "");
}

// keep: the newest N checkpoints stay; 0 keeps every one (the writer prunes none).
TEST(TrainConfigTest, CheckpointKeepZeroKeepsAll) {
  auto all = FromYaml("train: {steps: 3}\ndata: {text: c.txt}\ncheckpoint: {keep: 0}\n");
  ASSERT_TRUE(all.has_value()) << all.error().message;
  EXPECT_EQ(all->checkpoint_keep, 0);
  EXPECT_THAT(ErrorOf("train: {steps: 3}\ndata: {text: c.txt}\ncheckpoint: {keep: -1}\n"),
              HasSubstr("checkpoint.keep"));
}

TEST(TrainConfigTest, ZeroAndOffloadAreCheckedAgainstTheDeviceAndLayout) {
  const std::string base = "train: {steps: 3}\ndata: {text: c.txt}\n";
  auto z = FromYaml(base + "parallel: {zero: 2}\n");
  ASSERT_TRUE(z.has_value()) << z.error().message;
  EXPECT_EQ(z->parallel.zero, 2);
  EXPECT_EQ(z->parallel.offload, "none");
  EXPECT_EQ(FromYaml(base)->parallel.zero, 0);
  EXPECT_THAT(ErrorOf(base + "parallel: {zero: 4}\n"), HasSubstr("parallel.zero"));
  // Offload moves GPU state: on the CPU it is an error naming the field.
  auto off = FromYaml(base + "parallel: {zero: 1, offload: optimizer}\n");
  ASSERT_FALSE(off.has_value());
  EXPECT_EQ(off.error().field, "parallel.offload");
  EXPECT_THAT(off.error().message, HasSubstr("train.device cpu"));
  EXPECT_THAT(ErrorOf(base + "parallel: {offload: disk}\n"),
              HasSubstr("must be none, optimizer or optimizer+params, got 'disk'"));
  EXPECT_THAT(ErrorOf("train: {steps: 3, device: cuda}\ndata: {text: c.txt}\n"
                      "parallel: {zero: 1, offload: optimizer+params}\n"),
              HasSubstr("optimizer+params needs parallel.zero 3"));
  // What is not built yet is refused by name, not ignored.
  EXPECT_EQ(FromYaml(base + "parallel: {zero: 3}\n")->parallel.zero, 3);
  // Every stage inside tensor/pipeline layouts on the CPU (trainer/shard_zero.h), with or
  // without ZeRO-3's prefetch (default on).
  EXPECT_TRUE(FromYaml(base + "parallel: {zero: 1, tensor: 2, pipeline: 2}\n").has_value());
  EXPECT_TRUE(FromYaml(base + "parallel: {zero: 2, tensor: 2}\n").has_value());
  auto z3 = FromYaml(base + "parallel: {zero: 3, pipeline: 2}\n");
  ASSERT_TRUE(z3.has_value()) << z3.error().message;
  EXPECT_TRUE(z3->parallel.prefetch);
  EXPECT_FALSE(FromYaml(base + "parallel: {zero: 3, prefetch: false}\n")->parallel.prefetch);
  EXPECT_THAT(ErrorOf(base + "parallel: {zero: 3, prefetch: 2}\n"), HasSubstr("prefetch"));
  // On CUDA: stages 1 to 3, the optimizer offload and, with stage 3, optimizer+params are
  // built (trainer/cuda_zero.h), and inside tensor/pipeline layouts too
  // (trainer/cuda_shard_engine.cc; optimizer+params there needs two or more data replicas,
  // which the trainer checks once it knows the world).
  const std::string cuda = "train: {steps: 3, device: cuda}\ndata: {text: c.txt}\n";
  EXPECT_EQ(FromYaml(cuda + "parallel: {zero: 2}\n")->parallel.zero, 2);
  auto cuda_off = FromYaml(cuda + "parallel: {zero: 1, offload: optimizer}\n");
  ASSERT_TRUE(cuda_off.has_value()) << cuda_off.error().message;
  EXPECT_EQ(cuda_off->parallel.offload, "optimizer");
  EXPECT_TRUE(FromYaml(cuda + "parallel: {offload: optimizer}\n").has_value());
  EXPECT_EQ(FromYaml(cuda + "parallel: {zero: 3}\n")->parallel.zero, 3);
  auto params_off = FromYaml(cuda + "parallel: {zero: 3, offload: optimizer+params}\n");
  ASSERT_TRUE(params_off.has_value()) << params_off.error().message;
  EXPECT_EQ(params_off->parallel.offload, "optimizer+params");
  // Refused with an error naming `field` and saying `what`.
  auto refused = [&](const std::string& parallel, const std::string& field,
                     const std::string& what) {
    auto c = FromYaml(cuda + "parallel: " + parallel + "\n");
    ASSERT_FALSE(c.has_value()) << parallel;
    EXPECT_EQ(c.error().field, field) << parallel;
    EXPECT_THAT(c.error().message, HasSubstr(what)) << parallel;
  };
  refused("{zero: 2, offload: optimizer+params}", "parallel.offload",
          "optimizer+params needs parallel.zero 3, got 2");
  EXPECT_EQ(FromYaml(cuda + "parallel: {zero: 1, tensor: 2}\n")->parallel.zero, 1);
  EXPECT_EQ(FromYaml(cuda + "parallel: {zero: 2, tensor: 2, pipeline: 2}\n")->parallel.zero, 2);
  auto z3_layout = FromYaml(cuda + "parallel: {zero: 3, tensor: 2}\n");
  ASSERT_TRUE(z3_layout.has_value()) << z3_layout.error().message;
  EXPECT_EQ(z3_layout->parallel.zero, 3);
  EXPECT_EQ(FromYaml(cuda + "parallel: {zero: 3, pipeline: 2}\n")->parallel.zero, 3);
  EXPECT_EQ(FromYaml(cuda + "parallel: {offload: optimizer, pipeline: 2}\n")->parallel.offload,
            "optimizer");
  auto layout_params_off = FromYaml(cuda + "parallel: {zero: 3, offload: optimizer+params, tensor: 2}\n");
  ASSERT_TRUE(layout_params_off.has_value()) << layout_params_off.error().message;
  EXPECT_EQ(layout_params_off->parallel.offload, "optimizer+params");
  refused("{zero: 2, offload: optimizer+params, tensor: 2}", "parallel.offload",
          "optimizer+params needs parallel.zero 3, got 2");
}

TEST(TrainConfigTest, DefaultsNeedOnlyStepsAndData) {
  auto c = FromYaml("train: {steps: 3}\ndata: {train: 'shards/*.bin'}\n");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->data_train, "/base/shards/*.bin");
  EXPECT_EQ(c->tokenizer, "byte");
  EXPECT_EQ(c->global_batch_tokens, 0);
}

// With model.init_from the file gives the shape: an absent n_layer, n_head or n_embd is 0
// ("the file's"), not the default. GPT-2 124M's n_head 12 was refused against the default
// n_embd 128 ("model.n_embd: 128 is not divisible by model.n_head 12"), and an absent n_head
// trained the file's weights with 4 heads.
TEST(TrainConfigTest, InitFromLeavesTheShapeToTheFile) {
  auto c = FromYaml("train: {steps: 3}\ndata: {text: a}\n"
                    "model: {init_from: gpt2/model.safetensors, n_head: 12}\n");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->n_head, 12);
  EXPECT_EQ(c->n_layer, 0);
  EXPECT_EQ(c->n_embd, 0);
  auto d = FromYaml("train: {steps: 3}\ndata: {text: a}\nmodel: {init_from: m.safetensors}\n");
  ASSERT_TRUE(d.has_value()) << d.error().message;
  EXPECT_EQ(d->n_head, 0);
  auto e = FromYaml("train: {steps: 3}\ndata: {text: a}\nmodel: {n_head: 2, n_embd: 32}\n");
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->n_layer, 4);  // without init_from the defaults stand
}

TEST(TrainConfigTest, ErrorsNameTheField) {
  EXPECT_THAT(ErrorOf("data: {text: a}\n"), HasSubstr("train.steps: is required"));
  EXPECT_THAT(ErrorOf("train: {steps: 0}\ndata: {text: a}\n"), HasSubstr("train.steps"));
  EXPECT_THAT(ErrorOf("train: {steps: 1, micro_batch: 0}\ndata: {text: a}\n"),
              HasSubstr("train.micro_batch"));
  EXPECT_THAT(ErrorOf("train: {steps: 1, lr: -1}\ndata: {text: a}\n"), HasSubstr("train.lr"));
  EXPECT_THAT(ErrorOf("train: {steps: 1, lr: 0.001, min_lr: 0.01}\ndata: {text: a}\n"),
              HasSubstr("train.min_lr"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\nmodel: {n_embd: 65, n_head: 4}\n"),
              HasSubstr("model.n_embd: 65 is not divisible by model.n_head 4"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\nmodel: {n_layers: 2}\n"),
              HasSubstr("did you mean 'n_layer'"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\ntrainer: {}\n"), HasSubstr("trainer"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\n"), HasSubstr("data"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a, train: b}\n"), HasSubstr("exactly one"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\ntokenizer: {type: wordpiece}\n"),
              HasSubstr("tokenizer.type"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\ntokenizer: {type: gpt2}\n"),
              HasSubstr("tokenizer.vocab"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a, val_fraction: 0.9}\n"),
              HasSubstr("data.val_fraction"));
  EXPECT_THAT(ErrorOf("train: {steps: 1}\ndata: {text: a}\nmodel: 3\n"), HasSubstr("model"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("empty"));
  // A document that is not a mapping (a list, a scalar) says so in the config's words; it
  // said "body: must be a JSON object, got array", as of an HTTP request.
  EXPECT_EQ(ErrorOf("- model\n- train\n"),
            "the config must be a mapping of sections (model, data, train, ...), got array");
  EXPECT_THAT(ErrorOf("steps 5\n"), HasSubstr("must be a mapping of sections"));
}

TEST(TrainConfigTest, ParallelSectionAndItsErrors) {
  auto c = FromYaml(R"(
train: {steps: 1}
data: {text: a}
parallel: {tensor: 2, pipeline: 2, schedule: interleaved, virtual_stages: 2, microbatches: 8,
           pipeline_layers: [1, 1, 1, 1]}
)");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->parallel.tensor, 2);
  EXPECT_EQ(c->parallel.pipeline, 2);
  EXPECT_EQ(c->parallel.schedule, "interleaved");
  EXPECT_EQ(c->parallel.virtual_stages, 2);
  EXPECT_EQ(c->parallel.microbatches, 8);
  EXPECT_EQ(c->parallel.pipeline_layers, (std::vector<int>{1, 1, 1, 1}));
  auto d = FromYaml("train: {steps: 1}\ndata: {text: a}\n");
  EXPECT_EQ(d->parallel.tensor, 1);
  EXPECT_EQ(d->parallel.schedule, "1f1b");
  const std::string base = "train: {steps: 1}\ndata: {text: a}\n";
  EXPECT_THAT(ErrorOf(base + "parallel: {tensor: 0}\n"), HasSubstr("parallel.tensor"));
  EXPECT_THAT(ErrorOf(base + "parallel: {tensor: 3}\n"),
              HasSubstr("parallel.tensor: 3 does not divide n_head 4"));
  EXPECT_THAT(ErrorOf(base + "parallel: {schedule: zigzag}\n"), HasSubstr("parallel.schedule"));
  EXPECT_THAT(ErrorOf(base + "parallel: {pipeline_layers: 3}\n"),
              HasSubstr("parallel.pipeline_layers: must be a list"));
  EXPECT_THAT(ErrorOf(base + "parallel: {pipeline_layers: [2, x]}\n"),
              HasSubstr("parallel.pipeline_layers: entry 1 must be a layer count"));
  EXPECT_THAT(ErrorOf(base + "parallel: {tensors: 2}\n"), HasSubstr("did you mean 'tensor'"));
  // The data-parallel reduction overlaps the backward unless told not to.
  EXPECT_TRUE(d->parallel.overlap_grad_reduce);
  EXPECT_FALSE(FromYaml(base + "parallel: {overlap_grad_reduce: false}\n")
                   ->parallel.overlap_grad_reduce);
  EXPECT_THAT(ErrorOf(base + "parallel: {overlap_grad_reduce: 3}\n"),
              HasSubstr("parallel.overlap_grad_reduce"));
}

// --set section.key=value overrides the file before decoding.
TEST(TrainConfigTest, SetOverridesTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/set-test.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("train: {steps: 5}\ndata: {text: a}\n", f);
    std::fclose(f);
  }
  auto c = LoadTrainConfig(path, {"parallel.tensor=2", "train.steps=9", "parallel.schedule=gpipe",
                                  "sample.prompt=a=b", "parallel.pipeline_layers=[2,2]"});
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->parallel.tensor, 2);
  EXPECT_EQ(c->steps, 9);
  EXPECT_EQ(c->parallel.schedule, "gpipe");
  EXPECT_EQ(c->sample_prompt, "a=b");
  EXPECT_EQ(c->parallel.pipeline_layers, (std::vector<int>{2, 2}));
  for (const char* bad : {"parallel", "tensor=2", "parallel.a.b=1", ".x=1"}) {
    auto e = LoadTrainConfig(path, {bad});
    ASSERT_FALSE(e.has_value()) << bad;
    EXPECT_THAT(e.error().message, HasSubstr("--set")) << bad;
  }
  auto unknown = LoadTrainConfig(path, {"parallel.tensr=2"});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error().message, HasSubstr("did you mean 'tensor'"));
  std::remove(path.c_str());
}

TEST(TrainConfigTest, AccumulationStepsFollowTheWorldSize) {
  TrainConfig c;
  c.micro_batch = 4;
  c.seq_len = 32;
  c.global_batch_tokens = 512;  // 16 sequences
  EXPECT_EQ(AccumulationSteps(c, 1).value(), 4);
  EXPECT_EQ(AccumulationSteps(c, 2).value(), 2);
  EXPECT_EQ(AccumulationSteps(c, 4).value(), 1);
  auto three = AccumulationSteps(c, 3);
  ASSERT_FALSE(three.has_value());
  EXPECT_THAT(three.error().message,
              HasSubstr("512 is not a positive multiple of world size 3 x train.micro_batch 4 x "
                        "model.seq_len 32 = 384"));
  EXPECT_FALSE(AccumulationSteps(c, 8).has_value());  // 8 x 4 x 32 = 1024 > 512
  c.global_batch_tokens = 0;
  EXPECT_EQ(AccumulationSteps(c, 8).value(), 1);
}

}  // namespace
}  // namespace cohort::engine
