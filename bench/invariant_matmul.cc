// bench_invariant_matmul: the serving product (kernels/cpu/invariant_matmul.h) beside
// OpenBLAS's sgemm (kernels/cpu/matmul.h, the baseline it must not fall behind) on the
// products of one decode step of bench_serve's model: every layer's qkv (C -> 3C),
// attention projection (C -> C), MLP up (C -> 4C) and down (4C -> C), then the head
// (C -> padded vocab), each layer with its own weights, so that the step streams the
// whole model through the caches as the server does (6 layers of n_embd 384: 42 MB,
// more than this VM's L3).
//
//   bench_invariant_matmul [--layers L] [--embd C] [--vocab V] [--rows 1,8,32,64]
//                          [--threads T] [--repeats R]
//
// For each row count N (the step's tokens: 8 is the decode step of 8 streams): the
// median over R repeats of the whole step's products, the two kernels alternating in
// every repeat so that both see the same load; then per product at that N. Target
// (issue 16): at least OpenBLAS's speed at every N from 1 to 32.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/kernels/cpu/invariant_matmul.h"
#include "engine/kernels/cpu/matmul.h"

namespace {

namespace cpu = cohort::engine::cpu;
using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 6, embd = 384, vocab = 256, threads = 1, repeats = 41;
  std::vector<int> rows = {1, 2, 4, 8, 16, 32, 64};
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "bench_invariant_matmul: %s\nusage: bench_invariant_matmul [--layers L] [--embd C] "
               "[--vocab V] [--rows 1,8,32] [--threads T] [--repeats R]\n", why);
  std::exit(2);
}

int PositiveInt(const char* flag, const char* v, int max) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > max) {
    Usage(fmt::format("{}: expected an integer in [1, {}], got '{}'", flag, max, v).c_str());
  }
  return static_cast<int>(n);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(fmt::format("{} needs a value", a).c_str());
    const char* v = argv[++i];
    if (a == "--layers") o.layers = PositiveInt("--layers", v, 96);
    else if (a == "--embd") o.embd = PositiveInt("--embd", v, 8192);
    else if (a == "--vocab") o.vocab = PositiveInt("--vocab", v, 1 << 18);
    else if (a == "--threads") o.threads = PositiveInt("--threads", v, 1024);
    else if (a == "--repeats") o.repeats = PositiveInt("--repeats", v, 100000);
    else if (a == "--rows") {
      o.rows.clear();
      std::stringstream s(v);
      std::string item;
      while (std::getline(s, item, ',')) o.rows.push_back(PositiveInt("--rows", item.c_str(), 4096));
      if (o.rows.empty()) Usage("--rows: no row count given");
    } else {
      Usage(fmt::format("unknown flag {}", a).c_str());
    }
  }
  return o;
}

std::vector<float> Random(size_t n, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// One product of the step: its weights both ways (w: OC × C for sgemm, wt: C × OC).
struct Product {
  const char* name;
  int C, OC;
  std::vector<float> w, bias;
  cpu::RowInvariantWeights packed;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  omp_set_num_threads(o.threads);
  cpu::UseOpenMpForBlas();
  const int C = o.embd, Vp = (o.vocab + 127) / 128 * 128;
  std::mt19937 g(1);
  std::vector<Product> step;
  for (int l = 0; l < o.layers; ++l) {
    for (auto [name, in, out] : {std::tuple{"qkv", C, 3 * C}, std::tuple{"attn proj", C, C},
                                 std::tuple{"mlp up", C, 4 * C}, std::tuple{"mlp down", 4 * C, C}}) {
      Product p{name, in, out, Random(static_cast<size_t>(out) * in, g), Random(out, g), {}};
      p.packed = cpu::PackRowInvariantWeights(p.w.data(), out, in);
      step.push_back(std::move(p));
    }
  }
  {
    Product head{"head", C, Vp, Random(static_cast<size_t>(Vp) * C, g), {}, {}};
    head.packed = cpu::PackRowInvariantWeights(head.w.data(), Vp, C);
    step.push_back(std::move(head));
  }
  const int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  const std::vector<float> inp = Random(static_cast<size_t>(max_rows) * 4 * C, g);
  std::vector<float> out(static_cast<size_t>(max_rows) * std::max(4 * C, Vp));

  // Seconds of product p (or the whole step when p < 0) at N rows, by one kernel.
  auto run = [&](bool invariant, int N, int p) {
    const auto t0 = Clock::now();
    for (int i = 0; i < static_cast<int>(step.size()); ++i) {
      if (p >= 0 && i != p) continue;
      const Product& q = step[i];
      const float* bias = q.bias.empty() ? nullptr : q.bias.data();
      if (invariant) {
        cpu::MatmulForwardRowInvariant(out.data(), inp.data(), q.packed, bias, N);
      } else {
        cpu::MatmulForward(out.data(), inp.data(), q.w.data(), bias, N, q.C, q.OC);
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  fmt::print("# bench_invariant_matmul: the products of one decode step ({} layers, n_embd {}, head {}), "
             "{} thread(s), {} ({}), OpenBLAS {}; median of {} repeats, the kernels alternating\n",
             o.layers, C, Vp, o.threads, "row-invariant", cpu::RowInvariantMatmulIsa(), cpu::BlasCoreName(),
             o.repeats);
  fmt::print("{:>6s} {:>16s} {:>14s} {:>10s} {:>16s}   target\n", "rows", "invariant us", "OpenBLAS us",
             "ratio", "invariant GFLOP/s");
  double flops_per_row = 0;
  for (const Product& q : step) flops_per_row += 2.0 * q.C * q.OC;
  for (int N : o.rows) {
    std::vector<double> a, b;
    run(true, N, -1), run(false, N, -1);  // warm-up
    for (int r = 0; r < o.repeats; ++r) {
      a.push_back(run(true, N, -1));
      b.push_back(run(false, N, -1));
    }
    const double ta = Median(a), tb = Median(b);
    fmt::print("{:>6d} {:>16.1f} {:>14.1f} {:>9.2f}x {:>16.1f}   {}\n", N, 1e6 * ta, 1e6 * tb, tb / ta,
               flops_per_row * N / ta * 1e-9, N <= 32 ? ">= 1.00x" : "");
  }
  // Per product of the last layer and the head (the step's shapes), at each N.
  fmt::print("# per product (layer {} and the head), us: invariant / OpenBLAS\n{:>6s}", o.layers,
             "rows");
  const int first = static_cast<int>(step.size()) - 5;
  for (int i = first; i < static_cast<int>(step.size()); ++i) {
    fmt::print(" {:>22s}", fmt::format("{} {}x{}", step[i].name, step[i].C, step[i].OC));
  }
  fmt::print("\n");
  for (int N : o.rows) {
    fmt::print("{:>6d}", N);
    for (int i = first; i < static_cast<int>(step.size()); ++i) {
      std::vector<double> a, b;
      for (int r = 0; r < o.repeats; ++r) {
        a.push_back(run(true, N, i));
        b.push_back(run(false, N, i));
      }
      fmt::print(" {:>22s}", fmt::format("{:.1f} / {:.1f}", 1e6 * Median(a), 1e6 * Median(b)));
    }
    fmt::print("\n");
  }
  return 0;
}
