#include "agent/cpu_allocator.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

// The levels Choose narrows through, widest first; kLeaf takes CPUs in order.
enum Level { kNode = 0, kPackage = 1, kCore = 2, kLeaf = 3 };

int KeyAt(const CpuPlace& p, int level) {
  return level == kNode ? p.node : level == kPackage ? p.package : p.core;
}

// -1 when the file is missing or holds no number.
int ReadNumber(const fs::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return -1;
  int v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && v >= 0 ? v : -1;
}

// Appends `need` of `cands` (indices into `pool`, ascending) to `out`: inside the
// smallest group at `level` that holds them all (best fit, leaving bigger groups whole
// for bigger tasks), else the largest groups whole and the rest the same way.
void Choose(const std::vector<CpuPlace>& pool, const std::vector<size_t>& cands, int need, int level,
            std::vector<size_t>& out) {
  if (need <= 0) return;
  if (level == kLeaf || need >= static_cast<int>(cands.size())) {
    const size_t n = std::min(cands.size(), static_cast<size_t>(need));
    out.insert(out.end(), cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(n));
    return;
  }
  std::map<int, std::vector<size_t>> groups;
  for (size_t i : cands) groups[KeyAt(pool[i], level)].push_back(i);
  while (need > 0 && !groups.empty()) {
    auto best = groups.end();
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      if (static_cast<int>(it->second.size()) >= need &&
          (best == groups.end() || it->second.size() < best->second.size())) {
        best = it;
      }
    }
    if (best != groups.end()) {
      Choose(pool, best->second, need, level + 1, out);
      return;
    }
    auto largest = std::max_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size();
    });
    out.insert(out.end(), largest->second.begin(), largest->second.end());
    need -= static_cast<int>(largest->second.size());
    groups.erase(largest);
  }
}

}  // namespace

std::vector<CpuPlace> ReadCpuTopology(const std::vector<int>& cpus, const std::string& sys_cpu_dir) {
  std::vector<CpuPlace> out;
  std::map<std::pair<int, int>, int> core_ids;  // (package, core_id) -> a node-wide core number
  for (int cpu : cpus) {
    const fs::path dir = fs::path(sys_cpu_dir) / ("cpu" + std::to_string(cpu));
    CpuPlace p;
    p.cpu = cpu;
    p.package = std::max(0, ReadNumber(dir / "topology" / "physical_package_id"));
    const int core_id = ReadNumber(dir / "topology" / "core_id");
    // A CPU without a core_id is a core of its own (keyed apart from every real one).
    const std::pair<int, int> key = core_id >= 0 ? std::pair{p.package, core_id} : std::pair{-1, cpu};
    p.core = core_ids.try_emplace(key, static_cast<int>(core_ids.size())).first->second;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      int node = -1;
      if (name.size() > 4 && name.compare(0, 4, "node") == 0) {
        auto [q, perr] = std::from_chars(name.data() + 4, name.data() + name.size(), node);
        if (perr == std::errc() && q == name.data() + name.size()) p.node = node;
      }
    }
    out.push_back(p);
  }
  return out;
}

Result<CpuBind> ParseCpuBind(std::string_view s) {
  if (s == "cores") return CpuBind::kCores;
  if (s == "none") return CpuBind::kNone;
  return Errorf(ErrorCode::kInvalidArgument,
                "--cpu-bind must be 'cores' (bind each task to its own CPUs) or 'none' (leave tasks on all of the "
                "agent's CPUs), got '{}'",
                s);
}

std::vector<int> CpuPoolOf(const std::vector<int>& usable, int advertised) {
  if (advertised <= 0 || static_cast<size_t>(advertised) > usable.size()) return {};
  return std::vector<int>(usable.begin(), usable.begin() + advertised);
}

CpuAllocator::CpuAllocator(std::vector<CpuPlace> pool) : pool_(std::move(pool)) {
  std::sort(pool_.begin(), pool_.end(), [](const CpuPlace& a, const CpuPlace& b) { return a.cpu < b.cpu; });
  users_.assign(pool_.size(), 0);
}

std::vector<int> CpuAllocator::Allocate(int count) {
  std::vector<size_t> chosen;
  int need = std::min(count, pool_size());
  // The least-used CPUs first (all idle ones while the head's placements fit the pool),
  // then the next level of use, each level chosen by place.
  std::vector<bool> taken(pool_.size(), false);
  while (need > 0) {
    int level = -1;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (!taken[i] && (level < 0 || users_[i] < level)) level = users_[i];
    }
    std::vector<size_t> cands;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (!taken[i] && users_[i] == level) cands.push_back(i);
    }
    const size_t before = chosen.size();
    Choose(pool_, cands, need, kNode, chosen);
    for (size_t k = before; k < chosen.size(); ++k) taken[chosen[k]] = true;
    need -= static_cast<int>(chosen.size() - before);
  }
  std::vector<int> out;
  for (size_t i : chosen) {
    users_[i] += 1;
    out.push_back(pool_[i].cpu);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CpuAllocator::Release(const std::vector<int>& cpus) {
  for (int cpu : cpus) {
    auto it = std::lower_bound(pool_.begin(), pool_.end(), cpu, [](const CpuPlace& p, int c) { return p.cpu < c; });
    if (it != pool_.end() && it->cpu == cpu) {
      int& u = users_[static_cast<size_t>(it - pool_.begin())];
      if (u > 0) u -= 1;
    }
  }
}

int CpuAllocator::idle() const {
  return static_cast<int>(std::count(users_.begin(), users_.end(), 0));
}

}  // namespace cohort::agent
