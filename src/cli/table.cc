#include "cli/table.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace cohort::cli {
namespace {

// Length in bytes of the UTF-8 sequence that starts with `c` (1 for a stray byte).
size_t CodePointBytes(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Walks `s` code point by code point; returns the byte offset after `n` of them.
size_t PrefixBytes(std::string_view s, size_t n) {
  size_t i = 0;
  while (n > 0 && i < s.size()) {
    i += std::min(CodePointBytes(static_cast<unsigned char>(s[i])), s.size() - i);
    --n;
  }
  return i;
}

std::string OneLine(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return out;
}

}  // namespace

Table::Table(std::vector<std::string> header, size_t max_width)
    : header_(std::move(header)), max_width_(header_.size(), max_width) {}

void Table::SetMaxWidth(size_t column, size_t width) {
  if (column < max_width_.size()) max_width_[column] = width;
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(size_t indent) const {
  const size_t n = header_.size();
  std::vector<std::vector<std::string>> lines;
  lines.reserve(rows_.size() + 1);
  lines.push_back(header_);
  for (const auto& r : rows_) lines.push_back(r);
  for (auto& line : lines) {
    for (size_t c = 0; c < n; ++c) line[c] = Truncate(line[c], max_width_[c]);
  }
  std::vector<size_t> width(n, 0);
  for (const auto& line : lines) {
    for (size_t c = 0; c < n; ++c) width[c] = std::max(width[c], DisplayWidth(line[c]));
  }
  std::string out;
  for (const auto& line : lines) {
    std::string text(indent, ' ');
    for (size_t c = 0; c < n; ++c) {
      text += line[c];
      if (c + 1 < n) text.append(width[c] - DisplayWidth(line[c]) + 2, ' ');
    }
    while (text.size() > indent && text.back() == ' ') text.pop_back();
    out += text;
    out += '\n';
  }
  return out;
}

size_t DisplayWidth(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    i += std::min(CodePointBytes(static_cast<unsigned char>(s[i])), s.size() - i);
  }
  return n;
}

std::string Truncate(std::string_view s, size_t max_width) {
  std::string line = OneLine(s);
  if (max_width == 0 || DisplayWidth(line) <= max_width) return line;
  std::string out = line.substr(0, PrefixBytes(line, max_width - 1));
  out += "…";
  return out;
}

std::string FormatIndexList(std::vector<int> indices) {
  if (indices.empty()) return "-";
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  std::string out;
  for (size_t i = 0; i < indices.size();) {
    size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(indices[i]);
    if (j > i) out += fmt::format("-{}", indices[j]);
    i = j + 1;
  }
  return out;
}

std::string FormatHostList(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return "-";
  // A name splits into a prefix and a numeric suffix; names without digits at the end
  // stand alone.
  struct Number {
    uint64_t value;
    std::string text;
  };
  struct Group {
    std::string prefix;
    std::vector<Number> numbers;  // empty for a name without a numeric suffix
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> by_prefix;
  for (const auto& h : hosts) {
    size_t cut = h.size();
    while (cut > 0 && std::isdigit(static_cast<unsigned char>(h[cut - 1]))) --cut;
    std::string digits = h.substr(cut);
    if (digits.empty() || digits.size() > 18) {
      groups.push_back({h, {}});
      continue;
    }
    std::string prefix = h.substr(0, cut);
    auto [it, inserted] = by_prefix.emplace(prefix, groups.size());
    if (inserted) groups.push_back({prefix, {}});
    groups[it->second].numbers.push_back({std::stoull(digits), digits});
  }
  std::vector<std::string> parts;
  for (auto& g : groups) {
    if (g.numbers.empty()) {
      parts.push_back(g.prefix);
      continue;
    }
    auto& nums = g.numbers;
    std::sort(nums.begin(), nums.end(), [](const Number& a, const Number& b) {
      return a.value != b.value ? a.value < b.value : a.text < b.text;
    });
    nums.erase(std::unique(nums.begin(), nums.end(),
                           [](const Number& a, const Number& b) { return a.text == b.text; }),
               nums.end());
    if (nums.size() == 1) {
      parts.push_back(g.prefix + nums[0].text);
      continue;
    }
    // Runs of consecutive values.
    std::vector<std::string> ranges;
    for (size_t i = 0; i < nums.size();) {
      size_t j = i;
      // "9" and "10" join; "09" and "10" would not print back the same names.
      auto padded = [](const Number& n) { return n.text.size() > 1 && n.text[0] == '0'; };
      while (j + 1 < nums.size() && nums[j + 1].value == nums[j].value + 1 &&
             (nums[j + 1].text.size() == nums[j].text.size() || (!padded(nums[j]) && !padded(nums[j + 1])))) {
        ++j;
      }
      ranges.push_back(j > i ? nums[i].text + "-" + nums[j].text : nums[i].text);
      i = j + 1;
    }
    parts.push_back(g.prefix + "[" + Join(ranges, ",") + "]");
  }
  return Join(parts, ",");
}

std::string FormatGiB(int64_t bytes) {
  if (bytes <= 0) return "-";
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, std::string_view sep, std::string_view empty) {
  if (items.empty()) return std::string(empty);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string SignalName(int signal) {
  static const std::map<int, std::string_view> kNames = {
      {1, "SIGHUP"},   {2, "SIGINT"},   {3, "SIGQUIT"},  {4, "SIGILL"},   {5, "SIGTRAP"},
      {6, "SIGABRT"},  {7, "SIGBUS"},   {8, "SIGFPE"},   {9, "SIGKILL"},  {10, "SIGUSR1"},
      {11, "SIGSEGV"}, {12, "SIGUSR2"}, {13, "SIGPIPE"}, {14, "SIGALRM"}, {15, "SIGTERM"},
      {24, "SIGXCPU"}, {25, "SIGXFSZ"}};
  if (auto it = kNames.find(signal); it != kNames.end()) return std::string(it->second);
  return fmt::format("signal {}", signal);
}

}  // namespace cohort::cli
