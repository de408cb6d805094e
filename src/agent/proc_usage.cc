#include "agent/proc_usage.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cohort::agent {

std::optional<ProcStat> ParseProcStat(std::string_view line, long ticks_per_s, long page_bytes) {
  // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string_view::npos || ticks_per_s <= 0) return std::nullopt;
  std::vector<std::string_view> f;  // f[0] is field 3 (state)
  size_t pos = close + 1;
  while (pos < line.size() && f.size() < 22) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    if (end > pos) f.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  if (f.size() < 22) return std::nullopt;
  auto num = [&](size_t field, long long& out) {
    std::string_view s = f[field - 3];
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  };
  long long session = 0, utime = 0, stime = 0, cutime = 0, cstime = 0, rss = 0;
  if (!num(6, session) || !num(14, utime) || !num(15, stime) || !num(16, cutime) || !num(17, cstime) ||
      !num(24, rss)) {
    return std::nullopt;
  }
  ProcStat st;
  st.session = static_cast<int>(session);
  st.usage.cpu_seconds = double(utime + stime + cutime + cstime) / double(ticks_per_s);
  st.usage.rss_bytes = std::max<long long>(0, rss) * page_bytes;
  return st;
}

std::map<int, ProcUsage> UsageBySession(const std::set<int>& sessions, std::string_view proc_root) {
  std::map<int, ProcUsage> out;
  if (sessions.empty()) return out;
  static const long ticks = sysconf(_SC_CLK_TCK);
  static const long page = sysconf(_SC_PAGESIZE);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(std::string(proc_root), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::ifstream in(it->path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;  // the process is gone
    auto st = ParseProcStat(line, ticks, page);
    if (!st || !sessions.contains(st->session)) continue;
    ProcUsage& u = out[st->session];
    u.cpu_seconds += st->usage.cpu_seconds;
    u.rss_bytes += st->usage.rss_bytes;
  }
  return out;
}

std::map<int, int> SessionsOf(const std::set<int>& pids, std::string_view proc_root) {
  std::map<int, int> out;
  static const long ticks = sysconf(_SC_CLK_TCK);
  static const long page = sysconf(_SC_PAGESIZE);
  for (int pid : pids) {
    std::ifstream in(std::string(proc_root) + "/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;  // the process is gone
    if (auto st = ParseProcStat(line, ticks, page)) out[pid] = st->session;
  }
  return out;
}

}  // namespace cohort::agent
