#include <cstdint>

#include <fmt/format.h>

#include "agent/gpu/gpu.h"

namespace cohort::agent {
namespace {

constexpr char kSimulatedName[] = "Cohort Simulated GPU 80GB";
constexpr int64_t kSimulatedMemoryBytes = int64_t{80} << 30;

// 64-bit FNV-1a: stable across platforms and compilers, unlike std::hash.
uint64_t Fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Finishes a hash so that nearby inputs spread over all bits (splitmix64's finaliser).
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

std::string SimulatedUuid(std::string_view node_name, int index) {
  std::string key = fmt::format("cohort-simulated-gpu/{}/{}", node_name, index);
  uint64_t hi = Mix(Fnv1a(key));
  uint64_t lo = Mix(Fnv1a(key, hi));
  return fmt::format("GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff,
                     hi & 0xffff, lo >> 48, lo & 0xffffffffffffull);
}

}  // namespace

std::vector<GpuInfo> SimulatedGpus(int n, std::string_view node_name) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = kSimulatedName;
    g.uuid = SimulatedUuid(node_name, i);
    g.memory_bytes = kSimulatedMemoryBytes;
    g.simulated = true;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace cohort::agent
