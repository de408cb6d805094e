// NVML through dlopen: the few declarations below mirror nvml.h (stable C ABI), so the
// build needs neither the header nor the library.
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>  // std::call_once
#include <map>
#include <set>
#include <tuple>

#include "common/log.h"

#include <fmt/format.h>

#include "agent/gpu/gpu.h"
#include "api/gpu_request.h"
#include "common/mutex.h"

namespace cohort::agent {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned gpu;     // percent
  unsigned memory;  // percent
};
using nvmlEventSet_t = struct nvmlEventSet_st*;
// nvmlEventData_t (with the _v2 instance ids); padded in case a driver's is larger.
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned char reserved[64];
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorGpuIsLost = 15;
constexpr unsigned kNvmlTemperatureGpu = 0;
constexpr unsigned kNvmlClockSm = 1;
constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8;
constexpr int kNvmlMemoryErrorUncorrected = 1;
constexpr int kNvmlVolatileEcc = 0;
constexpr unsigned kNvmlBufferSize = 96;  // NVML_DEVICE_{NAME,UUID}_V2_BUFFER_SIZE
constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
// nvmlProcessInfo_t as the _v2 and _v3 queries fill it, and the first version's.
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
struct nvmlProcessInfoV1_t {
  unsigned pid;
  unsigned long long used_gpu_memory;
};
// Processes asked for per GPU at most (a GPU holds far fewer compute processes).
constexpr unsigned kMaxProcesses = 1024;
// MIG and topology (issue 18).
struct nvmlPciInfo_t {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_sub_system_id;
  char bus_id[32];
};
struct nvmlDeviceAttributes_t {
  unsigned multiprocessor_count;
  unsigned shared_copy_engine_count;
  unsigned shared_decoder_count;
  unsigned shared_encoder_count;
  unsigned shared_jpeg_count;
  unsigned shared_ofa_count;
  unsigned gpu_instance_slice_count;
  unsigned compute_instance_slice_count;
  unsigned long long memory_size_mb;
};
constexpr unsigned kNvmlDeviceMigEnable = 1;
constexpr int kNvmlFeatureEnabled = 1;
constexpr unsigned kNvmlNvLinkMaxLinks = 18;
constexpr int kNvmlTopologyMultiple = 20;  // at most one chain of PCIe switches apart

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);  // may be null
  nvmlReturn_t (*get_count)(unsigned*);
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*);
  // Telemetry and health: each optional (null when the library lacks it).
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*get_temperature)(nvmlDevice_t, unsigned, unsigned*);
  nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned*);  // milliwatts
  nvmlReturn_t (*get_clock)(nvmlDevice_t, unsigned, unsigned*);  // MHz
  nvmlReturn_t (*get_total_ecc)(nvmlDevice_t, int, int, unsigned long long*);
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*);
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned);
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t);
  // Compute processes: the _v3/_v2 query (nvmlProcessInfo_t), else the first version.
  nvmlReturn_t (*get_processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*);
  nvmlReturn_t (*get_processes_v1)(nvmlDevice_t, unsigned*, nvmlProcessInfoV1_t*);
  // MIG and topology: each optional (without them, no MIG instances or no topology).
  nvmlReturn_t (*get_mig_mode)(nvmlDevice_t, unsigned*, unsigned*);
  nvmlReturn_t (*get_max_mig_count)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*get_mig_handle)(nvmlDevice_t, unsigned, nvmlDevice_t*);
  nvmlReturn_t (*get_attributes)(nvmlDevice_t, nvmlDeviceAttributes_t*);
  nvmlReturn_t (*get_pci_info)(nvmlDevice_t, nvmlPciInfo_t*);
  nvmlReturn_t (*get_nvlink_state)(nvmlDevice_t, unsigned, int*);
  nvmlReturn_t (*get_nvlink_remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
  nvmlReturn_t (*get_common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*);

  std::string ErrorText(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? fmt::format("{} (NVML error {})", s, r) : fmt::format("NVML error {}", r);
  }
};

