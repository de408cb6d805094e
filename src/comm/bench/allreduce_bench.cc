#include "comm/bench/allreduce_bench.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "comm/bench/bench_buffer.h"
#include "comm/bench/gloo_ring_baseline.h"
#include "comm/launch_env.h"
#include "comm/store.h"

namespace cohort::comm::bench {

Result<size_t> ParseByteSize(std::string_view text, std::string_view what) {
  auto bad = [&] {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{}: '{}' is not a size (use e.g. 4, 64K, 256M, 1G)", what, text);
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return bad();
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - d) / 10) return bad();
    value = value * 10 + d;
  }
  std::string suffix;
  for (char c : text.substr(digits)) suffix.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    shift = 30;
  } else {
    return bad();
  }
  if (value == 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: must be at least 1 byte, got '{}'", what, text);
  }
  if (value > (std::numeric_limits<uint64_t>::max() >> shift)) return bad();
  return static_cast<size_t>(value << shift);
}

std::string FormatByteSize(size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::vector<size_t> SizeList(size_t min_bytes, size_t max_bytes, int factor) {
  std::vector<size_t> out;
  if (min_bytes == 0 || factor < 2) return out;
  for (size_t s = min_bytes; s <= max_bytes;) {
    out.push_back(s);
    if (s > max_bytes / static_cast<size_t>(factor)) break;  // the next would pass max (or overflow)
    s *= static_cast<size_t>(factor);
  }
  return out;
}

size_t CountFor(size_t bytes, DataType type) { return std::max<size_t>(1, bytes / SizeOf(type)); }

double AlgBandwidth(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0.0;
}

double BusBandwidth(double algbw, int ranks) {
  return ranks > 0 ? algbw * 2.0 * (ranks - 1) / ranks : 0.0;
}

int ItersFor(size_t bytes) {
  constexpr size_t kTrafficPerSize = 512u << 20;
  const size_t iters = kTrafficPerSize / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp<size_t>(iters, 10, 1000));
}

int WarmupFor(size_t bytes) { return bytes >= (16u << 20) ? 1 : 3; }

std::string FormatHeader(const AllreduceBenchOptions& o, int ranks, bool with_baseline) {
  std::string out = fmt::format(
      "# cohort bench allreduce: {} ranks, backend {}{}, {}, sum, in place; sizes {} .. {} "
      "(x{})\n"
      "# time: average per call of the slowest rank; algbw = bytes/time; busbw = algbw * "
      "2(n-1)/n (GB/s = 1e9 B/s)\n",
      ranks, o.backend, o.check_consistency ? "" : " (check_consistency off)",
      DataTypeName(o.dtype), FormatByteSize(o.min_bytes), FormatByteSize(o.max_bytes), o.factor);
  if (with_baseline) {
    out += fmt::format("# {:>35}  {:<37}  {}\n", "", fmt::format("cohort {}", o.backend),
                       "gloo ring (gloo::allreduce, direct)");
  }
  out += fmt::format("# {:>11}  {:>11}  {:>9}  {:>11}  {:>11}  {:>11}", "size(B)", "count",
                     "type", "time(us)", "algbw", "busbw");
  if (with_baseline) {
    out += fmt::format("  {:>11}  {:>11}  {:>11}  {:>6}", "time(us)", "algbw", "busbw", "ratio");
  }
  out += fmt::format("  {:>6}\n", "#wrong");
  return out;
}

std::string FormatRow(const BenchRow& r, DataType type, int ranks, bool with_baseline) {
  const double algbw = AlgBandwidth(r.bytes, r.seconds);
  std::string out = fmt::format("  {:>11}  {:>11}  {:>9}  {:>11.1f}  {:>11.3f}  {:>11.3f}", r.bytes,
                                r.count, DataTypeName(type), r.seconds * 1e6, algbw,
                                BusBandwidth(algbw, ranks));
  if (with_baseline) {
    const double base_algbw = AlgBandwidth(r.bytes, r.baseline_seconds);
    const double ratio = r.seconds > 0 ? r.baseline_seconds / r.seconds : 0.0;
    out += fmt::format("  {:>11.1f}  {:>11.3f}  {:>11.3f}  {:>6.2f}", r.baseline_seconds * 1e6,
                       base_algbw, BusBandwidth(base_algbw, ranks), ratio);
  }
  out += fmt::format("  {:>6}\n", r.wrong);
  return out;
}

