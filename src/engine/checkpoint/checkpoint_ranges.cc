#include "engine/checkpoint/checkpoint_ranges.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <tuple>

#include <fmt/format.h>

#include "engine/data/file_util.h"

namespace cohort::engine::ckpt {
namespace {

constexpr const char* const* kFiles = kTensorFiles;

// Writes all of `bytes` at `offset` of `fd`.
Result<void> PwriteAll(int fd, const uint8_t* data, size_t bytes, uint64_t offset,
                       const std::string& path) {
  while (bytes > 0) {
    ssize_t n = pwrite(fd, data, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(IoError("writing", path, errno));
    if (n == 0) return std::unexpected(IoError("writing", path, EIO));
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

Result<uint64_t> U64(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_unsigned()) {
    return Errorf(ErrorCode::kInvalidArgument, "range {} missing or not an unsigned integer",
                  name);
  }
  return it->get<uint64_t>();
}

}  // namespace

uint32_t Crc32(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes)));
}

std::string CrcHex(uint32_t crc) { return fmt::format("{:08x}", crc); }

std::string Describe(const RangeRecord& r) {
  if (r.runs <= 1) {
    return fmt::format("{} bytes [{}, {}) written by rank {}", r.file, r.offset,
                       r.offset + r.bytes, r.rank);
  }
  return fmt::format("{} bytes [{}, {}) in {} runs of {} every {}, written by rank {}", r.file,
                     r.offset, r.offset + (r.runs - 1) * r.stride + r.bytes, r.runs, r.bytes,
                     r.stride, r.rank);
}

nlohmann::json ToJson(const RangeRecord& r) {
  nlohmann::json j = {{"file", r.file}, {"offset", r.offset}, {"bytes", r.bytes},
                      {"rank", r.rank}, {"crc32", CrcHex(r.crc)}};
  if (r.runs > 1) {
    j["runs"] = r.runs;
    j["stride"] = r.stride;
  }
  return j;
}

Result<RangeRecord> RangeFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return MakeError(ErrorCode::kInvalidArgument, "range is not an object");
  RangeRecord r;
  auto file = j.find("file");
  if (file == j.end() || !file->is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, "range file missing");
  }
  r.file = file->get<std::string>();
  r.offset = COHORT_TRY(U64(j, "offset"));
  r.bytes = COHORT_TRY(U64(j, "bytes"));
  const uint64_t rank = COHORT_TRY(U64(j, "rank"));
  if (rank > (1u << 30)) return Errorf(ErrorCode::kInvalidArgument, "range rank {}", rank);
  r.rank = static_cast<int>(rank);
  r.runs = j.contains("runs") ? COHORT_TRY(U64(j, "runs")) : 1;
  r.stride = j.contains("stride") ? COHORT_TRY(U64(j, "stride")) : r.bytes;
  if (r.runs == 0 || (r.runs > 1 && r.stride < r.bytes) || r.runs > (uint64_t{1} << 40) ||
      r.stride > (uint64_t{1} << 50) || r.offset > (uint64_t{1} << 50) ||
      r.bytes > (uint64_t{1} << 50)) {
    return Errorf(ErrorCode::kInvalidArgument, "range of {} has impossible runs {} / stride {}",
                  r.file, r.runs, r.stride);
  }
  auto crc = j.find("crc32");
  if (crc == j.end() || !crc->is_string()) {
    return MakeError(ErrorCode::kInvalidArgument, "range crc32 missing");
  }
  const std::string& hex = crc->get_ref<const std::string&>();
  auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), r.crc, 16);
  if (ec != std::errc() || p != hex.data() + hex.size()) {
    return Errorf(ErrorCode::kInvalidArgument, "range crc32 '{}' is not hexadecimal", hex);
  }
  return r;
}

const char* FileOf(CheckpointArray a) {
  return a == CheckpointArray::kParams ? kFiles[0] : kFiles[1];
}

uint64_t FileByteOffset(CheckpointArray a, size_t n) {
  return a == CheckpointArray::kAdamV ? uint64_t{n} * sizeof(float) : 0;
}

