#include "engine/data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::engine {
namespace {

TEST(ByteTokenizerTest, RoundTripIncludingInvalidUtf8) {
  auto tok = MakeByteTokenizer();
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->eot_token(), -1);
  std::string text = "héllo \xff\xfe\x80 日本\n";
  text.push_back('\0');
  std::vector<int32_t> ids = tok->Encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(ids[1], 0xC3);  // é is C3 A9
  EXPECT_EQ(ids[2], 0xA9);
  EXPECT_EQ(ids[7], 0xFF);
  EXPECT_EQ(ids.back(), 0);
  EXPECT_EQ(tok->Decode(ids), text);
}

TEST(ByteTokenizerTest, OutOfRangeIdsDecodeToReplacementCharacter) {
  auto tok = MakeByteTokenizer();
  std::vector<int32_t> ids = {'a', 256, -1, 'b'};
  EXPECT_EQ(tok->Decode(ids), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
}

}  // namespace
}  // namespace cohort::engine

// ---- GPT-2 BPE on a hand-made vocabulary ----
namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// GPT-2's bytes_to_unicode, written out independently of the implementation: printable
// Latin-1 bytes are themselves, the others U+0100 upwards in byte order.
std::string Sym(int b) {
  bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  uint32_t cp = static_cast<uint32_t>(b);
  if (!printable) {
    cp = 256;
    for (int x = 0; x < b; ++x) {
      bool px = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
      cp += px ? 0 : 1;
    }
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Merges in rank order (symbols are written in the byte alphabet: "Ġ" is a space).
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"t", "h"},          // r0  th
    {"th", "e"},         // r1  the
    {"Ġ", "c"},          // r2  Ġc
    {"a", "t"},          // r3  at
    {"Ġc", "at"},        // r4  Ġcat
    {"'", "s"},          // r5  's
    {"1", "2"},          // r6  12
    {"3", "4"},          // r7  34
    {"Ġ", "1"},          // r8  Ġ1   (ranked after 12: " 1234" must not use it)
    {"Ã", "©"},          // r9  é
    {"f", "Ã©"},         // r10 fé
    {"Ġ", "æ"},          // r11 Ġ + first byte of 日
    {"¥", "æ"},          // r12 last byte of 日 + first byte of 本: only inside one piece
    {"!", "?"},          // r13 !?
    {"Ġ", "Ġ"},          // r14 two spaces
};

class BpeTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort-bpe-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Ids 0..255: the byte symbols in GPT-2's order (printable bytes first); then one id
    // per merge; then <|endoftext|>, as in GPT-2's vocab.json.
    std::vector<int> order;
    for (int b = 0; b < 256; ++b) {
      if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) order.push_back(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) order.push_back(b);
    }
    for (int b : order) Add(Sym(b));
    for (const auto& [a, b] : kMerges) Add(a + b);
    Add("<|endoftext|>");
    WriteVocab("vocab.json", vocab_);
    std::string merges = "#version: 0.2\n";
    for (const auto& [a, b] : kMerges) merges += a + " " + b + "\n";
    WriteFile("merges.txt", merges);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Add(const std::string& s) {
    ids_[s] = static_cast<int32_t>(vocab_.size());
    vocab_.push_back(s);
  }
  int32_t Id(const std::string& s) const {
    auto it = ids_.find(s);
    EXPECT_NE(it, ids_.end()) << s;
    return it == ids_.end() ? -1 : it->second;
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  void WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
  }
  // One entry per line, like Hugging Face's files pretty-printed.
  void WriteVocab(const std::string& name, const std::vector<std::string>& syms) {
    std::string text = "{\n";
    for (size_t i = 0; i < syms.size(); ++i) {
      text += "  " + nlohmann::json(syms[i]).dump() + ": " + std::to_string(i) +
              (i + 1 < syms.size() ? ",\n" : "\n");
    }
    WriteFile(name, text + "}\n");
  }
  std::unique_ptr<Tokenizer> Load() {
    auto t = LoadGpt2BpeTokenizer(Path("vocab.json"), Path("merges.txt"));
    EXPECT_TRUE(t) << t.error().ToString();
    return t ? std::move(*t) : nullptr;
  }

  std::string dir_;
  std::vector<std::string> vocab_;
  std::map<std::string, int32_t> ids_;
};

TEST_F(BpeTokenizerTest, ByteAlphabetMatchesGpt2) {
  // Known GPT-2 facts: " " is Ġ (id 220), "\n" is Ċ (198), "!" is 0, "A" is 32, byte 0 is Ā.
  EXPECT_EQ(Sym(' '), "Ġ");
  EXPECT_EQ(Sym('\n'), "Ċ");
  EXPECT_EQ(Sym(0), "Ā");
  EXPECT_EQ(Id("Ġ"), 220);
  EXPECT_EQ(Id("Ċ"), 198);
  EXPECT_EQ(Id("!"), 0);
  EXPECT_EQ(Id("A"), 32);
  auto tok = Load();
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->name(), "gpt2-bpe");
  EXPECT_EQ(tok->vocab_size(), 256 + 15 + 1);
  EXPECT_EQ(tok->eot_token(), 271);
  EXPECT_EQ(tok->Encode(" \n!A"), (std::vector<int32_t>{220, 198, 0, 32}));
}

