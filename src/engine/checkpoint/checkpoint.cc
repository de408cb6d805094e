// Checksums are zlib's CRC-32: zlib is already a dependency, its crc32 is fast (several
// GB/s, so a 1.5 GB GPT-2 checkpoint costs well under a second), and the goal is to catch
// accidental damage (torn writes, truncation, bit rot), not tampering, which is what
// SHA-256 would add at a few times the cost.
#include "engine/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <fmt/ranges.h>

#include "engine/checkpoint/checkpoint_ranges.h"
#include "engine/data/file_util.h"

namespace cohort::engine {
namespace fs = std::filesystem;
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are little-endian; a big-endian host needs byte swaps");

constexpr std::string_view kFormat = "cohort-checkpoint";
constexpr int kVersion = 1;          // state.json's
constexpr int kManifestVersion = 2;  // 1: whole-file checksums of params.bin and optim.bin
constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kTempPrefix = ".tmp-step_";
constexpr size_t kChunk = size_t{8} << 20;
constexpr const char* kDataFiles[] = {"params.bin", "optim.bin", "state.json"};

using ckpt::Crc32;
using ckpt::CrcHex;

std::string StepName(int64_t step) { return fmt::format("step_{:08d}", step); }

// Parses "step_<digits>" to its step, or -1.
int64_t ParseStepName(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return -1;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.size() < 8) return -1;
  int64_t v = -1;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || p != digits.data() + digits.size() || v < 0) return -1;
  return v;
}

// A file's size and checksum, for MANIFEST.
struct FileSum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Writes chunks of `parts` to `path` (fsynced) and returns their size and CRC.
Result<FileSum> WriteParts(const std::string& path,
                           std::initializer_list<std::span<const uint8_t>> parts) {
  FileWriter w = COHORT_TRY(FileWriter::Create(path));
  FileSum sum;
  sum.crc = Crc32(0, nullptr, 0);
  for (std::span<const uint8_t> part : parts) {
    for (size_t off = 0; off < part.size(); off += kChunk) {
      size_t n = std::min(kChunk, part.size() - off);
      COHORT_TRY_VOID(w.Write(part.data() + off, n));
      sum.crc = Crc32(sum.crc, part.data() + off, n);
      sum.bytes += n;
    }
  }
  COHORT_TRY_VOID(w.SyncAndClose());
  return sum;
}

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

nlohmann::json ConfigToJson(const GptConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"max_seq_len", c.max_seq_len},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_embd", c.n_embd}};
}

// Removes every stale temporary directory in `dir` (best effort).
void RemoveTempDirs(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with(kTempPrefix)) {
      std::error_code ignore;
      fs::remove_all(e.path(), ignore);
    }
  }
}

// Rank 0, once every rank's ranges are durable in `tmp`: state.json, then MANIFEST (the
// tensor files' sizes and every range), each fsynced, then the directory.
Result<void> WriteStateAndManifest(const std::string& tmp, const CheckpointHeader& header,
                                   const std::map<std::string, uint64_t>& sizes,
                                   std::span<const ckpt::RangeRecord> ranges) {
  nlohmann::json rng = nlohmann::json::array();
  for (uint64_t w : header.progress.rng_state) rng.push_back(std::to_string(w));
  nlohmann::json state = {
      {"format", kFormat},
      {"version", kVersion},
      {"config", ConfigToJson(header.config)},
      {"progress",
       {{"step", header.progress.step},
        {"next_batch", header.progress.next_batch},
        {"tokens_seen", header.progress.tokens_seen},
        {"rng_state", rng}}},
      {"adam_t", header.adam_t},
      {"metadata", header.metadata},
  };
  std::string state_text = state.dump(2) + "\n";
  FileSum state_sum = COHORT_TRY(WriteParts(tmp + "/state.json", {AsBytes(state_text)}));
  nlohmann::json files = nlohmann::json::object();
  files["state.json"] = {{"bytes", state_sum.bytes}, {"crc32", CrcHex(state_sum.crc)}};
  for (const auto& [name, bytes] : sizes) files[name] = {{"bytes", bytes}};
  nlohmann::json list = nlohmann::json::array();
  for (const ckpt::RangeRecord& r : ranges) list.push_back(ckpt::ToJson(r));
  nlohmann::json manifest = {
      {"format", kFormat}, {"version", kManifestVersion}, {"files", files}, {"ranges", list}};
  std::string manifest_text = manifest.dump(1) + "\n";
  COHORT_TRY(WriteParts(tmp + "/MANIFEST", {AsBytes(manifest_text)}));
  return FsyncDir(tmp);
}

