// Checkpoints written by range (checkpoint.h, SaveCheckpointRanges): ranks on threads, each
// writing its ranges of the logical arrays in parallel (contiguous and strided), through an
// in-process CheckpointGroup. Round trip, a rank that cannot write, ranks that leave a gap, a
// group that breaks mid-write (a killed rank), a damaged range named on load, and a
// checkpoint of the first format (whole-file checksums) still loading.
#include <barrier>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <zlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"

#include "engine/checkpoint/checkpoint.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using testing::BitwiseEqual;
using testing::SmallConfig;
using ::testing::HasSubstr;

// The ranks of one process as a CheckpointGroup: collectives meet at a barrier. `broken`
// makes Max fail on every rank (a communicator whose peer died).
struct Shared {
  explicit Shared(int n) : size(n), sync(n), values(n) {}
  int size;
  std::barrier<> sync;
  std::vector<std::vector<double>> values;
  bool broken = false;
};

class ThreadGroup : public CheckpointGroup {
 public:
  ThreadGroup(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  Result<void> Broadcast(std::span<int64_t> v) override {
    s_.values[rank_].assign(v.begin(), v.end());
    s_.sync.arrive_and_wait();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(s_.values[0][i]);
    s_.sync.arrive_and_wait();
    return {};
  }
  Result<void> Max(std::span<float> v) override {
    if (s_.broken) return MakeError(ErrorCode::kUnavailable, "allreduce #7: rank 2 is gone");
    s_.values[rank_].assign(v.begin(), v.end());
    s_.sync.arrive_and_wait();
    for (size_t i = 0; i < v.size(); ++i) {
      for (int r = 0; r < s_.size; ++r) v[i] = std::max(v[i], static_cast<float>(s_.values[r][i]));
    }
    s_.sync.arrive_and_wait();
    return {};
  }

 private:
  Shared& s_;
  int rank_;
};

struct Logical {
  std::vector<float> params, m, v;
  explicit Logical(size_t n) : params(n), m(n), v(n) {
    for (size_t i = 0; i < n; ++i) {
      params[i] = 0.5f + static_cast<float>(i) * 1e-3f;
      m[i] = -static_cast<float>(i) * 1e-6f;
      v[i] = static_cast<float>(i % 97) * 1e-8f;
    }
  }
};

CheckpointHeader Header(int64_t step) {
  CheckpointHeader h;
  h.config = SmallConfig();
  h.adam_t = step;
  h.progress.step = step;
  h.progress.next_batch = step;
  h.progress.rng_state = {1, 2, 3};
  return h;
}

// Rank r of `ranks`: params and m as a contiguous quarter each; v as a strided range, the
// rank's column block of a (rows × ranks·w) view (plus the tail to the last rank).
struct RankRanges {
  std::vector<CheckpointRange> ranges;
  std::vector<float> strided;
};

RankRanges RangesOf(const Logical& s, int r, int ranks) {
  const size_t n = s.params.size();
  RankRanges out;
  const size_t lo = n * r / ranks, hi = n * (r + 1) / ranks;
  out.ranges.push_back({CheckpointArray::kParams, lo, hi - lo, hi - lo, 1,
                        std::span<const float>(s.params).subspan(lo, hi - lo)});
  out.ranges.push_back({CheckpointArray::kAdamM, lo, hi - lo, hi - lo, 1,
                        std::span<const float>(s.m).subspan(lo, hi - lo)});
  const size_t w = 3, row = w * ranks, rows = n / row;
  for (size_t k = 0; k < rows; ++k) {
    for (size_t j = 0; j < w; ++j) out.strided.push_back(s.v[k * row + r * w + j]);
  }
  out.ranges.push_back({CheckpointArray::kAdamV, r * w, w, row, rows, out.strided});
  if (r == ranks - 1 && rows * row < n) {
    out.ranges.push_back({CheckpointArray::kAdamV, rows * row, n - rows * row, 0, 1,
                          std::span<const float>(s.v).subspan(rows * row)});
  }
  return out;
}

class CheckpointRangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort-ckpt-ranges-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs SaveCheckpointRanges on `ranks` threads; `edit` may change a rank's ranges.
  std::vector<Result<std::string>> SaveOnRanks(
      int ranks, int64_t step, bool broken = false,
      const std::function<void(int, std::vector<CheckpointRange>&)>& edit = {}) {
    Shared shared(ranks);
    shared.broken = broken;
    std::vector<Result<std::string>> results(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        ThreadGroup g(shared, r);
        RankRanges mine = RangesOf(state_, r, ranks);
        if (edit) edit(r, mine.ranges);
        results[r] = SaveCheckpointRanges(&g, dir_, Header(step), mine.ranges, 0);
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
  Logical state_{SmallConfig().num_parameters()};
};

TEST_F(CheckpointRangesTest, FourRanksWriteTheLogicalStateInParallel) {
  for (const auto& r : SaveOnRanks(4, 7)) {
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(*r, dir_ + "/step_00000007");
  }
  auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(ck) << ck.error().ToString();
  EXPECT_TRUE(BitwiseEqual(ck->params, state_.params));
  EXPECT_TRUE(BitwiseEqual(ck->adam_m, state_.m));
  EXPECT_TRUE(BitwiseEqual(ck->adam_v, state_.v));
  EXPECT_EQ(ck->adam_t, 7);
  // The MANIFEST lists every rank's ranges (3 or 4 each), strided ones with their stride.
  nlohmann::json manifest;
  std::ifstream(dir_ + "/step_00000007/MANIFEST") >> manifest;
  EXPECT_EQ(manifest["version"], 2);
  EXPECT_EQ(manifest["ranges"].size(), 13u);
  int strided = 0;
  std::set<int> writers;
  for (const auto& r : manifest["ranges"]) {
    writers.insert(r["rank"].get<int>());
    if (r.contains("stride")) ++strided;
  }
  EXPECT_EQ(writers, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(strided, 4);
  // Nothing but the checkpoint is left (no temporary directory, no per-rank lists).
  EXPECT_EQ(Entries(), std::vector<std::string>{"step_00000007"});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_ + "/step_00000007")) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"MANIFEST", "optim.bin", "params.bin", "state.json"}));
}

