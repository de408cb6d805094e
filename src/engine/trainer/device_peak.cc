#include "engine/trainer/device_peak.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace cohort::engine {

std::optional<DevicePeak> GpuPeakBf16(std::string_view name) {
  // Dense bf16 tensor-core peaks from NVIDIA's data sheets (SXM parts unless named: the
  // data sheets print twice these, "with sparsity"). The first row whose text the name
  // contains wins, so a specific part ("H200 NVL", "GH200") comes before the general one
  // ("H200"). H100 SXM and H200 SXM share the GH100 chip and clocks: 989.4 TFLOP/s.
  struct Row {
    std::string_view match;
    double tflops;
  };
  static constexpr Row kTable[] = {
      {"GH200", 989.4},    {"H200 NVL", 835.5}, {"H200", 989.4},    {"H100 PCIe", 756.5},
      {"H100 NVL", 835.5}, {"H100", 989.4},     {"B200", 2250.0},   {"A100", 312.0},
      {"A800", 312.0},     {"L40S", 362.05},    {"A10G", 70.0},     {"A10", 125.0},
      {"L4", 121.0},       {"RTX 4090", 165.2}, {"RTX 3090", 71.0},
  };
  for (const Row& r : kTable) {
    if (name.find(r.match) != std::string_view::npos) {
      return DevicePeak{std::string(name), r.tflops * 1e12};
    }
  }
  return std::nullopt;
}

DevicePeak CpuPeakFp32(int threads) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "CPU", flags;
  double mhz = 0;
  while (std::getline(in, line)) {
    auto value = [&] {
      size_t p = line.find(':');
      return p == std::string::npos ? std::string() : line.substr(p + 2);
    };
    if (line.starts_with("model name") && model == "CPU") model = value();
    if (line.starts_with("flags") && flags.empty()) flags = " " + value() + " ";
    if (line.starts_with("cpu MHz") && mhz == 0) mhz = std::atof(value().c_str());
  }
  // The nominal maximum, when the kernel exposes it, is a better peak than the current clock.
  if (std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); f) {
    double khz = 0;
    if (f >> khz && khz > 0) mhz = khz / 1000.0;
  }
  if (mhz <= 0) mhz = 2000;  // unknown clock: assume 2 GHz rather than report no MFU
  int per_cycle = 8;
  std::string isa = "SSE";
  if (flags.find(" avx512f ") != std::string::npos) {
    per_cycle = 64, isa = "AVX-512";
  } else if (flags.find(" avx2 ") != std::string::npos && flags.find(" fma ") != std::string::npos) {
    per_cycle = 32, isa = "AVX2+FMA";
  }
  DevicePeak p;
  p.flops = threads * mhz * 1e6 * per_cycle;
  p.device = fmt::format("{} ({} threads, {}, {:.2f} GHz)", model, threads, isa, mhz / 1000);
  return p;
}

}  // namespace cohort::engine