// Reads a whole file and its CRC; kInvalidArgument-style reasons for the caller.
Result<std::vector<uint8_t>> ReadWhole(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return MakeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                     fmt::format("cannot open: {}", std::strerror(errno)));
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return MakeError(ErrorCode::kUnavailable, fmt::format("read: {}", std::strerror(err)));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  close(fd);
  return out;
}

// Reads `path` into `out` (exactly out.size() floats, or several spans in turn) while
// checking its size and, given `want` (a version 1 manifest's whole-file entry), its CRC.
Result<void> ReadVerified(const std::string& path, const FileSum* want,
                          std::initializer_list<std::span<float>> outs) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errorf(ErrorCode::kInvalidArgument, "cannot open: {}", std::strerror(errno));
  uint64_t total = 0;
  for (auto o : outs) total += o.size_bytes();
  uint32_t crc = Crc32(0, nullptr, 0);
  uint64_t got = 0;
  std::string failure;
  for (std::span<float> o : outs) {
    uint8_t* p = reinterpret_cast<uint8_t*>(o.data());
    size_t left = o.size_bytes();
    while (left > 0 && failure.empty()) {
      ssize_t n = read(fd, p, std::min(left, kChunk));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) failure = fmt::format("read: {}", std::strerror(errno));
      if (n == 0) failure = fmt::format("truncated: {} bytes, expected {}", got, total);
      if (n <= 0) break;
      crc = Crc32(crc, p, static_cast<size_t>(n));
      p += n;
      left -= static_cast<size_t>(n);
      got += static_cast<uint64_t>(n);
    }
  }
  if (failure.empty()) {
    uint8_t extra;
    ssize_t n = read(fd, &extra, 1);
    if (n > 0) failure = fmt::format("larger than the expected {} bytes", total);
  }
  close(fd);
  if (!failure.empty()) return MakeError(ErrorCode::kInvalidArgument, failure);
  if (want && crc != want->crc) {
    return Errorf(ErrorCode::kInvalidArgument, "checksum mismatch (crc32 {} != manifest {})",
                  CrcHex(crc), CrcHex(want->crc));
  }
  return {};
}

Result<GptConfig> ConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return MakeError(ErrorCode::kInvalidArgument, "config is not an object");
  GptConfig c;
  auto field = [&](const char* name, int& out) -> Result<void> {
    auto it = j.find(name);
    // get<int>() would wrap a larger number into range (2^32 + 8 reading as 8).
    if (it == j.end() || !it->is_number_integer() ||
        (it->is_number_unsigned() ? it->get<uint64_t>() > uint64_t{INT_MAX}
                                  : it->get<int64_t>() < INT_MIN || it->get<int64_t>() > INT_MAX)) {
      return Errorf(ErrorCode::kInvalidArgument, "config.{} missing or not an integer of int's range",
                    name);
    }
    out = it->get<int>();
    return {};
  };
  COHORT_TRY_VOID(field("vocab_size", c.vocab_size));
  COHORT_TRY_VOID(field("max_seq_len", c.max_seq_len));
  COHORT_TRY_VOID(field("n_layer", c.n_layer));
  COHORT_TRY_VOID(field("n_head", c.n_head));
  COHORT_TRY_VOID(field("n_embd", c.n_embd));
  COHORT_TRY_VOID(c.Validate());
  return c;
}

Result<int64_t> IntField(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})) {
    return Errorf(ErrorCode::kInvalidArgument, "{} missing or not an integer of int64's range",
                  name);
  }
  return it->get<int64_t>();
}

Result<uint64_t> ParseU64(const nlohmann::json& v) {
  if (!v.is_string()) return MakeError(ErrorCode::kInvalidArgument, "rng_state word not a string");
  const std::string& s = v.get_ref<const std::string&>();
  uint64_t out = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return Errorf(ErrorCode::kInvalidArgument, "rng_state word '{}' is not a uint64", s);
  }
  return out;
}

