// Peak dense throughput of the device a rank trains on, for MFU (model FLOPs
// utilisation = achieved model FLOP/s ÷ peak).
//
// GPUs come from a table of dense (no sparsity) peaks by product name; a CPU's float32
// peak is computed from its cores in use, its clock (from /proc/cpuinfo or sysfs) and
// its vector width (AVX-512: 64, AVX2 with FMA: 32, otherwise 8 FLOP per cycle and
// core). Pure functions apart from reading /proc and /sys.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cohort::engine {

struct DevicePeak {
  std::string device;     // "AMD EPYC 7B13 (2 threads, AVX2+FMA, 2.45 GHz)"
  double flops = 0;       // FLOP/s
};

// Dense bf16 peak of a GPU by its CUDA/NVML name ("NVIDIA H100 80GB HBM3"), or nullopt
// when it is not in the table.
std::optional<DevicePeak> GpuPeakBf16(std::string_view name);

// float32 peak of `threads` cores of this machine's CPU.
DevicePeak CpuPeakFp32(int threads);

}  // namespace cohort::engine
