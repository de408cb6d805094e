// NVML through dlopen: the few declarations below mirror nvml.h (stable C ABI), so the
// build needs neither the header nor the library.
#include <dlfcn.h>

#include <mutex>  // std::call_once
#include <set>

#include "common/log.h"

#include <fmt/format.h>

#include "agent/gpu/gpu.h"
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
    void* lib = dlopen(kNvmlLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      load_error = fmt::format("cannot load {} (is the NVIDIA driver installed?): {}",
                               kNvmlLibrary, e ? e : "unknown error");
      return;
    }
    auto sym = [&](const char* name) -> void* {
      void* p = dlsym(lib, name);
      if (!p && load_error.empty()) {
        load_error = fmt::format("{} lacks the symbol {}", kNvmlLibrary, name);
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
  });
  if (!load_error.empty()) return MakeError(ErrorCode::kUnavailable, load_error);
  return &api;
}

Result<GpuInfo> QueryDevice(const NvmlApi& api, unsigned index) {
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = api.get_handle(index, &dev);
  if (r != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetHandleByIndex({}): {}", index,
                  api.ErrorText(r));
  }
  GpuInfo g;
  g.index = static_cast<int>(index);
  char buf[kNvmlBufferSize] = {};
  if ((r = api.get_name(dev, buf, sizeof buf)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetName({}): {}", index, api.ErrorText(r));
  }
  g.name = buf;
  char ubuf[kNvmlBufferSize] = {};
  if ((r = api.get_uuid(dev, ubuf, sizeof ubuf)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetUUID({}): {}", index, api.ErrorText(r));
  }
  g.uuid = ubuf;
  nvmlMemory_t mem{};
  if ((r = api.get_memory(dev, &mem)) != kNvmlSuccess) {
    return Errorf(ErrorCode::kInternal, "nvmlDeviceGetMemoryInfo({}): {}", index,
                  api.ErrorText(r));
  }
  g.memory_bytes = static_cast<int64_t>(mem.total);
  return g;
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
  unsigned count = 0;
  if ((r = api->get_count(&count)) != kNvmlSuccess) {
    api->shutdown();
    return Errorf(ErrorCode::kUnavailable, "nvmlDeviceGetCount: {}", api->ErrorText(r));
  }
  std::vector<nvmlDevice_t> devices;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if ((r = api->get_handle(i, &dev)) != kNvmlSuccess) {
      api->shutdown();
      return Errorf(ErrorCode::kInternal, "nvmlDeviceGetHandleByIndex({}): {}", i, api->ErrorText(r));
    }
    devices.push_back(dev);
  }
  return std::unique_ptr<GpuMonitor>(std::make_unique<NvmlGpuMonitor>(api, std::move(devices)));
}

Result<std::vector<GpuInfo>> DiscoverNvmlGpus() {
  const NvmlApi* api = COHORT_TRY(LoadNvml());
  nvmlReturn_t r = api->init();
  if (r != kNvmlSuccess) {
    return Errorf(ErrorCode::kUnavailable, "nvmlInit failed (is the NVIDIA driver loaded?): {}",
                  api->ErrorText(r));
  }
  Result<std::vector<GpuInfo>> out = std::vector<GpuInfo>{};
  unsigned count = 0;
  r = api->get_count(&count);
  if (r != kNvmlSuccess) {
    out = Errorf(ErrorCode::kUnavailable, "nvmlDeviceGetCount: {}", api->ErrorText(r));
  }
  for (unsigned i = 0; out && i < count; ++i) {
    auto g = QueryDevice(*api, i);
    if (!g) {
      out = std::unexpected(g.error());
    } else {
      out->push_back(std::move(*g));
    }
  }
  api->shutdown();
  return out;
}

}  // namespace cohort::agent