// A step directory whose MANIFEST and state.json verify, its tensor files not read yet:
// the header (`ck` without arrays), the files' sizes (and version 1's whole-file CRCs) and
// the written ranges (version 2).
struct Opened {
  Checkpoint ck;
  bool by_range = false;
  FileSum sums[3];
  std::vector<ckpt::RangeRecord> ranges;
};

// Opens one step directory; the error message is the reason it is damaged.
Result<Opened> OpenOne(const std::string& path, int64_t step) {
  auto manifest_bytes = ReadWhole(path + "/MANIFEST");
  if (!manifest_bytes) {
    return Errorf(ErrorCode::kInvalidArgument, "MANIFEST: {}", manifest_bytes.error().message);
  }
  auto manifest = nlohmann::json::parse(manifest_bytes->begin(), manifest_bytes->end(),
                                        nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("files") ||
      !manifest["files"].is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "MANIFEST: not a valid manifest");
  }
  // Version 1: a whole-file CRC-32 for each file. Version 2: state.json's CRC-32, the tensor
  // files' sizes and their ranges, each with its CRC-32.
  const auto& version = manifest.value("version", nlohmann::json());
  const bool by_range = version == kManifestVersion;
  if (!by_range && version != 1) {
    return Errorf(ErrorCode::kInvalidArgument, "MANIFEST: unknown version {} (want 1 or {})",
                  version.dump(), kManifestVersion);
  }
  FileSum sums[3];
  for (int i = 0; i < 3; ++i) {
    const auto& files = manifest["files"];
    const bool needs_crc = !by_range || i == 2;
    auto it = files.find(kDataFiles[i]);
    if (it == files.end() || !it->is_object() || !it->contains("bytes") ||
        !(*it)["bytes"].is_number_unsigned() ||
        (needs_crc && (!it->contains("crc32") || !(*it)["crc32"].is_string()))) {
      return Errorf(ErrorCode::kInvalidArgument, "MANIFEST: no valid entry for {}",
                    kDataFiles[i]);
    }
    sums[i].bytes = (*it)["bytes"].get<uint64_t>();
    if (!needs_crc) continue;
    const std::string& hex = (*it)["crc32"].get_ref<const std::string&>();
    auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), sums[i].crc, 16);
    if (ec != std::errc() || p != hex.data() + hex.size()) {
      return Errorf(ErrorCode::kInvalidArgument, "MANIFEST: bad crc32 for {}", kDataFiles[i]);
    }
  }
  std::vector<ckpt::RangeRecord> ranges;
  if (by_range) {
    auto list = manifest.find("ranges");
    if (list == manifest.end() || !list->is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, "MANIFEST: no list of ranges");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      auto r = ckpt::RangeFromJson((*list)[i]);
      if (!r) return Errorf(ErrorCode::kInvalidArgument, "MANIFEST: range {}: {}", i, r.error().message);
      ranges.push_back(std::move(*r));
    }
    if (auto r = ckpt::CheckTiling({{kDataFiles[0], sums[0].bytes}, {kDataFiles[1], sums[1].bytes}},
                                   ranges);
        !r) {
      return MakeError(ErrorCode::kInvalidArgument, "MANIFEST: " + r.error().message);
    }
  }
  // state.json first: it says how large the other files must be.
  auto state_bytes = ReadWhole(path + "/state.json");
  if (!state_bytes) {
    return Errorf(ErrorCode::kInvalidArgument, "state.json: {}", state_bytes.error().message);
  }
  if (state_bytes->size() != sums[2].bytes ||
      Crc32(Crc32(0, nullptr, 0), state_bytes->data(), state_bytes->size()) != sums[2].crc) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "state.json: checksum mismatch or wrong size against MANIFEST");
  }
  auto state = nlohmann::json::parse(state_bytes->begin(), state_bytes->end(), nullptr, false);
  if (state.is_discarded() || !state.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "state.json: not a JSON object");
  }
  auto parse_state = [&](Checkpoint& ck) -> Result<void> {
    // value("format", "") would throw on a format that is not a string.
    auto format = state.find("format");
    if (format == state.end() || !format->is_string() || *format != kFormat ||
        !state.contains("version") || state["version"] != kVersion) {
      return Errorf(ErrorCode::kInvalidArgument, "unknown format/version (want {} {})", kFormat,
                    kVersion);
    }
    ck.config = COHORT_TRY(ConfigFromJson(state.value("config", nlohmann::json())));
    ck.adam_t = COHORT_TRY(IntField(state, "adam_t"));
    const auto& prog = state.value("progress", nlohmann::json());
    if (!prog.is_object()) return MakeError(ErrorCode::kInvalidArgument, "progress missing");
    ck.progress.step = COHORT_TRY(IntField(prog, "step"));
    ck.progress.next_batch = COHORT_TRY(IntField(prog, "next_batch"));
    ck.progress.tokens_seen = COHORT_TRY(IntField(prog, "tokens_seen"));
    auto rng = prog.find("rng_state");
    if (rng == prog.end() || !rng->is_array()) {
      return MakeError(ErrorCode::kInvalidArgument, "progress.rng_state missing");
    }
    for (const auto& w : *rng) ck.progress.rng_state.push_back(COHORT_TRY(ParseU64(w)));
    ck.metadata = state.value("metadata", nlohmann::json::object());
    if (!ck.metadata.is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "metadata is not an object");
    }
    if (ck.progress.step != step) {
      return Errorf(ErrorCode::kInvalidArgument, "step {} does not match the directory name",
                    ck.progress.step);
    }
    return {};
  };
  Checkpoint ck;
  ck.path = path;
  if (auto r = parse_state(ck); !r) {
    return MakeError(ErrorCode::kInvalidArgument, "state.json: " + r.error().message);
  }
  size_t n = ck.config.num_parameters();
  if (sums[0].bytes != n * sizeof(float)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "params.bin: MANIFEST says {} bytes, the config needs {}", sums[0].bytes,
                  n * sizeof(float));
  }
  if (sums[1].bytes != 2 * n * sizeof(float)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "optim.bin: MANIFEST says {} bytes, the config needs {}", sums[1].bytes,
                  2 * n * sizeof(float));
  }
  Opened out;
  out.ck = std::move(ck);
  out.by_range = by_range;
  for (int i = 0; i < 3; ++i) out.sums[i] = sums[i];
  out.ranges = std::move(ranges);
  return out;
}