Result<std::vector<RangeRecord>> WriteRanges(const std::string& dir, size_t n, int rank,
                                             std::span<const CheckpointRange> ranges) {
  for (const CheckpointRange& r : ranges) {
    const size_t last_end = r.runs == 0 ? 0 : (r.runs - 1) * r.stride + r.width;
    if (r.runs == 0 || r.width == 0 || (r.runs > 1 && r.stride < r.width) ||
        r.values.size() != r.runs * r.width || r.offset > n || last_end > n - r.offset) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "checkpoint range of rank {} at float {} ({} runs of {} every {}, {} values) "
                    "does not fit an array of {} floats",
                    rank, r.offset, r.runs, r.width, r.stride, r.values.size(), n);
    }
  }
  struct Open {
    int fd = -1;
    std::string path;
  };
  Open files[2];
  auto close_all = [&] {
    for (Open& f : files) {
      if (f.fd >= 0) close(f.fd);
      f.fd = -1;
    }
  };
  std::vector<RangeRecord> out;
  auto write = [&]() -> Result<void> {
    for (const CheckpointRange& r : ranges) {
      const int which = r.array == CheckpointArray::kParams ? 0 : 1;
      Open& f = files[which];
      if (f.fd < 0) {
        f.path = dir + "/" + kFiles[which];
        f.fd = open(f.path.c_str(), O_WRONLY | O_CLOEXEC);
        if (f.fd < 0) return std::unexpected(IoError("opening", f.path, errno));
      }
      RangeRecord rec;
      rec.file = kFiles[which];
      rec.offset = FileByteOffset(r.array, n) + uint64_t{r.offset} * sizeof(float);
      rec.bytes = uint64_t{r.width} * sizeof(float);
      rec.runs = r.runs;
      rec.stride = r.runs > 1 ? uint64_t{r.stride} * sizeof(float) : rec.bytes;
      rec.rank = rank;
      rec.crc = Crc32(0, nullptr, 0);
      const auto* bytes = reinterpret_cast<const uint8_t*>(r.values.data());
      for (size_t k = 0; k < r.runs; ++k) {
        const uint8_t* run = bytes + k * rec.bytes;
        rec.crc = Crc32(rec.crc, run, rec.bytes);
        COHORT_TRY_VOID(PwriteAll(f.fd, run, rec.bytes, rec.offset + k * rec.stride, f.path));
      }
      out.push_back(std::move(rec));
    }
    for (Open& f : files) {
      if (f.fd < 0) continue;
      if (fsync(f.fd) != 0) return std::unexpected(IoError("fsync", f.path, errno));
      if (close(f.fd) != 0) {
        f.fd = -1;
        return std::unexpected(IoError("closing", f.path, errno));
      }
      f.fd = -1;
    }
    return {};
  };
  auto done = write();
  close_all();
  if (!done) return std::unexpected(done.error());
  return out;
}

Result<void> CheckTiling(const std::map<std::string, uint64_t>& sizes,
                         std::span<const RangeRecord> records) {
  // (file, offset, end, record index) for every run.
  std::vector<std::tuple<std::string, uint64_t, uint64_t, size_t>> runs;
  for (size_t i = 0; i < records.size(); ++i) {
    const RangeRecord& r = records[i];
    auto size = sizes.find(r.file);
    if (size == sizes.end()) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: not a tensor file of the checkpoint",
                    Describe(r));
    }
    for (uint64_t k = 0; k < r.runs; ++k) {
      const uint64_t begin = r.offset + k * r.stride;
      if (begin > size->second || r.bytes > size->second - begin) {
        return Errorf(ErrorCode::kInvalidArgument, "{}: beyond the file's {} bytes", Describe(r),
                      size->second);
      }
      if (r.bytes > 0) runs.emplace_back(r.file, begin, begin + r.bytes, i);
    }
  }
  std::sort(runs.begin(), runs.end());
  for (const auto& [file, bytes] : sizes) {
    uint64_t covered = 0;
    size_t last = records.size();
    for (const auto& [f, begin, end, index] : runs) {
      if (f != file) continue;
      if (begin < covered) {
        return Errorf(ErrorCode::kInvalidArgument, "{} bytes [{}, {}) are written twice: by {} and {}",
                      file, begin, std::min(end, covered), Describe(records[last]),
                      Describe(records[index]));
      }
      if (begin > covered) {
        return Errorf(ErrorCode::kInvalidArgument, "{} bytes [{}, {}) are in no range", file,
                      covered, begin);
      }
      covered = end;
      last = index;
    }
    if (covered != bytes) {
      return Errorf(ErrorCode::kInvalidArgument, "{} bytes [{}, {}) are in no range", file,
                    covered, bytes);
    }
  }
  return {};
}

Result<void> VerifyRanges(const std::map<std::string, FileSegments>& files,
                          std::span<const RangeRecord> records) {
  for (const RangeRecord& r : records) {
    auto it = files.find(r.file);
    if (it == files.end()) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: not a tensor file of the checkpoint",
                    Describe(r));
    }
    uint32_t crc = Crc32(0, nullptr, 0);
    for (uint64_t k = 0; k < r.runs; ++k) {
      // The run [begin, begin + bytes) across the file's segments (CheckTiling has bounded it).
      uint64_t begin = r.offset + k * r.stride, left = r.bytes, seg_start = 0;
      for (std::span<const uint8_t> seg : it->second) {
        const uint64_t seg_end = seg_start + seg.size();
        if (left > 0 && begin < seg_end) {
          const uint64_t n = std::min(left, seg_end - begin);
          crc = Crc32(crc, seg.data() + (begin - seg_start), n);
          begin += n;
          left -= n;
        }
        seg_start = seg_end;
      }
      if (left > 0) {
        return Errorf(ErrorCode::kInvalidArgument, "{}: beyond the file", Describe(r));
      }
    }
    if (crc != r.crc) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: checksum mismatch in {} (crc32 {} != manifest {})",
                    r.file, Describe(r), CrcHex(crc), CrcHex(r.crc));
    }
  }
  return {};
}

