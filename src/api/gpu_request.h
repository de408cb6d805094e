// GPU requests: the one parser of what a job asks of GPUs (issues 18 and 19).
//
// A GPU request names a kind of device and a count per node: `4` (any four whole GPUs),
// `h100:4` (four whole GPUs whose model is H100) or `1g.10gb:2` (two MIG instances of
// that profile). The same text is `-G/--gpus` on `cohort submit`/`run` and `gpus:` in a
// spec. A model is matched on its short form (GpuShortName: "NVIDIA H100 80GB HBM3" is
// "h100"), case-insensitively; a MIG profile on NVML's profile name ("1g.10gb").
//
// Fractions of one GPU: `gpus_per_task: 0.5` (quarters: 0.25, 0.5 or 0.75; a whole number
// is whole GPUs) and `gpu_memory: 20GiB` (whole MiB; units B, KiB, MiB, GiB, TiB, or a
// plain byte count). Shares are counted in integer units, kGpuShareUnits per GPU, so that
// the scheduler's accounting has no float drift. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cohort::api {

// One GPU is this many share units; a fractional task holds 1..kGpuShareUnits-1 of them.
inline constexpr int kGpuShareUnits = 4;
// The largest gpu_memory a task may ask for (16 TiB, in MiB).
inline constexpr int64_t kMaxGpuMemoryMib = 16LL * 1024 * 1024;

struct GpuRequest {
  std::string type;  // "" (any model), a model short name ("h100") or a MIG profile ("1g.10gb")
  int count = 0;     // devices per node
  bool mig() const;
};

// Parses "[TYPE:]COUNT". `field` names the input in errors (e.g. "gpus", "--gpus").
// kInvalidArgument for an empty or malformed type, a count that is not a whole number in
// 0..max_count, or a type with a count of 0.
Result<GpuRequest> ParseGpuRequest(std::string_view text, std::string_view field, int max_count);

// "h100:4", "1g.10gb:2", or "4" when the type is empty.
std::string GpuRequestText(const GpuRequest& r);

// True for a MIG profile name: "<n>g.<m>gb", optionally followed by "+me" or similar
// "+<attribute>" suffixes, lowercase.
bool IsMigProfile(std::string_view type);

// A device type as a request names it: lowercase letters, digits, '.', '+' and '-', 1-32
// characters, starting with a letter or digit. kInvalidArgument naming `field` otherwise.
Result<std::string> NormalizeGpuType(std::string_view text, std::string_view field);

// The short, lowercase model name of an NVML device name, the form GPU types are matched
// on: "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-40GB" -> "a100", "Tesla
// V100-SXM2-16GB" -> "v100", "NVIDIA GeForce RTX 4090" -> "rtx4090", "NVIDIA L40S" ->
// "l40s". Vendor words (NVIDIA, Tesla, GeForce, Quadro) are dropped, then the first word
// up to a space or '-' is kept ("RTX"/"A" prefixes joined with the number after them).
std::string GpuShortName(std::string_view nvml_name);

// Parses gpus_per_task: a positive multiple of 1/kGpuShareUnits below 1 ("0.25", "0.5",
// "0.75"), or a whole number >= 1. Returns share units (1..kGpuShareUnits-1) for a
// fraction and kGpuShareUnits * n for n whole GPUs. kInvalidArgument naming `field`, with
// the value and the allowed ones, otherwise ("1.5", "0.3", "0", "-1").
Result<int64_t> ParseGpusPerTask(double value, std::string_view field);
// The same from text ("0.5").
Result<int64_t> ParseGpusPerTaskText(std::string_view text, std::string_view field);
// "0.25", "0.5", "0.75", "2" for share units.
std::string GpuShareText(int64_t units);

// Parses a memory size into MiB: "20GiB", "512MiB", "20G" (binary units; B, K/KiB, M/MiB,
// G/GiB, T/TiB, case-insensitive) or a plain byte count. Must be a whole number of MiB
// (rounded up from bytes), at least 1 MiB and at most kMaxGpuMemoryMib.
Result<int64_t> ParseMemoryMib(std::string_view text, std::string_view field);
// "20GiB" when a whole number of GiB, else "1536MiB".
std::string MemoryMibText(int64_t mib);

}  // namespace cohort::api