// Verifies and loads one step directory whole; the error message is the reason it is damaged.
Result<Checkpoint> LoadOne(const std::string& path, int64_t step) {
  Opened opened = COHORT_TRY(OpenOne(path, step));
  Checkpoint ck = std::move(opened.ck);
  const bool by_range = opened.by_range;
  const FileSum* sums = opened.sums;
  const std::vector<ckpt::RangeRecord>& ranges = opened.ranges;
  const size_t n = ck.config.num_parameters();
  ck.params.resize(n);
  ck.adam_m.resize(n);
  ck.adam_v.resize(n);
  if (auto r = ReadVerified(path + "/params.bin", by_range ? nullptr : &sums[0], {ck.params});
      !r) {
    return MakeError(ErrorCode::kInvalidArgument, "params.bin: " + r.error().message);
  }
  if (auto r = ReadVerified(path + "/optim.bin", by_range ? nullptr : &sums[1],
                            {ck.adam_m, ck.adam_v});
      !r) {
    return MakeError(ErrorCode::kInvalidArgument, "optim.bin: " + r.error().message);
  }
  if (by_range) {
    auto bytes = [](const std::vector<float>& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                      v.size() * sizeof(float));
    };
    COHORT_TRY_VOID(ckpt::VerifyRanges(
        {{kDataFiles[0], {bytes(ck.params)}}, {kDataFiles[1], {bytes(ck.adam_m), bytes(ck.adam_v)}}},
        ranges));
  }
  return ck;
}

Result<void> CompareConfig(const GptConfig& got, const GptConfig& want) {
  struct F {
    const char* name;
    int a, b;
  };
  const F fields[] = {{"vocab_size", got.vocab_size, want.vocab_size},
                      {"max_seq_len", got.max_seq_len, want.max_seq_len},
                      {"n_layer", got.n_layer, want.n_layer},
                      {"n_head", got.n_head, want.n_head},
                      {"n_embd", got.n_embd, want.n_embd}};
  for (const F& f : fields) {
    if (f.a != f.b) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("checkpoint {} {} != config {} {}", f.name, f.a, f.name, f.b),
                       f.name);
    }
  }
  return {};
}

}  // namespace

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    int64_t step = ParseStepName(name);
    std::error_code ignore;
    if (step >= 0 && e.is_directory(ignore)) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

