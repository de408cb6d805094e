#include "common/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace cohort {
namespace {

// Bytes of a cpu_set_t big enough for every CPU number kMaxCpuNumber allows.
constexpr size_t kMaskBytes = CPU_ALLOC_SIZE(kMaxCpuNumber + 1);

bool ParseCpu(std::string_view s, int& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty() && out >= 0 && out <= kMaxCpuNumber;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  // The kernel ends the list with a newline in /proc and /sys.
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty CPU list");
  std::vector<int> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view piece = text.substr(start, comma - start);
    start = comma + 1;
    const size_t dash = piece.find('-');
    int lo = 0;
    int hi = 0;
    const bool ok = dash == std::string_view::npos
                        ? ParseCpu(piece, lo) && (hi = lo, true)
                        : ParseCpu(piece.substr(0, dash), lo) && ParseCpu(piece.substr(dash + 1), hi) && lo <= hi;
    if (!ok) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "CPU list '{}': '{}' is not a CPU number (0 to {}) or a range LOW-HIGH", text, piece,
                    kMaxCpuNumber);
    }
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string FormatCpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) s += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

Result<std::vector<int>> AffinityCpus() {
  // A fixed-size buffer on the stack: CPU_ALLOC's heap is not needed for this bound.
  alignas(cpu_set_t) unsigned char buf[kMaskBytes] = {};
  auto* mask = reinterpret_cast<cpu_set_t*>(buf);
  if (sched_getaffinity(0, kMaskBytes, mask) != 0) {
    return Errorf(ErrorCode::kInternal, "sched_getaffinity: {}", strerror(errno));
  }
  std::vector<int> out;
  for (int c = 0; c <= kMaxCpuNumber; ++c) {
    if (CPU_ISSET_S(c, kMaskBytes, mask)) out.push_back(c);
  }
  return out;
}

int BindToCpus(const std::vector<int>& cpus) {
  alignas(cpu_set_t) unsigned char buf[kMaskBytes] = {};
  auto* mask = reinterpret_cast<cpu_set_t*>(buf);
  for (int c : cpus) {
    if (c >= 0 && c <= kMaxCpuNumber) CPU_SET_S(c, kMaskBytes, mask);
  }
  return sched_setaffinity(0, kMaskBytes, mask) == 0 ? 0 : errno;
}

}  // namespace cohort
