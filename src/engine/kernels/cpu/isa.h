// The vector instruction set a CPU kernel with hand-written variants runs with
// (invariant_matmul.cc, kv_attention.cc): the best this CPU has, or one a test names to
// compare the variants bit for bit. Any thread.
#pragma once

#include <optional>
#include <string_view>

namespace cohort::engine::cpu {

enum class Isa { kAvx512, kAvx2, kScalar };

// AVX-512F, else AVX2 with FMA, else scalar.
inline Isa BestIsa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return best;
}

// "avx512", "avx2" or "scalar" when this CPU can run it; nullopt otherwise.
inline std::optional<Isa> NamedIsa(std::string_view name) {
  if (name == "avx512" && BestIsa() == Isa::kAvx512) return Isa::kAvx512;
  if (name == "avx2" && BestIsa() != Isa::kScalar) return Isa::kAvx2;
  if (name == "scalar") return Isa::kScalar;
  return std::nullopt;
}

}  // namespace cohort::engine::cpu
