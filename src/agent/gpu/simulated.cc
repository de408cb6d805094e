#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "agent/gpu/gpu.h"
#include "api/gpu_request.h"
#include "common/mutex.h"

namespace cohort::agent {
namespace {

constexpr char kSimulatedName[] = "Cohort Simulated GPU 80GB";
constexpr int64_t kSimulatedMemoryBytes = int64_t{80} << 30;

// 64-bit FNV-1a: stable across platforms and compilers, unlike std::hash.
uint64_t Fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Finishes a hash so that nearby inputs spread over all bits (splitmix64's finaliser).
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

std::string SimulatedUuid(std::string_view node_name, int index) {
  std::string key = fmt::format("cohort-simulated-gpu/{}/{}", node_name, index);
  uint64_t hi = Mix(Fnv1a(key));
  uint64_t lo = Mix(Fnv1a(key, hi));
  return fmt::format("GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff,
                     hi & 0xffff, lo >> 48, lo & 0xffffffffffffull);
}

constexpr double kTimeConstantS = 1.0;

// The registrations of MakeSimulatedGpuMonitor's process directory (gpu.h): every
// "DEVICE BYTES" line of every live process's file, GPU by GPU; files of processes that
// are gone are removed.
std::vector<GpuProcess> ReadSimulatedProcesses(const std::string& dir, const std::vector<GpuInfo>& gpus) {
  std::vector<GpuProcess> out;
  if (dir.empty()) return out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int pid = 0;
    auto [p, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (perr != std::errc() || p != name.data() + name.size() || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      std::filesystem::remove(it->path(), ec);
      ec.clear();
      continue;
    }
    std::ifstream in(it->path());
    std::string device;
    long long bytes = 0;
    while (in >> device >> bytes) {
      if (bytes < 0) continue;
      for (const GpuInfo& g : gpus) {
        if (device == g.uuid || device == std::to_string(g.index)) out.push_back({g.index, pid, bytes});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const GpuProcess& a, const GpuProcess& b) {
    return a.gpu != b.gpu ? a.gpu < b.gpu : a.pid < b.pid;
  });
  return out;
}

class SimulatedGpuMonitor final : public GpuMonitor {
 public:
  SimulatedGpuMonitor(const std::vector<GpuInfo>& gpus, std::string process_dir)
      : gpus_(gpus), process_dir_(std::move(process_dir)), state_(gpus.size()) {}

  std::vector<GpuProcess> Processes() override { return ReadSimulatedProcesses(process_dir_, gpus_); }

  std::vector<GpuReading> Sample(const std::vector<bool>& busy, SteadyTime now) override EXCLUDES(mu_) {
    std::map<int, int64_t> registered;  // GPU index -> bytes the processes registered
    for (const GpuProcess& p : Processes()) registered[p.gpu] += p.memory_bytes;
    MutexLock lock(mu_);
    std::vector<GpuReading> out;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      State& st = state_[i];
      double target = i < busy.size() && busy[i] ? 1.0 : 0.0;
      if (st.sampled) {
        double dt = std::chrono::duration<double>(now - st.last).count();
        if (dt > 0) st.load += (target - st.load) * (1.0 - std::exp(-dt / kTimeConstantS));
      }
      st.sampled = true;
      st.last = now;
      const double l = st.load;
      const int64_t total = gpus_[i].memory_bytes;
      GpuReading r;
      r.index = gpus_[i].index;
      r.utilization = 0.95 * l;
      r.memory_total_bytes = total;
      r.memory_used_bytes = std::min<int64_t>(
          total, (int64_t{1} << 29) + static_cast<int64_t>(l * double(int64_t{60} << 30)) + registered[gpus_[i].index]);
      r.temperature_celsius = 35.0 + 40.0 * l;
      r.power_watts = 70.0 + 630.0 * l;
      r.sm_clock_hz = 345e6 + 1635e6 * l;
      r.health_events = st.health_events;
      r.health_event = st.health_event;
      out.push_back(std::move(r));
    }
    return out;
  }

  Result<void> InjectXid(int index, int xid) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (index < 0 || static_cast<size_t>(index) >= gpus_.size()) {
      return FieldError("gpu", "this node has GPUs 0..{}, got {}", int(gpus_.size()) - 1, index);
    }
    if (xid <= 0 || xid > 1000) return FieldError("xid", "must be between 1 and 1000, got {}", xid);
    if (IsApplicationXid(xid)) {
      return FieldError("xid", "{} is caused by applications, not a GPU fault; it would not mark the GPU unhealthy",
                        DescribeXid(xid));
    }
    State& st = state_[static_cast<size_t>(index)];
    st.health_events += 1;
    st.health_event = DescribeXid(xid) + " (injected)";
    return {};
  }

  void RecordHealthEvent(int index, std::string what) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (index < 0 || static_cast<size_t>(index) >= state_.size()) return;
    state_[static_cast<size_t>(index)].health_events += 1;
    state_[static_cast<size_t>(index)].health_event = std::move(what);
  }

 private:
  struct State {
    bool sampled = false;
    SteadyTime last;
    double load = 0;
    int64_t health_events = 0;
    std::string health_event;
  };
  const std::vector<GpuInfo> gpus_;
  const std::string process_dir_;
  Mutex mu_;
  std::vector<State> state_ GUARDED_BY(mu_);
};

}  // namespace

