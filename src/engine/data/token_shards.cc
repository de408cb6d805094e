#include "engine/data/token_shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>

#include "engine/data/file_util.h"

namespace cohort::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host needs byte swaps");

constexpr int32_t kMagic = 20240520;
constexpr int32_t kVersion = 1;
constexpr size_t kHeaderBytes = 1024;

// One memory-mapped shard.
struct Shard {
  std::string path;
  const uint8_t* map = nullptr;  // whole file, read-only
  size_t map_bytes = 0;
  const uint8_t* tokens = nullptr;  // first token (after the header, if any)
  size_t count = 0;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

uint16_t TokenAt(const Shard& s, size_t i) {
  uint16_t v;
  std::memcpy(&v, s.tokens + 2 * i, 2);
  return v;
}

}  // namespace

struct TokenDataset::Impl {
  std::vector<Shard> shards;
  std::vector<size_t> starts;   // starts[i]: global offset of shards[i]'s first token
  std::vector<int32_t> memory;  // in-memory dataset (no shards)
  size_t total = 0;

  ~Impl() {
    for (Shard& s : shards) {
      if (s.map != nullptr) munmap(const_cast<uint8_t*>(s.map), s.map_bytes);
    }
  }
};

namespace {

Result<Shard> MapShard(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Errorf(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                  "token shard {}: cannot open: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errorf(ErrorCode::kUnavailable, "token shard {}: stat: {}", path,
                  std::strerror(err));
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0) {
    close(fd);
    return Errorf(ErrorCode::kInvalidArgument, "token shard {} is empty", path);
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) {
    return Errorf(ErrorCode::kUnavailable, "token shard {}: mmap: {}", path,
                  std::strerror(err));
  }
  Shard s;
  s.path = path;
  s.map = static_cast<const uint8_t*>(map);
  s.map_bytes = bytes;
  auto fail = [&](std::string msg) -> Result<Shard> {
    munmap(map, bytes);
    return MakeError(ErrorCode::kInvalidArgument, "token shard " + path + ": " + msg);
  };

  int32_t magic = 0;
  if (bytes >= 4) std::memcpy(&magic, s.map, 4);
  if (magic == kMagic) {
    if (bytes < kHeaderBytes) {
      return fail(fmt::format("truncated header ({} bytes, the llm.c header is {})", bytes,
                              kHeaderBytes));
    }
    int32_t header[3];
    std::memcpy(header, s.map, sizeof(header));
    if (header[1] != kVersion) {
      return fail(fmt::format("unknown llm.c shard version {} (only {} = uint16 tokens)",
                              header[1], kVersion));
    }
    if (header[2] <= 0) {
      return fail(fmt::format("header token count is {}; a shard needs tokens", header[2]));
    }
    size_t want = kHeaderBytes + 2 * static_cast<size_t>(header[2]);
    if (bytes != want) {
      return fail(fmt::format("header says {} tokens ({} bytes) but the file has {} bytes{}",
                              header[2], want, bytes, bytes < want ? " (truncated)" : ""));
    }
    s.tokens = s.map + kHeaderBytes;
    s.count = static_cast<size_t>(header[2]);
    return s;
  }
  if (EndsWith(path, ".bin")) {
    return fail(fmt::format("bad magic {} (llm.c .bin shards start with {}); name raw "
                            "uint16 files something other than .bin",
                            magic, kMagic));
  }
  if (bytes % 2 != 0) {
    return fail(fmt::format("odd byte count {} for raw uint16 tokens", bytes));
  }
  s.tokens = s.map;
  s.count = bytes / 2;
  return s;
}

}  // namespace

TokenDataset::TokenDataset(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;
TokenDataset::~TokenDataset() = default;

Result<TokenDataset> TokenDataset::Open(const std::string& pattern) {
  glob_t g{};
  int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);  // sorted by default
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (rc == GLOB_NOMATCH || paths.empty()) {
    return Errorf(ErrorCode::kNotFound, "no token shard matches '{}'", pattern);
  }
  if (rc != 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot expand '{}' (glob error {})", pattern, rc);
  }
  auto impl = std::make_unique<Impl>();
  for (const std::string& p : paths) {
    Shard s = COHORT_TRY(MapShard(p));
    impl->starts.push_back(impl->total);
    impl->total += s.count;
    impl->shards.push_back(s);
  }
  return TokenDataset(std::move(impl));
}

TokenDataset TokenDataset::FromTokens(std::vector<int32_t> tokens) {
  auto impl = std::make_unique<Impl>();
  impl->total = tokens.size();
  impl->memory = std::move(tokens);
  return TokenDataset(std::move(impl));
}

size_t TokenDataset::size() const { return impl_->total; }

Result<void> TokenDataset::Read(size_t offset, std::span<int32_t> out) const {
  const Impl& d = *impl_;
  if (offset > d.total || out.size() > d.total - offset) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "token range [{}, {}) is outside the dataset of {} tokens", offset,
                  offset + out.size(), d.total);
  }
  if (d.shards.empty()) {
    std::copy_n(d.memory.begin() + static_cast<ptrdiff_t>(offset), out.size(), out.begin());
    return {};
  }
  size_t i = static_cast<size_t>(
      std::upper_bound(d.starts.begin(), d.starts.end(), offset) - d.starts.begin() - 1);
  size_t done = 0;
  while (done < out.size()) {
    const Shard& s = d.shards[i];
    size_t local = offset + done - d.starts[i];
    size_t n = std::min(out.size() - done, s.count - local);
    for (size_t k = 0; k < n; ++k) out[done + k] = TokenAt(s, local + k);
    done += n;
    ++i;
  }
  return {};
}

Result<void> TokenDataset::CheckVocab(int vocab_size) const {
  const Impl& d = *impl_;
  if (d.shards.empty()) {
    for (size_t i = 0; i < d.memory.size(); ++i) {
      if (d.memory[i] < 0 || d.memory[i] >= vocab_size) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "in-memory tokens: token {} at position {} is outside [0, {})",
                      d.memory[i], i, vocab_size);
      }
    }
    return {};
  }
  for (const Shard& s : d.shards) {
    for (size_t i = 0; i < s.count; ++i) {
      uint16_t t = TokenAt(s, i);
      if (static_cast<int>(t) >= vocab_size) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "token shard {}: token {} at position {} is >= vocab_size {}", s.path,
                      t, i, vocab_size);
      }
    }
  }
  return {};
}

std::vector<std::string> TokenDataset::files() const {
  std::vector<std::string> out;
  for (const Shard& s : impl_->shards) out.push_back(s.path);
  return out;
}

Result<void> WriteTokenShard(const std::string& path, std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{}: {} tokens do not fit an llm.c header (at most {})", path, tokens.size(),
                  INT32_MAX);
  }
  std::vector<uint8_t> buf(kHeaderBytes + 2 * tokens.size());
  int32_t header[256] = {};
  header[0] = kMagic;
  header[1] = kVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(buf.data(), header, sizeof(header));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}: token {} at position {} is outside [0, 65535]", path, tokens[i], i);
    }
    uint16_t v = static_cast<uint16_t>(tokens[i]);
    std::memcpy(buf.data() + kHeaderBytes + 2 * i, &v, 2);
  }
  return WriteFileAtomic(path, buf);
}

}  // namespace cohort::engine