TEST_F(CheckpointRangesTest, ARankThatCannotWriteKeepsThePreviousCheckpoint) {
  for (const auto& r : SaveOnRanks(3, 5)) ASSERT_TRUE(r) << r.error().ToString();
  // Rank 1's range runs past the end of its array: it fails, and so does every rank.
  auto results = SaveOnRanks(3, 10, false, [](int r, std::vector<CheckpointRange>& ranges) {
    if (r == 1) ranges[0].offset = SmallConfig().num_parameters() - 1;
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(results[r]) << "rank " << r;
    EXPECT_THAT(results[r].error().message, HasSubstr("older checkpoints are kept"));
  }
  EXPECT_THAT(results[1].error().message, HasSubstr("does not fit an array"));
  EXPECT_THAT(results[0].error().message, HasSubstr("rank 1 could not write its ranges"));
  EXPECT_EQ(Entries(), std::vector<std::string>{"step_00000005"});
  auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(ck) << ck.error().ToString();
  EXPECT_EQ(ck->progress.step, 5);
}

TEST_F(CheckpointRangesTest, RangesThatLeaveAGapAreNotCommitted) {
  auto results = SaveOnRanks(2, 3, false, [](int r, std::vector<CheckpointRange>& ranges) {
    if (r == 1) ranges.erase(ranges.begin());  // nobody writes the second half of params
  });
  ASSERT_FALSE(results[0]);
  EXPECT_EQ(results[0].error().code, ErrorCode::kInternal);
  EXPECT_THAT(results[0].error().message, HasSubstr("params.bin bytes ["));
  EXPECT_THAT(results[0].error().message, HasSubstr("are in no range"));
  ASSERT_FALSE(results[1]);
  EXPECT_THAT(results[1].error().message, HasSubstr("rank 0 could not commit"));
  EXPECT_TRUE(Entries().empty());
}

// The collective that would commit the ranges fails on every rank (a killed peer): nothing
// is renamed into place. Rank 0 removes the temporary directory, but a rank still writing
// may leave files in it; such a directory is never loaded and the next save removes it.
TEST_F(CheckpointRangesTest, AGroupBrokenMidWriteKeepsThePreviousCheckpoint) {
  for (const auto& r : SaveOnRanks(4, 5)) ASSERT_TRUE(r) << r.error().ToString();
  auto results = SaveOnRanks(4, 10, /*broken=*/true);
  for (const auto& r : results) {
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("rank 2 is gone"));
  }
  EXPECT_EQ(ListCheckpoints(dir_), std::vector<std::string>{dir_ + "/step_00000005"});
  auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->progress.step, 5);
  EXPECT_TRUE(ck->warnings.empty());
  for (const auto& r : SaveOnRanks(4, 15)) ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(Entries(), (std::vector<std::string>{"step_00000005", "step_00000015"}));
}

