// A fake libnvidia-ml for the NVML tests (nvml_test.cc), loaded through COHORT_NVML_LIBRARY:
// the NVML symbols the agent asks for, answered from the table below, so that MIG and
// topology discovery and per-process memory run without a GPU. Only what the table
// needs; every other symbol is absent (the agent treats those as optional).
//
// The table: NVML GPU 0 in MIG mode with two instances (one named with its profile, one
// whose profile comes from its attributes) and an empty slot; GPUs 1 and 2 joined by a
// direct NVLink, GPUs 3 and 4 through an NVSwitch; GPUs 1-2 under one PCIe switch, 3-4
// under a chain of two, GPU 0 apart. The calling process holds 5 GiB on GPU 1 and 2 GiB
// on the first MIG instance; a pid that is no process holds 1 GiB on GPU 1.
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace {

struct Pci {
  unsigned domain, bus, device;
};

struct Dev {
  const char* name;
  const char* uuid;
  unsigned long long memory;
  Pci pci;
  bool mig;
  int links[4];          // remote PCI bus per link (0: inactive)
  unsigned slices;       // MIG attributes: GPU instance slices
  unsigned long long memory_mb;
};

constexpr unsigned long long kGiB = 1ull << 30;

Dev gpus[5] = {
    {"NVIDIA A100-SXM4-80GB", "GPU-fake-0", 80 * kGiB, {0, 0x10, 0}, true, {0, 0, 0, 0}, 0, 0},
    {"NVIDIA H100 80GB HBM3", "GPU-fake-1", 80 * kGiB, {0, 0x11, 0}, false, {0x12, 0, 0, 0}, 0, 0},
    {"NVIDIA H100 80GB HBM3", "GPU-fake-2", 80 * kGiB, {0, 0x12, 0}, false, {0x11, 0, 0, 0}, 0, 0},
    {"NVIDIA H100 80GB HBM3", "GPU-fake-3", 80 * kGiB, {0, 0x13, 0}, false, {0, 0xa0, 0, 0}, 0, 0},
    {"NVIDIA H100 80GB HBM3", "GPU-fake-4", 80 * kGiB, {0, 0x14, 0}, false, {0, 0, 0xa0, 0}, 0, 0},
};
Dev mig[3] = {
    {"NVIDIA A100-SXM4-80GB MIG 1g.10gb", "MIG-fake-0-0", 10 * kGiB, {}, false, {}, 1, 9856},
    {nullptr, nullptr, 0, {}, false, {}, 0, 0},  // an empty slot
    {"NVIDIA A100-SXM4-80GB MIG", "MIG-fake-0-2", 40 * kGiB, {}, false, {}, 3, 40960},
};

bool IsGpu(const Dev* d) { return d >= gpus && d < gpus + 5; }
Dev* Of(void* handle) { return static_cast<Dev*>(handle); }

struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_sub_system_id;
  char bus_id[32];
};
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance_id, compute_instance_id;
};
struct Attributes {
  unsigned mp, ce, dec, enc, jpeg, ofa, gi_slices, ci_slices;
  unsigned long long memory_mb;
};

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6, kInsufficientSize = 7;

int Copy(char* out, unsigned len, const char* s) {
  if (std::strlen(s) + 1 > len) return kInsufficientSize;
  std::strcpy(out, s);
  return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int) { return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 5;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** out) {
  if (i >= 5) return kInvalidArgument;
  *out = &gpus[i];
  return kSuccess;
}
int nvmlDeviceGetName(void* d, char* out, unsigned len) { return Copy(out, len, Of(d)->name); }
int nvmlDeviceGetUUID(void* d, char* out, unsigned len) { return Copy(out, len, Of(d)->uuid); }
int nvmlDeviceGetMemoryInfo(void* d, Memory* m) {
  *m = {Of(d)->memory, Of(d)->memory, 0};
  return kSuccess;
}
int nvmlDeviceGetMigMode(void* d, unsigned* current, unsigned* pending) {
  if (!IsGpu(Of(d))) return kNotSupported;
  *current = *pending = Of(d)->mig ? 1 : 0;
  return kSuccess;
}
int nvmlDeviceGetMaxMigDeviceCount(void* d, unsigned* n) {
  *n = Of(d)->mig ? 3 : 0;
  return kSuccess;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void* d, unsigned i, void** out) {
  if (!Of(d)->mig || i >= 3) return kInvalidArgument;
  if (!mig[i].uuid) return kNotFound;
  *out = &mig[i];
  return kSuccess;
}
int nvmlDeviceGetAttributes_v2(void* d, Attributes* a) {
  if (IsGpu(Of(d))) return kNotSupported;
  *a = {};
  a->gi_slices = a->ci_slices = Of(d)->slices;
  a->memory_mb = Of(d)->memory_mb;
  return kSuccess;
}
int nvmlDeviceGetPciInfo_v3(void* d, PciInfo* p) {
  if (!IsGpu(Of(d))) return kNotSupported;
  *p = {};
  p->domain = Of(d)->pci.domain;
  p->bus = Of(d)->pci.bus;
  p->device = Of(d)->pci.device;
  return kSuccess;
}
int nvmlDeviceGetNvLinkState(void* d, unsigned link, int* active) {
  if (!IsGpu(Of(d)) || link >= 4) return kInvalidArgument;  // this "GPU" has 4 links
  *active = Of(d)->links[link] != 0;
  return kSuccess;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* d, unsigned link, PciInfo* p) {
  if (!IsGpu(Of(d)) || link >= 4 || !Of(d)->links[link]) return kInvalidArgument;
  *p = {};
  p->bus = static_cast<unsigned>(Of(d)->links[link]);
  return kSuccess;
}
int nvmlDeviceGetTopologyCommonAncestor(void* a, void* b, int* level) {
  const long i = Of(a) - gpus, j = Of(b) - gpus;
  auto pair = [&](long x, long y) { return (i == x && j == y) || (i == y && j == x); };
  *level = pair(1, 2) ? 10 : pair(3, 4) ? 20 : 30;  // SINGLE, MULTIPLE, HOSTBRIDGE
  return kSuccess;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, ProcessInfo* out) {
  ProcessInfo mine[2];
  unsigned n = 0;
  if (Of(d) == &gpus[1]) {
    mine[n++] = {static_cast<unsigned>(getpid()), 5 * kGiB, 0, 0};
    mine[n++] = {0x7ffffff0u, 1 * kGiB, 0, 0};
  } else if (Of(d) == &mig[0]) {
    mine[n++] = {static_cast<unsigned>(getpid()), 2 * kGiB, 1, 0};
  }
  if (*count < n) {
    *count = n;
    return kInsufficientSize;
  }
  for (unsigned k = 0; k < n; ++k) out[k] = mine[k];
  *count = n;
  return kSuccess;
}

}  // extern "C"
