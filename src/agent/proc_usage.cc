#include "agent/proc_usage.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

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
  long long pid = 0, ppid = 0, session = 0, utime = 0, stime = 0, cutime = 0, cstime = 0, start = 0, rss = 0;
  {
    std::string_view head = line.substr(0, line.find(' '));
    auto [p, ec] = std::from_chars(head.data(), head.data() + head.size(), pid);
    if (ec != std::errc() || p != head.data() + head.size()) return std::nullopt;
  }
  if (!num(4, ppid) || !num(6, session) || !num(14, utime) || !num(15, stime) || !num(16, cutime) || !num(17, cstime) ||
      !num(22, start) || !num(24, rss)) {
    return std::nullopt;
  }
  ProcStat st;
  st.pid = static_cast<int>(pid);
  st.ppid = static_cast<int>(ppid);
  st.session = static_cast<int>(session);
  st.usage.cpu_seconds = double(utime + stime + cutime + cstime) / double(ticks_per_s);
  st.usage.rss_bytes = std::max<long long>(0, rss) * page_bytes;
  st.start_ticks = start;
  return st;
}

TaskRoots ShimRoots(const std::set<int>& shims) {
  TaskRoots roots;
  for (int shim : shims) roots[shim] = {shim, 0};
  return roots;
}

bool RootNames(const TaskRoot& root, const ProcStat& p) {
  return p.pid > 1 && (root.start_ticks == 0 || root.start_ticks == p.start_ticks);
}

std::map<int, int> TasksOf(const std::vector<ProcStat>& procs, const TaskRoots& roots) {
  std::map<int, int> out;
  if (roots.empty()) return out;
  std::unordered_map<int, const ProcStat*> by_pid;
  by_pid.reserve(procs.size());
  for (const ProcStat& p : procs) by_pid[p.pid] = &p;
  // root pid -> task, for the roots whose process is the one they name.
  std::unordered_map<int, int> live;
  for (const auto& [pid, r] : roots) {
    auto it = by_pid.find(pid);
    if (it != by_pid.end() && RootNames(r, *it->second)) live[pid] = r.task;
  }
  // pid -> task, or 0: belongs to none (memoised, so the walk is linear in the processes).
  std::unordered_map<int, int> known;
  std::vector<int> chain;
  for (const ProcStat& p : procs) {
    chain.clear();
    int root = 0;
    for (int pid = p.pid;;) {
      if (auto r = live.find(pid); r != live.end()) {
        root = r->second;
        break;
      }
      if (auto k = known.find(pid); k != known.end()) {
        root = k->second;
        break;
      }
      auto it = by_pid.find(pid);
      // init, the kernel's threads (ppid 0), a parent gone since the read, or a cycle
      // that a pid reused during the read could make: no ancestor root.
      if (pid <= 1 || it == by_pid.end() || chain.size() > by_pid.size()) break;
      chain.push_back(pid);
      pid = it->second->ppid;
    }
    for (int pid : chain) known[pid] = root;
    if (auto r = live.find(p.session); root == 0 && r != live.end()) root = r->second;
    if (root != 0) out[p.pid] = root;
  }
  return out;
}

