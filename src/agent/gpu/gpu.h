// GPU discovery: what GPUs this node has, as the agent reports them to the head.
//
// Two sources share one data model. DiscoverNvmlGpus asks the NVIDIA driver through NVML,
// which is loaded with dlopen("libnvidia-ml.so.1") at run time (never linked), so one
// cohort binary runs on machines with and without NVIDIA drivers. SimulatedGpus makes up
// GPUs for tests and demos on machines without any. Both are plain functions with no
// shared state; NVML itself is thread-safe, and DiscoverNvmlGpus initialises and shuts it
// down on each call, so any thread may call either at any time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::agent {

struct GpuInfo {
  int index = 0;             // NVML index; what CUDA_VISIBLE_DEVICES names on this node
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-8d9f0c1e-...": stable across reboots
  int64_t memory_bytes = 0;  // total device memory
  bool simulated = false;
  // Issue 18 (api::Gpu has the same fields): a MIG instance's profile and parent GPU, and
  // the GPU's NVLink island and PCIe switch (-1 unknown).
  std::string mig_profile;
  int mig_parent = -1;
  int nvlink_island = -1;
  int pcie_switch = -1;
};

// The GPUs the NVIDIA driver sees, in node order: each whole GPU in NVML index order with
// its NVLink island (GPUs joined by active NVLinks, directly or through NVSwitches: from
// nvmlDeviceGetNvLinkState and the links' remote PCI addresses) and its PCIe switch (GPUs
// whose nvmlDeviceGetTopologyCommonAncestor is INTERNAL, SINGLE or MULTIPLE); a GPU in MIG
// mode is replaced by its instances (profile from the instance's name or attributes,
// "MIG-..." uuid, its own memory, mig_parent the GPU's NVML index), so node indices are
// NVML's only on a node without MIG. -1 where NVML cannot say. The library is
// libnvidia-ml.so.1, or the path in COHORT_NVML_LIBRARY (read once per process). Returns
// kUnavailable when the NVML library cannot be loaded or the driver does not answer (the
// message says which), and kInternal when a per-device query fails. An empty vector means
// a driver with no GPUs.
Result<std::vector<GpuInfo>> DiscoverNvmlGpus();

// `n` simulated GPUs: name "Cohort Simulated GPU 80GB", 80 GiB each, and UUIDs in NVML's
// format ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") derived from `node_name` and the
// index, so they are the same on every run and differ between nodes and indices.
std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name);

// How simulated GPUs present themselves beyond their count (agent flags
// --simulated-gpu-model, --simulated-nvlink-island, --simulated-pcie-switch,
// --simulated-mig), so that typed, MIG and topology-aware scheduling is tested without GPUs.
struct SimulatedLayout {
  std::string model;            // the NVML-style name ("NVIDIA H100 80GB HBM3"); "" the default
  int nvlink_island = 0;        // GPUs per NVLink island, consecutive indices; 0 none
  int pcie_switch = 0;          // GPUs per PCIe switch, consecutive indices; 0 none
  // GPU 0 in MIG mode, carved into these instances (profile, count), reported instead of it.
  std::vector<std::pair<std::string, int>> mig;
};

// Parses --simulated-mig "1g.10gb:3,3g.40gb:1". kInvalidArgument naming the flag for a bad
// profile or count, or instances whose memory exceeds the GPU's 80 GiB.
Result<std::vector<std::pair<std::string, int>>> ParseSimulatedMig(std::string_view text);

// `n` simulated GPUs laid out as `layout` says, each with the memory its model's name states
// ("NVIDIA A100-SXM4-40GB": 40 GiB; 80 GiB when the name states none). Whole GPUs keep their index's uuid; a MIG
// GPU 0 becomes its instances (indices 0..k-1, uuids "MIG-..." derived like the GPUs'),
// and the other GPUs follow at indices k, k+1, ...; every device is then named by uuid.
std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name, const SimulatedLayout& layout);

