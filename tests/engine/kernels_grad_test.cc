// Finite-difference checks of every CPU kernel's backward: central differences of
// L = Σ r·y (r a fixed random projection of the output y, summed in double) against the
// backward given dout = r. Perturbations are powers of two and the denominator is the
// perturbation actually representable in float32, so the check is tight for float32.
// Also checks that backward kernels accumulate (+=) rather than overwrite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/cpu/attention.h"
#include "engine/kernels/cpu/cross_entropy.h"
#include "engine/kernels/cpu/encoder.h"
#include "engine/kernels/cpu/gelu.h"
#include "engine/kernels/cpu/layernorm.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/kernels/cpu/residual.h"
#include "normal_random.h"

namespace cohort::engine::cpu {
namespace {

using testing::NormalRandom;

double Dot(const std::vector<float>& r, const std::vector<float>& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

// Compares `analytic` with central differences of `loss` in every element of `x` (or
// `max_samples` of them chosen at random): |fd − g| <= tol · (|g| + rms(g)).
void CheckGradient(const std::string& name, std::vector<float>& x,
                   const std::vector<float>& analytic, const std::function<double()>& loss,
                   float h, double tol, size_t max_samples = 100000) {
  ASSERT_EQ(x.size(), analytic.size()) << name;
  double rms = 0;
  for (float g : analytic) rms += static_cast<double>(g) * g;
  rms = std::sqrt(rms / analytic.size());
  ASSERT_GT(rms, 0.0) << name << ": the analytic gradient is all zero";
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  if (idx.size() > max_samples) {
    std::shuffle(idx.begin(), idx.end(), std::mt19937_64(42));
    idx.resize(max_samples);
  }
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i : idx) {
    const float x0 = x[i];
    const float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
    const double err = std::abs(fd - analytic[i]) / (std::abs(analytic[i]) + rms);
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_LT(worst, tol) << name << ": element " << worst_i << " analytic " << analytic[worst_i];
}

// Backward kernels add into their outputs: running with a pre-filled gradient must give
// pre-fill + the gradient.
void ExpectAccumulates(const std::vector<float>& fresh, const std::vector<float>& prefilled,
                       float fill, const std::string& name) {
  ASSERT_EQ(fresh.size(), prefilled.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    ASSERT_NEAR(prefilled[i], fresh[i] + fill, 1e-5f * (1 + std::abs(fresh[i]))) << name << " " << i;
  }
}

void CheckLayerNorm(int N, int C, size_t samples) {
  auto inp = NormalRandom(N * C, 1, 2.0f, 0.5f), w = NormalRandom(C, 2, 0.3f, 1.0f), b = NormalRandom(C, 3, 0.3f);
  auto r = NormalRandom(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return Dot(r, out);
  };
  loss();
  std::vector<float> dinp(N * C), dw(C), db(C);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(),
                    mean.data(), rstd.data(), N, C);
  CheckGradient("layernorm dinp", inp, dinp, loss, 1.0f / 256, 1e-3, samples);
  CheckGradient("layernorm dw", w, dw, loss, 1.0f / 256, 1e-4);
  CheckGradient("layernorm db", b, db, loss, 1.0f / 256, 1e-4);

  loss();
  std::vector<float> dinp2(N * C, 0.5f), dw2(C, 0.5f), db2(C, 0.5f);
  LayerNormBackward(dinp2.data(), dw2.data(), db2.data(), r.data(), inp.data(), w.data(),
                    mean.data(), rstd.data(), N, C);
  ExpectAccumulates(dinp, dinp2, 0.5f, "dinp");
  ExpectAccumulates(dw, dw2, 0.5f, "dw");
  ExpectAccumulates(db, db2, 0.5f, "db");
}

TEST(KernelGradTest, LayerNorm) { CheckLayerNorm(4, 24, 100000); }
// Enough rows for the multi-threaded path (per-thread partial sums of dw and db).
TEST(KernelGradTest, LayerNormManyRows) { CheckLayerNorm(800, 24, 200); }

void CheckMatmul(int N, int C, int OC) {
  auto inp = NormalRandom(N * C, 1), w = NormalRandom(OC * C, 2, 0.5f), bias = NormalRandom(OC, 3);
  auto r = NormalRandom(N * OC, 4);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    MatmulForward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return Dot(r, out);
  };
  loss();
  // Forward against a naive double product.
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = bias[o];
      for (int c = 0; c < C; ++c) s += static_cast<double>(inp[n * C + c]) * w[o * C + c];
      ASSERT_NEAR(out[n * OC + o], s, 1e-5 * (1 + std::abs(s)));
    }
  }
  std::vector<float> dinp(N * C), dw(OC * C), db(OC);
  MatmulBackward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  // Linear in each input: any step works, the check is limited by rounding only.
  CheckGradient("matmul dinp", inp, dinp, loss, 0.25f, 1e-4, 150);
  CheckGradient("matmul dw", w, dw, loss, 0.25f, 1e-4, 150);
  CheckGradient("matmul dbias", bias, db, loss, 0.25f, 1e-4);

  std::vector<float> dinp2(N * C, -1.0f), dw2(OC * C, -1.0f), db2(OC, -1.0f);
  MatmulBackward(dinp2.data(), dw2.data(), db2.data(), r.data(), inp.data(), w.data(), N, C, OC);
  ExpectAccumulates(dinp, dinp2, -1.0f, "dinp");
  ExpectAccumulates(dw, dw2, -1.0f, "dw");
  ExpectAccumulates(db, db2, -1.0f, "dbias");
  // alpha scales every product.
  std::vector<float> dinp3(N * C), dw3(OC * C), db3(OC);
  MatmulBackward(dinp3.data(), dw3.data(), db3.data(), r.data(), inp.data(), w.data(), N, C, OC,
                 0.25f);
  for (size_t i = 0; i < dinp.size(); ++i) ASSERT_NEAR(dinp3[i], 0.25f * dinp[i], 1e-5f);
  for (size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(dw3[i], 0.25f * dw[i], 1e-5f);
  for (size_t i = 0; i < db.size(); ++i) ASSERT_NEAR(db3[i], 0.25f * db[i], 1e-5f);
}