namespace {

std::optional<ProcStat> ReadProcStat(const std::filesystem::path& dir) {
  static const long ticks = sysconf(_SC_CLK_TCK);
  static const long page = sysconf(_SC_PAGESIZE);
  std::ifstream in(dir / "stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;  // the process is gone
  return ParseProcStat(line, ticks, page);
}

}  // namespace

std::optional<int64_t> ProcStartTicks(int pid, std::string_view proc_root) {
  if (pid <= 0) return std::nullopt;
  auto st = ReadProcStat(std::filesystem::path(std::string(proc_root)) / std::to_string(pid));
  if (!st || st->pid != pid) return std::nullopt;
  return st->start_ticks;
}

std::vector<int> SessionMembers(int session, std::string_view proc_root) {
  std::vector<int> out;
  if (session <= 1) return out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(std::string(proc_root), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    if (auto st = ReadProcStat(it->path()); st && st->session == session) out.push_back(st->pid);
  }
  return out;
}

std::optional<uint64_t> ReadPidNamespace(std::string_view pid, std::string_view proc_root) {
  const std::string link = fmt::format("{}/{}/ns/pid", proc_root, pid);
  char buf[64];
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof buf) return std::nullopt;
  std::string_view target(buf, static_cast<size_t>(n));
  if (!target.starts_with("pid:[") || !target.ends_with("]")) return std::nullopt;
  target = target.substr(5, target.size() - 6);
  uint64_t inode = 0;
  auto [p, ec] = std::from_chars(target.data(), target.data() + target.size(), inode);
  if (ec != std::errc() || p != target.data() + target.size() || inode == 0) return std::nullopt;
  return inode;
}

TaskProcesses ReadTaskProcesses(const TaskRoots& roots, std::string_view proc_root) {
  TaskProcesses out;
  if (roots.empty()) return out;
  std::vector<ProcStat> procs;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(std::string(proc_root), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    if (auto st = ReadProcStat(it->path())) procs.push_back(*st);
  }
  out.task_of = TasksOf(procs, roots);  // rules 1 and 2
  std::unordered_map<int, ProcStat*> by_pid;
  auto find = [&](int pid) -> ProcStat* {
    if (by_pid.empty()) {
      by_pid.reserve(procs.size());
      for (ProcStat& p : procs) by_pid[p.pid] = &p;
    }
    auto it = by_pid.find(pid);
    return it == by_pid.end() ? nullptr : it->second;
  };
  // Rule 3 (proc_usage.h): the namespaces of the live namespace roots, each confirmed by
  // the root's start time read after it, never the reader's own; then those of the
  // processes the tree and the sessions left, each confirmed the same way and given to
  // its namespace's task at once.
  const std::optional<uint64_t> own = ReadPidNamespace("self", proc_root);
  std::unordered_map<uint64_t, int> ns_task;
  for (const auto& [pid, r] : roots) {
    ProcStat* p = r.namespace_init ? find(pid) : nullptr;
    if (p == nullptr || !RootNames(r, *p)) continue;
    const auto ns = ReadPidNamespace(std::to_string(pid), proc_root);
    if (!ns || ns == own || ProcStartTicks(pid, proc_root) != p->start_ticks) continue;
    ns_task.emplace(*ns, r.task);
  }
  if (!ns_task.empty()) {
    for (ProcStat& p : procs) {
      if (out.task_of.contains(p.pid)) continue;
      const auto ns = ReadPidNamespace(std::to_string(p.pid), proc_root);
      auto t = ns ? ns_task.find(*ns) : ns_task.end();
      if (t == ns_task.end() || ProcStartTicks(p.pid, proc_root) != p.start_ticks) continue;
      out.task_of[p.pid] = t->second;
    }
  }
  // Rule 4: the members of the live roots' cgroup leaves, each confirmed by its start time
  // read after the list.
  for (const auto& [pid, r] : roots) {
    if (r.cgroup.empty() || out.task_of.size() == procs.size()) continue;
    const ProcStat* root = find(pid);
    if (root == nullptr || !RootNames(r, *root)) continue;
    std::ifstream in(r.cgroup + "/cgroup.procs");
    for (int member = 0; in >> member;) {
      const ProcStat* p = find(member);
      if (p == nullptr || out.task_of.contains(member) || ProcStartTicks(member, proc_root) != p->start_ticks) continue;
      out.task_of[member] = r.task;
    }
  }
  for (const ProcStat& p : procs) {
    auto t = out.task_of.find(p.pid);
    if (t == out.task_of.end()) continue;
    ProcUsage& u = out.usage[t->second];
    u.cpu_seconds += p.usage.cpu_seconds;
    u.rss_bytes += p.usage.rss_bytes;
  }
  return out;
}

}  // namespace cohort::agent
