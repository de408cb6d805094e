// Helpers for the Communicator tests: an in-memory rendezvous store shared by threads, a
// harness that runs one thread per rank, memory that lives where a backend wants it, and
// element codecs written independently of the library's (the oracle for half types).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/store.h"

// Asserts that a Result holds a value, printing the expression and the error otherwise.
#define ASSERT_OK(expr)                                                    \
  do {                                                                     \
    auto _r = (expr);                                                      \
    ASSERT_TRUE(_r.has_value()) << #expr << ": " << _r.error().ToString(); \
  } while (0)

namespace cohort::comm::commtest {

// comm::Store test double: a map under a mutex, waits on a condition variable.
class MemStore final : public Store {
 public:
  Result<void> Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, Millis timeout) override;
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;  // guarded by mu_
};

// A store that never has any key: Get and Wait fail with kDeadlineExceeded after their
// timeout (an unreachable rendezvous).
class BlackHoleStore final : public Store {
 public:
  Result<void> Set(const std::string& key, const std::string& value) override { return {}; }
  Result<std::string> Get(const std::string& key, Millis timeout) override;
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return delta; }
};

// Options for rank `rank` of `world` on 127.0.0.1 with a short timeout.
CommOptions LocalOptions(const std::string& backend, int rank, int world,
                         std::shared_ptr<Store> store, Millis timeout = Millis(10000));

// Runs `body(comm)` on `world` threads, each with its own communicator created from
// LocalOptions over one fresh MemStore (tweaked by `tweak` if given). Creation failures
// are test failures. Returns when every thread has finished. For nccl, thread r first
// makes CUDA device r (mod the device count) current.
void RunRanks(const std::string& backend, int world, const std::function<void(Communicator&)>& body,
              const std::function<void(CommOptions&)>& tweak = nullptr);

// Memory a backend's collectives operate on: host memory for gloo, device memory on the
// thread's current device for nccl (device_buffer.h; Upload/Download copy across).
class TestBuffer {
 public:
  virtual ~TestBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual void Upload(const std::vector<std::byte>& host) = 0;
  virtual std::vector<std::byte> Download() const = 0;
};
std::unique_ptr<TestBuffer> MakeBuffer(const std::string& backend, size_t bytes);

// Element codecs (independent of the library): values as doubles <-> bytes of `type`.
// float16 goes through the compiler's _Float16; bfloat16 picks the nearer neighbour.
std::vector<std::byte> Encode(DataType type, const std::vector<double>& values);
std::vector<double> Decode(DataType type, const std::vector<std::byte>& bytes);
// `v` rounded to the nearest value of `type` (ties to even); integers truncate.
double RoundTo(DataType type, double v);

// `count` random values of `type` for (rank, salt): exactly representable; integers in
// [-1000, 1000], floats in [-1, 1).
std::vector<double> RandomValues(DataType type, size_t count, int rank, int salt);

bool IsFloat(DataType type);
// Unit roundoff of `type` (2^-24, 2^-8, 2^-11; 0 for integers).
double UnitRoundoff(DataType type);

std::string TypeParamName(DataType type);

}  // namespace cohort::comm::commtest