// Loads the library once per process and keeps it loaded: unloading NVML while a driver
// thread may still run is a known source of crashes, and the mapping is cheap.
Result<const NvmlApi*> LoadNvml() {
  static std::once_flag once;
  static NvmlApi api;
  static std::string load_error;
  std::call_once(once, [] {
    // COHORT_NVML_LIBRARY names another library (a path): a driver installed elsewhere,
    // or the tests' table-driven fake.
    const char* override_path = std::getenv("COHORT_NVML_LIBRARY");
    const std::string path = override_path && *override_path ? override_path : kNvmlLibrary;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      load_error = fmt::format("cannot load {} (is the NVIDIA driver installed?): {}",
                               path, e ? e : "unknown error");
      return;
    }
    auto sym = [&](const char* name) -> void* {
      void* p = dlsym(lib, name);
      if (!p && load_error.empty()) {
        load_error = fmt::format("{} lacks the symbol {}", path, name);
      }
      return p;
    };
    api.init = reinterpret_cast<decltype(api.init)>(sym("nvmlInit_v2"));
    api.shutdown = reinterpret_cast<decltype(api.shutdown)>(sym("nvmlShutdown"));
    api.get_count = reinterpret_cast<decltype(api.get_count)>(sym("nvmlDeviceGetCount_v2"));
    api.get_handle =
        reinterpret_cast<decltype(api.get_handle)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    api.get_name = reinterpret_cast<decltype(api.get_name)>(sym("nvmlDeviceGetName"));
    api.get_uuid = reinterpret_cast<decltype(api.get_uuid)>(sym("nvmlDeviceGetUUID"));
    api.get_memory = reinterpret_cast<decltype(api.get_memory)>(sym("nvmlDeviceGetMemoryInfo"));
    api.error_string = reinterpret_cast<decltype(api.error_string)>(dlsym(lib, "nvmlErrorString"));
    auto opt = [&](auto& field, const char* name) {
      field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(dlsym(lib, name));
    };
    opt(api.get_utilization, "nvmlDeviceGetUtilizationRates");
    opt(api.get_temperature, "nvmlDeviceGetTemperature");
    opt(api.get_power, "nvmlDeviceGetPowerUsage");
    opt(api.get_clock, "nvmlDeviceGetClockInfo");
    opt(api.get_total_ecc, "nvmlDeviceGetTotalEccErrors");
    opt(api.event_set_create, "nvmlEventSetCreate");
    opt(api.register_events, "nvmlDeviceRegisterEvents");
    opt(api.event_set_wait, "nvmlEventSetWait_v2");
    if (!api.event_set_wait) opt(api.event_set_wait, "nvmlEventSetWait");
    opt(api.event_set_free, "nvmlEventSetFree");
    opt(api.get_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!api.get_processes) opt(api.get_processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!api.get_processes) opt(api.get_processes_v1, "nvmlDeviceGetComputeRunningProcesses");
    opt(api.get_mig_mode, "nvmlDeviceGetMigMode");
    opt(api.get_max_mig_count, "nvmlDeviceGetMaxMigDeviceCount");
    opt(api.get_mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex");
    opt(api.get_attributes, "nvmlDeviceGetAttributes_v2");
    opt(api.get_pci_info, "nvmlDeviceGetPciInfo_v3");
    opt(api.get_nvlink_state, "nvmlDeviceGetNvLinkState");
    opt(api.get_nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    opt(api.get_common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
  });
  if (!load_error.empty()) return MakeError(ErrorCode::kUnavailable, load_error);
  return &api;
}

// Name, uuid and memory of `dev`; `what` names it in errors ("GPU 3", "GPU 0 MIG 1").
Result<GpuInfo> QueryDevice(const NvmlApi& api, nvmlDevice_t dev, const std::string& what) {
  GpuInfo g;
  nvmlReturn_t r;
  char buf[kNvmlBufferSize] = {};
  if ((r = api.get_name(dev, buf, sizeof buf)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetName({}): {}", what, api.ErrorText(r));
  }
  g.name = buf;
  char ubuf[kNvmlBufferSize] = {};
  if ((r = api.get_uuid(dev, ubuf, sizeof ubuf)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetUUID({}): {}", what, api.ErrorText(r));
  }
  g.uuid = ubuf;
  nvmlMemory_t mem{};
  if ((r = api.get_memory(dev, &mem)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetMemoryInfo({}): {}", what, api.ErrorText(r));
  }
  g.memory_bytes = static_cast<int64_t>(mem.total);
  return g;
}

// A MIG instance's profile: from its name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb"), else from
// its attributes (slices and memory); "" when neither gives a profile name.
std::string MigProfile(const NvmlApi& api, nvmlDevice_t dev, const std::string& name) {
  if (size_t at = name.rfind("MIG "); at != std::string::npos && api::IsMigProfile(name.substr(at + 4))) {
    return name.substr(at + 4);
  }
  nvmlDeviceAttributes_t attr{};
  if (api.get_attributes && api.get_attributes(dev, &attr) == kNvmlSuccess && attr.gpu_instance_slice_count > 0) {
    std::string p = fmt::format("{}g.{}gb", attr.gpu_instance_slice_count, (attr.memory_size_mb + 512) / 1024);
    if (api::IsMigProfile(p)) return p;
  }
  return "";
}

// Connected components over n + extra nodes; ids are given in order of the first member.
class Components {
 public:
  explicit Components(size_t n) : parent_(n) {
    for (size_t i = 0; i < n; ++i) parent_[i] = i;
  }
  size_t Add() {
    parent_.push_back(parent_.size());
    return parent_.size() - 1;
  }
  size_t Find(size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Join(size_t a, size_t b) { parent_[Find(a)] = Find(b); }
  // The component id of each of the first `n` nodes where `member[i]`, else -1.
  std::vector<int> Ids(size_t n, const std::vector<bool>& member) {
    std::map<size_t, int> ids;
    std::vector<int> out(n, -1);
    for (size_t i = 0; i < n; ++i) {
      if (!member[i]) continue;
      auto [it, fresh] = ids.emplace(Find(i), static_cast<int>(ids.size()));
      out[i] = it->second;
    }
    return out;
  }

 private:
  std::vector<size_t> parent_;
};

// NVLink islands of whole GPUs: GPUs joined by active links, directly or through NVSwitches
// (a remote end that is no GPU of this node); -1 for a GPU with no active link.
std::vector<int> NvLinkIslands(const NvmlApi& api, const std::vector<nvmlDevice_t>& gpus) {
  const size_t n = gpus.size();
  std::vector<bool> linked(n, false);
  if (!api.get_pci_info || !api.get_nvlink_state || !api.get_nvlink_remote_pci) return std::vector<int>(n, -1);
  using PciKey = std::tuple<unsigned, unsigned, unsigned>;
  std::map<PciKey, size_t> node_of;
  for (size_t i = 0; i < n; ++i) {
    nvmlPciInfo_t pci{};
    if (api.get_pci_info(gpus[i], &pci) == kNvmlSuccess) node_of[{pci.domain, pci.bus, pci.device}] = i;
  }
  Components c(n);
  for (size_t i = 0; i < n; ++i) {
    for (unsigned link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      int active = 0;
      if (api.get_nvlink_state(gpus[i], link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled) continue;
      nvmlPciInfo_t remote{};
      if (api.get_nvlink_remote_pci(gpus[i], link, &remote) != kNvmlSuccess) continue;
      const PciKey key{remote.domain, remote.bus, remote.device};
      auto it = node_of.find(key);
      if (it == node_of.end()) it = node_of.emplace(key, c.Add()).first;  // an NVSwitch
      c.Join(i, it->second);
      linked[i] = true;
    }
  }
  return c.Ids(n, linked);
}

// PCIe switches of whole GPUs: GPUs whose common ancestor is at most a chain of PCIe
// switches (NVML_TOPOLOGY_SINGLE or _MULTIPLE; INTERNAL: one board) share one; -1 for all
// when NVML cannot say.
std::vector<int> PcieSwitches(const NvmlApi& api, const std::vector<nvmlDevice_t>& gpus) {
  const size_t n = gpus.size();
  if (!api.get_common_ancestor) return std::vector<int>(n, -1);
  Components c(n);
  bool known = false;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      int level = 0;
      if (api.get_common_ancestor(gpus[i], gpus[j], &level) != kNvmlSuccess) continue;
      known = true;
      if (level <= kNvmlTopologyMultiple) c.Join(i, j);
    }
  }
  if (!known) return std::vector<int>(n, -1);
  return c.Ids(n, std::vector<bool>(n, true));
}

struct NvmlDevice {
  nvmlDevice_t handle;
  GpuInfo info;
};

// The node's devices in node order (gpu.h): each whole GPU with its NVLink island and
// PCIe switch, and a GPU in MIG mode as its instances (uuids "MIG-...", mig_parent its
// NVML index), which CUDA names by uuid. A MIG GPU without instances offers nothing.
Result<std::vector<NvmlDevice>> EnumerateDevices(const NvmlApi& api) {
  unsigned count = 0;
  nvmlReturn_t r = api.get_count(&count);
  if (r != kNvmlSuccess) return Errorf(ErrorCode::kUnavailable, "nvmlDeviceGetCount: {}", api.ErrorText(r));
  std::vector<nvmlDevice_t> handles;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if ((r = api.get_handle(i, &dev)) != kNvmlSuccess) {
      return Errorf(ErrorCode::kInternal, "nvmlDeviceGetHandleByIndex({}): {}", i, api.ErrorText(r));
    }
    handles.push_back(dev);
  }
  const std::vector<int> islands = NvLinkIslands(api, handles);
  const std::vector<int> switches = PcieSwitches(api, handles);
  std::vector<NvmlDevice> out;
  for (unsigned i = 0; i < count; ++i) {
    unsigned current = 0, pending = 0, slots = 0;
    const bool mig = api.get_mig_mode && api.get_max_mig_count && api.get_mig_handle &&
                     api.get_mig_mode(handles[i], &current, &pending) == kNvmlSuccess &&
                     current == kNvmlDeviceMigEnable && api.get_max_mig_count(handles[i], &slots) == kNvmlSuccess;
    if (!mig) {
      GpuInfo g = COHORT_TRY(QueryDevice(api, handles[i], fmt::format("GPU {}", i)));
      g.index = static_cast<int>(out.size());
      g.nvlink_island = islands[i];
      g.pcie_switch = switches[i];
      out.push_back({handles[i], std::move(g)});
      continue;
    }
    size_t found = 0;
    for (unsigned k = 0; k < slots; ++k) {
      nvmlDevice_t inst = nullptr;
      if (api.get_mig_handle(handles[i], k, &inst) != kNvmlSuccess) continue;  // an empty slot
      GpuInfo g = COHORT_TRY(QueryDevice(api, inst, fmt::format("GPU {} MIG {}", i, k)));
      g.mig_profile = MigProfile(api, inst, g.name);
      if (g.mig_profile.empty()) {
        LOG_WARN("NVML: GPU {} MIG instance {} ({}) has no profile name; it is not offered", i, g.uuid, g.name);
        continue;
      }
      g.mig_parent = static_cast<int>(i);
      g.index = static_cast<int>(out.size());
      out.push_back({inst, std::move(g)});
      ++found;
    }
    if (found == 0) LOG_WARN("NVML: GPU {} is in MIG mode with no instances; it offers nothing", i);
  }
  return out;
}

// Holds NVML initialised for its lifetime (nvmlInit is reference-counted, so discovery's
// init/shutdown pairs do not disturb it).
class NvmlGpuMonitor final : public GpuMonitor {
 public:
  NvmlGpuMonitor(const NvmlApi* api, std::vector<nvmlDevice_t> devices)
      : api_(api), devices_(std::move(devices)), state_(devices_.size()) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (api_->get_total_ecc) {
        unsigned long long n = 0;
        if (api_->get_total_ecc(devices_[i], kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &n) == kNvmlSuccess) {
          state_[i].ecc_baseline = n;
        }
      }
    }
    if (api_->event_set_create && api_->register_events && api_->event_set_wait &&
        api_->event_set_create(&events_) == kNvmlSuccess) {
      int registered = 0;
      for (auto* dev : devices_) {
        registered += api_->register_events(dev, kNvmlEventTypeXidCriticalError, events_) == kNvmlSuccess;
      }
      LOG_INFO("NVML: XID events registered on {} of {} GPU(s)", registered, devices_.size());
    } else {
      events_ = nullptr;
      LOG_WARN("NVML: XID events are not available; GPU health relies on ECC counters");
    }
  }
  ~NvmlGpuMonitor() override {
    if (events_ && api_->event_set_free) api_->event_set_free(events_);
    api_->shutdown();
  }

  void RecordHealthEvent(int index, std::string what) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (index < 0 || static_cast<size_t>(index) >= state_.size()) return;
    HealthEventLocked(state_[static_cast<size_t>(index)], std::move(what));
  }

  std::vector<GpuReading> Sample(const std::vector<bool>&, SteadyTime) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    DrainEventsLocked();
    std::vector<GpuReading> out;
    for (size_t i = 0; i < devices_.size(); ++i) {
      nvmlDevice_t dev = devices_[i];
      State& st = state_[i];
      GpuReading r;
      r.index = static_cast<int>(i);
      nvmlUtilization_t u{};
      if (api_->get_utilization) {
        nvmlReturn_t rc = api_->get_utilization(dev, &u);
        if (rc == kNvmlSuccess) r.utilization = std::min(1.0, u.gpu / 100.0);
        if (rc == kNvmlErrorGpuIsLost) HealthEventLocked(st, "GPU is lost (NVML: GPU_IS_LOST)");
      }
      nvmlMemory_t mem{};
      if (api_->get_memory(dev, &mem) == kNvmlSuccess) {
        r.memory_used_bytes = static_cast<int64_t>(mem.used);
        r.memory_total_bytes = static_cast<int64_t>(mem.total);
      }
      unsigned v = 0;
      if (api_->get_temperature && api_->get_temperature(dev, kNvmlTemperatureGpu, &v) == kNvmlSuccess) {
        r.temperature_celsius = v;
      }
      if (api_->get_power && api_->get_power(dev, &v) == kNvmlSuccess) r.power_watts = v / 1000.0;
      if (api_->get_clock && api_->get_clock(dev, kNvmlClockSm, &v) == kNvmlSuccess) r.sm_clock_hz = v * 1e6;
      unsigned long long ecc = 0;
      if (api_->get_total_ecc &&
          api_->get_total_ecc(dev, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &ecc) == kNvmlSuccess &&
          ecc > st.ecc_baseline) {
        HealthEventLocked(st, fmt::format("{} uncorrectable ECC error(s)", ecc - st.ecc_baseline));
        st.ecc_baseline = ecc;
      }
      r.health_events = st.health_events;
      r.health_event = st.health_event;
      out.push_back(std::move(r));
    }
    return out;
  }

  std::vector<GpuProcess> Processes() override {
    std::vector<GpuProcess> out;
    for (size_t i = 0; i < devices_.size(); ++i) {
      // The count is in/out: a GPU that gained processes since the size was chosen
      // answers INSUFFICIENT_SIZE; one retry with its new count, else the GPU is skipped.
      unsigned n = 0;
      for (int attempt = 0; attempt < 2; ++attempt) {
        unsigned count = std::max(n, 64u);
        std::vector<nvmlProcessInfo_t> infos(std::min(count, kMaxProcesses));
        n = static_cast<unsigned>(infos.size());
        nvmlReturn_t rc;
        if (api_->get_processes) {
          rc = api_->get_processes(devices_[i], &n, infos.data());
        } else if (api_->get_processes_v1) {
          std::vector<nvmlProcessInfoV1_t> v1(infos.size());
          rc = api_->get_processes_v1(devices_[i], &n, v1.data());
          for (size_t k = 0; k < v1.size() && k < n; ++k) infos[k] = {v1[k].pid, v1[k].used_gpu_memory, 0, 0};
        } else {
          return out;
        }
        if (rc == kNvmlErrorInsufficientSize) continue;
        if (rc != kNvmlSuccess) break;
        for (size_t k = 0; k < n && k < infos.size(); ++k) {
          // Memory NVML cannot attribute (Windows WDDM, some containers) reads as unknown.
          if (infos[k].used_gpu_memory == kNvmlValueNotAvailable) continue;
          out.push_back({static_cast<int>(i), static_cast<int>(infos[k].pid),
                         static_cast<int64_t>(infos[k].used_gpu_memory)});
        }
        break;
      }
    }
    return out;
  }

 private:
  struct State {
    unsigned long long ecc_baseline = 0;
    int64_t health_events = 0;
    std::string health_event;
    std::string last_lost;
  };

  // Counts one health event in `st` (an element of state_).
  void HealthEventLocked(State& st, std::string what) REQUIRES(mu_) {
    if (what == st.last_lost) return;  // a lost GPU stays lost: one event
    if (what.starts_with("GPU is lost")) st.last_lost = what;
    st.health_events += 1;
    st.health_event = std::move(what);
  }

  // Reads every pending XID event without blocking.
  void DrainEventsLocked() REQUIRES(mu_) {
    if (!events_) return;
    for (int n = 0; n < 256; ++n) {
      nvmlEventData_t data{};
      nvmlReturn_t rc = api_->event_set_wait(events_, &data, 0);
      if (rc != kNvmlSuccess) return;  // timeout: nothing pending
      if (!(data.event_type & kNvmlEventTypeXidCriticalError)) continue;
      int xid = static_cast<int>(data.event_data);
      for (size_t i = 0; i < devices_.size(); ++i) {
        if (data.device != devices_[i]) continue;
        if (IsApplicationXid(xid)) {
          LOG_WARN("GPU {}: {} (caused by an application; the GPU stays healthy)", i, DescribeXid(xid));
        } else {
          LOG_ERROR("GPU {}: {}: marking it unhealthy", i, DescribeXid(xid));
          HealthEventLocked(state_[i], DescribeXid(xid));
        }
      }
    }
  }

  const NvmlApi* api_;
  const std::vector<nvmlDevice_t> devices_;
  nvmlEventSet_t events_ = nullptr;
  Mutex mu_;
  std::vector<State> state_ GUARDED_BY(mu_);
};

}  // namespace

