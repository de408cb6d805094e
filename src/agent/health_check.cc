#include "agent/health_check.h"

#include <signal.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/log.h"
#include "common/subprocess.h"

namespace cohort::agent {

std::vector<std::pair<int, std::string>> HealthCheckEvents(int exit_code, bool timed_out, std::string_view output,
                                                           int num_gpus) {
  std::vector<std::pair<int, std::string>> events;
  if (exit_code == 0 && !timed_out) return events;
  std::string first_line;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t end = output.find('\n', pos);
    if (end == std::string_view::npos) end = output.size();
    std::string_view line = output.substr(pos, end - pos);
    pos = end + 1;
    if (first_line.empty() && !line.empty()) first_line = std::string(line.substr(0, 200));
    if (!line.starts_with("gpu ")) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    int index = -1;
    std::string_view num = line.substr(4, colon - 4);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec != std::errc() || p != num.data() + num.size() || index < 0 || index >= num_gpus) continue;
    std::string_view text = line.substr(colon + 1);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    events.emplace_back(index, "health check: " + std::string(text.substr(0, 500)));
  }
  if (!events.empty()) return events;
  std::string why = timed_out ? std::string("health check timed out") : fmt::format("health check exited {}", exit_code);
  if (!first_line.empty()) why += ": " + first_line;
  for (int i = 0; i < num_gpus; ++i) events.emplace_back(i, why);
  return events;
}

HealthChecker::HealthChecker(std::string command, Millis interval, std::string work_dir, int num_gpus,
                             GpuMonitor* monitor, std::function<void()> wake)
    : command_(std::move(command)),
      interval_(interval),
      output_path_(work_dir + "/health-check.out"),
      num_gpus_(num_gpus),
      monitor_(monitor),
      wake_(std::move(wake)) {
  thread_ = std::thread([this] { Loop(); });
}

HealthChecker::~HealthChecker() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void HealthChecker::Loop() {
  while (true) {
    RunOnce();
    MutexLock lock(mu_);
    if (cv_.WaitFor(mu_, interval_, [this] {
          mu_.AssertHeld();
          return stop_;
        })) {
      return;
    }
  }
}

void HealthChecker::RunOnce() {
  std::error_code ec;
  std::filesystem::remove(output_path_, ec);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command_};
  o.stdout_path = output_path_;
  auto p = Subprocess::Spawn(o);
  if (!p) {
    LOG_WARN("cannot run the health check: {}", p.error().message);
    return;
  }
  const Millis timeout = std::min<Millis>(interval_, Millis(60'000));
  auto deadline = SteadyClock::now() + timeout;
  std::optional<ExitStatus> st;
  while (!(st = p->TryWait())) {
    MutexLock lock(mu_);
    if (stop_ || SteadyClock::now() >= deadline) break;
    cv_.WaitFor(mu_, Millis(20), [this] {
      mu_.AssertHeld();
      return stop_;
    });
  }
  bool timed_out = false;
  if (!st) {
    p->Signal(SIGKILL, /*group=*/true);
    (void)p->Wait();
    MutexLock lock(mu_);
    if (stop_) return;  // the agent is stopping: not a verdict on the GPUs
    timed_out = true;
  }
  std::ifstream in(output_path_);
  std::stringstream out;
  out << in.rdbuf();
  auto events = HealthCheckEvents(st ? st->Code() : 0, timed_out, out.str(), num_gpus_);
  for (auto& [gpu, why] : events) {
    LOG_WARN("GPU {}: {}", gpu, why);
    monitor_->RecordHealthEvent(gpu, why);
  }
  if (!events.empty() && wake_) wake_();
}

}  // namespace cohort::agent