std::string DescribeXid(int xid) {
  const char* what = nullptr;
  switch (xid) {
    case 13: what = "graphics engine exception"; break;
    case 31: what = "GPU memory page fault"; break;
    case 43: what = "GPU stopped processing"; break;
    case 45: what = "preemptive cleanup"; break;
    case 48: what = "double-bit ECC error"; break;
    case 61: what = "internal micro-controller breakpoint"; break;
    case 62: what = "internal micro-controller halt"; break;
    case 63: what = "ECC page retirement or row remapping event"; break;
    case 64: what = "ECC page retirement or row remapping failure"; break;
    case 68: what = "video processor exception"; break;
    case 74: what = "NVLink error"; break;
    case 79: what = "GPU has fallen off the bus"; break;
    case 92: what = "high single-bit ECC error rate"; break;
    case 94: what = "contained ECC error"; break;
    case 95: what = "uncontained ECC error"; break;
    case 119: what = "GSP RPC timeout"; break;
    case 120: what = "GSP error"; break;
    default: break;
  }
  return what ? fmt::format("XID {} ({})", xid, what) : fmt::format("XID {}", xid);
}

bool IsApplicationXid(int xid) { return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68; }

std::unique_ptr<GpuMonitor> MakeSimulatedGpuMonitor(const std::vector<GpuInfo>& gpus, std::string process_dir) {
  return std::make_unique<SimulatedGpuMonitor>(gpus, std::move(process_dir));
}

std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name) {
  return SimulatedGpus(n, node_name, SimulatedLayout{});
}

namespace {

// "1g.10gb" -> 10 GiB in bytes; 0 if the profile names no memory.
int64_t MigProfileBytes(std::string_view profile) {
  const size_t dot = profile.find('.');
  const size_t gb = profile.find("gb", dot);
  if (dot == std::string_view::npos || gb == std::string_view::npos) return 0;
  int64_t n = 0;
  for (char c : profile.substr(dot + 1, gb - dot - 1)) {
    if (c < '0' || c > '9' || n > 1'000'000) return 0;
    n = n * 10 + (c - '0');
  }
  return n << 30;
}

// The memory a model's NVML name states ("NVIDIA A100-SXM4-40GB" -> 40 GiB, "NVIDIA H100
// 80GB HBM3" -> 80 GiB: a run of digits followed by "GB"), else the default 80 GiB.
int64_t SimulatedModelBytes(std::string_view model) {
  for (size_t gb = model.find("GB"); gb != std::string_view::npos; gb = model.find("GB", gb + 1)) {
    size_t start = gb;
    while (start > 0 && model[start - 1] >= '0' && model[start - 1] <= '9') --start;
    if (start == gb || gb - start > 6) continue;
    int64_t n = 0;
    for (size_t i = start; i < gb; ++i) n = n * 10 + (model[i] - '0');
    if (n > 0) return n << 30;
  }
  return kSimulatedMemoryBytes;
}

}  // namespace

Result<std::vector<std::pair<std::string, int>>> ParseSimulatedMig(std::string_view text) {
  std::vector<std::pair<std::string, int>> out;
  int64_t bytes = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t colon = item.rfind(':');
    const std::string profile(item.substr(0, colon == std::string_view::npos ? item.size() : colon));
    int count = 0;
    if (colon != std::string_view::npos) {
      for (char c : item.substr(colon + 1)) count = (c >= '0' && c <= '9' && count < 100) ? count * 10 + (c - '0') : -1000;
    }
    if (!api::IsMigProfile(profile) || colon == std::string_view::npos || count < 1 || count > 7) {
      return FieldError("--simulated-mig", "'{}' must be PROFILE:COUNT with a MIG profile such as 1g.10gb and a count 1-7",
                        item);
    }
    bytes += MigProfileBytes(profile) * count;
    out.emplace_back(profile, count);
    start = comma + 1;
  }
  if (bytes > kSimulatedMemoryBytes) {
    return FieldError("--simulated-mig", "instances of {} GiB in all exceed the simulated GPU's 80 GiB", bytes >> 30);
  }
  return out;
}

std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name, const SimulatedLayout& layout) {
  std::vector<GpuInfo> gpus;
  const std::string model = layout.model.empty() ? std::string(kSimulatedName) : layout.model;
  const int64_t memory = SimulatedModelBytes(model);
  int next = 0;
  for (int i = 0; i < n; ++i) {
    if (i == 0 && !layout.mig.empty()) {
      int k = 0;
      for (const auto& [profile, count] : layout.mig) {
        for (int c = 0; c < count; ++c, ++k) {
          GpuInfo g;
          g.index = next++;
          g.name = fmt::format("{} MIG {}", model, profile);
          g.uuid = "MIG-" + SimulatedUuid(node_name, 1000 + k).substr(4);
          g.memory_bytes = MigProfileBytes(profile);
          g.simulated = true;
          g.mig_profile = profile;
          g.mig_parent = 0;
          gpus.push_back(std::move(g));
        }
      }
      continue;
    }
    GpuInfo g;
    g.index = next++;
    g.name = model;
    g.uuid = SimulatedUuid(node_name, i);
    g.memory_bytes = memory;
    g.simulated = true;
    if (layout.nvlink_island > 0) g.nvlink_island = i / layout.nvlink_island;
    if (layout.pcie_switch > 0) g.pcie_switch = i / layout.pcie_switch;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace cohort::agent
