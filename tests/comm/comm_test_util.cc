#include "comm_test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "device_buffer.h"

namespace cohort::comm::commtest {

Result<void> MemStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
  return {};
}

Result<std::string> MemStore::Get(const std::string& key, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return kv_.contains(key); })) {
    return Errorf(ErrorCode::kDeadlineExceeded, "memstore: timed out waiting for key {}", key);
  }
  return kv_[key];
}

Result<void> MemStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all = [&] {
    for (const auto& k : keys) {
      if (!kv_.contains(k)) return false;
    }
    return true;
  };
  if (!cv_.wait_for(lock, timeout, all)) {
    return Errorf(ErrorCode::kDeadlineExceeded, "memstore: timed out waiting for keys");
  }
  return {};
}

Result<int64_t> MemStore::Add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t v = kv_.contains(key) ? std::stoll(kv_[key]) : 0;
  v += delta;
  kv_[key] = std::to_string(v);
  cv_.notify_all();
  return v;
}

namespace {
// Blocks for `timeout` on a condition nobody signals (not a sleep: a bounded wait).
void WaitOut(Millis timeout) {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, timeout, [] { return false; });
}
}  // namespace

Result<std::string> BlackHoleStore::Get(const std::string& key, Millis timeout) {
  WaitOut(timeout);
  return Errorf(ErrorCode::kDeadlineExceeded, "store: timed out after {}ms waiting for keys: {}",
                timeout.count(), key);
}

Result<void> BlackHoleStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  WaitOut(timeout);
  return Errorf(ErrorCode::kDeadlineExceeded, "store: timed out after {}ms waiting for keys: {}",
                timeout.count(), keys.empty() ? "" : keys[0]);
}

CommOptions LocalOptions(const std::string& backend, int rank, int world,
                         std::shared_ptr<Store> store, Millis timeout) {
  CommOptions o;
  o.backend = backend;
  o.rank = rank;
  o.world_size = world;
  o.store = std::move(store);
  o.prefix = "test";
  o.timeout = timeout;
  o.iface_host = "127.0.0.1";
  return o;
}

void RunRanks(const std::string& backend, int world, const std::function<void(Communicator&)>& body,
              const std::function<void(CommOptions&)>& tweak) {
  auto store = std::make_shared<MemStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      // nccl: one rank per GPU; rank r on device r (the suite keeps world <= devices).
      if (backend == "nccl" && !UseDevice(r % std::max(1, CudaDeviceCount()))) return;
      CommOptions o = LocalOptions(backend, r, world, store);
      if (tweak) tweak(o);
      auto comm = CreateCommunicator(o);
      if (!comm) {
        ADD_FAILURE() << "rank " << r << ": " << comm.error().ToString();
        return;
      }
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

namespace {
class HostBuffer final : public TestBuffer {
 public:
  explicit HostBuffer(size_t bytes) : mem_(bytes) {}
  void* data() override { return mem_.empty() ? nullptr : mem_.data(); }
  size_t bytes() const override { return mem_.size(); }
  void Upload(const std::vector<std::byte>& host) override { mem_ = host; }
  std::vector<std::byte> Download() const override { return mem_; }

 private:
  std::vector<std::byte> mem_;
};
}  // namespace

std::unique_ptr<TestBuffer> MakeBuffer(const std::string& backend, size_t bytes) {
  if (backend == "nccl") return MakeDeviceBuffer(bytes);  // device_buffer.h
  return std::make_unique<HostBuffer>(bytes);
}

namespace {
uint16_t ToBFloat16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t down = bits & 0xffff0000u;
  const uint32_t up = down + 0x10000u;
  const double lo = std::bit_cast<float>(down), hi = std::bit_cast<float>(up);
  const double dl = std::fabs(f - lo), dh = std::fabs(hi - f);
  if (dl < dh) return static_cast<uint16_t>(down >> 16);
  if (dh < dl) return static_cast<uint16_t>(up >> 16);
  return static_cast<uint16_t>(((down >> 16) & 1) ? up >> 16 : down >> 16);  // tie: even
}
double FromBFloat16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
}  // namespace

std::vector<std::byte> Encode(DataType type, const std::vector<double>& values) {
  std::vector<std::byte> out(values.size() * SizeOf(type));
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* p = out.data() + i * SizeOf(type);
    switch (type) {
      case DataType::kFloat32: { float v = static_cast<float>(values[i]); std::memcpy(p, &v, 4); break; }
      case DataType::kFloat16: { _Float16 v = static_cast<_Float16>(static_cast<float>(values[i])); std::memcpy(p, &v, 2); break; }
      case DataType::kBFloat16: { uint16_t v = ToBFloat16(static_cast<float>(values[i])); std::memcpy(p, &v, 2); break; }
      case DataType::kInt32: { int32_t v = static_cast<int32_t>(values[i]); std::memcpy(p, &v, 4); break; }
      case DataType::kInt64: { int64_t v = static_cast<int64_t>(values[i]); std::memcpy(p, &v, 8); break; }
    }
  }
  return out;
}

std::vector<double> Decode(DataType type, const std::vector<std::byte>& bytes) {
  const size_t n = bytes.size() / SizeOf(type);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * SizeOf(type);
    switch (type) {
      case DataType::kFloat32: { float v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case DataType::kFloat16: { _Float16 v; std::memcpy(&v, p, 2); out[i] = static_cast<float>(v); break; }
      case DataType::kBFloat16: { uint16_t v; std::memcpy(&v, p, 2); out[i] = FromBFloat16(v); break; }
      case DataType::kInt32: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case DataType::kInt64: { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<double>(v); break; }
    }
  }
  return out;
}

double RoundTo(DataType type, double v) {
  switch (type) {
    case DataType::kFloat32: return static_cast<float>(v);
    case DataType::kFloat16: return static_cast<float>(static_cast<_Float16>(static_cast<float>(v)));
    case DataType::kBFloat16: return FromBFloat16(ToBFloat16(static_cast<float>(v)));
    case DataType::kInt32:
    case DataType::kInt64: return std::trunc(v);
  }
  return v;
}

std::vector<double> RandomValues(DataType type, size_t count, int rank, int salt) {
  std::mt19937_64 rng(static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(salt));
  std::vector<double> out(count);
  if (IsFloat(type)) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (auto& v : out) v = RoundTo(type, dist(rng));
  } else {
    std::uniform_int_distribution<int> dist(-1000, 1000);
    for (auto& v : out) v = dist(rng);
  }
  return out;
}

bool IsFloat(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat16 || type == DataType::kBFloat16;
}

double UnitRoundoff(DataType type) {
  switch (type) {
    case DataType::kFloat32: return std::ldexp(1.0, -24);
    case DataType::kBFloat16: return std::ldexp(1.0, -8);
    case DataType::kFloat16: return std::ldexp(1.0, -11);
    default: return 0;
  }
}

std::string TypeParamName(DataType type) { return std::string(DataTypeName(type)); }

}  // namespace cohort::comm::commtest
