// Output file patterns (output_pattern.h).
#include "api/output_pattern.h"

#include <openssl/evp.h>

#include <fmt/format.h>

namespace cohort::api {
namespace {

constexpr size_t kMaxPathBytes = 4096;  // PATH_MAX
constexpr std::string_view kFields = "%j %A %a %x %u %N %n %t %%";

bool IsField(char c) {
  return c == 'j' || c == 'A' || c == 'a' || c == 'x' || c == 'u' || c == 'N' || c == 'n' || c == 't' || c == '%';
}

// Calls `emit(width, letter)` for each field and `literal(text)` between them, in order.
// Returns the offset of the first bad '%' (npos when none) and sets `why`.
template <typename Field, typename Literal>
size_t Walk(std::string_view p, Field&& field, Literal&& literal, std::string* why) {
  size_t i = 0;
  while (i < p.size()) {
    const size_t pct = p.find('%', i);
    if (pct == std::string_view::npos) {
      literal(p.substr(i));
      break;
    }
    literal(p.substr(i, pct - i));
    size_t j = pct + 1;
    int width = 0;
    while (j < p.size() && p[j] >= '0' && p[j] <= '9' && j - pct <= 2) width = width * 10 + (p[j++] - '0');
    if (j >= p.size()) {
      if (why) {
        *why = j == pct + 1 ? "ends in a lone '%' (write %% for a '%')"
                            : fmt::format("ends in '{}', a width with no field after it (e.g. '{}t')",
                                          p.substr(pct), p.substr(pct));
      }
      return pct;
    }
    if (!IsField(p[j]) || (p[j] == '%' && j != pct + 1)) {
      if (why) {
        *why = p[j] >= '0' && p[j] <= '9'
                   ? "has a field width over 99 at that '%'"
                   : fmt::format("has an unknown field '%{}' (known: {})", p.substr(pct + 1, j - pct), kFields);
      }
      return pct;
    }
    if (width > 10) {
      if (why) *why = fmt::format("pads '%{}' to {} digits; at most 10", p.substr(pct + 1, j - pct), width);
      return pct;
    }
    field(width, p[j]);
    i = j + 1;
  }
  return std::string_view::npos;
}

std::string Padded(int width, int64_t v) { return width > 0 ? fmt::format("{:0{}}", v, width) : std::to_string(v); }

}  // namespace

Result<void> CheckOutputPattern(std::string_view field, std::string_view pattern) {
  if (pattern.empty()) return FieldError(std::string(field), "is empty: give a file path, or leave it out");
  if (pattern.find('\0') != std::string_view::npos) return FieldError(std::string(field), "contains a NUL byte");
  if (pattern.size() > kMaxPathBytes) {
    return FieldError(std::string(field), "is {} bytes long; a path is at most {} bytes", pattern.size(),
                      kMaxPathBytes);
  }
  std::string why;
  if (Walk(pattern, [](int, char) {}, [](std::string_view) {}, &why) != std::string_view::npos) {
    return FieldError(std::string(field), "pattern '{}' {}", pattern, why);
  }
  const size_t slash = pattern.rfind('/');
  const std::string_view last = slash == std::string_view::npos ? pattern : pattern.substr(slash + 1);
  if (last.empty() || last == "." || last == "..") {
    return FieldError(std::string(field), "'{}' names a directory; give a file in it (e.g. '{}{}slurm-%j.out')",
                      pattern, pattern, last.empty() ? "" : "/");
  }
  return {};
}

Result<void> CheckOpenMode(std::string_view open_mode) {
  if (open_mode.empty() || open_mode == "append" || open_mode == "truncate") return {};
  return FieldError("open_mode", "must be 'append' or 'truncate', got '{}'", open_mode);
}

std::string ExpandOutputPattern(std::string_view pattern, const OutputPatternValues& v) {
  std::string out;
  const bool element = v.array_job_id > 0;
  auto field = [&](int width, char c) {
    // A value not known stays as written.
    auto number = [&](const std::optional<int64_t>& n) {
      out += n ? Padded(width, *n) : width ? fmt::format("%{}{}", width, c) : fmt::format("%{}", c);
    };
    switch (c) {
      case 'j': number(v.job_id); break;
      case 'A': number(element ? v.array_job_id : v.job_id); break;
      case 'a': number(v.array_task_id); break;
      case 'n': number(v.node_index); break;
      case 't': number(v.rank); break;
      case 'x': out += v.job_name; break;
      case 'u': out += v.user; break;
      case 'N': out += v.node ? *v.node : "%N"; break;
      case '%': out += '%'; break;
    }
  };
  auto literal = [&](std::string_view s) { out += s; };
  if (const size_t bad = Walk(pattern, field, literal, nullptr); bad != std::string_view::npos) {
    out += pattern.substr(bad);
  }
  return out;
}

bool OutputTruncates(std::string_view open_mode, int attempt) { return open_mode != "append" && attempt == 0; }

std::string OutputTruncationMarker(std::string_view rendezvous_url, int64_t job, int attempt) {
  const size_t slash = rendezvous_url.rfind('/');
  const std::string_view token = slash == std::string_view::npos ? rendezvous_url : rendezvous_url.substr(slash + 1);
  if (token.empty()) return fmt::format("local:{}:{}", job, attempt);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(token.data(), token.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < 8 && i < size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return fmt::format("{}:{}:{}", hex, job, attempt);
}

}  // namespace cohort::api
