#include "engine/checkpoint/checkpoint.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <zlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using testing::BitwiseEqual;
using testing::SmallConfig;
using ::testing::HasSubstr;

// A checkpoint's contents, with distinct values everywhere (incl. -0, denormals, NaN bits).
struct State {
  GptConfig config = SmallConfig();
  std::vector<float> params, m, v;
  TrainProgress progress;
  int64_t adam_t = 0;
  nlohmann::json metadata = {{"lr", 0.001}, {"note", "hi"}};

  explicit State(int64_t step) {
    size_t n = config.num_parameters();
    params.resize(n);
    m.resize(n);
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      params[i] = static_cast<float>(step) + static_cast<float>(i) * 1e-3f;
      m[i] = -static_cast<float>(i) * 1.5e-7f;
      v[i] = static_cast<float>(i * i) * 1e-9f;
    }
    params[0] = -0.0f;
    params[1] = std::numeric_limits<float>::denorm_min();
    progress.step = step;
    progress.next_batch = step * 2;
    progress.tokens_seen = step * 4096;
    progress.rng_state = {0xFFFFFFFFFFFFFFFFull, 0x8000000000000001ull, 12345,
                          static_cast<uint64_t>(step)};
    adam_t = step;
  }
  CheckpointView View() const {
    CheckpointView view;
    view.config = config;
    view.params = params;
    view.adam_m = m;
    view.adam_v = v;
    view.adam_t = adam_t;
    view.progress = progress;
    view.metadata = metadata;
    return view;
  }
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort-ckpt-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Save(int64_t step, int keep_last = 0) {
    State s(step);
    auto r = SaveCheckpoint(dir_, s.View(), keep_last);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : "";
  }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripIsBitwise) {
  std::string path = Save(100);
  EXPECT_EQ(path, (fs::path(dir_) / "step_00000100").string());
  for (const char* f : {"params.bin", "optim.bin", "state.json", "MANIFEST"}) {
    EXPECT_TRUE(fs::exists(fs::path(path) / f)) << f;
  }
  auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(ck) << ck.error().ToString();
  State want(100);
  EXPECT_EQ(ck->path, path);
  EXPECT_TRUE(BitwiseEqual(ck->params, want.params));
  EXPECT_TRUE(BitwiseEqual(ck->adam_m, want.m));
  EXPECT_TRUE(BitwiseEqual(ck->adam_v, want.v));
  EXPECT_EQ(ck->adam_t, 100);
  EXPECT_EQ(ck->progress.step, 100);
  EXPECT_EQ(ck->progress.next_batch, 200);
  EXPECT_EQ(ck->progress.tokens_seen, 409600);
  EXPECT_EQ(ck->progress.rng_state, want.progress.rng_state);  // uint64 exact
  EXPECT_EQ(ck->metadata, want.metadata);
  EXPECT_EQ(ck->config.n_embd, 8);
  EXPECT_EQ(ck->config.vocab_size, 50);
  EXPECT_TRUE(ck->warnings.empty());
  EXPECT_EQ(ListCheckpoints(dir_), std::vector<std::string>{path});
}

TEST_F(CheckpointTest, NewestWinsAndResavingAStepReplacesIt) {
  Save(5);
  Save(20);
  Save(10);
  auto ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->progress.step, 20);
  // Save step 20 again with other metadata: it replaces the directory.
  State s(20);
  s.metadata = {{"again", true}};
  ASSERT_TRUE(SaveCheckpoint(dir_, s.View(), 0));
  ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->metadata, s.metadata);
  EXPECT_EQ(ListCheckpoints(dir_).size(), 3u);
}

TEST_F(CheckpointTest, KeepLastPrunesOldest) {
  for (int64_t step : {1, 2, 3, 4, 5}) Save(step, 3);
  std::vector<std::string> left = ListCheckpoints(dir_);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step_00000003");
  EXPECT_EQ(fs::path(left[2]).filename(), "step_00000005");
  Save(6, 0);  // keep_last 0 keeps all
  EXPECT_EQ(ListCheckpoints(dir_).size(), 4u);
}