// ---- Telemetry and health ----
//
// A GpuMonitor samples every GPU of the node: readings (std::nullopt when the source
// cannot give one, e.g. an NVML without that symbol, or a query the device refuses) and a
// health-event counter. Health events are critical XIDs (except the ones applications
// cause: 13, 31, 43, 45, 68), new uncorrectable ECC errors since the monitor started, and
// a GPU the driver reports lost. The agent sends the counter and the latest event's text
// in every heartbeat; the head marks the GPU unhealthy when the counter grows.
//
// Threads: Sample is called by one thread at a time (the agent's sampler thread);
// InjectXid and RecordHealthEvent may be called from any thread concurrently with it.

struct GpuReading {
  int index = 0;
  std::optional<double> utilization;          // 0..1
  std::optional<int64_t> memory_used_bytes;
  std::optional<int64_t> memory_total_bytes;
  std::optional<double> temperature_celsius;
  std::optional<double> power_watts;
  std::optional<double> sm_clock_hz;
  int64_t health_events = 0;  // since the monitor started
  std::string health_event;   // the latest: "XID 79 (GPU has fallen off the bus)"
};

// One process's memory on one GPU (issue 18): NVML's compute processes, or what a task
// registered with simulated GPUs. `gpu` is the device's node index (GpuInfo::index).
struct GpuProcess {
  int gpu = 0;
  int pid = 0;  // in the agent's pid namespace
  int64_t memory_bytes = 0;
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  // One reading per GPU in index order. `busy[i]` says whether a running task holds GPU
  // i (used by the simulated model; NVML measures instead); `now` is the sample time.
  virtual std::vector<GpuReading> Sample(const std::vector<bool>& busy, SteadyTime now) = 0;
  // Fault injection: records a health event on GPU `index` as if the driver had reported
  // XID `xid`. Simulated GPUs only: kFailedPrecondition on real ones, kInvalidArgument
  // for an index the node does not have.
  virtual Result<void> InjectXid(int index, int xid) {
    return MakeError(ErrorCode::kFailedPrecondition, "fault injection needs simulated GPUs (--simulated-gpus)");
  }
  // Records a health event found outside the driver (a failed health check) on GPU
  // `index`; an index the node does not have is ignored.
  virtual void RecordHealthEvent(int index, std::string what) = 0;
  // The processes that hold memory on each GPU now, GPU by GPU; empty when the source
  // cannot say (an NVML without the query). Same thread rules as Sample.
  virtual std::vector<GpuProcess> Processes() = 0;
};

// "XID 79 (GPU has fallen off the bus)"; the description is omitted for unknown codes.
std::string DescribeXid(int xid);
// XIDs that applications cause (13, 31, 43, 45, 68): logged, but not a GPU health event.
bool IsApplicationXid(int xid);

// The simulated model, a pure function of the busy flags over time: each GPU's load
// moves toward 1 while a task holds it and toward 0 when idle, exponentially with a time
// constant of 1 s. From load L: utilization 0.95 L, memory used 0.5 GiB + 60 GiB x L of
// 80 GiB (plus what processes registered, below; at most the total), temperature
// 35 + 40 L °C, power 70 + 630 L W, SM clock 345 MHz + 1635 MHz x L. The first sample
// starts from load 0.
//
// Simulated process memory: with a non-empty `process_dir`, a process "uses" device
// memory by writing the file `process_dir/PID` (its own pid) with one line per device,
// "DEVICE BYTES", where DEVICE is the GPU's node index or uuid (what CUDA_VISIBLE_DEVICES
// names, so a task may write "$CUDA_VISIBLE_DEVICES 25769803776"). Processes reads every
// such file of a live process (GPU by GPU, like NVML), and removes the files of processes
// that have exited; unreadable lines and unknown devices are skipped. The agent gives
// every task the directory as COHORT_SIMULATED_GPU_MEMORY_DIR.
std::unique_ptr<GpuMonitor> MakeSimulatedGpuMonitor(const std::vector<GpuInfo>& gpus, std::string process_dir = "");

// Telemetry through NVML for the GPUs DiscoverNvmlGpus found; every query symbol is
// optional (a missing one reads as unknown). Registers for XID events where the driver
// supports them. Processes asks nvmlDeviceGetComputeRunningProcesses (_v3, else _v2, else
// the first version). kUnavailable when NVML cannot be loaded or initialised.
Result<std::unique_ptr<GpuMonitor>> OpenNvmlGpuMonitor();

}  // namespace cohort::agent