// Odd sizes so the chunks have remainders; the forward splits the larger of N and OC.
TEST(KernelGradTest, MatmulSplitByColumns) { CheckMatmul(37, 13, 41); }
TEST(KernelGradTest, MatmulSplitByRows) { CheckMatmul(45, 11, 19); }

void CheckAttention(int B, int T, int C, int NH, size_t samples) {
  auto qkv = NormalRandom(static_cast<size_t>(B) * T * 3 * C, 7, 0.8f);
  auto r = NormalRandom(static_cast<size_t>(B) * T * C, 8);
  std::vector<float> out(static_cast<size_t>(B) * T * C), att(static_cast<size_t>(B) * NH * T * T);
  auto loss = [&] {
    AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return Dot(r, out);
  };
  loss();
  // Causal: probabilities above the diagonal are 0, rows sum to 1.
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int i = 0; i < T; ++i) {
      double s = 0;
      for (int j = 0; j < T; ++j) {
        const float p = att[(static_cast<size_t>(bh) * T + i) * T + j];
        if (j > i) {
          ASSERT_EQ(p, 0.0f);
        }
        s += p;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
  }
  std::vector<float> dqkv(qkv.size());
  AttentionBackward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  CheckGradient("attention dqkv", qkv, dqkv, loss, 1.0f / 256, 2e-3, samples);
  loss();
  std::vector<float> dqkv2(qkv.size(), 2.0f);
  AttentionBackward(dqkv2.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  ExpectAccumulates(dqkv, dqkv2, 2.0f, "dqkv");
}

TEST(KernelGradTest, AttentionShort) { CheckAttention(2, 7, 12, 3, 300); }
// T > the kernel's 64-row block, so the blocked causal products are exercised.
TEST(KernelGradTest, AttentionAcrossBlocks) { CheckAttention(1, 150, 8, 2, 300); }

TEST(KernelGradTest, Gelu) {
  const size_t n = 200;
  auto inp = NormalRandom(n, 11, 2.0f);
  auto r = NormalRandom(n, 12);
  std::vector<float> out(n);
  auto loss = [&] {
    GeluForward(out.data(), inp.data(), n);
    return Dot(r, out);
  };
  loss();
  // Against the formula in double.
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double y = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(out[i], y, 1e-6 * (1 + std::abs(y)));
  }
  std::vector<float> dinp(n);
  GeluBackward(dinp.data(), inp.data(), r.data(), n);
  CheckGradient("gelu", inp, dinp, loss, 1.0f / 256, 1e-4);
  std::vector<float> dinp2(n, 3.0f);
  GeluBackward(dinp2.data(), inp.data(), r.data(), n);
  ExpectAccumulates(dinp, dinp2, 3.0f, "gelu dinp");
}