std::string FormatSummary(const std::vector<BenchRow>& rows, int ranks, bool with_baseline) {
  if (rows.empty()) return "";
  double ours = 0, base = 0;
  const BenchRow* worst = nullptr;
  for (const auto& r : rows) {
    ours += BusBandwidth(AlgBandwidth(r.bytes, r.seconds), ranks);
    base += BusBandwidth(AlgBandwidth(r.bytes, r.baseline_seconds), ranks);
    if (r.seconds > 0 && (worst == nullptr || r.baseline_seconds / r.seconds <
                                                  worst->baseline_seconds / worst->seconds)) {
      worst = &r;
    }
  }
  const double n = static_cast<double>(rows.size());
  std::string out = fmt::format("# Avg bus bandwidth: {:.3f} GB/s", ours / n);
  if (with_baseline && worst != nullptr) {
    out += fmt::format(" (gloo ring: {:.3f}); smallest ratio {:.2f} at {}", base / n,
                       worst->baseline_seconds / worst->seconds, FormatByteSize(worst->bytes));
  }
  out += "\n";
  return out;
}

namespace {

// Fills `bytes` of host memory with `count` elements of `type` all equal to `v`.
void FillHost(std::vector<std::byte>& host, size_t count, DataType type, int v) {
  auto put = [&]<typename T>(T x) {
    for (size_t i = 0; i < count; ++i) std::memcpy(host.data() + i * sizeof(T), &x, sizeof(T));
  };
  switch (type) {
    case DataType::kFloat32: put(static_cast<float>(v)); break;
    case DataType::kInt32: put(static_cast<int32_t>(v)); break;
    case DataType::kInt64: put(static_cast<int64_t>(v)); break;
    case DataType::kFloat16: {  // small integers: exponent 15 + e, mantissa
      const float f = static_cast<float>(v);
      int e = 0;
      const float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
      const uint16_t h = v == 0 ? 0
                                : static_cast<uint16_t>(((e - 1 + 15) << 10) |
                                                        (static_cast<uint32_t>(m * 2048) & 0x3ff));
      put(h);
      break;
    }
    case DataType::kBFloat16: {
      uint32_t bits;
      const float f = static_cast<float>(v);
      std::memcpy(&bits, &f, 4);
      put(static_cast<uint16_t>(bits >> 16));  // exact for small integers
      break;
    }
  }
}

// Counts elements of `host` that differ from the encoding of `want`.
long long CountWrong(const std::vector<std::byte>& host, size_t count, DataType type, int want) {
  std::vector<std::byte> expect(count * SizeOf(type));
  FillHost(expect, count, type, want);
  long long wrong = 0;
  const size_t esz = SizeOf(type);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(host.data() + i * esz, expect.data() + i * esz, esz) != 0) ++wrong;
  }
  return wrong;
}

struct Timing {
  double ours = 0;
  double baseline = 0;
};

class Worker {
 public:
  Worker(const AllreduceBenchOptions& o, std::FILE* out) : o_(o), out_(out) {}

  Result<void> Run() {
    const LaunchEnv env = COHORT_TRY(DetectLaunchEnv());
    COHORT_TRY_VOID(UseLocalDevice(o_.backend, env.local_rank));
    if (!env.store_url.empty()) {
      store_ = std::shared_ptr<Store>(COHORT_TRY(OpenStore(env.store_url, env.hosts_store(), o_.timeout)));
    }
    const char* attempt = std::getenv("COHORT_ATTEMPT");
    const std::string prefix = fmt::format("bench-allreduce/{}", attempt ? attempt : "0");
    CommOptions co;
    co.backend = o_.backend;
    co.rank = env.rank;
    co.world_size = env.world_size;
    co.store = store_;
    co.prefix = prefix;
    co.timeout = o_.timeout;
    co.iface_host = o_.iface;
    co.check_consistency = o_.check_consistency;
    comm_ = COHORT_TRY(CreateCommunicator(co));
    with_baseline_ = o_.baseline && GlooRingBaseline::Supports(o_.dtype);
    if (with_baseline_) {
      baseline_ = COHORT_TRY(GlooRingBaseline::Connect(store_, prefix + "/gloo-ring/", env.rank,
                                                       env.world_size, o_.timeout, o_.iface));
    }
    const auto sizes = SizeList(o_.min_bytes, o_.max_bytes, o_.factor);
    const size_t max_count = CountFor(sizes.empty() ? 1 : sizes.back(), o_.dtype);
    const size_t max_bytes = max_count * SizeOf(o_.dtype);
    buf_ = COHORT_TRY(AllocateBenchBuffer(o_.backend, max_bytes));
    stats_ = COHORT_TRY(AllocateBenchBuffer(o_.backend, 3 * sizeof(int64_t)));
    host_.resize(max_bytes);
    if (with_baseline_) base_buf_.assign(max_bytes, std::byte{0});

    const bool printer = comm_->rank() == 0;
    if (printer) {
      std::fputs(FormatHeader(o_, comm_->size(), with_baseline_).c_str(), out_);
      std::fflush(out_);
    }
    std::vector<BenchRow> rows;
    for (size_t bytes : sizes) {
      BenchRow row = COHORT_TRY(RunSize(bytes));
      rows.push_back(row);
      if (printer) {
        std::fputs(FormatRow(row, o_.dtype, comm_->size(), with_baseline_).c_str(), out_);
        std::fflush(out_);
      }
    }
    if (printer) {
      std::fputs(FormatSummary(rows, comm_->size(), with_baseline_).c_str(), out_);
      std::fflush(out_);
    }
    // Nobody leaves (rank 0 may host the store) before everyone is done.
    return comm_->Barrier();
  }

