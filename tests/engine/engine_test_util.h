// Helpers for the engine's model/kernel/optimizer tests: a temporary folder, raw array
// files, running tests/engine/torch_reference.py, and error metrics.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "temp_dir.h"

namespace cohort::engine::testing {

template <typename T>
void WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

template <typename T>
std::vector<T> ReadRaw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Runs `torch_reference.py MODE DIR` with the Python that has torch (COHORT_TORCH_PYTHON,
// overridable by the environment variable of the same name). Fails the test (never skips)
// when Python or torch is missing, with the script's output in the message.
inline ::testing::AssertionResult RunTorchReference(const std::string& mode, const TempDir& dir) {
  std::string python = COHORT_TORCH_PYTHON;
  if (const char* env = std::getenv("COHORT_TORCH_PYTHON"); env != nullptr && *env) python = env;
  SpawnOptions opts;
  opts.argv = {python, COHORT_TORCH_REFERENCE, mode, dir.path()};
  opts.stdout_path = dir.File("torch_reference.log");
  opts.new_process_group = false;
  auto child = Subprocess::Spawn(opts);
  if (!child) {
    return ::testing::AssertionFailure()
           << "cannot run " << python << " (PyTorch reference): " << child.error().ToString();
  }
  auto status = child->WaitFor(Millis(300000));
  if (!status) {
    child->Signal(SIGKILL);
    (void)child->Wait();
    return ::testing::AssertionFailure() << "torch_reference.py timed out";
  }
  if (!status->Success()) {
    return ::testing::AssertionFailure()
           << "torch_reference.py " << mode << " failed (" << status->ToString()
           << "); PyTorch (Debian python3-torch) is required for this test. Output:\n"
           << ReadText(dir.File("torch_reference.log"));
  }
  return ::testing::AssertionSuccess();
}

// Compares a (float32 or float64) against the reference b: the relative error
// ||a − b|| / ||b|| and the worst element |a − b| / (|b| + floor), floor = `floor_frac` ×
// rms(b) (so entries near zero are judged against the tensor's scale).
struct Mismatch {
  double rel = 0.0;      // ||a − b|| / ||b||
  double max_rel = 0.0;  // max_i |a_i − b_i| / (|b_i| + floor)
  size_t worst = 0;
};

template <typename A, typename B>
Mismatch Compare(const A* a, const B* b, size_t n, double floor_frac = 1.0) {
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff2 += d * d;
    ref2 += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  Mismatch m;
  m.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const double floor = ref2 > 0 ? floor_frac * std::sqrt(ref2 / n) : 1e-30;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])) /
                     (std::abs(static_cast<double>(b[i])) + floor);
    if (e > m.max_rel) {
      m.max_rel = e;
      m.worst = i;
    }
  }
  return m;
}

}  // namespace cohort::engine::testing
