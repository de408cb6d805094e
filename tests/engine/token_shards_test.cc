#include "engine/data/token_shards.h"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TokenShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort-shards-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  void WriteBytes(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream f(Path(name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void WriteRaw(const std::string& name, const std::vector<uint16_t>& toks) {
    std::vector<uint8_t> b(toks.size() * 2);
    std::memcpy(b.data(), toks.data(), b.size());
    WriteBytes(name, b);
  }
  std::string dir_;
};

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_F(TokenShardsTest, BinShardRoundTripAndHeaderLayout) {
  std::vector<int32_t> toks = {0, 1, 50256, 65535, 7};
  ASSERT_TRUE(WriteTokenShard(Path("a.bin"), toks));
  EXPECT_EQ(fs::file_size(Path("a.bin")), 1024u + 2 * toks.size());
  std::ifstream f(Path("a.bin"), std::ios::binary);
  int32_t header[3];
  f.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);

  auto ds = TokenDataset::Open(Path("a.bin"));
  ASSERT_TRUE(ds) << ds.error().ToString();
  EXPECT_EQ(ds->size(), 5u);
  std::vector<int32_t> out(5);
  ASSERT_TRUE(ds->Read(0, out));
  EXPECT_EQ(out, toks);
  EXPECT_EQ(ds->files(), std::vector<std::string>{Path("a.bin")});
}

TEST_F(TokenShardsTest, RawUint16Shard) {
  WriteRaw("raw.u16", {10, 20, 30, 40});
  auto ds = TokenDataset::Open(Path("raw.u16"));
  ASSERT_TRUE(ds) << ds.error().ToString();
  EXPECT_EQ(ds->size(), 4u);
  std::vector<int32_t> out(2);
  ASSERT_TRUE(ds->Read(1, out));
  EXPECT_EQ(out, (std::vector<int32_t>{20, 30}));
}

TEST_F(TokenShardsTest, ReadsAcrossShardsInSortedGlobOrder) {
  // Written out of order; the glob sorts: a (0..9), b raw (100..104), c (200..206).
  ASSERT_TRUE(WriteTokenShard(Path("shard_c.bin"), Iota(7, 200)));
  ASSERT_TRUE(WriteTokenShard(Path("shard_a.bin"), Iota(10, 0)));
  std::vector<uint16_t> b = {100, 101, 102, 103, 104};
  WriteRaw("shard_b.u16", b);
  auto ds = TokenDataset::Open(Path("shard_*"));
  ASSERT_TRUE(ds) << ds.error().ToString();
  EXPECT_EQ(ds->files(), (std::vector<std::string>{Path("shard_a.bin"), Path("shard_b.u16"),
                                                    Path("shard_c.bin")}));
  ASSERT_EQ(ds->size(), 22u);
  std::vector<int32_t> all(22);
  ASSERT_TRUE(ds->Read(0, all));
  std::vector<int32_t> want = Iota(10, 0);
  for (int t : Iota(5, 100)) want.push_back(t);
  for (int t : Iota(7, 200)) want.push_back(t);
  EXPECT_EQ(all, want);
  // A window spanning all three shards.
  std::vector<int32_t> span(8);
  ASSERT_TRUE(ds->Read(8, span));
  EXPECT_EQ(span, (std::vector<int32_t>{8, 9, 100, 101, 102, 103, 104, 200}));
  // Out of range.
  std::vector<int32_t> over(3);
  auto r = ds->Read(20, over);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  std::vector<int32_t> empty;
  EXPECT_TRUE(ds->Read(22, empty));
}