TEST(KernelGradTest, Residual) {
  const size_t n = 100;
  auto a = NormalRandom(n, 21), b = NormalRandom(n, 22), r = NormalRandom(n, 23);
  std::vector<float> out(n);
  auto loss = [&] {
    ResidualForward(out.data(), a.data(), b.data(), n);
    return Dot(r, out);
  };
  loss();
  std::vector<float> da(n, 0.0f), db(n, 1.0f);
  ResidualBackward(da.data(), db.data(), r.data(), n);
  CheckGradient("residual da", a, da, loss, 0.5f, 1e-5);
  for (auto& x : db) x -= 1.0f;  // db was pre-filled with 1: accumulates
  CheckGradient("residual db", b, db, loss, 0.5f, 1e-5);
}

TEST(KernelGradTest, Encoder) {
  const int B = 3, T = 5, C = 20, V = 7;
  auto wte = NormalRandom(V * C, 31), wpe = NormalRandom(T * C, 32);
  std::vector<int32_t> tokens = {0, 3, 3, 6, 1, 3, 3, 0, 2, 2, 6, 5, 4, 3, 3};  // repeats
  auto r = NormalRandom(B * T * C, 33);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EncoderForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return Dot(r, out);
  };
  loss();
  std::vector<float> dwte(V * C), dwpe(T * C);
  EncoderBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  CheckGradient("encoder dwte", wte, dwte, loss, 0.5f, 1e-5);
  CheckGradient("encoder dwpe", wpe, dwpe, loss, 0.5f, 1e-5);
  std::vector<float> dwte2(V * C, 1.5f), dwpe2(T * C, 1.5f);
  EncoderBackward(dwte2.data(), dwpe2.data(), r.data(), tokens.data(), B, T, C);
  ExpectAccumulates(dwte, dwte2, 1.5f, "dwte");
  ExpectAccumulates(dwpe, dwpe2, 1.5f, "dwpe");
}

TEST(KernelGradTest, CrossEntropyIgnoresPaddingAndMaskedRows) {
  const int N = 6, V = 11, Vp = 16;
  auto logits = NormalRandom(N * Vp, 41, 2.0f);
  std::vector<int32_t> targets = {3, -1, 10, 0, -1, 7};
  std::vector<float> lse(N);
  int count = 0;
  auto loss = [&] {
    return CrossEntropyForward(lse.data(), logits.data(), targets.data(), N, V, Vp, &count) /
           count;
  };
  const double l0 = loss();
  ASSERT_EQ(count, 4);
  // Against a direct double computation over the real columns only.
  double ref = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(logits[n * Vp + v]));
    ref += std::log(s) - logits[n * Vp + targets[n]];
  }
  EXPECT_NEAR(l0, ref / 4, 1e-6 * std::abs(ref));
  // Huge padded logits must not matter.
  for (int n = 0; n < N; ++n) {
    for (int v = V; v < Vp; ++v) logits[n * Vp + v] = 1e4f;
  }
  EXPECT_NEAR(loss(), l0, 1e-9);
  std::vector<float> dlogits = logits;
  CrossEntropyBackwardInPlace(dlogits.data(), lse.data(), targets.data(), N, V, Vp, 1.0f / count);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < Vp; ++v) {
      if (targets[n] < 0 || v >= V) {
        ASSERT_EQ(dlogits[n * Vp + v], 0.0f) << n << "," << v;
      }
    }
  }
  // Every entry: the masked rows and padded columns have zero gradient and zero FD too.
  CheckGradient("cross-entropy dlogits", logits, dlogits, loss, 1.0f / 256, 1e-3);
}

}  // namespace
}  // namespace cohort::engine::cpu
