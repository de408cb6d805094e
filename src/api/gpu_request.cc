#include "api/gpu_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <vector>

namespace cohort::api {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool GpuRequest::mig() const { return IsMigProfile(type); }

bool IsMigProfile(std::string_view type) {
  // <n>g.<m>gb[+attr...]
  const size_t g = type.find("g.");
  if (g == std::string_view::npos || !AllDigits(type.substr(0, g))) return false;
  std::string_view rest = type.substr(g + 2);
  const size_t gb = rest.find("gb");
  if (gb == std::string_view::npos || !AllDigits(rest.substr(0, gb))) return false;
  rest = rest.substr(gb + 2);
  while (!rest.empty()) {
    if (rest[0] != '+' || rest.size() < 2) return false;
    rest.remove_prefix(1);
    while (!rest.empty() && std::islower(static_cast<unsigned char>(rest[0]))) rest.remove_prefix(1);
  }
  return true;
}

Result<std::string> NormalizeGpuType(std::string_view text, std::string_view field) {
  std::string t = Lower(text);
  const bool ok = !t.empty() && t.size() <= 32 && std::isalnum(static_cast<unsigned char>(t[0])) &&
                  std::all_of(t.begin(), t.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-';
                  });
  if (!ok) {
    return FieldError(std::string(field),
                      "GPU type '{}' must be 1-32 letters, digits, '.', '+' or '-' (a model such as h100 or a MIG "
                      "profile such as 1g.10gb)",
                      text);
  }
  return t;
}

Result<GpuRequest> ParseGpuRequest(std::string_view text, std::string_view field, int max_count) {
  GpuRequest r;
  std::string_view count = text;
  if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    r.type = COHORT_TRY(NormalizeGpuType(text.substr(0, colon), field));
    count = text.substr(colon + 1);
  }
  int n = -1;
  if (AllDigits(count) && count.size() <= 9) std::from_chars(count.data(), count.data() + count.size(), n);
  if (n < 0 || n > max_count) {
    return FieldError(std::string(field), "'{}' must be [TYPE:]COUNT with COUNT a whole number 0-{} (e.g. 4, h100:4, 1g.10gb:2)",
                      text, max_count);
  }
  if (n == 0 && !r.type.empty()) {
    return FieldError(std::string(field), "'{}' names GPU type '{}' with a count of 0; ask for at least 1", text, r.type);
  }
  r.count = n;
  return r;
}

std::string GpuRequestText(const GpuRequest& r) {
  return r.type.empty() ? std::to_string(r.count) : fmt::format("{}:{}", r.type, r.count);
}

std::string GpuShortName(std::string_view nvml_name) {
  std::vector<std::string> words;
  std::string word;
  for (char c : nvml_name) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!word.empty()) words.push_back(Lower(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(Lower(word));
  static constexpr std::string_view kVendor[] = {"nvidia", "tesla", "geforce", "quadro"};
  std::erase_if(words, [](const std::string& w) {
    return std::find(std::begin(kVendor), std::end(kVendor), w) != std::end(kVendor);
  });
  if (words.empty()) return "gpu";
  // "RTX 4090", "RTX A6000", "A 100": a prefix word joins the model number after it.
  const bool prefix = words[0] == "rtx" || words[0] == "gtx" || words[0] == "titan";
  if (prefix && words.size() > 1) return words[0] + words[1];
  return words[0];
}

Result<int64_t> ParseGpusPerTask(double value, std::string_view field) {
  const double units = value * kGpuShareUnits;
  const bool finite = std::isfinite(value) && value > 0 && value <= 1024;
  const bool on_grid = finite && std::fabs(units - std::round(units)) < 1e-9;
  const bool whole = finite && std::fabs(value - std::round(value)) < 1e-9;
  if (!on_grid || (value > 1 && !whole)) {
    return FieldError(std::string(field),
                      "{} GPUs per task: a fraction of one GPU must be 0.25, 0.5 or 0.75 (quarters), more than one "
                      "must be a whole number (1-1024)",
                      value);
  }
  return static_cast<int64_t>(std::llround(units));
}

Result<int64_t> ParseGpusPerTaskText(std::string_view text, std::string_view field) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return FieldError(std::string(field), "'{}' is not a number (0.25, 0.5, 0.75 or a whole number)", text);
  }
  return ParseGpusPerTask(v, field);
}

std::string GpuShareText(int64_t units) {
  if (units % kGpuShareUnits == 0) return std::to_string(units / kGpuShareUnits);
  return fmt::format("{:g}", static_cast<double>(units) / kGpuShareUnits);
}

Result<int64_t> ParseMemoryMib(std::string_view text, std::string_view field) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string unit = Lower(text.substr(digits));
  int64_t shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kib") shift = 10;
  if (unit == "m" || unit == "mib") shift = 20;
  if (unit == "g" || unit == "gib") shift = 30;
  if (unit == "t" || unit == "tib") shift = 40;
  uint64_t n = 0;
  const bool number = digits > 0 && digits <= 15 &&
                      std::from_chars(text.data(), text.data() + digits, n).ec == std::errc();
  if (!number || shift < 0) {
    // "20GB" (or "20 GB"): a decimal unit is ambiguous for GPU memory, which CUDA and
    // nvidia-smi count in binary units: say which to write.
    std::string u = unit;
    std::erase(u, ' ');
    if (number && (u == "kb" || u == "mb" || u == "gb" || u == "tb")) {
      return FieldError(std::string(field), "'{}' must be a size in binary units: write {}{}iB (or {}{}) as nvidia-smi "
                        "counts it, or a byte count", text, n, static_cast<char>(std::toupper(u[0])), n,
                        static_cast<char>(std::toupper(u[0])));
    }
    return FieldError(std::string(field), "'{}' must be a size such as 20GiB, 512MiB or a byte count", text);
  }
  // In MiB, rounded up from bytes; the digit limit keeps n << 40 in range.
  const long double bytes = static_cast<long double>(n) * static_cast<long double>(1ULL << shift);
  const long double mib_exact = bytes / (1 << 20);
  const int64_t mib = static_cast<int64_t>(std::ceil(mib_exact));
  if (mib < 1 || mib > kMaxGpuMemoryMib) {
    return FieldError(std::string(field), "'{}' must be between 1MiB and {}", text, MemoryMibText(kMaxGpuMemoryMib));
  }
  return mib;
}

std::string MemoryMibText(int64_t mib) {
  if (mib % 1024 == 0) return fmt::format("{}GiB", mib / 1024);
  return fmt::format("{}MiB", mib);
}

}  // namespace cohort::api