TEST_F(BpeTokenizerTest, ExactEncodings) {
  auto tok = Load();
  ASSERT_TRUE(tok);
  auto B = [&](int b) { return Id(Sym(b)); };
  // Pieces: "the" " cat" "'s" " " " 1234" " café" " 日本" "!?" <eot> "x"
  std::string text = "the cat's  1234 café 日本!?<|endoftext|>x";
  std::vector<int32_t> want = {
      Id("the"), Id("Ġcat"), Id("'s"),
      B(' '),                                     // the first of two spaces stays alone
      B(' '), Id("12"), Id("34"),                 // 12 (r6) before Ġ1 (r8): Ġ 12 34
      Id("Ġc"), B('a'), Id("fÃ©"),                // café: Ġc a fé
      Id("Ġæ"), B(0x97), Id("¥æ"), B(0x9C), B(0xAC),  // 日本 = E6 97 A5 E6 9C AC, one piece
      Id("!?"), 271, B('x')};
  EXPECT_EQ(tok->Encode(text), want);
  EXPECT_EQ(tok->Decode(want), text);
}

TEST_F(BpeTokenizerTest, WhitespaceRuns) {
  auto tok = Load();
  ASSERT_TRUE(tok);
  auto B = [&](int b) { return Id(Sym(b)); };
  // "x   y": "x", "  " (the run minus the space that joins "y"), " y".
  EXPECT_EQ(tok->Encode("x   y"), (std::vector<int32_t>{B('x'), Id("ĠĠ"), B(' '), B('y')}));
  // Trailing run is one piece: ĠĠ then Ġ (merges apply left to right).
  EXPECT_EQ(tok->Encode("x   "), (std::vector<int32_t>{B('x'), Id("ĠĠ"), B(' ')}));
  // Contractions split from the word; "'t" has no merge here so it stays bytes.
  EXPECT_EQ(tok->Encode("it's"), (std::vector<int32_t>{B('i'), B('t'), Id("'s")}));
  EXPECT_EQ(tok->Encode("<|endoftext|><|endoftext|>"), (std::vector<int32_t>{271, 271}));
  EXPECT_TRUE(tok->Encode("").empty());
}

TEST_F(BpeTokenizerTest, DecodeRoundTripIncludingInvalidUtf8) {
  auto tok = Load();
  ASSERT_TRUE(tok);
  for (std::string text :
       {std::string("Hello, world! It's 2024.\n\tTabs   and  spaces "),
        std::string("bad \xff\xfe bytes \xc3 and é日本 <|endoftext|> after"),
        std::string("\x80"), std::string(1, '\0') + "nul"}) {
    std::vector<int32_t> ids = tok->Encode(text);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tok->vocab_size());
    EXPECT_EQ(tok->Decode(ids), text);
  }
  std::vector<int32_t> bad = {Id("the"), 9999, -3};
  EXPECT_EQ(tok->Decode(bad), "the\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_F(BpeTokenizerTest, ConcurrentEncodeAgreesWithSerial) {
  auto tok = Load();
  ASSERT_TRUE(tok);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("the cat's " + std::to_string(i * 7919) + " café");
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts) want.push_back(tok->Encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) {
        size_t j = (i * 7 + static_cast<size_t>(k) * 13) % texts.size();
        mismatches[static_cast<size_t>(k)] += tok->Encode(texts[j]) != want[j];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST_F(BpeTokenizerTest, MalformedFilesNameFileAndLine) {
  // Missing files.
  auto r = LoadGpt2BpeTokenizer(Path("none.json"), Path("merges.txt"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message, HasSubstr("none.json"));
  // JSON syntax error on line 3.
  WriteFile("broken.json", "{\n  \"a\": 0,\n  \"b\" 1\n}\n");
  r = LoadGpt2BpeTokenizer(Path("broken.json"), Path("merges.txt"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr(Path("broken.json") + ":3"));
  // A non-integer id, on line 4.
  WriteFile("strid.json", "{\n  \"a\": 0,\n  \"b\": 1,\n  \"c\": \"2\"\n}\n");
  r = LoadGpt2BpeTokenizer(Path("strid.json"), Path("merges.txt"));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr(Path("strid.json") + ":4"));
  // A vocabulary without every byte.
  std::vector<std::string> partial(vocab_.begin() + 1, vocab_.end());
  WriteVocab("partial.json", partial);
  r = LoadGpt2BpeTokenizer(Path("partial.json"), Path("merges.txt"));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("no entry for byte 0x21"));
  // A merges line with three symbols, on line 3.
  WriteFile("three.txt", "#version: 0.2\nt h\nth e x\n");
  r = LoadGpt2BpeTokenizer(Path("vocab.json"), Path("three.txt"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr(Path("three.txt") + ":3"));
  EXPECT_THAT(r.error().message, HasSubstr("two symbols"));
  // A merge whose result is not in the vocabulary, on line 2.
  WriteFile("unknown.txt", "#version: 0.2\nq z\n");
  r = LoadGpt2BpeTokenizer(Path("vocab.json"), Path("unknown.txt"));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr(Path("unknown.txt") + ":2"));
  EXPECT_THAT(r.error().message, HasSubstr("\"qz\", which is not in"));
}

// A number beyond a double in vocab.json made nlohmann throw out_of_range, which the
// loader did not catch, so `cohort train` died (found by fuzz/bpe_tokenizer; the input is
// fuzz/corpus/bpe_tokenizer/crash-number-out-of-range). It is malformed JSON naming the
// file and the symbol.
TEST_F(BpeTokenizerTest, NumberBeyondADoubleIsMalformedJson) {
  for (const char* text : {"{\"a\": 1e400}", "{\n  \"b\": -1e999\n}\n", "[1e400]"}) {
    WriteFile("huge.json", text);
    auto r = LoadGpt2BpeTokenizer(Path("huge.json"), Path("merges.txt"));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << text;
    EXPECT_THAT(r.error().message, HasSubstr(Path("huge.json") + ": malformed JSON: ")) << text;
    EXPECT_THAT(r.error().message, HasSubstr("number out of range")) << r.error().message;
  }
}

}  // namespace
}  // namespace cohort::engine