TEST_F(TokenShardsTest, NothingMatchesIsNotFound) {
  auto r = TokenDataset::Open(Path("nope_*.bin"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message, HasSubstr("nope_*.bin"));
}

TEST_F(TokenShardsTest, BadShardsAreRejectedNamingTheFile) {
  ASSERT_TRUE(WriteTokenShard(Path("good.bin"), Iota(100, 0)));
  // Truncated: the header says 100 tokens, the file holds fewer.
  fs::copy_file(Path("good.bin"), Path("trunc.bin"));
  fs::resize_file(Path("trunc.bin"), 1024 + 150);
  // Bad magic with a .bin name.
  WriteBytes("magic.bin", std::vector<uint8_t>(2048, 7));
  // Unknown version.
  std::vector<uint8_t> v2(1024 + 4, 0);
  int32_t hdr[3] = {20240520, 2, 2};
  std::memcpy(v2.data(), hdr, sizeof(hdr));
  WriteBytes("version.bin", v2);
  // Odd byte count for raw tokens, and an empty file.
  WriteBytes("odd.u16", {1, 2, 3});
  WriteBytes("empty.u16", {});

  struct Case {
    const char* name;
    const char* says;
  } cases[] = {{"trunc.bin", "truncated"},
               {"magic.bin", "bad magic"},
               {"version.bin", "version 2"},
               {"odd.u16", "odd byte count"},
               {"empty.u16", "empty"}};
  for (const Case& c : cases) {
    auto r = TokenDataset::Open(Path(c.name));
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << c.name;
    EXPECT_THAT(r.error().message, HasSubstr(Path(c.name)));
    EXPECT_THAT(r.error().message, HasSubstr(c.says));
  }
  auto ok = TokenDataset::Open(Path("good.bin"));
  EXPECT_TRUE(ok);
}

TEST_F(TokenShardsTest, CheckVocabNamesShardAndPosition) {
  ASSERT_TRUE(WriteTokenShard(Path("s0.bin"), std::vector<int32_t>{1, 2, 3}));
  ASSERT_TRUE(WriteTokenShard(Path("s1.bin"), std::vector<int32_t>{4, 300, 5}));
  auto ds = TokenDataset::Open(Path("s*.bin"));
  ASSERT_TRUE(ds);
  EXPECT_TRUE(ds->CheckVocab(301));
  auto r = ds->CheckVocab(256);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, HasSubstr(Path("s1.bin")));
  EXPECT_THAT(r.error().message, HasSubstr("position 1"));
  EXPECT_THAT(r.error().message, HasSubstr("300"));

  TokenDataset mem = TokenDataset::FromTokens({1, 2, -1});
  EXPECT_FALSE(mem.CheckVocab(10));
  EXPECT_TRUE(TokenDataset::FromTokens({1, 2, 9}).CheckVocab(10));
}

TEST_F(TokenShardsTest, InMemoryDataset) {
  TokenDataset ds = TokenDataset::FromTokens(Iota(10, 5));
  EXPECT_EQ(ds.size(), 10u);
  EXPECT_TRUE(ds.files().empty());
  std::vector<int32_t> out(3);
  ASSERT_TRUE(ds.Read(7, out));
  EXPECT_EQ(out, (std::vector<int32_t>{12, 13, 14}));
  EXPECT_FALSE(ds.Read(8, out));
}

TEST_F(TokenShardsTest, WriteRejectsIdsOutsideUint16) {
  auto r = WriteTokenShard(Path("x.bin"), std::vector<int32_t>{1, 65536});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Path("x.bin")));
  EXPECT_FALSE(WriteTokenShard(Path("x.bin"), std::vector<int32_t>{-1}));
}

TEST_F(TokenShardsTest, FailedWriteLeavesOldFileIntact) {
  ASSERT_TRUE(WriteTokenShard(Path("keep.bin"), std::vector<int32_t>{1, 2, 3}));
  auto before = fs::file_size(Path("keep.bin"));
  // In a child process, cap file sizes at 4 KiB so writing 20 KiB fails (EFBIG).
  auto write_capped = [&] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    auto r = WriteTokenShard(Path("keep.bin"), Iota(10000, 0));
    std::_Exit(!r && r.error().code == ErrorCode::kUnavailable ? 0 : 1);
  };
  EXPECT_EXIT(write_capped(), ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(fs::file_size(Path("keep.bin")), before);
  auto ds = TokenDataset::Open(Path("keep.bin"));
  ASSERT_TRUE(ds);
  std::vector<int32_t> out(3);
  ASSERT_TRUE(ds->Read(0, out));
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3}));
  // No temporary file is left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(TokenShardsTest, WriteToMissingDirectoryIsUnavailable) {
  auto r = WriteTokenShard(Path("no/such/dir/x.bin"), std::vector<int32_t>{1});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("No such file"));
}

}  // namespace
}  // namespace cohort::engine