 private:
  Result<BenchRow> RunSize(size_t size) {
    BenchRow row;
    row.count = CountFor(size, o_.dtype);
    row.bytes = row.count * SizeOf(o_.dtype);
    const int n = comm_->size();
    const int iters = o_.iters > 0 ? o_.iters : ItersFor(row.bytes);
    const int warmup = o_.warmup >= 0 ? o_.warmup : WarmupFor(row.bytes);

    // Checked iteration: rank r contributes r + 1 everywhere.
    FillHost(host_, row.count, o_.dtype, comm_->rank() + 1);
    COHORT_TRY_VOID(buf_->Upload(host_.data(), row.bytes));
    COHORT_TRY_VOID(comm_->AllReduce(buf_->data(), buf_->data(), row.count, o_.dtype, ReduceOp::kSum));
    COHORT_TRY_VOID(buf_->Download(host_.data(), row.bytes));
    const long long wrong = CountWrong(host_, row.count, o_.dtype, n * (n + 1) / 2);
    for (int i = 1; i < warmup; ++i) COHORT_TRY_VOID(Ours(row.count));
    for (int i = 0; i < warmup && with_baseline_; ++i) COHORT_TRY_VOID(Baseline(row.count));

    // Alternating blocks, so that ours and the baseline see the same machine load (two
    // cores shared by every rank are noisy); who goes first alternates too.
    const int blocks = std::min(iters, 10);
    const int per_block = (iters + blocks - 1) / blocks;
    Timing total;
    for (int b = 0; b < blocks; ++b) {
      for (int turn = 0; turn < 2; ++turn) {
        const bool ours = (turn == 0) == (b % 2 == 0);
        if (!ours && !with_baseline_) continue;
        COHORT_TRY_VOID(ours ? comm_->Barrier() : baseline_->Barrier());
        const SteadyTime t0 = SteadyClock::now();
        for (int i = 0; i < per_block; ++i) COHORT_TRY_VOID(ours ? Ours(row.count) : Baseline(row.count));
        (ours ? total.ours : total.baseline) +=
            std::chrono::duration<double>(SteadyClock::now() - t0).count();
      }
    }
    const double calls = static_cast<double>(blocks * per_block);
    // The slowest rank's averages and everybody's wrong elements.
    int64_t mine[3] = {static_cast<int64_t>(total.ours / calls * 1e9),
                       static_cast<int64_t>(total.baseline / calls * 1e9), wrong};
    COHORT_TRY_VOID(stats_->Upload(mine, sizeof(mine)));
    auto* stats = static_cast<int64_t*>(stats_->data());
    COHORT_TRY_VOID(comm_->AllReduce(stats, stats, 2, DataType::kInt64, ReduceOp::kMax));
    COHORT_TRY_VOID(comm_->AllReduce(stats + 2, stats + 2, 1, DataType::kInt64, ReduceOp::kSum));
    int64_t all[3];
    COHORT_TRY_VOID(stats_->Download(all, sizeof(all)));
    row.seconds = static_cast<double>(all[0]) / 1e9;
    row.baseline_seconds = static_cast<double>(all[1]) / 1e9;
    row.wrong = all[2];
    return row;
  }

  Result<void> Ours(size_t count) {
    return comm_->AllReduce(buf_->data(), buf_->data(), count, o_.dtype, ReduceOp::kSum);
  }
  Result<void> Baseline(size_t count) {
    return baseline_->AllReduceSum(base_buf_.data(), count, o_.dtype);
  }

  const AllreduceBenchOptions& o_;
  std::FILE* out_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GlooRingBaseline> baseline_;
  bool with_baseline_ = false;
  std::unique_ptr<BenchBuffer> buf_;    // ours: host or device memory
  std::unique_ptr<BenchBuffer> stats_;  // three int64 for the per-size exchange
  std::vector<std::byte> host_;         // staging for the checked iteration
  std::vector<std::byte> base_buf_;     // the baseline's host buffer
};

}  // namespace

Result<void> RunAllreduceWorker(const AllreduceBenchOptions& options, std::FILE* out) {
  return Worker(options, out).Run();
}

}  // namespace cohort::comm::bench