Result<std::unique_ptr<GpuMonitor>> OpenNvmlGpuMonitor() {
  const NvmlApi* api = COHORT_TRY(LoadNvml());
  nvmlReturn_t r = api->init();
  if (r != kNvmlSuccess) {
    return Errorf(ErrorCode::kUnavailable, "nvmlInit failed: {}", api->ErrorText(r));
  }
  auto found = EnumerateDevices(*api);
  if (!found) {
    api->shutdown();
    return std::unexpected(found.error());
  }
  std::vector<nvmlDevice_t> devices;
  for (const NvmlDevice& d : *found) devices.push_back(d.handle);
  return std::unique_ptr<GpuMonitor>(std::make_unique<NvmlGpuMonitor>(api, std::move(devices)));
}

Result<std::vector<GpuInfo>> DiscoverNvmlGpus() {
  const NvmlApi* api = COHORT_TRY(LoadNvml());
  nvmlReturn_t r = api->init();
  if (r != kNvmlSuccess) {
    return Errorf(ErrorCode::kUnavailable, "nvmlInit failed (is the NVIDIA driver loaded?): {}",
                  api->ErrorText(r));
  }
  auto found = EnumerateDevices(*api);
  api->shutdown();
  if (!found) return std::unexpected(found.error());
  std::vector<GpuInfo> out;
  for (NvmlDevice& d : *found) out.push_back(std::move(d.info));
  return out;
}

}  // namespace cohort::agent