namespace {

// One file's wanted runs sorted by offset, with the running maximum of their ends, so that
// the runs overlapping [a, b) are found by binary search although runs may overlap.
class WantedIndex {
 public:
  explicit WantedIndex(std::vector<FileRun> runs) : runs_(std::move(runs)) {
    std::sort(runs_.begin(), runs_.end(),
              [](const FileRun& x, const FileRun& y) { return x.offset < y.offset; });
    uint64_t most = 0;
    for (const FileRun& r : runs_) {
      most = std::max(most, r.offset + r.bytes);
      max_end_.push_back(most);
    }
  }
  // Calls f(run) for every run overlapping [a, b).
  template <typename F>
  void ForEachOverlap(uint64_t a, uint64_t b, F&& f) const {
    auto it = std::upper_bound(max_end_.begin(), max_end_.end(), a);
    for (size_t i = static_cast<size_t>(it - max_end_.begin());
         i < runs_.size() && runs_[i].offset < b; ++i) {
      if (runs_[i].offset + runs_[i].bytes > a && runs_[i].bytes > 0) f(runs_[i]);
    }
  }
  bool Overlaps(uint64_t a, uint64_t b) const {
    bool any = false;
    ForEachOverlap(a, b, [&](const FileRun&) { any = true; });
    return any;
  }

 private:
  std::vector<FileRun> runs_;
  std::vector<uint64_t> max_end_;
};

constexpr size_t kReadChunk = size_t{8} << 20;

// Reads exactly `bytes` at `offset` of `fd`; the reason otherwise.
Result<void> PreadAll(int fd, uint8_t* data, size_t bytes, uint64_t offset) {
  while (bytes > 0) {
    ssize_t n = pread(fd, data, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errorf(ErrorCode::kInvalidArgument, "read: {}", std::strerror(errno));
    if (n == 0) {
      return Errorf(ErrorCode::kInvalidArgument, "truncated: nothing at byte {}", offset);
    }
    data += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

}  // namespace

Result<ReadStats> ReadWantedRanges(const std::string& dir, std::span<const RangeRecord> records,
                                   std::span<const FileRun> wanted, size_t* failed) {
  std::vector<FileRun> per_file[2];
  for (const FileRun& w : wanted) {
    if (w.file < 0 || w.file > 1) {
      return Errorf(ErrorCode::kInternal, "a wanted run of tensor file {}", w.file);
    }
    per_file[w.file].push_back(w);
  }
  const WantedIndex index[2] = {WantedIndex(std::move(per_file[0])),
                                WantedIndex(std::move(per_file[1]))};
  int fds[2] = {-1, -1};
  auto close_all = [&] {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  std::vector<uint8_t> chunk;
  ReadStats stats;
  for (size_t i = 0; i < records.size(); ++i) {
    const RangeRecord& r = records[i];
    const int f = r.file == kTensorFiles[0] ? 0 : r.file == kTensorFiles[1] ? 1 : -1;
    if (f < 0) continue;  // CheckTiling admits none
    bool needed = false;
    for (uint64_t k = 0; k < r.runs && !needed; ++k) {
      const uint64_t a = r.offset + k * r.stride;
      needed = index[f].Overlaps(a, a + r.bytes);
    }
    if (!needed) continue;
    // "<file>: <what> in <range><detail>", as VerifyRanges words a mismatch.
    auto fail = [&](const std::string& what, const std::string& detail = {}) {
      close_all();
      *failed = i;
      return Errorf(ErrorCode::kInvalidArgument, "{}: {} in {}{}", r.file, what, Describe(r),
                    detail);
    };
    if (fds[f] < 0) {
      const std::string path = dir + "/" + kTensorFiles[f];
      fds[f] = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fds[f] < 0) return fail(fmt::format("cannot open: {}", std::strerror(errno)));
    }
    uint32_t crc = Crc32(0, nullptr, 0);
    for (uint64_t k = 0; k < r.runs; ++k) {
      const uint64_t run = r.offset + k * r.stride;
      for (uint64_t done = 0; done < r.bytes;) {
        const uint64_t a = run + done;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk, r.bytes - done));
        if (chunk.size() < n) chunk.resize(n);
        if (auto got = PreadAll(fds[f], chunk.data(), n, a); !got) {
          return fail(got.error().message);
        }
        crc = Crc32(crc, chunk.data(), n);
        index[f].ForEachOverlap(a, a + n, [&](const FileRun& w) {
          const uint64_t lo = std::max(a, w.offset), hi = std::min(a + n, w.offset + w.bytes);
          std::memcpy(w.out + (lo - w.offset), chunk.data() + (lo - a), hi - lo);
        });
        stats.bytes += n;
        done += n;
      }
    }
    if (crc != r.crc) {
      return fail("checksum mismatch",
                  fmt::format(" (crc32 {} != manifest {})", CrcHex(crc), CrcHex(r.crc)));
    }
    ++stats.ranges;
  }
  close_all();
  return stats;
}

}  // namespace cohort::engine::ckpt
