#include "engine/trainer/text_corpus.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;

Result<std::vector<std::string>> ExpandSpec(const std::string& spec, std::string_view field) {
  std::error_code ec;
  std::vector<std::string> candidates;
  if (fs::is_directory(spec, ec)) {
    for (const auto& e : fs::directory_iterator(spec, ec)) candidates.push_back(e.path().string());
    if (ec) return Errorf(ErrorCode::kInvalidArgument, "{}: cannot list {}: {}", field, spec, ec.message());
  } else if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    if (glob(spec.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) candidates.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  } else if (fs::exists(spec, ec)) {
    candidates.push_back(spec);
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto& c : candidates) {
    if (!fs::is_regular_file(c, ec)) continue;
    const std::string real = fs::canonical(c, ec).string();
    if (ec || !seen.insert(real).second) continue;
    files.push_back(c);
  }
  if (files.empty()) {
    return Errorf(ErrorCode::kNotFound, "{}: no text file at '{}'", field, spec);
  }
  return files;
}

}  // namespace

Result<TextCorpus> LoadTextCorpus(const std::string& spec, const Tokenizer& tokenizer,
                                  double val_fraction, std::string_view field) {
  TextCorpus corpus;
  corpus.files = COHORT_TRY(ExpandSpec(spec, field));
  std::vector<int32_t> tokens;
  const std::vector<int32_t> separator =
      tokenizer.eot_token() >= 0 ? std::vector<int32_t>{tokenizer.eot_token()}
                                 : tokenizer.Encode("\n\n");
  for (const auto& f : corpus.files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof()) return Errorf(ErrorCode::kInvalidArgument, "{}: cannot read {}", field, f);
    const std::string text = ss.str();
    corpus.bytes += text.size();
    if (!tokens.empty()) tokens.insert(tokens.end(), separator.begin(), separator.end());
    const auto ids = tokenizer.Encode(text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  if (tokens.size() < 2) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: '{}' holds no text", field, spec);
  }
  const size_t val = static_cast<size_t>(tokens.size() * val_fraction);
  corpus.val.assign(tokens.end() - val, tokens.end());
  tokens.resize(tokens.size() - val);
  corpus.train = std::move(tokens);
  return corpus;
}

}  // namespace cohort::engine