// A run that fell back past a damaged newer checkpoint prunes only up to the step it writes:
// keep_last counted the damaged step_00000020, so with keep_last 1 the checkpoint just
// written (step 12) was deleted and the damaged one kept: nothing left to resume from.
TEST_F(CheckpointTest, KeepLastNeverCountsADamagedNewerCheckpoint) {
  Save(10, 1);
  const std::string damaged = Save(20, 0);
  fs::resize_file(damaged + "/optim.bin", fs::file_size(damaged + "/optim.bin") - 4);
  auto resumed = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(resumed) << resumed.error().ToString();
  ASSERT_EQ(resumed->progress.step, 10);

  const std::string written = Save(12, 1);
  EXPECT_TRUE(fs::exists(written));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "step_00000010"));  // pruned: keep_last 1
  auto next = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(next) << next.error().ToString();
  EXPECT_EQ(next->progress.step, 12);
  ASSERT_EQ(next->warnings.size(), 1u);
  EXPECT_THAT(next->warnings[0], HasSubstr(damaged));

  // Writing the damaged one's step replaces it, and pruning goes on as before.
  Save(20, 1);
  EXPECT_EQ(ListCheckpoints(dir_), std::vector<std::string>{damaged});
  auto last = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(last) << last.error().ToString();
  EXPECT_EQ(last->progress.step, 20);
  EXPECT_TRUE(last->warnings.empty());
}

TEST_F(CheckpointTest, ListOrdersByStepNotName) {
  Save(99999999);
  Save(100000000);  // nine digits
  Save(7);
  auto all = ListCheckpoints(dir_);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(fs::path(all[2]).filename(), "step_100000000");
  auto ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->progress.step, 100000000);
}

void FlipByte(const std::string& path, size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

TEST_F(CheckpointTest, DamagedNewestFallsBackWithAWarning) {
  struct Damage {
    const char* name;
    std::function<void(const std::string&)> apply;
    const char* reason;
  };
  std::vector<Damage> cases = {
      {"flipped params", [](const std::string& p) { FlipByte(p + "/params.bin", 100); },
       "params.bin: checksum mismatch"},
      {"truncated optim",
       [](const std::string& p) {
         fs::resize_file(p + "/optim.bin", fs::file_size(p + "/optim.bin") - 4);
       },
       "optim.bin: truncated"},
      {"no manifest", [](const std::string& p) { fs::remove(p + "/MANIFEST"); }, "MANIFEST"},
      {"garbage state",
       [](const std::string& p) { std::ofstream(p + "/state.json") << "{not json"; },
       "state.json"},
  };
  for (const Damage& d : cases) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Save(10);
    std::string newest = Save(20);
    d.apply(newest);
    auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
    ASSERT_TRUE(ck) << d.name << ": " << ck.error().ToString();
    EXPECT_EQ(ck->progress.step, 10) << d.name;
    EXPECT_TRUE(BitwiseEqual(ck->params, State(10).params)) << d.name;
    ASSERT_EQ(ck->warnings.size(), 1u) << d.name;
    EXPECT_THAT(ck->warnings[0], HasSubstr(newest)) << d.name;
    EXPECT_THAT(ck->warnings[0], HasSubstr(d.reason)) << d.name;
    EXPECT_THAT(ck->warnings[0], HasSubstr("using step_00000010")) << d.name;
  }
}

// A state.json whose checksum matches but whose fields have the wrong types is damaged,
// not a crash: `"format": 1` made nlohmann's value() throw out of the loader (found by
// fuzz/checkpoint_manifest; its input is fuzz/corpus/checkpoint_manifest/state_types).
TEST_F(CheckpointTest, StateWithWrongTypesIsDamagedNotACrash) {
  const nlohmann::json config = {{"vocab_size", 50}, {"max_seq_len", 8}, {"n_layer", 2},
                                 {"n_head", 2}, {"n_embd", 8}};
  const nlohmann::json progress = {{"step", 20}, {"next_batch", 40}, {"tokens_seen", 1},
                                   {"rng_state", {"1"}}};
  const nlohmann::json good = {{"format", "cohort-checkpoint"}, {"version", 1},
                               {"config", config}, {"progress", progress}, {"adam_t", 20},
                               {"metadata", nlohmann::json::object()}};
  struct Case {
    const char* name;
    nlohmann::json state;
    const char* reason;
  };
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json s = good;
    s[key] = std::move(value);
    return s;
  };
  auto with_config = [&](const char* key, nlohmann::json value) {
    nlohmann::json c = config;
    c[key] = std::move(value);
    return with("config", c);
  };
  const Case cases[] = {
      {"format a number", with("format", 1), "unknown format/version"},
      {"config past int", with_config("n_layer", int64_t{1} << 32 | 2), "config.n_layer"},
      {"config past int64", with_config("vocab_size", UINT64_MAX), "config.vocab_size"},
      {"adam_t past int64", with("adam_t", UINT64_MAX), "adam_t"},
      {"metadata a list", with("metadata", nlohmann::json::array()), "metadata is not an object"},
  };
  for (const Case& c : cases) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Save(10);
    std::string newest = Save(20);
    // Replace state.json and give MANIFEST its new size and checksum, as a careless tool
    // rewriting the checkpoint would.
    std::string text = c.state.dump();
    std::ofstream(newest + "/state.json", std::ios::binary | std::ios::trunc) << text;
    nlohmann::json manifest;
    std::ifstream(newest + "/MANIFEST") >> manifest;
    manifest["files"]["state.json"]["bytes"] = text.size();
    manifest["files"]["state.json"]["crc32"] = fmt::format(
        "{:08x}", crc32(crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(text.data()),
                        static_cast<uInt>(text.size())));
    std::ofstream(newest + "/MANIFEST", std::ios::trunc) << manifest.dump();
    auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
    ASSERT_TRUE(ck) << c.name << ": " << ck.error().ToString();
    EXPECT_EQ(ck->progress.step, 10) << c.name;
    ASSERT_EQ(ck->warnings.size(), 1u) << c.name;
    EXPECT_THAT(ck->warnings[0], HasSubstr("state.json: ")) << c.name;
    EXPECT_THAT(ck->warnings[0], HasSubstr(c.reason)) << c.name << ": " << ck->warnings[0];
  }
}