Result<std::string> SaveCheckpoint(const std::string& dir, const CheckpointView& view,
                                   int keep_last) {
  COHORT_TRY_VOID(view.config.Validate());
  size_t n = view.config.num_parameters();
  if (view.params.size() != n || view.adam_m.size() != n || view.adam_v.size() != n) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "checkpoint: params/adam_m/adam_v have {}/{}/{} floats, the config needs {}",
                  view.params.size(), view.adam_m.size(), view.adam_v.size(), n);
  }
  const CheckpointHeader header{view.config, view.adam_t, view.progress, view.metadata};
  const CheckpointRange ranges[] = {{CheckpointArray::kParams, 0, n, n, 1, view.params},
                                    {CheckpointArray::kAdamM, 0, n, n, 1, view.adam_m},
                                    {CheckpointArray::kAdamV, 0, n, n, 1, view.adam_v}};
  return SaveCheckpointRanges(nullptr, dir, header, ranges, keep_last);
}

namespace {

// Rank 0: the temporary directory with params.bin and optim.bin at their full size (space
// reserved, so a full disk fails here, before any rank writes).
Result<void> PrepareTemp(const std::string& dir, const std::string& tmp, size_t n) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Errorf(ErrorCode::kUnavailable, "creating checkpoint directory {}: {}", dir,
                  ec.message());
  }
  RemoveTempDirs(dir);
  if (mkdir(tmp.c_str(), 0755) != 0) return std::unexpected(IoError("creating", tmp, errno));
  const uint64_t sizes[] = {uint64_t{n} * sizeof(float), uint64_t{2} * n * sizeof(float)};
  for (int i = 0; i < 2; ++i) {
    const std::string path = tmp + "/" + kDataFiles[i];
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return std::unexpected(IoError("creating", path, errno));
    int err = posix_fallocate(fd, 0, static_cast<off_t>(sizes[i]));
    if (err == EOPNOTSUPP || err == EINVAL) err = ftruncate(fd, static_cast<off_t>(sizes[i])) ? errno : 0;
    close(fd);
    if (err != 0) return std::unexpected(IoError("reserving space for", path, err));
  }
  return {};
}

// Rank 0, once every rank's ranges are durable: their records, tiling checked, into the
// MANIFEST, and the directory renamed into place.
Result<void> Commit(const std::string& dir, const std::string& tmp, const std::string& final_path,
                    const CheckpointHeader& header, int ranks) {
  const size_t n = header.config.num_parameters();
  std::vector<ckpt::RangeRecord> all;
  for (int r = 0; r < ranks; ++r) {
    const std::string part = fmt::format("{}/ranges-{}.json", tmp, r);
    auto bytes = ReadWhole(part);
    if (!bytes) return Errorf(ErrorCode::kUnavailable, "{}: {}", part, bytes.error().message);
    auto list = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (list.is_discarded() || !list.is_array()) {
      return Errorf(ErrorCode::kInternal, "{}: not a list of ranges", part);
    }
    for (const auto& j : list) all.push_back(COHORT_TRY(ckpt::RangeFromJson(j)));
    if (unlink(part.c_str()) != 0) return std::unexpected(IoError("removing", part, errno));
  }
  const std::map<std::string, uint64_t> sizes = {{kDataFiles[0], uint64_t{n} * sizeof(float)},
                                                 {kDataFiles[1], uint64_t{2} * n * sizeof(float)}};
  if (auto r = ckpt::CheckTiling(sizes, all); !r) {
    return Errorf(ErrorCode::kInternal, "the ranks' checkpoint ranges do not tile the state: {}",
                  r.error().message);
  }
  COHORT_TRY_VOID(WriteStateAndManifest(tmp, header, sizes, all));
  // Re-saving a step (a restarted run) replaces the old directory: move it aside first.
  std::error_code ec;
  std::string old_aside;
  if (fs::exists(final_path, ec)) {
    old_aside = tmp + "-old";
    if (rename(final_path.c_str(), old_aside.c_str()) != 0) {
      return std::unexpected(IoError("moving aside", final_path, errno));
    }
  }
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    if (!old_aside.empty()) rename(old_aside.c_str(), final_path.c_str());
    return std::unexpected(IoError("renaming " + tmp + " to", final_path, err));
  }
  if (!old_aside.empty()) fs::remove_all(old_aside, ec);
  return FsyncDir(dir);
}

