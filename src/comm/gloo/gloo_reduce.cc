#include "comm/gloo/gloo_reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

namespace cohort::comm::gloo_backend {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00 | ((ax >> 13) & 0x3ff));  // NaN
  if (ax >= 0x47800000) return static_cast<uint16_t>(sign | 0x7c00);  // >= 2^16 (or inf): inf
  if (ax >= 0x38800000) {  // normal half: float exponent >= -14
    const uint32_t mant = ax & 0x7fffff;
    uint32_t h = (((ax >> 23) - 112) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry may reach inf: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (ax <= 0x33000000) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to (signed) zero
  // Half subnormal: units of 2^-24.
  const uint32_t mant = (ax & 0x7fffff) | 0x800000;
  const int shift = 126 - static_cast<int>(ax >> 23);  // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1))) ++h;  // may become the smallest normal
  return static_cast<uint16_t>(sign | h);
}

float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

// A codec says how an element is stored and in which type it is combined.
template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static Compute Load(Storage v) { return v; }
  static Storage Store(Compute v) { return v; }
};
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store(float v) { return FloatToHalf(v); }
};
struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t v) { return BFloat16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToBFloat16(v); }
};

template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {  // wrap instead of undefined behaviour
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

struct SumOp {
  template <typename T>
  static T Apply(T a, T b) { return Add(a, b); }
};
struct MaxOp {
  template <typename T>
  static T Apply(T a, T b) { return std::max(a, b); }
};
struct MinOp {
  template <typename T>
  static T Apply(T a, T b) { return std::min(a, b); }
};

template <typename Codec, typename Op>
void Kernel(void* out, const void* a, const void* b, size_t n) {
  using S = typename Codec::Storage;
  auto* o = static_cast<S*>(out);
  const auto* x = static_cast<const S*>(a);
  const auto* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = Codec::Store(Op::Apply(Codec::Load(x[i]), Codec::Load(y[i])));
  }
}

template <typename Codec>
ReduceFn ForOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return &Kernel<Codec, SumOp>;
    case ReduceOp::kMax: return &Kernel<Codec, MaxOp>;
    case ReduceOp::kMin: return &Kernel<Codec, MinOp>;
  }
  return nullptr;
}

template <typename Codec>
void Divide(void* buf, size_t count, int divisor) {
  auto* p = static_cast<typename Codec::Storage*>(buf);
  using C = typename Codec::Compute;
  const C d = static_cast<C>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = Codec::Store(Codec::Load(p[i]) / d);
}

}  // namespace

ReduceFn ReduceFunction(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32: return ForOp<Plain<float>>(op);
    case DataType::kBFloat16: return ForOp<BFloat16>(op);
    case DataType::kFloat16: return ForOp<Half>(op);
    case DataType::kInt32: return ForOp<Plain<int32_t>>(op);
    case DataType::kInt64: return ForOp<Plain<int64_t>>(op);
  }
  return nullptr;
}

void DivideInPlace(void* buf, size_t count, DataType type, int divisor) {
  switch (type) {
    case DataType::kFloat32: return Divide<Plain<float>>(buf, count, divisor);
    case DataType::kBFloat16: return Divide<BFloat16>(buf, count, divisor);
    case DataType::kFloat16: return Divide<Half>(buf, count, divisor);
    case DataType::kInt32: return Divide<Plain<int32_t>>(buf, count, divisor);
    case DataType::kInt64: return Divide<Plain<int64_t>>(buf, count, divisor);
  }
}

}  // namespace cohort::comm::gloo_backend
