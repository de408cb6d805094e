// Helpers the engine's multi-rank benchmarks share (bench_parallel_train, bench_zero): ranks
// as threads of one process with gloo over loopback (COHORT_BENCH_COMM=shm: over shared
// memory, as `cohort train` on one host), exit-on-error checks, model shapes and random
// tokens.
#pragma once

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "comm/store.h"
#include "engine/model/gpt.h"

namespace cohort::engine::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The communicator backend of the benchmarks' ranks: COHORT_BENCH_COMM, default gloo (the
// backend their published baselines used).
inline std::string BenchBackend() {
  const char* b = std::getenv("COHORT_BENCH_COMM");
  return b != nullptr && *b != '\0' ? b : "gloo";
}

// Runs body(comm) on `world` threads, each a rank with its own communicator (BenchBackend)
// over a file store in a fresh temporary directory. Exits on a setup failure.
inline void RunRanks(int world, const std::function<void(comm::Communicator&)>& body) {
  static int runs = 0;
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       fmt::format("cohort-bench-parallel-{}-{}", ::getpid(), runs++))
          .string();
  std::filesystem::create_directories(dir);
  std::shared_ptr<comm::Store> store(
      comm::OpenStore("file://" + dir, false, Millis(60000)).value().release());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      comm::CommOptions o;
      o.backend = BenchBackend();
      o.rank = r;
      o.world_size = world;
      o.store = store;
      o.prefix = "bench";
      o.timeout = Millis(600000);
      o.iface_host = "127.0.0.1";
      auto c = comm::CreateCommunicator(o);
      if (!c) {
        std::fprintf(stderr, "rank %d: %s\n", r, c.error().ToString().c_str());
        std::exit(1);
      }
      omp_set_num_threads(1);
      body(**c);
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().ToString().c_str());
    std::exit(1);
  }
  return std::move(*r);
}
inline void Check(Result<void> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().ToString().c_str());
    std::exit(1);
  }
}

inline GptConfig Model(int layers, int embd, int heads, int vocab, int seq) {
  GptConfig c;
  c.n_layer = layers;
  c.n_embd = embd;
  c.n_head = heads;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  return c;
}

// Random tokens (fixed seed per micro-batch).
inline void Fill(int k, std::span<int32_t> in, std::span<int32_t> out, int vocab) {
  uint64_t x = 0x9e3779b97f4a7c15ULL * (k + 1);
  for (size_t i = 0; i < in.size(); ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    in[i] = static_cast<int32_t>((x >> 33) % vocab);
    out[i] = static_cast<int32_t>((x >> 17) % vocab);
  }
}

}  // namespace cohort::engine::bench