// This rank's ranges into `tmp`, and their records (ranges-<rank>.json, fsynced).
Result<void> WriteMine(const std::string& tmp, size_t n, int rank,
                       std::span<const CheckpointRange> mine) {
  std::vector<ckpt::RangeRecord> records = COHORT_TRY(ckpt::WriteRanges(tmp, n, rank, mine));
  nlohmann::json list = nlohmann::json::array();
  for (const ckpt::RangeRecord& r : records) list.push_back(ckpt::ToJson(r));
  const std::string text = list.dump();
  COHORT_TRY(WriteParts(fmt::format("{}/ranges-{}.json", tmp, rank), {AsBytes(text)}));
  return {};
}

}  // namespace

Result<std::string> SaveCheckpointRanges(CheckpointGroup* group, const std::string& dir,
                                         const CheckpointHeader& header,
                                         std::span<const CheckpointRange> mine, int keep_last) {
  const int rank = group ? group->rank() : 0;
  const int ranks = group ? group->size() : 1;
  const std::string name = StepName(header.progress.step);
  const std::string final_path = (fs::path(dir) / name).string();
  auto context = [&](const Error& e) {
    return std::unexpected(WithContext(
        e, fmt::format("writing checkpoint {} in {} (nothing was renamed into place; older "
                       "checkpoints are kept)",
                       name, dir)));
  };
  // 1. Rank 0 checks the header and prepares the temporary directory; its outcome and the
  // directory's name reach every rank.
  Result<void> ready;
  if (auto v = header.config.Validate(); !v) {
    ready = v;
  } else if (header.progress.step < 0) {
    ready = FieldError("progress.step", "must be >= 0, got {}", header.progress.step);
  } else if (!header.metadata.is_object()) {
    ready = FieldError("metadata", "must be a JSON object");
  }
  const size_t n = ready ? header.config.num_parameters() : 0;
  std::random_device rd;
  int64_t shared[3] = {0, static_cast<int64_t>(getpid()), static_cast<int64_t>(rd())};
  std::string tmp;
  auto temp_name = [&] {
    return (fs::path(dir) / fmt::format("{}{:08d}-{}-{:08x}", kTempPrefix, header.progress.step,
                                        shared[1], static_cast<uint32_t>(shared[2])))
        .string();
  };
  if (rank == 0) {
    tmp = temp_name();
    if (ready) ready = PrepareTemp(dir, tmp, n);
    shared[0] = ready ? 1 : 0;
  }
  auto remove_tmp = [&] {
    std::error_code ignore;
    if (rank == 0) fs::remove_all(tmp, ignore);
  };
  if (group) {
    if (auto b = group->Broadcast(shared); !b) {
      remove_tmp();
      return context(b.error());
    }
  }
  if (shared[0] == 0) {
    remove_tmp();
    if (rank == 0) return context(ready.error());
    return context(MakeError(ErrorCode::kUnavailable,
                             "rank 0 could not prepare the checkpoint (see its log)")
                       .error());
  }
  if (rank != 0) tmp = temp_name();
  // 2. Every rank writes its ranges; then all learn whether every rank succeeded.
  Result<void> wrote = WriteMine(tmp, n, rank, mine);
  float failed[2] = {wrote ? 0.0f : 1.0f, wrote ? -1.0f : static_cast<float>(rank)};
  Result<void> agreed = group ? group->Max(failed) : Result<void>{};
  // 3. Rank 0 commits only when every rank's ranges are durable.
  Result<void> committed = wrote;
  if (!agreed) {
    committed = agreed;
  } else if (wrote && failed[0] != 0) {
    committed = Errorf(ErrorCode::kUnavailable, "rank {} could not write its ranges (see its log)",
                       static_cast<int>(failed[1]));
  }
  if (rank == 0 && committed) committed = Commit(dir, tmp, final_path, header, ranks);
  if (!committed) remove_tmp();
  int64_t outcome = committed ? 1 : 0;
  if (group && agreed) {
    if (auto b = group->Broadcast(std::span<int64_t>(&outcome, 1)); !b && committed) committed = b;
    if (rank != 0 && committed && outcome == 0) {
      committed = MakeError(ErrorCode::kUnavailable,
                            "rank 0 could not commit the checkpoint (see its log)");
    }
  }
  if (!committed) return context(committed.error());
  if (rank == 0 && keep_last > 0) {
    // The newest keep_last up to this step. A newer step directory can only be one that the
    // resume skipped as damaged (a valid one would have been resumed from): counted, it
    // pushed the valid ones out, with keep_last 1 the one just written, and the next resume
    // found nothing to load. It stays (for a look) until its step is written again (Commit
    // replaces it).
    std::vector<std::string> upto;
    for (std::string& path : ListCheckpoints(dir)) {
      if (ParseStepName(fs::path(path).filename().string()) <= header.progress.step) {
        upto.push_back(std::move(path));
      }
    }
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < upto.size(); ++i) {
      std::error_code ignore;
      fs::remove_all(upto[i], ignore);
    }
  }
  return final_path;
}

