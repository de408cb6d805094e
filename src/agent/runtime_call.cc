#include "agent/runtime_call.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/subprocess.h"

namespace cohort::agent {

Result<std::string> RunRuntimeCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                                      Millis timeout) {
  std::error_code ec;
  std::filesystem::create_directories(scratch_dir, ec);
  static std::atomic<uint64_t> seq{0};
  const std::string path = fmt::format("{}/runtime-{}-{}.out", scratch_dir, getpid(), seq++);
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = path;
  o.stderr_path = path + ".err";
  auto p = Subprocess::Spawn(o);
  if (!p) {  // not installed here
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + ".err", ec);
    return Errorf(ErrorCode::kNotFound, "{}", p.error().message);
  }
  auto st = p->WaitFor(timeout);
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string out = read(path), err = read(path + ".err");
  std::filesystem::remove(path, ec);
  std::filesystem::remove(path + ".err", ec);
  if (!st) {
    p->Signal(SIGKILL);
    (void)p->Wait();
    return Errorf(ErrorCode::kUnavailable, "`{}` did not finish within {}", fmt::join(argv, " "), FormatDuration(timeout.count()));
  }
  if (!st->Success()) {
    std::string line = err.substr(0, err.find('\n'));
    return Errorf(ErrorCode::kUnavailable, "`{}` failed ({}): {}", fmt::join(argv, " "), st->ToString(),
                  line.empty() ? "no message" : line.substr(0, 500));
  }
  return out;
}

}  // namespace cohort::agent
