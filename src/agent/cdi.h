// The CDI spec the agent writes for its real GPUs, so that container tasks (container.h)
// get exactly their GPUs: `podman run --device cohort.dev/gpu=0`.
//
// CDI (the Container Device Interface, github.com/cncf-tags/container-device-interface)
// is how Podman, Docker and containerd inject devices: a JSON file in a spec directory
// (/etc/cdi or /var/run/cdi by default) names devices of one kind and the edits each
// needs. Ours is kind `cohort.dev/gpu` with one device per GPU, named by its index (what
// CUDA_VISIBLE_DEVICES names on the node), holding its device node (/dev/nvidiaN, N the
// driver's minor number, read from /proc/driver/nvidia/gpus/*/information by UUID), and
// edits common to all of them: the driver's control nodes (/dev/nvidiactl, nvidia-uvm,
// nvidia-uvm-tools, nvidia-modeset) and the user-space driver libraries and tools
// (libcuda, libnvidia-ml, ..., nvidia-smi) bind-mounted read-only at their host paths.
// Simulated GPUs have no spec: they pass only the environment.
//
// Pure functions over a root directory (tests point it at a fake tree); WriteCdiSpec
// writes atomically. Any thread.
#pragma once

#include <string>
#include <vector>

#include "agent/gpu/gpu.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::agent {

inline constexpr char kCdiKind[] = "cohort.dev/gpu";
inline constexpr char kCdiSpecFile[] = "cohort-gpu.json";

// What of the driver the host has, as paths under `root` ("/" on a node).
struct CdiHostFiles {
  std::vector<std::string> control_nodes;   // /dev/nvidiactl, ...
  std::vector<std::string> libraries;       // /usr/lib/x86_64-linux-gnu/libcuda.so.1, ...
  std::vector<std::string> binaries;        // /usr/bin/nvidia-smi
};

// Looks for the control nodes, libraries (in the usual library directories) and tools
// under `root`; what is missing is left out.
CdiHostFiles DiscoverCdiHostFiles(const std::string& root = "/");

// The driver's minor number of the GPU with `uuid` (/proc/driver/nvidia/gpus/*/information
// under `root`). kNotFound when no entry names it.
Result<int> NvidiaMinorNumber(const std::string& uuid, const std::string& root = "/");

// The spec for `gpus` (real ones; simulated ones are skipped). kNotFound naming the GPU
// when one has no minor number under `root`. Paths in the spec are host paths (without
// `root`).
Result<json> MakeCdiSpec(const std::vector<GpuInfo>& gpus, const CdiHostFiles& host, const std::string& root = "/");

// The --device values for a task's GPUs: "cohort.dev/gpu=0", ...
std::vector<std::string> CdiDeviceNames(const std::vector<int>& gpus);

// Writes `spec` to DIR/cohort-gpu.json atomically (a temporary file renamed over it),
// creating DIR. kUnavailable naming the path on failure.
Result<std::string> WriteCdiSpec(const std::string& dir, const json& spec);

}  // namespace cohort::agent
