// Helpers shared by the libFuzzer targets in fuzz/: the input as text, inputs made of
// several parts, a scratch directory for decoders that read files, and the checks a
// target makes on what a decoder accepted. Each target is one process run by libFuzzer on
// one thread; nothing here is thread-safe.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json.h"

namespace cohort::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits an input into exactly `n` parts at the first n - 1 lines that read "%%" (the
// seed corpus's files are readable text); missing parts are empty.
inline std::vector<std::string_view> SplitParts(std::string_view in, size_t n) {
  constexpr std::string_view kSeparator = "\n%%\n";
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    size_t at = in.find(kSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(in);
  parts.resize(n);
  return parts;
}

// A directory of this process's own, made on first use and removed at a normal exit; under
// $COHORT_FUZZ_SCRATCH when set (scripts/fuzz.sh removes that one, also after a crash,
// which skips exit handlers), else under /dev/shm when it exists (a file write per input
// then costs no disk).
inline const std::string& ScratchDir() {
  // Never destroyed: the exit handler that removes it runs after static destructors.
  static const std::string* const dir = [] {
    std::error_code ec;
    const char* env = std::getenv("COHORT_FUZZ_SCRATCH");
    std::string base = env != nullptr && *env != '\0' ? env
                       : std::filesystem::is_directory("/dev/shm", ec)
                           ? "/dev/shm"
                           : std::filesystem::temp_directory_path().string();
    auto* path = new std::string(base + "/cohort-fuzz-XXXXXX");
    if (mkdtemp(path->data()) == nullptr) {
      std::perror("cohort fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ignore;
      std::filesystem::remove_all(ScratchDir(), ignore);
    });
    return path;
  }();
  return *dir;
}

// Writes `bytes` to `path`, replacing it; aborts if it cannot (the harness is broken).
inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(("cohort fuzz: writing " + path).c_str());
    std::abort();
  }
}

// Stops the fuzzer with a message: a property of an accepted input does not hold.
template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  std::fprintf(stderr, "cohort fuzz: %s\n",
               fmt::format(format, std::forward<Args>(args)...).c_str());
  std::abort();
}

// Every decoder's error must say what is wrong: a non-empty message.
template <typename T>
void CheckError(const Result<T>& r, std::string_view decoder) {
  if (!r && r.error().message.empty()) Fail("{} failed with an empty message", decoder);
}

// What a decoder accepted survives the wire: its encoding, sent as text and decoded
// again, decodes to the same encoding. `decode` takes a json and returns a Result of the
// value; `encode` the value to its json.
template <typename Decode, typename Encode>
void CheckRoundTrip(const json& first, Decode decode, Encode encode, std::string_view what) {
  std::string text = first.dump();
  auto reparsed = ParseJson(text, what);
  if (!reparsed) Fail("{}: its own encoding does not parse: {}", what, reparsed.error().message);
  auto again = decode(*reparsed);
  if (!again) {
    Fail("{}: its own encoding is refused: {}\nencoding: {}", what, again.error().message, text);
  }
  json second = encode(*again);
  if (second != first) {
    Fail("{}: decoding its encoding changes it\nfirst:  {}\nsecond: {}", what, text,
         second.dump());
  }
}

// A message body as an HTTP route or a client reads it: ParseJson, then `decode`; what
// is accepted must pass CheckRoundTrip.
template <typename Decode, typename Encode>
void FuzzMessage(std::string_view body, Decode decode, Encode encode, std::string_view what) {
  auto j = ParseJson(body, what);
  CheckError(j, "ParseJson");
  if (!j) return;
  auto value = decode(*j);
  CheckError(value, what);
  if (value) CheckRoundTrip(encode(*value), decode, encode, what);
}

// The kind of input an input is, from its first byte (`n` kinds; the seed corpus starts
// its files with a digit, '0' choosing the first), and the rest of the input.
inline std::pair<size_t, std::string_view> Select(const uint8_t* data, size_t size, size_t n) {
  if (size == 0) return {0, {}};
  return {static_cast<size_t>(data[0] - '0') % n, AsText(data + 1, size - 1)};
}

// Fuzzes one kind of input: the bytes after the selector byte.
using BodyFuzzer = void (*)(std::string_view body);

// Runs the fuzzer that Select picks on the rest of the input.
template <size_t N>
void FuzzSelected(const uint8_t* data, size_t size, const BodyFuzzer (&fuzzers)[N]) {
  auto [which, body] = Select(data, size, N);
  fuzzers[which](body);
}

}  // namespace cohort::fuzz