Result<Checkpoint> LoadLatestCheckpoint(const std::string& dir,
                                        const std::optional<GptConfig>& expected) {
  std::vector<std::string> all = ListCheckpoints(dir);
  if (all.empty()) {
    return Errorf(ErrorCode::kNotFound, "no checkpoint in {}", dir);
  }
  std::vector<std::string> reasons;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::string name = fs::path(*it).filename().string();
    auto ck = LoadOne(*it, ParseStepName(name));
    if (!ck) {
      reasons.push_back(fmt::format("{} is damaged ({})", *it, ck.error().message));
      continue;
    }
    if (expected) COHORT_TRY_VOID(CompareConfig(ck->config, *expected));
    for (const std::string& r : reasons) ck->warnings.push_back(r + "; using " + name);
    return ck;
  }
  return Errorf(ErrorCode::kInvalidArgument, "no valid checkpoint in {}: {}", dir,
                fmt::join(reasons, "; "));
}

namespace {

// This rank's request as runs of the tensor files (params.bin; optim.bin holds m then v).
std::vector<ckpt::FileRun> FileRunsOf(const CheckpointReadRequest& mine, size_t n) {
  std::vector<ckpt::FileRun> out;
  const std::pair<CheckpointArray, const std::vector<ParamRun>*> arrays[] = {
      {CheckpointArray::kParams, &mine.params},
      {CheckpointArray::kAdamM, &mine.adam_m},
      {CheckpointArray::kAdamV, &mine.adam_v}};
  for (const auto& [array, runs] : arrays) {
    const int file = array == CheckpointArray::kParams ? 0 : 1;
    for (const ParamRun& r : *runs) {
      out.push_back({file, ckpt::FileByteOffset(array, n) + uint64_t{r.offset} * sizeof(float),
                     uint64_t{r.count} * sizeof(float), reinterpret_cast<uint8_t*>(r.out)});
    }
  }
  return out;
}

Result<void> CheckRequest(const CheckpointReadRequest& mine, size_t n) {
  for (const auto* runs : {&mine.params, &mine.adam_m, &mine.adam_v}) {
    for (const ParamRun& r : *runs) {
      if (r.offset > n || r.count > n - r.offset || (r.count > 0 && r.out == nullptr)) {
        return Errorf(ErrorCode::kInternal,
                      "checkpoint read: a run of {} floats at {} outside an array of {}", r.count,
                      r.offset, n);
      }
    }
  }
  return {};
}

}  // namespace

