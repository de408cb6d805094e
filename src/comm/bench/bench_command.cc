#include "comm/bench/bench_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/bench/allreduce_bench.h"
#include "common/clock.h"
#include "common/subprocess.h"

namespace cohort::comm {

namespace {

using bench::AllreduceBenchOptions;

int Report(const Error& e) {
  std::fprintf(stderr, "cohort bench: error: %s\n", e.message.c_str());
  return ExitCodeFor(e);
}

// The flags as typed, before they are checked.
struct RawFlags {
  std::string min_bytes = "4";
  std::string max_bytes = "256M";
  std::string dtype = "float32";
  std::string timeout = "300s";
  bool no_baseline = false;
  bool no_check = false;
  bool worker = false;
};

Result<DataType> ParseDataType(const std::string& name) {
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                     DataType::kInt32, DataType::kInt64}) {
    if (DataTypeName(t) == name) return t;
  }
  return Errorf(ErrorCode::kInvalidArgument,
                "--dtype: unknown type '{}' (float32, bfloat16, float16, int32, int64)", name);
}

Result<AllreduceBenchOptions> Resolve(AllreduceBenchOptions o, const RawFlags& raw) {
  o.min_bytes = COHORT_TRY(bench::ParseByteSize(raw.min_bytes, "--min-bytes"));
  o.max_bytes = COHORT_TRY(bench::ParseByteSize(raw.max_bytes, "--max-bytes"));
  if (o.min_bytes > o.max_bytes) {
    return Errorf(ErrorCode::kInvalidArgument, "--min-bytes {} is larger than --max-bytes {}",
                  raw.min_bytes, raw.max_bytes);
  }
  o.dtype = COHORT_TRY(ParseDataType(raw.dtype));
  o.timeout = Millis(COHORT_TRY(ParseDurationMs(raw.timeout, "--timeout")));
  if (o.timeout.count() <= 0) return Errorf(ErrorCode::kInvalidArgument, "--timeout must be positive");
  o.baseline = !raw.no_baseline;
  o.check_consistency = !raw.no_check;
  return o;
}

// Replaces this process with `cohort run -n N -- cohort bench allreduce --worker ...`.
int Launch(const AllreduceBenchOptions& o, const RawFlags& raw) {
  const std::string self = SelfExePath();
  std::vector<std::string> args = {self, "run", "-n", std::to_string(o.ranks), "--grace", "2s",
                                   "--", self, "bench", "allreduce", "--worker",
                                   "--backend", o.backend,
                                   "--min-bytes", std::to_string(o.min_bytes),
                                   "--max-bytes", std::to_string(o.max_bytes),
                                   "--factor", std::to_string(o.factor),
                                   "--dtype", raw.dtype,
                                   "--timeout", fmt::format("{}ms", o.timeout.count()),
                                   // `cohort run` starts every rank on this machine.
                                   "--iface", o.iface.empty() ? "127.0.0.1" : o.iface};
  if (o.iters > 0) args.insert(args.end(), {"--iters", std::to_string(o.iters)});
  if (o.warmup >= 0) args.insert(args.end(), {"--warmup", std::to_string(o.warmup)});
  if (!o.baseline) args.push_back("--no-baseline");
  if (!o.check_consistency) args.push_back("--no-consistency-check");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execv(self.c_str(), argv.data());
  return Report(Error(ErrorCode::kInternal, fmt::format("cannot execute '{}': {}", self, std::strerror(errno))));
}

int RunBench(int argc, char** argv) {
  CLI::App app{"Benchmarks of the data plane", "cohort bench"};
  app.require_subcommand(1);
  AllreduceBenchOptions o;
  RawFlags raw;
  auto* ar = app.add_subcommand(
      "allreduce",
      "Allreduce bandwidth, nccl-tests style (algbw, busbw), beside Gloo's own ring allreduce");
  ar->add_option("-n,--ranks", o.ranks, "Ranks to start with `cohort run` (default 2)")
      ->check(CLI::Range(1, 1024));
  ar->add_option("--backend", o.backend,
                 "Communicator backend to measure: gloo, shm (ranks on this host) or nccl "
                 "(default gloo)")
      ->check(CLI::IsMember({"gloo", "shm", "nccl"}));
  ar->add_option("--min-bytes", raw.min_bytes, "Smallest message (default 4)");
  ar->add_option("--max-bytes", raw.max_bytes, "Largest message (default 256M)");
  ar->add_option("--factor", o.factor, "Size multiplier between rows (default 2)")
      ->check(CLI::Range(2, 1024));
  ar->add_option("--iters", o.iters, "Timed iterations per size (default: by size, 10..1000)")
      ->check(CLI::Range(1, 1000000));
  ar->add_option("--warmup", o.warmup, "Warmup iterations per size (default: 3, 1 from 16M)")
      ->check(CLI::Range(1, 1000000));
  ar->add_option("--dtype", raw.dtype, "float32, bfloat16, float16, int32 or int64 (default float32)");
  ar->add_flag("--no-baseline", raw.no_baseline, "Skip Gloo's ring allreduce");
  ar->add_flag("--no-consistency-check", raw.no_check,
               "Create the communicator with check_consistency off");
  ar->add_option("--iface", o.iface, "Address or interface for Gloo's TCP transport (default 127.0.0.1)");
  ar->add_option("--timeout", raw.timeout, "Bound on every wait (default 300s)");
  ar->add_flag("--worker", raw.worker, "Run one rank (used by the launcher)")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto options = Resolve(o, raw);
  if (!options) return Report(options.error());
  if (!raw.worker) return Launch(*options, raw);
  if (auto ok = bench::RunAllreduceWorker(*options, stdout); !ok) return Report(ok.error());
  return 0;
}

}  // namespace

ExternalCommand BenchCommand() {
  return ExternalCommand{"bench",
                         "Data-plane benchmarks (allreduce: nccl-tests style, against Gloo's ring)",
                         &RunBench};
}

}  // namespace cohort::comm