TEST_F(CheckpointRangesTest, ADamagedRangeIsNamedAndThePreviousCheckpointUsed) {
  for (const auto& r : SaveOnRanks(4, 5)) ASSERT_TRUE(r);
  for (const auto& r : SaveOnRanks(4, 10)) ASSERT_TRUE(r);
  // Damage one float of v in rank 2's strided columns: optim.bin byte 4n + 4·(2·3) + 1.
  const size_t n = SmallConfig().num_parameters();
  const std::string optim = dir_ + "/step_00000010/optim.bin";
  {
    std::fstream f(optim, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(4 * n + 4 * 6 + 1);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte ^= 0x10;
    f.seekp(at);
    f.write(&byte, 1);
  }
  auto ck = LoadLatestCheckpoint(dir_, SmallConfig());
  ASSERT_TRUE(ck) << ck.error().ToString();
  EXPECT_EQ(ck->progress.step, 5);
  ASSERT_EQ(ck->warnings.size(), 1u);
  EXPECT_THAT(ck->warnings[0], HasSubstr("step_00000010 is damaged"));
  EXPECT_THAT(ck->warnings[0], HasSubstr("optim.bin: checksum mismatch in optim.bin bytes ["));
  EXPECT_THAT(ck->warnings[0], HasSubstr(fmt::format("[{}, ", 4 * n + 24)));
  EXPECT_THAT(ck->warnings[0], HasSubstr("written by rank 2"));
  EXPECT_THAT(ck->warnings[0], HasSubstr("using step_00000005"));
}

// The first format: MANIFEST version 1 with a whole-file CRC-32 for every file.
TEST_F(CheckpointRangesTest, FirstFormatCheckpointsStillLoad) {
  const std::string step = dir_ + "/step_00000003";
  fs::create_directories(step);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(step + "/" + name, std::ios::binary) << bytes;
    return nlohmann::json{
        {"bytes", bytes.size()},
        {"crc32", fmt::format("{:08x}", crc32(crc32(0, nullptr, 0),
                                              reinterpret_cast<const Bytef*>(bytes.data()),
                                              static_cast<uInt>(bytes.size())))}};
  };
  auto raw = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  const GptConfig c = SmallConfig();
  nlohmann::json state = {
      {"format", "cohort-checkpoint"},
      {"version", 1},
      {"config", {{"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len},
                  {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}}},
      {"progress", {{"step", 3}, {"next_batch", 6}, {"tokens_seen", 96}, {"rng_state", {"42"}}}},
      {"adam_t", 3},
      {"metadata", nlohmann::json::object()}};
  nlohmann::json files = {{"params.bin", write("params.bin", raw(state_.params))},
                          {"optim.bin", write("optim.bin", raw(state_.m) + raw(state_.v))},
                          {"state.json", write("state.json", state.dump(2))}};
  std::ofstream(step + "/MANIFEST")
      << nlohmann::json{{"format", "cohort-checkpoint"}, {"version", 1}, {"files", files}}.dump();
  auto ck = LoadLatestCheckpoint(dir_, c);
  ASSERT_TRUE(ck) << ck.error().ToString();
  EXPECT_EQ(ck->progress.step, 3);
  EXPECT_EQ(ck->progress.rng_state, std::vector<uint64_t>{42});
  EXPECT_TRUE(BitwiseEqual(ck->params, state_.params));
  EXPECT_TRUE(BitwiseEqual(ck->adam_v, state_.v));
  // Read by range too: a version-1 checkpoint is one range per file, verified whole; a run
  // of v lands where asked.
  const size_t n = c.num_parameters();
  std::vector<float> v_part(10);
  CheckpointReadRequest request;
  request.adam_v.push_back({n - 10, 10, v_part.data()});
  auto part = LoadCheckpointRanges(nullptr, dir_, c, request);
  ASSERT_TRUE(part) << part.error().ToString();
  EXPECT_EQ(part->adam_t, 3);
  EXPECT_EQ(part->bytes_read, 8 * n) << "optim.bin, whole: its one range";
  EXPECT_TRUE(BitwiseEqual(v_part, std::vector<float>(state_.v.end() - 10, state_.v.end())));
  // And its whole-file checksum is still checked, by either path.
  {
    std::fstream f(step + "/params.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("\x7f", 1);
  }
  auto damaged = LoadLatestCheckpoint(dir_, c);
  ASSERT_FALSE(damaged);
  EXPECT_THAT(damaged.error().message, HasSubstr("params.bin: checksum mismatch"));
  std::vector<float> p_part(4);
  request.params.push_back({0, 4, p_part.data()});
  auto by_range = LoadCheckpointRanges(nullptr, dir_, c, request);
  ASSERT_FALSE(by_range);
  EXPECT_THAT(by_range.error().message, HasSubstr("params.bin: checksum mismatch in params.bin"));
  // A config that differs is named, as LoadLatestCheckpoint names it.
  GptConfig other = c;
  other.n_embd = 16;
  auto mismatch = LoadCheckpointRanges(nullptr, dir_, other, {});
  ASSERT_FALSE(mismatch);
  EXPECT_THAT(mismatch.error().message, HasSubstr("checkpoint n_embd 8 != config n_embd 16"));
}

}  // namespace
}  // namespace cohort::engine
