#include "agent/cdi.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace cohort::agent {

namespace fs = std::filesystem;

namespace {

// The user-space driver files a CUDA program needs (as nvidia-container-toolkit mounts).
constexpr const char* kLibraries[] = {
    "libcuda.so.1",           "libcuda.so",          "libnvidia-ml.so.1",    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",    "libcudadebugger.so.1", "libnvidia-gpucomp.so", "libnvidia-allocator.so.1",
    "libnvidia-cfg.so.1",     "libnvidia-opencl.so.1",
};
constexpr const char* kLibraryDirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                        "/usr/lib", "/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"};
constexpr const char* kControlNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                         "/dev/nvidia-modeset"};
constexpr const char* kBinaries[] = {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump", "/usr/bin/nvidia-persistenced"};

std::string Under(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (fs::path(root) / fs::path(path).relative_path()).string();
}

bool Exists(const std::string& root, const std::string& path) {
  std::error_code ec;
  return fs::exists(Under(root, path), ec);
}

json Mount(const std::string& path) {
  return json{{"hostPath", path}, {"containerPath", path}, {"options", {"ro", "nosuid", "nodev", "bind"}}};
}

}  // namespace

CdiHostFiles DiscoverCdiHostFiles(const std::string& root) {
  CdiHostFiles out;
  for (const char* node : kControlNodes) {
    if (Exists(root, node)) out.control_nodes.emplace_back(node);
  }
  for (const char* lib : kLibraries) {
    for (const char* dir : kLibraryDirs) {
      const std::string path = std::string(dir) + "/" + lib;
      if (Exists(root, path)) {
        out.libraries.push_back(path);
        break;  // the first directory that has it, as the dynamic linker would
      }
    }
  }
  for (const char* bin : kBinaries) {
    if (Exists(root, bin)) out.binaries.emplace_back(bin);
  }
  return out;
}

Result<int> NvidiaMinorNumber(const std::string& uuid, const std::string& root) {
  const std::string dir = Under(root, "/proc/driver/nvidia/gpus");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream in(it->path() / "information");
    std::string line, found_uuid;
    int minor = -1;
    while (std::getline(in, line)) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon), value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
      if (key == "GPU UUID") found_uuid = value;
      if (key == "Device Minor") minor = std::atoi(value.c_str());
    }
    if (found_uuid == uuid && minor >= 0) return minor;
  }
  return Errorf(ErrorCode::kNotFound, "no entry in {} names GPU {} (its device node is unknown)", dir, uuid);
}

Result<json> MakeCdiSpec(const std::vector<GpuInfo>& gpus, const CdiHostFiles& host, const std::string& root) {
  json devices = json::array();
  for (const GpuInfo& g : gpus) {
    if (g.simulated) continue;
    const int minor = COHORT_TRY(NvidiaMinorNumber(g.uuid, root));
    devices.push_back({{"name", std::to_string(g.index)},
                       {"containerEdits", {{"deviceNodes", {{{"path", fmt::format("/dev/nvidia{}", minor)}}}}}}});
  }
  json nodes = json::array();
  for (const auto& n : host.control_nodes) nodes.push_back({{"path", n}});
  json mounts = json::array();
  for (const auto& l : host.libraries) mounts.push_back(Mount(l));
  for (const auto& b : host.binaries) mounts.push_back(Mount(b));
  json edits = {{"env", {"NVIDIA_VISIBLE_DEVICES=void"}}};  // no other hook adds GPUs
  if (!nodes.empty()) edits["deviceNodes"] = std::move(nodes);
  if (!mounts.empty()) edits["mounts"] = std::move(mounts);
  return json{{"cdiVersion", "0.5.0"}, {"kind", kCdiKind}, {"devices", std::move(devices)},
              {"containerEdits", std::move(edits)}};
}

std::vector<std::string> CdiDeviceNames(const std::vector<int>& gpus) {
  std::vector<std::string> out;
  out.reserve(gpus.size());
  for (int g : gpus) out.push_back(fmt::format("{}={}", kCdiKind, g));
  return out;
}

Result<std::string> WriteCdiSpec(const std::string& dir, const json& spec) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / kCdiSpecFile).string();
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << spec.dump(2) << "\n";
    if (!out.flush()) return Errorf(ErrorCode::kUnavailable, "cannot write the CDI spec {}", tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Errorf(ErrorCode::kUnavailable, "cannot write the CDI spec {}: {}", path, ec.message());
  }
  return path;
}

}  // namespace cohort::agent
