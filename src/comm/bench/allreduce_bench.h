// The allreduce benchmark (`cohort bench allreduce`), in the manner of nccl-tests'
// all_reduce_perf: for each message size from min_bytes to max_bytes (times `factor`),
// the average time of an in-place sum allreduce over `iters` iterations after `warmup`,
// the slowest rank's figure, and the bandwidths nccl-tests defines:
//   algbw = bytes / time,   busbw = algbw * 2 (n - 1) / n
// (busbw is what each link carries in a bandwidth-optimal ring, so it is comparable
// across rank counts). Beside the Communicator backend under test, the same figures for
// Gloo's own ring allreduce on a plain Gloo context (gloo_ring_baseline.h) over the same
// rendezvous, and their ratio (ours / gloo busbw, equivalently gloo time / our time).
// The two run in alternating blocks (up to 10 per size, who goes first alternating too)
// so that both see the same load.
// The first warmup iteration of each size is checked: every element must equal
// n (n + 1) / 2 when rank r contributes r + 1 (column #wrong, summed over ranks).
//
// RunAllreduceWorker is one rank; the launcher (bench_command.h) starts the ranks through
// `cohort run`. The pure helpers below are what the unit test checks.
// Threads: RunAllreduceWorker runs on the calling thread; the helpers are pure.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm::bench {

struct AllreduceBenchOptions {
  int ranks = 2;                    // launcher only: ranks to start
  std::string backend = "gloo";     // the Communicator backend under test
  size_t min_bytes = 4;
  size_t max_bytes = 256u << 20;
  int factor = 2;                   // next size = size * factor
  int iters = 0;                    // 0: by size (ItersFor)
  int warmup = -1;                  // -1: by size (WarmupFor)
  DataType dtype = DataType::kFloat32;
  bool baseline = true;             // also time Gloo's ring (float32, int32, int64)
  bool check_consistency = true;    // CommOptions::check_consistency of the communicator
  std::string iface;                // CommOptions::iface_host (empty: the hostname)
  Millis timeout{300000};           // per call and for rendezvous
};

// One line of the table.
struct BenchRow {
  size_t bytes = 0;
  size_t count = 0;
  double seconds = 0;           // ours: average per allreduce, slowest rank
  double baseline_seconds = 0;  // gloo ring; 0: not measured
  long long wrong = 0;          // elements wrong after the checked iteration, all ranks
};

// "4", "64K", "256M", "1G", "512KiB", "2MB" (powers of 1024; case-insensitive).
// kInvalidArgument naming `what` for anything else, zero, or an overflow.
Result<size_t> ParseByteSize(std::string_view text, std::string_view what);

// "4 B" .. "256 MiB": how sizes are named in messages.
std::string FormatByteSize(size_t bytes);

// min, min*factor, ... up to and including max (when reached). Empty if min > max.
// Requires min >= 1 and factor >= 2.
std::vector<size_t> SizeList(size_t min_bytes, size_t max_bytes, int factor);

// Elements of `type` in a message of `bytes` (at least one).
size_t CountFor(size_t bytes, DataType type);

// GB/s (1e9 bytes per second), as nccl-tests reports.
double AlgBandwidth(size_t bytes, double seconds);
double BusBandwidth(double algbw, int ranks);

// Iterations for a size when the user gave none: ~512 MiB of traffic per size (so 4 B
// .. 256 MiB on 4 ranks takes about two minutes on two cores), between 10 and 1000.
int ItersFor(size_t bytes);
// Warmup iterations: 1 for >= 16 MiB, else 3 (the first is the checked one).
int WarmupFor(size_t bytes);

// The table's header and rows (rows for rank 0 to print).
std::string FormatHeader(const AllreduceBenchOptions& options, int ranks, bool with_baseline);
std::string FormatRow(const BenchRow& row, DataType type, int ranks, bool with_baseline);
// "# Avg bus bandwidth ..." and the smallest ratio, after the last row.
std::string FormatSummary(const std::vector<BenchRow>& rows, int ranks, bool with_baseline);

// One rank of the benchmark: finds its peers (DetectLaunchEnv, OpenStore), creates the
// communicator and the baseline, runs every size and, on rank 0, prints the table to
// `out`. Returns an error for a failed rendezvous, collective or check setup.
Result<void> RunAllreduceWorker(const AllreduceBenchOptions& options, std::FILE* out);

}  // namespace cohort::comm::bench
