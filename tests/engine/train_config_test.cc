// TrainConfig decoding: defaults, every section, and errors that name the field.
#include "engine/trainer/config.h"

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

TEST(TrainConfigTest, DefaultsNeedOnlyStepsAndData) {
  auto c = FromYaml("train: {steps: 3}\ndata: {train: 'shards/*.bin'}\n");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->data_train, "/base/shards/*.bin");
  EXPECT_EQ(c->tokenizer, "byte");
  EXPECT_EQ(c->global_batch_tokens, 0);
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