Result<CheckpointShard> LoadCheckpointRanges(CheckpointGroup* group, const std::string& dir,
                                             const std::optional<GptConfig>& expected,
                                             const CheckpointReadRequest& mine) {
  const int rank = group ? group->rank() : 0;
  std::vector<std::string> all;
  if (rank == 0) all = ListCheckpoints(dir);
  std::vector<std::string> reasons;
  // Rank 0 names each candidate, newest first, by its step: -1 when none is left.
  for (size_t tried = 0;; ++tried) {
    int64_t step = -1;
    if (rank == 0 && tried < all.size()) {
      step = ParseStepName(fs::path(all[all.size() - 1 - tried]).filename().string());
    }
    if (group) COHORT_TRY_VOID(group->Broadcast(std::span<int64_t>(&step, 1)));
    if (step < 0) {
      if (tried == 0) return Errorf(ErrorCode::kNotFound, "no checkpoint in {}", dir);
      if (rank != 0) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "no valid checkpoint in {} (rank 0 lists the reasons)", dir);
      }
      return Errorf(ErrorCode::kInvalidArgument, "no valid checkpoint in {}: {}", dir,
                    fmt::join(reasons, "; "));
    }
    const std::string name = StepName(step);
    const std::string path = (fs::path(dir) / name).string();
    // This rank's verdict: 0 valid; 1 damaged (failed_range: the range's index + 1, or 0 when
    // the MANIFEST or state.json is); a valid checkpoint of another shape is `mismatch`.
    CheckpointShard got;
    Result<void> verdict;
    Result<void> mismatch;
    size_t failed_range = 0;
    auto opened = OpenOne(path, step);
    if (!opened) {
      verdict = std::unexpected(opened.error());
    } else {
      const size_t n = opened->ck.config.num_parameters();
      if (expected) mismatch = CompareConfig(opened->ck.config, *expected);
      if (mismatch) {
        std::vector<ckpt::RangeRecord> ranges = opened->ranges;
        if (!opened->by_range) {  // version 1: a range per file, its whole-file CRC
          ranges = {{"params.bin", 0, opened->sums[0].bytes, opened->sums[0].bytes, 1, 0,
                     opened->sums[0].crc},
                    {"optim.bin", 0, opened->sums[1].bytes, opened->sums[1].bytes, 1, 0,
                     opened->sums[1].crc}};
        }
        size_t failed = 0;
        Result<ckpt::ReadStats> read = ckpt::ReadStats{};
        if (auto ok = CheckRequest(mine, n); !ok) {
          read = std::unexpected(ok.error());
        } else {
          read = ckpt::ReadWantedRanges(path, ranges, FileRunsOf(mine, n), &failed);
        }
        if (read) {
          got.bytes_read = read->bytes;
          got.ranges_verified = read->ranges;
        } else {
          verdict = std::unexpected(read.error());
          if (read.error().code != ErrorCode::kInternal) failed_range = failed + 1;
        }
      }
    }
    float outcome[3] = {verdict ? 0.0f : 1.0f, static_cast<float>(failed_range),
                        verdict && !mismatch ? 1.0f : 0.0f};
    if (group) COHORT_TRY_VOID(group->Max(outcome));
    if (outcome[0] == 0 && outcome[2] != 0) {
      if (!mismatch) return std::unexpected(mismatch.error());
      return Errorf(ErrorCode::kInvalidArgument,
                    "checkpoint {}: another rank found a config that differs from this run's",
                    path);
    }
    if (outcome[0] != 0) {
      // Every rank knows the MANIFEST: the range a rank found damaged is named from it.
      std::string why = verdict ? std::string() : verdict.error().message;
      const size_t index = static_cast<size_t>(outcome[1]);
      if (why.empty() || (index > 0 && failed_range != index)) {
        if (index > 0 && opened && index - 1 < opened->ranges.size()) {
          why = fmt::format("{}: damaged or unreadable: {}, found by another rank",
                            opened->ranges[index - 1].file, ckpt::Describe(opened->ranges[index - 1]));
        } else if (why.empty()) {
          why = "another rank could not read it (see its log)";
        }
      } else if (index > 0) {
        why += fmt::format(", read by rank {}", rank);
      }
      reasons.push_back(fmt::format("{} is damaged ({})", path, why));
      continue;
    }
    CheckpointShard out = std::move(got);
    Checkpoint& ck = opened->ck;
    out.path = path;
    out.config = ck.config;
    out.adam_t = ck.adam_t;
    out.progress = std::move(ck.progress);
    out.metadata = std::move(ck.metadata);
    for (const std::string& r : reasons) out.warnings.push_back(r + "; using " + name);
    return out;
  }
}

}  // namespace cohort::engine
