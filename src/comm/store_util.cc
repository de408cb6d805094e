#include "comm/store_util.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace cohort::comm {

Result<void> CheckKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("key: must be 1 to {} bytes, got {} ('{}')", kMaxKeyBytes, key.size(),
                                 PrintableKey(key)),
                     "key");
  }
  return {};
}

std::string FormatSeconds(Millis d) {
  return fmt::format("{:.1f}s", static_cast<double>(d.count()) / 1000.0);
}

std::string PrintableKey(std::string_view key) {
  constexpr size_t kMaxShown = 100;
  std::string out;
  for (size_t i = 0; i < key.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (key.size() > kMaxShown) out += fmt::format("...({} bytes)", key.size());
  return out;
}

Error TimeoutError(Millis timeout, const std::vector<std::string>& keys) {
  constexpr size_t kMaxListed = 10;
  std::string list;
  for (size_t i = 0; i < keys.size() && i < kMaxListed; ++i) {
    if (i > 0) list += ", ";
    list += PrintableKey(keys[i]);
  }
  if (keys.size() > kMaxListed) list += fmt::format(" and {} more", keys.size() - kMaxListed);
  return Error{ErrorCode::kDeadlineExceeded,
               fmt::format("store: timed out after {} waiting for keys: {}", FormatSeconds(timeout), list)};
}

std::string PercentEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size());
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<int64_t> ParseInt64(std::string_view text) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

Result<int64_t> CheckedAdd(std::string_view key, int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    return Errorf(ErrorCode::kInvalidArgument, "store: adding {} to key '{}' (= {}) overflows int64", b,
                  PrintableKey(key), a);
  }
  return sum;
}

Result<HostPort> ParseHostPort(std::string_view text, std::string_view url, bool allow_zero_port) {
  HostPort hp;
  std::string_view port;
  if (text.starts_with('[')) {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must be of the form [v6addr]:port", url);
    }
    hp.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must name a port (host:port)", url);
    }
    hp.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (hp.host.empty()) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must name a host (host:port)", url);
  }
  auto p = ParseInt64(port);
  if (!p || *p < (allow_zero_port ? 0 : 1) || *p > 65535) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' has an invalid port '{}' (1-65535)", url, port);
  }
  hp.port = static_cast<int>(*p);
  return hp;
}

Millis Backoff::Next(SteadyTime deadline) {
  auto left = std::chrono::ceil<Millis>(deadline - SteadyClock::now());
  Millis d = std::clamp(next_, Millis(0), std::max(left, Millis(0)));
  next_ = std::min(next_ * 2, max_);
  return d;
}

}  // namespace cohort::comm
