// Helpers shared by the agent tests: temp dirs, files, process liveness, and waiting on
// a condition with a deadline (never a bare sleep).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace cohort::agent::agent_testing {

// A fresh directory under $TMPDIR (or /tmp), removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cohort-agent-test-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    path_ = p ? std::filesystem::canonical(p).string() : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& cond,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Waits for a file written atomically (tmp + rename) and returns its content.
inline std::optional<std::string> WaitForFile(const std::string& path,
                                              std::chrono::milliseconds timeout =
                                                  std::chrono::seconds(20)) {
  if (!WaitFor([&] { return std::filesystem::exists(path); }, timeout)) return std::nullopt;
  return ReadFile(path);
}

inline int ReadPidFile(const std::string& path) {
  auto text = WaitForFile(path);
  return text ? std::atoi(text->c_str()) : 0;
}

// A fake container runtime at `path` that never answers (a hung daemon's client): it
// writes its pid to `pid_file` (tmp + rename) and blocks reading the FIFO `fifo`, made
// here, which nobody writes. False if the FIFO or the script cannot be made.
inline bool WriteHungRuntime(const std::string& path, const std::string& fifo, const std::string& pid_file) {
  if (mkfifo(fifo.c_str(), 0600) != 0) return false;
  std::ofstream(path) << "#!/bin/sh\necho $$ > " << pid_file << ".tmp && mv " << pid_file << ".tmp " << pid_file
                      << "\nexec cat " << fifo << "\n";
  return chmod(path.c_str(), 0755) == 0;
}

// True if `pid` exists and is not a zombie.
inline bool IsAlive(int pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos || rp + 2 >= stat.size()) return false;
  return stat[rp + 2] != 'Z';
}

}  // namespace cohort::agent::agent_testing
