#include "agent/gpu/sharing.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "common/log.h"
#include "common/subprocess.h"

namespace cohort::agent {

namespace {

// True if `name` is an executable file, or one on PATH when it has no '/'.
bool Executable(const std::string& name) {
  if (name.empty()) return false;
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    const size_t colon = std::min(rest.find(':'), rest.size());
    const std::string dir(rest.substr(0, colon));
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
    rest.remove_prefix(std::min(colon + 1, rest.size()));
  }
  return false;
}

}  // namespace

GpuSharing::GpuSharing(const std::vector<GpuInfo>& gpus, std::string work_dir, std::string mps_control)
    : gpus_(gpus), work_dir_(std::move(work_dir)), mps_control_(std::move(mps_control)) {
  const bool real = !gpus_.empty() && std::none_of(gpus_.begin(), gpus_.end(), [](const GpuInfo& g) { return g.simulated; });
  mode_ = real && Executable(mps_control_) ? "mps" : "time-slicing";
}

GpuSharing::~GpuSharing() {
  for (int gpu : std::set<int>(daemons_)) Quit(gpu);
}

std::string GpuSharing::Dir(int gpu) const { return fmt::format("{}/mps/gpu{}", work_dir_, gpu); }

Result<void> GpuSharing::Prepare(const std::string& task, int gpu, std::map<std::string, std::string>& env) {
  if (!env.contains("COHORT_GPU_SHARE")) return {};
  env["COHORT_GPU_SHARING"] = mode_;
  SharingRecord rec{task, gpu, mode_, env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]};
  if (mode_ == "mps") {
    const auto it = std::find_if(gpus_.begin(), gpus_.end(), [&](const GpuInfo& g) { return g.index == gpu; });
    if (it == gpus_.end()) return Errorf(ErrorCode::kInvalidArgument, "no GPU {} on this node to share", gpu);
    const std::string dir = Dir(gpu);
    std::map<std::string, std::string> daemon_env = {{"CUDA_VISIBLE_DEVICES", it->uuid},
                                                     {"CUDA_MPS_PIPE_DIRECTORY", dir + "/pipe"},
                                                     {"CUDA_MPS_LOG_DIRECTORY", dir + "/log"}};
    if (!daemons_.contains(gpu)) {
      std::error_code ec;
      std::filesystem::create_directories(dir + "/pipe", ec);
      std::filesystem::create_directories(dir + "/log", ec);
      SpawnOptions so;
      so.argv = {mps_control_, "-d"};
      so.env = daemon_env;
      auto p = Subprocess::Spawn(so);
      if (!p) return std::unexpected(p.error());
      auto st = p->WaitFor(Millis(10'000));  // -d forks the daemon and returns
      if (!st || !st->Success()) {
        return Errorf(ErrorCode::kUnavailable, "cannot start the MPS control daemon for GPU {}: {}", gpu,
                      st ? st->ToString() : st.error().message);
      }
      daemons_.insert(gpu);
      LOG_INFO("started the MPS control daemon for GPU {} ({})", gpu, dir);
    }
    // The task is an MPS client of that daemon; its device is the only one it sees.
    env["CUDA_MPS_PIPE_DIRECTORY"] = daemon_env["CUDA_MPS_PIPE_DIRECTORY"];
    env["CUDA_MPS_LOG_DIRECTORY"] = daemon_env["CUDA_MPS_LOG_DIRECTORY"];
  }
  records_.push_back(std::move(rec));
  return {};
}

void GpuSharing::Reconcile(const std::set<int>& shared) {
  for (int gpu : std::set<int>(daemons_)) {
    if (!shared.contains(gpu)) Quit(gpu);
  }
}

void GpuSharing::Quit(int gpu) {
  const std::string dir = Dir(gpu);
  SpawnOptions so;
  so.argv = {"/bin/sh", "-c", "echo quit | \"$0\"", mps_control_};
  so.env = {{"CUDA_MPS_PIPE_DIRECTORY", dir + "/pipe"}, {"CUDA_MPS_LOG_DIRECTORY", dir + "/log"}};
  if (auto p = Subprocess::Spawn(so); p) {
    if (auto st = p->WaitFor(Millis(10'000)); !st) {
      p->Signal(SIGKILL);
      (void)p->Wait();
    }
  }
  daemons_.erase(gpu);
  LOG_INFO("quit the MPS control daemon for GPU {}", gpu);
}

}  // namespace cohort::agent
