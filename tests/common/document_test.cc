// Documents from outside are bounded: YAML aliases cannot expand a document past a fixed
// number of nodes or into a cycle, and JSON cannot nest past kMaxJsonDepth or hold a
// number beyond a double. Each failure is a clear kInvalidArgument naming the place.
#include "common/document.h"

#include <sys/resource.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A "billion laughs" of `levels` anchors, each a list of ten aliases of the one before:
// 10^levels strings once expanded, from a few hundred bytes of text.
std::string AliasBomb(int levels) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= levels; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  return text;
}

// The process's peak resident set, in bytes.
int64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

TEST(YamlAliases, SharedBlocksStillExpand) {
  auto j = YamlToJson("base: &env {A: 1, B: two}\nfirst: *env\nsecond: [*env, *env]\n", "job.yaml");
  ASSERT_TRUE(j.has_value()) << j.error().message;
  EXPECT_EQ((*j)["first"], (*j)["base"]);
  EXPECT_EQ((*j)["second"][1]["B"], "two");
}

TEST(YamlAliases, RecursiveAliasIsRefusedWithItsName) {
  for (const char* text : {"a: &a [*a]\n", "a: &a {b: [1, {c: *a}]}\n"}) {
    auto j = YamlToJson(text, "job.yaml");
    ASSERT_FALSE(j.has_value()) << text;
    EXPECT_EQ(j.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(j.error().message, StartsWith("job.yaml:1:")) << j.error().message;
    EXPECT_THAT(j.error().message, HasSubstr("recursive alias *a")) << j.error().message;
  }
}

TEST(YamlAliases, BillionLaughsFailsFastWithLittleMemory) {
  int64_t before = PeakRssBytes();
  auto j = YamlToJson(AliasBomb(9), "bomb.yaml");
  ASSERT_FALSE(j.has_value());
  EXPECT_THAT(j.error().message, StartsWith("bomb.yaml:")) << j.error().message;
  EXPECT_THAT(j.error().message, HasSubstr("YAML alias expansion exceeds 100000 nodes")) << j.error().message;
  EXPECT_THAT(j.error().message, HasSubstr("at alias *a")) << j.error().message;
  EXPECT_LT(PeakRssBytes() - before, int64_t(64) << 20);
}

TEST(YamlAliases, ExpansionBelowTheLimitConverts) {
  // Four levels: 10^4 strings, well under the limit.
  auto j = YamlToJson(AliasBomb(3), "ok.yaml");
  ASSERT_TRUE(j.has_value()) << j.error().message;
  EXPECT_EQ((*j)["a3"].size(), 10u);
  EXPECT_EQ((*j)["a3"][9][9][9][9], "lol");
}

TEST(YamlAliases, AliasesCannotNestPastTheDepthLimit) {
  // Each anchor nests the one before one level deeper: 80 levels from 80 short lines.
  std::string text = "l0: &l0 [x]\n";
  for (int i = 1; i < 80; ++i) {
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [*l" + std::to_string(i - 1) + "]\n";
  }
  auto j = YamlToJson(text, "deep.yaml");
  ASSERT_FALSE(j.has_value());
  EXPECT_THAT(j.error().message, HasSubstr("more than 64 levels deep")) << j.error().message;
}

TEST(YamlAliases, DeepNestingWithoutAliasesIsRefused) {
  std::string text = std::string(100, '[') + std::string(100, ']');
  auto j = YamlToJson(text, "deep.yaml");
  ASSERT_FALSE(j.has_value());
  EXPECT_THAT(j.error().message, HasSubstr("deep.yaml:1:65: nested more than 64 levels deep")) << j.error().message;
}

TEST(JsonDocuments, NumberOutOfRangeNamesTheField) {
  auto j = JsonFromText("{\"command\": [\"x\"], \"nodes\": 1e400}", "job.json");
  ASSERT_FALSE(j.has_value());
  EXPECT_EQ(j.error().message, "job.json: nodes: number out of range: 1e400");
}

// As YAML does: a JSON spec with "nodes" twice ran with the last one, silently.
TEST(JsonDocuments, AKeyGivenTwiceIsRefused) {
  auto j = JsonFromText("{\"command\": [\"x\"], \"nodes\": 2,\n \"nodes\": 3}", "job.json");
  ASSERT_FALSE(j.has_value());
  EXPECT_EQ(j.error().message, "job.json: the key 'nodes' is given twice");
  auto env = JsonFromText(R"({"env": {"A": "1", "A": "2"}})", "job.json");
  ASSERT_FALSE(env.has_value());
  EXPECT_EQ(env.error().message, "job.json: env: the key 'A' is given twice");
}

TEST(JsonDocuments, SyntaxErrorsKeepLineAndColumn) {
  auto j = JsonFromText("{\n  \"nodes\": 1,\n  oops\n}", "job.json");
  ASSERT_FALSE(j.has_value());
  EXPECT_THAT(j.error().message, StartsWith("job.json:3:3: invalid JSON: syntax error")) << j.error().message;
}

// JSON holds only UTF-8, so a YAML string that is not could be neither sent to the head
// nor stored: converting it used to succeed, and dumping the spec then threw (found by
// fuzz/job_spec_yaml; its input, truncated inside a three-byte character, is the first
// case, kept in fuzz/corpus/job_spec_yaml/crash-invalid-utf8.yaml).
TEST(YamlStrings, InvalidUtf8IsRefusedWithItsPlace) {
  std::string fuzzed = "command:\n  - s!str 1wo";
  for (int i = 0; i < 20; ++i) fuzzed += "\xef\xbf\xbd";
  fuzzed += "\xef\xbf" "d\n";
  auto j = YamlToJson(fuzzed, "job.yaml", {"command"});
  ASSERT_FALSE(j.has_value());
  EXPECT_EQ(j.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(j.error().message,
            "job.yaml:2:5: a string is not valid UTF-8 (byte 0xef at offset 69 of it)");

  const std::pair<std::string, std::string> cases[] = {
      {"name: caf\xe9\n", "job.yaml:1:7: a string is not valid UTF-8 (byte 0xe9 at offset 3"},
      {"\"k\\xff\": 1\n", ""},  // an escape YAML decodes to U+00FF: valid, converts
      {"env: {\"\xc0\xaf\": x}\n", "job.yaml:1:7: a string is not valid UTF-8 (byte 0xc0 at offset 0"},
      {"command: [\"\xed\xa0\x80\"]\n", "job.yaml:1:11: a string is not valid UTF-8 (byte 0xed"},
      {"x: \xf4\x90\x80\x80\n", "job.yaml:1:4: a string is not valid UTF-8 (byte 0xf4"},
  };
  for (const auto& [text, error] : cases) {
    auto r = YamlToJson(text, "job.yaml", {"command", "env"});
    if (error.empty()) {
      EXPECT_TRUE(r.has_value()) << text << ": " << r.error().message;
    } else {
      ASSERT_FALSE(r.has_value()) << text;
      EXPECT_THAT(r.error().message, StartsWith(error)) << text;
    }
  }
}

// yaml-cpp 0.7 reports an empty document at a token no rule takes and leaves the token in
// place, so reading the documents looped for ever, allocating (found by fuzz/train_config;
// its input, a config with a stray ',' at the top, is
// fuzz/corpus/train_config/hang-stray-comma). Now it is a syntax error at the token.
TEST(YamlSyntax, StrayCommaIsAnErrorNotALoop) {
  const std::pair<std::string, std::string> cases[] = {
      {",", "job.yaml:1:1: invalid YAML: unexpected token ','"},
      {"\n  ,\n", "job.yaml:2:3: invalid YAML: unexpected token ','"},
      {"- !+(.,.)", "job.yaml:"},
  };
  for (const auto& [text, error] : cases) {
    auto j = YamlToJson(text, "job.yaml");
    ASSERT_FALSE(j.has_value()) << text;
    EXPECT_EQ(j.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(j.error().message, StartsWith(error)) << text;
  }
  // Documents that do move on are still counted.
  auto two = YamlToJson("a: 1\n---\nb: 2\n", "job.yaml");
  ASSERT_FALSE(two.has_value());
  EXPECT_THAT(two.error().message, HasSubstr("has 2 YAML documents"));
}

TEST(YamlStrings, Utf8ConvertsUnchanged) {
  auto j = YamlToJson("name: \"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80\"\n\xc3\xa9: 1\n", "job.yaml");
  ASSERT_TRUE(j.has_value()) << j.error().message;
  EXPECT_EQ((*j)["name"], "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80");
  EXPECT_EQ((*j)["\xc3\xa9"], 1);
  EXPECT_NO_THROW((void)j->dump());
}

}  // namespace
}  // namespace cohort
