#include "engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/data/file_util.h"

namespace cohort::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; a big-endian host needs byte swaps");

// Headers of real models are a few hundred KB; anything past this is a corrupt length.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {  // inf / nan
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

int DtypeBytes(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

// Bytes of the dtypes we can validate but not convert (for offsets checks only).
int AnyDtypeBytes(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

Result<void> PreadAll(int fd, void* out, size_t bytes, uint64_t offset) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Errorf(ErrorCode::kUnavailable, "read: {}",
                    n == 0 ? "unexpected end of file" : std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Result<SafeTensorFile> ReadFd(int fd, const std::string& path, uint64_t file_bytes,
                              const SafeTensorFilter& select) {
  auto bad = [&](std::string msg) {
    return MakeError(ErrorCode::kInvalidArgument, "safetensors " + path + ": " + msg);
  };
  if (file_bytes < 8) return bad(fmt::format("file of {} bytes has no header", file_bytes));
  uint64_t n = 0;
  COHORT_TRY_VOID(PreadAll(fd, &n, 8, 0));
  if (n > file_bytes - 8 || n > kMaxHeaderBytes) {
    return bad(fmt::format("header length {} is larger than the file ({} bytes)", n,
                           file_bytes));
  }
  std::string header(n, '\0');
  COHORT_TRY_VOID(PreadAll(fd, header.data(), n, 8));
  auto j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("header is not a valid JSON object");
  uint64_t data_start = 8 + n;
  uint64_t data_bytes = file_bytes - data_start;

  SafeTensorFile out;
  std::vector<Entry> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return bad(fmt::format("__metadata__.{} is not a string", m.key()));
        }
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto tbad = [&](std::string msg) { return bad("tensor '" + name + "': " + msg); };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      return tbad("needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    Entry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return tbad("shape has a negative or non-integer entry");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 48) / dim) return tbad("shape is too large");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return tbad("data_offsets are not non-negative integers");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes) {
      return tbad(fmt::format("data_offsets [{}, {}] are outside the data ({} bytes)", e.begin,
                              e.end, data_bytes));
    }
    int width = AnyDtypeBytes(e.dtype);
    if (width == 0) return tbad("unknown dtype '" + e.dtype + "'");
    if (e.end - e.begin != numel * static_cast<uint64_t>(width)) {
      return tbad(fmt::format("{} bytes for shape of {} {} elements (needs {})",
                              e.end - e.begin, numel, e.dtype, numel * width));
    }
    entries.push_back(std::move(e));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return bad(fmt::format("tensors '{}' and '{}' overlap", by_offset[i - 1]->name,
                             by_offset[i]->name));
    }
  }
  for (const Entry& e : entries) {
    if (select && !select(e.name)) continue;
    if (DtypeBytes(e.dtype) == 0) {
      return bad("tensor '" + e.name + "': unsupported dtype '" + e.dtype +
                 "' (F32, F16 and BF16 are read)");
    }
    SafeTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    size_t bytes = e.end - e.begin;
    if (e.dtype == "F32") {
      t.data.resize(bytes / 4);
      COHORT_TRY_VOID(PreadAll(fd, t.data.data(), bytes, data_start + e.begin));
    } else {
      std::vector<uint16_t> raw(bytes / 2);
      COHORT_TRY_VOID(PreadAll(fd, raw.data(), bytes, data_start + e.begin));
      t.data.resize(raw.size());
      bool half = e.dtype == "F16";
      for (size_t i = 0; i < raw.size(); ++i) {
        t.data[i] = half ? HalfToFloat(raw[i]) : Bf16ToFloat(raw[i]);
      }
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

Result<SafeTensorFile> ReadSafeTensors(const std::string& path, const SafeTensorFilter& select) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Errorf(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                  "safetensors {}: cannot open: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errorf(ErrorCode::kUnavailable, "safetensors {}: stat: {}", path, std::strerror(err));
  }
  auto r = ReadFd(fd, path, static_cast<uint64_t>(st.st_size), select);
  close(fd);
  if (!r && r.error().code == ErrorCode::kUnavailable) {
    return std::unexpected(WithContext(r.error(), "safetensors " + path));
  }
  return r;
}

Result<void> WriteSafeTensors(const std::string& path, const SafeTensorFile& file) {
  nlohmann::json header = nlohmann::json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name == "__metadata__") {
      return Errorf(ErrorCode::kInvalidArgument, "{}: '__metadata__' is not a tensor name",
                    path);
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return Errorf(ErrorCode::kInvalidArgument, "{}: tensor '{}' has a negative dimension",
                      path, name);
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.data.size()) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}: tensor '{}' has {} floats but its shape needs {}", path, name,
                    t.data.size(), numel);
    }
    uint64_t bytes = numel * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (allowed by the format).
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  uint64_t n = text.size();

  std::string tmp = TempSiblingPath(path);
  auto attempt = [&]() -> Result<void> {
    FileWriter w = COHORT_TRY(FileWriter::Create(tmp));
    COHORT_TRY_VOID(w.Write(&n, 8));
    COHORT_TRY_VOID(w.Write(text.data(), text.size()));
    for (const auto& [name, t] : file.tensors) {
      COHORT_TRY_VOID(w.Write(t.data.data(), t.data.size() * sizeof(float)));
    }
    COHORT_TRY_VOID(w.SyncAndClose());
    if (rename(tmp.c_str(), path.c_str()) != 0) {
      return std::unexpected(IoError("renaming " + tmp + " to", path, errno));
    }
    return {};
  };
  if (auto r = attempt(); !r) {
    unlink(tmp.c_str());
    return r;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDir(dir.empty() ? "." : dir);
}

}  // namespace cohort::engine