TEST_F(CheckpointTest, NoValidCheckpointListsEveryReason) {
  std::string a = Save(1);
  std::string b = Save(2);
  FlipByte(a + "/optim.bin", 3);
  fs::remove(b + "/params.bin");
  auto ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_FALSE(ck);
  EXPECT_EQ(ck.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(ck.error().message, HasSubstr(a));
  EXPECT_THAT(ck.error().message, HasSubstr("optim.bin: checksum mismatch"));
  EXPECT_THAT(ck.error().message, HasSubstr(b));
  EXPECT_THAT(ck.error().message, HasSubstr("params.bin"));
}

TEST_F(CheckpointTest, EmptyOrMissingDirectoryIsNotFound) {
  auto ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_FALSE(ck);
  EXPECT_EQ(ck.error().code, ErrorCode::kNotFound);
  ck = LoadLatestCheckpoint(dir_ + "/nope", std::nullopt);
  ASSERT_FALSE(ck);
  EXPECT_EQ(ck.error().code, ErrorCode::kNotFound);
}

TEST_F(CheckpointTest, ConfigMismatchNamesTheField) {
  Save(3);
  GptConfig other = SmallConfig();
  other.n_embd = 16;
  auto ck = LoadLatestCheckpoint(dir_, other);
  ASSERT_FALSE(ck);
  EXPECT_EQ(ck.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(ck.error().field, "n_embd");
  EXPECT_THAT(ck.error().message, HasSubstr("checkpoint n_embd 8 != config n_embd 16"));
}

TEST_F(CheckpointTest, SpanLengthsMustMatchConfig) {
  State s(1);
  s.m.pop_back();
  auto r = SaveCheckpoint(dir_, s.View(), 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(ListCheckpoints(dir_).empty());
}

TEST_F(CheckpointTest, LeftoverTempDirsAreIgnoredAndCleaned) {
  Save(1);
  // A crash mid-write leaves a temporary directory, possibly with a newer step.
  fs::create_directories(fs::path(dir_) / ".tmp-step_00000009-123-abcdef00");
  std::ofstream(fs::path(dir_) / ".tmp-step_00000009-123-abcdef00" / "params.bin") << "x";
  auto ck = LoadLatestCheckpoint(dir_, std::nullopt);
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->progress.step, 1);
  EXPECT_TRUE(ck->warnings.empty());
  Save(2);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / ".tmp-step_00000009-123-abcdef00"));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2);
}

TEST_F(CheckpointTest, NoSpaceLeftIsClearAndKeepsOlderCheckpoints) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  std::string mnt = dir_ + "/small";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string p;
    ~Unmount() { umount(p.c_str()); }
  } unmount{mnt};

  State small(1);  // ~17 KiB of params + optim: fits
  ASSERT_TRUE(SaveCheckpoint(mnt, small.View(), 0));
  State big(2);
  big.config.n_embd = 64;
  big.config.n_head = 4;
  big.config.n_layer = 4;  // ~200k params: 2.4 MB, more than the 1 MiB tmpfs
  size_t n = big.config.num_parameters();
  big.params.assign(n, 1.0f);
  big.m.assign(n, 2.0f);
  big.v.assign(n, 3.0f);
  auto r = SaveCheckpoint(mnt, big.View(), 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("no space left on device"));
  EXPECT_THAT(r.error().message, HasSubstr("step_00000002"));
  EXPECT_THAT(r.error().message, HasSubstr("older checkpoints are kept"));
  // Only the old checkpoint remains (no temporary directory), and it still loads.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(mnt)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"step_00000001"});
  auto ck = LoadLatestCheckpoint(mnt, SmallConfig());
  ASSERT_TRUE(ck) << ck.error().ToString();
  EXPECT_EQ(ck->progress.step, 1);
  EXPECT_TRUE(BitwiseEqual(ck->params, small.params));
}

}  // namespace
}  // namespace cohort::engine
