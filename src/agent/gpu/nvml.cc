// NVML through dlopen: the few declarations below mirror nvml.h (stable C ABI), so the
// build needs neither the header nor the library.
#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

#include "agent/gpu/gpu.h"

namespace cohort::agent {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
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

}  // namespace

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
