#include "engine/trainer/tokenize_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/data/token_shards.h"
#include "engine/data/tokenizer.h"
#include "engine/trainer/text_corpus.h"

namespace cohort::engine {
namespace {

int Report(const Error& e) {
  std::fprintf(stderr, "cohort tokenize: error: %s\n", e.message.c_str());
  return ExitCodeFor(e);
}

struct Flags {
  std::string input, output_dir, tokenizer = "byte", vocab, merges;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
};

// Removes the shards an earlier run left in `dir` (train_NNNNNN.bin and val_NNNNNN.bin, this
// command's names, nothing else); returns how many. Writing over them alone would leave
// those past this run's count behind, and data.train's glob would mix them (another
// tokenizer, another corpus) into this run's tokens.
bool IsShardName(std::string_view name) {
  for (std::string_view prefix : {"train_", "val_"}) {
    if (!name.starts_with(prefix)) continue;
    std::string_view rest = name.substr(prefix.size());
    return rest.size() == 10 && rest.ends_with(".bin") &&
           std::all_of(rest.begin(), rest.begin() + 6, [](char c) { return c >= '0' && c <= '9'; });
  }
  return false;
}

Result<int> RemoveEarlierShards(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (IsShardName(e.path().filename().string())) old.push_back(e.path());
  }
  if (ec) {
    return Errorf(ErrorCode::kInvalidArgument, "--output-dir {}: cannot list: {}", dir,
                  ec.message());
  }
  for (const auto& p : old) {
    if (!fs::remove(p, ec) && ec) {
      return Errorf(ErrorCode::kInvalidArgument, "--output-dir {}: cannot remove {}: {}", dir,
                    p.filename().string(), ec.message());
    }
  }
  return static_cast<int>(old.size());
}

// Writes `tokens` as shards <dir>/<prefix>_NNNNNN.bin; returns how many.
Result<int> WriteShards(const std::string& dir, const std::string& prefix,
                        std::span<const int32_t> tokens, int64_t shard_tokens) {
  int n = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += shard_tokens, ++n) {
    const size_t count = std::min<size_t>(shard_tokens, tokens.size() - begin);
    const std::string path = fmt::format("{}/{}_{:06d}.bin", dir, prefix, n);
    COHORT_TRY_VOID(WriteTokenShard(path, tokens.subspan(begin, count)));
  }
  return n;
}

int RunTokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text into llm.c .bin token shards for `cohort train`", "cohort tokenize"};
  Flags f;
  app.add_option("-i,--input", f.input, "A text file, a directory of text files, or a glob")->required();
  app.add_option("-o,--output-dir", f.output_dir, "Where the shards go (created if needed; an earlier run's train_*/val_* shards there are removed)")->required();
  app.add_option("--tokenizer", f.tokenizer, "byte (default) or gpt2")
      ->check(CLI::IsMember({"byte", "gpt2"}));
  app.add_option("--vocab", f.vocab, "GPT-2 vocab.json (with --tokenizer gpt2)");
  app.add_option("--merges", f.merges, "GPT-2 merges.txt (with --tokenizer gpt2)");
  app.add_option("--val-fraction", f.val_fraction, "Share of tokens for validation (default 0.05)")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--shard-tokens", f.shard_tokens, "Tokens per shard (default 100M)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 31));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (f.tokenizer == "gpt2") {
    if (f.vocab.empty() || f.merges.empty()) {
      return Report(Error(ErrorCode::kInvalidArgument,
                          "--tokenizer gpt2 needs --vocab (vocab.json) and --merges (merges.txt)"));
    }
    auto t = LoadGpt2BpeTokenizer(f.vocab, f.merges);
    if (!t) return Report(t.error());
    tokenizer = std::move(*t);
  } else {
    tokenizer = MakeByteTokenizer();
  }
  auto corpus = LoadTextCorpus(f.input, *tokenizer, f.val_fraction, "--input");
  if (!corpus) return Report(corpus.error());
  std::error_code ec;
  std::filesystem::create_directories(f.output_dir, ec);
  if (ec) {
    return Report(Error(ErrorCode::kInvalidArgument,
                        fmt::format("--output-dir {}: {}", f.output_dir, ec.message())));
  }
  auto removed = RemoveEarlierShards(f.output_dir);
  if (!removed) return Report(removed.error());
  if (*removed > 0) {
    std::printf("removed %d shards of an earlier run from %s\n", *removed, f.output_dir.c_str());
  }
  auto train = WriteShards(f.output_dir, "train", corpus->train, f.shard_tokens);
  if (!train) return Report(train.error());
  auto val = WriteShards(f.output_dir, "val", corpus->val, f.shard_tokens);
  if (!val) return Report(val.error());
  std::printf("%zu files, %zu bytes -> %zu training tokens in %d shards, %zu validation tokens "
              "in %d shards (%s tokenizer, vocab %d) in %s\n",
              corpus->files.size(), corpus->bytes, corpus->train.size(), *train,
              corpus->val.size(), *val, std::string(tokenizer->name()).c_str(),
              tokenizer->vocab_size(), f.output_dir.c_str());
  return 0;
}

}  // namespace

ExternalCommand TokenizeCommand() {
  return ExternalCommand{"tokenize", "Tokenize text into token shards for `cohort train`",
                         &RunTokenize};
}

}  // namespace cohort::engine
