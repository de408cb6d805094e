// Parity of the CUDA kernels (src/engine/kernels/cuda, all but the training attention) with the float32
// CPU reference (kernels/cpu, engine/optim), issue 5. Each test draws fresh random inputs,
// rounds them to bf16 on the host, feeds the same rounded values to both sides, poisons
// the GPU outputs first (NaN) and compares with RelError (double): < 1e-2 for bf16
// outputs, < 1e-4 for float32 ones. Accumulating outputs start from random values on both
// sides. Sizes include odd ones and unaligned pointers, which take the scalar paths.
// Every test skips when no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "engine/kernels/cpu/cross_entropy.h"
#include "engine/kernels/cpu/encoder.h"
#include "engine/kernels/cpu/gelu.h"
#include "engine/kernels/cpu/kv_attention.h"
#include "engine/kernels/cpu/layernorm.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/kernels/cpu/residual.h"
#include "engine/kernels/cuda/adamw.cuh"
#include "engine/kernels/cuda/common.cuh"
#include "engine/kernels/cuda/cross_entropy.cuh"
#include "engine/kernels/cuda/encoder.cuh"
#include "engine/kernels/cuda/gelu.cuh"
#include "engine/kernels/cuda/grad_norm.cuh"
#include "engine/kernels/cuda/kv_attention.cuh"
#include "engine/kernels/cuda/layernorm.cuh"
#include "engine/kernels/cuda/matmul.cuh"
#include "engine/kernels/cuda/matmul.h"
#include "engine/kernels/cuda/residual.cuh"
#include "engine/optim/adamw.h"
#include "engine/optim/grad_clip.h"
#include "cuda_test_util.h"
#ifdef COHORT_CUDA_EMULATED
#include <cublasLt.h>

#include "cublaslt_emu.h"
#endif

namespace cohort::engine::cuda {
namespace {

namespace ct = ::cohort::engine::cuda::testing;
using ct::DeviceBuffer;
using ct::RelError;
using ct::RandomVector;
using ct::RoundBf16;

constexpr double kBf16Tol = 1e-2;
constexpr double kFloatTol = 1e-4;
constexpr cudaStream_t kStream = nullptr;

std::vector<int32_t> RandomTokens(size_t n, int vocab, uint64_t seed) {
  const std::vector<float> u = RandomVector(n, seed, 1.0f);
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) {
    int v = static_cast<int>((u[i] * 0.5f + 0.5f) * vocab);
    t[i] = v < 0 ? 0 : (v >= vocab ? vocab - 1 : v);
  }
  return t;
}

// Bitwise equality of two float vectors (determinism checks).
bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------------------------------
// common.cuh

// Conversions at an aligned start and one element in (the scalar path); n odd.
void CheckConversions(size_t n, size_t offset) {
  const std::vector<float> x = RandomVector(n, 11 + offset, 3.0f);
  DeviceBuffer<float> src(n + offset);
  DeviceBuffer<ct::bf16> half(n + offset);
  DeviceBuffer<float> back(n + offset);
  half.Poison();
  back.Poison();
  COHORT_ASSERT_CUDA(cudaMemcpy(src.data() + offset, x.data(), n * sizeof(float),
                                cudaMemcpyHostToDevice));
  ConvertToBf16(half.data() + offset, src.data() + offset, n, kStream);
  ConvertToFloat(back.data() + offset, half.data() + offset, n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  const std::vector<ct::bf16> h = half.Download();
  const std::vector<float> f = back.Download();
  const std::vector<float> rounded = RoundBf16(x);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(ct::Bf16Bits(ct::ToFloat(h[offset + i])), ct::Bf16Bits(x[i])) << "element " << i;
    ASSERT_EQ(f[offset + i], rounded[i]) << "element " << i;
  }
  for (size_t i = 0; i < offset; ++i) {
    EXPECT_TRUE(std::isnan(f[i])) << "element " << i << " before the range was written";
  }
}

TEST(CudaCommonTest, ConvertRoundsToNearestEvenAligned) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckConversions(100003, 0);
}

TEST(CudaCommonTest, ConvertRoundsToNearestEvenUnaligned) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckConversions(4099, 1);
}

TEST(CudaCommonTest, FillWritesExactlyTheRange) {
  COHORT_SKIP_WITHOUT_GPU();
  for (size_t offset : {size_t{0}, size_t{1}}) {
    const size_t n = 10007;
    DeviceBuffer<float> buf(n + 2);
    buf.Poison();
    Fill(buf.data() + offset, -2.75f, n, kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    const std::vector<float> f = buf.Download();
    for (size_t i = 0; i < n + 2; ++i) {
      if (i >= offset && i < offset + n) {
        ASSERT_EQ(f[i], -2.75f) << "element " << i << " offset " << offset;
      } else {
        ASSERT_TRUE(std::isnan(f[i])) << "element " << i << " outside the range was written";
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// encoder.cuh

void CheckEncoderForward(int B, int T, int C, int V) {
  const std::vector<int32_t> tokens = RandomTokens(static_cast<size_t>(B) * T, V, 21);
  const std::vector<float> wte = RoundBf16(RandomVector(static_cast<size_t>(V) * C, 22));
  const std::vector<float> wpe = RoundBf16(RandomVector(static_cast<size_t>(T) * C, 23));
  std::vector<float> ref(static_cast<size_t>(B) * T * C);
  cpu::EncoderForward(ref.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);

  DeviceBuffer<int32_t> d_tokens(tokens);
  auto d_wte = ct::UploadBf16(wte);
  auto d_wpe = ct::UploadBf16(wpe);
  DeviceBuffer<ct::bf16> d_out(ref.size());
  d_out.Poison();
  EncoderForward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(ct::DownloadBf16(d_out), ref), kBf16Tol) << B << "x" << T << "x" << C;
}

TEST(CudaEncoderTest, ForwardMatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckEncoderForward(4, 64, 768, 1000);  // 16-byte path
  CheckEncoderForward(3, 17, 40, 13);     // 16-byte path, odd B·T
  CheckEncoderForward(2, 5, 12, 7);       // C % 8 != 0: scalar path
}

// dwte, dwpe start from random values (the backward accumulates). Runs the GPU backward
// twice from the same start and requires bitwise-equal results.
void CheckEncoderBackward(const std::vector<int32_t>& tokens, int B, int T, int C, int V) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " C=" << C << " V=" << V);
  const std::vector<float> dout = RoundBf16(RandomVector(static_cast<size_t>(B) * T * C, 31));
  const std::vector<float> dwte0 = RandomVector(static_cast<size_t>(V) * C, 32, 0.5f);
  const std::vector<float> dwpe0 = RandomVector(static_cast<size_t>(T) * C, 33, 0.5f);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  cpu::EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);

  DeviceBuffer<int32_t> d_tokens(tokens);
  auto d_dout = ct::UploadBf16(dout);
  const size_t scratch_bytes = EncoderBackwardScratchBytes(B, T);
  ASSERT_GT(scratch_bytes, 0u);
  DeviceBuffer<char> scratch(scratch_bytes);
  std::vector<float> first_wte, first_wpe;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<float> d_dwte(dwte0), d_dwpe(dwpe0);
    scratch.Poison();
    EncoderBackward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T, C,
                    scratch.data(), kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    std::vector<float> got_wte = d_dwte.Download(), got_wpe = d_dwpe.Download();
    EXPECT_LT(RelError(got_wte, dwte), kFloatTol) << "dwte";
    EXPECT_LT(RelError(got_wpe, dwpe), kFloatTol) << "dwpe";
    if (run == 0) {
      first_wte = std::move(got_wte);
      first_wpe = std::move(got_wpe);
    } else {
      EXPECT_TRUE(BitwiseEqual(first_wte, got_wte)) << "dwte differs between two runs";
      EXPECT_TRUE(BitwiseEqual(first_wpe, got_wpe)) << "dwpe differs between two runs";
    }
  }
}

TEST(CudaEncoderTest, BackwardMatchesCpuWithRepeatedTokens) {
  COHORT_SKIP_WITHOUT_GPU();
  // A small vocabulary: every token repeats many times; rows never used keep their values.
  CheckEncoderBackward(RandomTokens(4 * 64, 7, 41), 4, 64, 768, 50);
  CheckEncoderBackward(RandomTokens(3 * 17, 5, 42), 3, 17, 40, 9);
  CheckEncoderBackward(RandomTokens(2 * 5, 3, 43), 2, 5, 20, 4);  // scalar path
  // A realistic spread with a larger vocabulary.
  CheckEncoderBackward(RandomTokens(8 * 128, 5000, 44), 8, 128, 64, 5000);
}

TEST(CudaEncoderTest, BackwardOneLongRun) {
  COHORT_SKIP_WITHOUT_GPU();
  // Every position has the same token: one run of 333 (ballots past 32, the unrolled loop
  // and its remainder), and one of the 333 differs to make a second run at the end.
  std::vector<int32_t> tokens(9 * 37, 3);
  tokens[100] = 5;
  CheckEncoderBackward(tokens, 9, 37, 72, 6);
  CheckEncoderBackward(tokens, 9, 37, 9, 6);  // scalar path
}

// The vocabulary-parallel pieces: rank r of 2 holds rows [r·V/2, (r+1)·V/2). Forward:
// the float32 partial is the CPU's, and the two ranks' partials summed, plus wpe, are
// EncoderForward's bits. Backward: the rank's rows and dwpe as the CPU's shard kernels.
void CheckEncoderShard(int B, int T, int C, int V) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " C=" << C << " V=" << V);
  const size_t N = static_cast<size_t>(B) * T;
  const std::vector<int32_t> tokens = RandomTokens(N, V, 51);
  const std::vector<float> wte = RoundBf16(RandomVector(static_cast<size_t>(V) * C, 52));
  const std::vector<float> wpe = RoundBf16(RandomVector(static_cast<size_t>(T) * C, 53));
  const std::vector<float> dout = RoundBf16(RandomVector(N * C, 54));
  DeviceBuffer<int32_t> d_tokens(tokens);
  auto d_wpe = ct::UploadBf16(wpe);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<char> scratch(EncoderBackwardScratchBytes(B, T));
  const int rows = V / 2;
  std::vector<float> sum(N * C, 0.0f);
  for (int r = 0; r < 2; ++r) {
    const int v0 = r * rows;
    const std::vector<float> mine(wte.begin() + static_cast<size_t>(v0) * C,
                                  wte.begin() + static_cast<size_t>(v0 + rows) * C);
    std::vector<float> ref(N * C);
    cpu::EmbeddingShardForward(ref.data(), tokens.data(), mine.data(), v0, rows, N, C);
    auto d_mine = ct::UploadBf16(mine);
    DeviceBuffer<float> d_part(N * C);
    d_part.Poison();
    EncoderShardForward(d_part.data(), d_tokens.data(), d_mine.data(), v0, rows, B, T, C,
                        kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    const std::vector<float> part = d_part.Download();
    EXPECT_TRUE(BitwiseEqual(part, ref)) << "partial of rank " << r;
    for (size_t i = 0; i < part.size(); ++i) sum[i] += part[i];

    const std::vector<float> dwte0 = RandomVector(static_cast<size_t>(rows) * C, 55 + r, 0.5f);
    const std::vector<float> dwpe0 = RandomVector(static_cast<size_t>(T) * C, 57, 0.5f);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    cpu::EmbeddingShardBackward(dwte.data(), dout.data(), tokens.data(), v0, rows, N, C);
    cpu::PositionBackward(dwpe.data(), dout.data(), B, T, C);
    DeviceBuffer<float> d_dwte(dwte0), d_dwpe(dwpe0);
    EncoderShardBackward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), v0, rows,
                         B, T, C, scratch.data(), kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    EXPECT_LT(RelError(d_dwte.Download(), dwte), kFloatTol) << "dwte rows of rank " << r;
    EXPECT_LT(RelError(d_dwpe.Download(), dwpe), kFloatTol) << "dwpe on rank " << r;
  }
  DeviceBuffer<float> d_sum(sum);
  DeviceBuffer<ct::bf16> d_out(N * C), d_whole(N * C);
  d_out.Poison();
  EncoderAddPosition(d_out.data(), d_sum.data(), d_wpe.data(), B, T, C, kStream);
  auto d_wte = ct::UploadBf16(wte);
  EncoderForward(d_whole.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_TRUE(BitwiseEqual(ct::DownloadBf16(d_out), ct::DownloadBf16(d_whole)))
      << "summed partials + wpe differ from EncoderForward";
}

TEST(CudaEncoderTest, VocabularyShardMatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckEncoderShard(2, 16, 64, 128);  // 16-byte wte path
  CheckEncoderShard(3, 7, 12, 10);    // scalar path, odd B·T
}

// ---------------------------------------------------------------------------------------
// layernorm.cuh

struct LayerNormInputs {
  std::vector<float> inp, w, b;
};

LayerNormInputs MakeLayerNormInputs(int N, int C, uint64_t seed) {
  LayerNormInputs in;
  in.inp = RandomVector(static_cast<size_t>(N) * C, seed, 2.0f);
  // A per-row offset so the mean is far from 0 (a one-pass variance would lose digits).
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) in.inp[static_cast<size_t>(n) * C + c] += 0.25f * (n % 7);
  }
  in.inp = RoundBf16(in.inp);
  in.w = RandomVector(C, seed + 1, 1.0f);
  for (float& x : in.w) x += 1.0f;  // weights around 1, as trained ones
  in.w = RoundBf16(in.w);
  in.b = RoundBf16(RandomVector(C, seed + 2, 0.5f));
  return in;
}

// v uploaded as bf16 behind `offset` zeros: offset 1 breaks 16-byte alignment.
DeviceBuffer<ct::bf16> UploadBf16At(const std::vector<float>& v, size_t offset) {
  std::vector<float> r(offset, 0.0f);
  r.insert(r.end(), v.begin(), v.end());
  return ct::UploadBf16(r);
}

void CheckLayerNormForward(int N, int C, size_t offset) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " offset=" << offset);
  const LayerNormInputs in = MakeLayerNormInputs(N, C, 51);
  std::vector<float> ref(in.inp.size()), mean(N), rstd(N);
  cpu::LayerNormForward(ref.data(), mean.data(), rstd.data(), in.inp.data(), in.w.data(),
                        in.b.data(), N, C);

  auto with_offset = [offset](const std::vector<float>& v) { return UploadBf16At(v, offset); };
  auto d_inp = with_offset(in.inp);
  auto d_w = with_offset(in.w);
  auto d_b = with_offset(in.b);
  DeviceBuffer<ct::bf16> d_out(in.inp.size() + offset);
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  d_out.Poison();
  d_mean.Poison();
  d_rstd.Poison();
  LayerNormForward(d_out.data() + offset, d_mean.data(), d_rstd.data(), d_inp.data() + offset,
                   d_w.data() + offset, d_b.data() + offset, N, C, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  std::vector<float> out = ct::DownloadBf16(d_out);
  out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(offset));
  EXPECT_LT(RelError(out, ref), kBf16Tol) << "out";
  EXPECT_LT(RelError(d_mean.Download(), mean), kFloatTol) << "mean";
  EXPECT_LT(RelError(d_rstd.Download(), rstd), kFloatTol) << "rstd";
}

TEST(CudaLayerNormTest, ForwardMatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckLayerNormForward(37, 768, 0);
  CheckLayerNormForward(64, 24, 0);   // C < 32·8: most lanes idle
  CheckLayerNormForward(9, 1600, 0);  // C not a multiple of 256
  CheckLayerNormForward(5, 30, 0);    // C % 8 != 0: scalar path
  CheckLayerNormForward(11, 64, 1);   // unaligned: scalar path
}

// FusedResidualLayerNormForward as the model runs it, the sum written over its first input
// (the projection's output): residual, out, mean and rstd bitwise those of ResidualForward
// then LayerNormForward, and out within bf16 of the CPU's LayerNorm of the bf16 sum.
void CheckFusedResidualLayerNorm(int N, int C, size_t offset) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " offset=" << offset);
  const LayerNormInputs in = MakeLayerNormInputs(N, C, 56);
  const std::vector<float> proj = RoundBf16(RandomVector(in.inp.size(), 57, 0.5f));
  std::vector<float> sum(in.inp.size());
  cpu::ResidualForward(sum.data(), proj.data(), in.inp.data(), sum.size());
  sum = RoundBf16(sum);
  std::vector<float> ref(sum.size()), mean(N), rstd(N);
  cpu::LayerNormForward(ref.data(), mean.data(), rstd.data(), sum.data(), in.w.data(),
                        in.b.data(), N, C);

  auto with_offset = [offset](const std::vector<float>& v) { return UploadBf16At(v, offset); };
  auto d_skip = with_offset(in.inp);
  auto d_w = with_offset(in.w);
  auto d_b = with_offset(in.b);
  struct Outputs {
    std::vector<float> residual, out, mean, rstd;
  };
  auto run = [&](bool fused) {
    auto d_res = with_offset(proj);  // the sum is written over it
    DeviceBuffer<ct::bf16> d_out(sum.size() + offset);
    DeviceBuffer<float> d_mean(N), d_rstd(N);
    d_out.Poison();
    d_mean.Poison();
    d_rstd.Poison();
    ct::bf16* res = d_res.data() + offset;
    if (fused) {
      FusedResidualLayerNormForward(res, d_out.data() + offset, d_mean.data(), d_rstd.data(),
                                    res, d_skip.data() + offset, d_w.data() + offset,
                                    d_b.data() + offset, N, C, kStream);
    } else {
      ResidualForward(res, res, d_skip.data() + offset, sum.size(), kStream);
      LayerNormForward(d_out.data() + offset, d_mean.data(), d_rstd.data(), res,
                       d_w.data() + offset, d_b.data() + offset, N, C, kStream);
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return Outputs{ct::DownloadBf16(d_res), ct::DownloadBf16(d_out), d_mean.Download(),
                   d_rstd.Download()};
  };
  const Outputs two = run(false), one = run(true);
  EXPECT_TRUE(BitwiseEqual(one.residual, two.residual)) << "residual";
  EXPECT_TRUE(BitwiseEqual(one.out, two.out)) << "out";
  EXPECT_TRUE(BitwiseEqual(one.mean, two.mean)) << "mean";
  EXPECT_TRUE(BitwiseEqual(one.rstd, two.rstd)) << "rstd";
  std::vector<float> res(one.residual.begin() + static_cast<std::ptrdiff_t>(offset),
                         one.residual.end());
  std::vector<float> out(one.out.begin() + static_cast<std::ptrdiff_t>(offset), one.out.end());
  EXPECT_TRUE(BitwiseEqual(res, sum)) << "residual vs the CPU's bf16 sum";
  EXPECT_LT(RelError(out, ref), kBf16Tol) << "out vs CPU";
  EXPECT_LT(RelError(one.mean, mean), kFloatTol) << "mean vs CPU";
}

TEST(CudaLayerNormTest, FusedResidualForwardIsResidualThenLayerNorm) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckFusedResidualLayerNorm(37, 768, 0);
  CheckFusedResidualLayerNorm(9, 1600, 0);  // C not a multiple of 256
  CheckFusedResidualLayerNorm(5, 30, 0);    // C % 8 != 0: scalar path
  CheckFusedResidualLayerNorm(11, 64, 1);   // unaligned: scalar path
}

void CheckLayerNormBackward(int N, int C) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C);
  const LayerNormInputs in = MakeLayerNormInputs(N, C, 61);
  std::vector<float> out(in.inp.size()), mean(N), rstd(N);
  cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.w.data(),
                        in.b.data(), N, C);
  const std::vector<float> dout = RoundBf16(RandomVector(in.inp.size(), 62));
  const std::vector<float> dinp0 = RoundBf16(RandomVector(in.inp.size(), 63, 0.5f));
  const std::vector<float> dw0 = RandomVector(C, 64, 0.5f), db0 = RandomVector(C, 65, 0.5f);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  cpu::LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), in.inp.data(),
                         in.w.data(), mean.data(), rstd.data(), N, C);

  auto d_inp = ct::UploadBf16(in.inp);
  auto d_w = ct::UploadBf16(in.w);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<float> d_mean(mean), d_rstd(rstd);
  DeviceBuffer<char> scratch(LayerNormBackwardScratchBytes(N, C));
  std::vector<float> first_dw, first_db;
  for (int run = 0; run < 2; ++run) {
    auto d_dinp = ct::UploadBf16(dinp0);
    DeviceBuffer<float> d_dw(dw0), d_db(db0);
    scratch.Poison();
    LayerNormBackward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                      d_w.data(), d_mean.data(), d_rstd.data(), N, C, scratch.data(), kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    std::vector<float> got_dw = d_dw.Download(), got_db = d_db.Download();
    EXPECT_LT(RelError(ct::DownloadBf16(d_dinp), dinp), kBf16Tol) << "dinp";
    EXPECT_LT(RelError(got_dw, dw), kFloatTol) << "dw";
    EXPECT_LT(RelError(got_db, db), kFloatTol) << "db";
    if (run == 0) {
      first_dw = std::move(got_dw);
      first_db = std::move(got_db);
    } else {
      EXPECT_TRUE(BitwiseEqual(first_dw, got_dw)) << "dw differs between two runs";
      EXPECT_TRUE(BitwiseEqual(first_db, got_db)) << "db differs between two runs";
    }
  }
}

TEST(CudaLayerNormTest, BackwardMatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckLayerNormBackward(37, 768);
  CheckLayerNormBackward(300, 64);   // several row chunks
  CheckLayerNormBackward(5000, 40);  // 128 chunks, the last ones empty
  CheckLayerNormBackward(7, 30);     // scalar path
}

// ---------------------------------------------------------------------------------------
// matmul.h / matmul.cuh

// alpha scales dout in Backward (Matmul::Backward's last parameter); the CPU reference
// gets alpha·dout in float32.
void CheckMatmul(Matmul& mm, int N, int C, int OC, bool with_bias, float alpha = 1.0f) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " OC=" << OC
                                    << " bias=" << with_bias << " alpha=" << alpha);
  const std::vector<float> inp = RoundBf16(RandomVector(static_cast<size_t>(N) * C, 71));
  const std::vector<float> w = RoundBf16(RandomVector(static_cast<size_t>(OC) * C, 72, 0.1f));
  const std::vector<float> bias = RoundBf16(RandomVector(OC, 73, 0.5f));
  const std::vector<float> dout = RoundBf16(RandomVector(static_cast<size_t>(N) * OC, 74));
  const std::vector<float> dw0 = RandomVector(static_cast<size_t>(OC) * C, 75, 0.5f);
  const std::vector<float> dbias0 = RandomVector(OC, 76, 0.5f);

  std::vector<float> out(static_cast<size_t>(N) * OC);
  cpu::MatmulForward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C,
                     OC);
  std::vector<float> dinp(static_cast<size_t>(N) * C, 0.0f), dw = dw0, dbias = dbias0;
  std::vector<float> scaled_dout = dout;
  for (float& x : scaled_dout) x *= alpha;
  cpu::MatmulBackward(dinp.data(), dw.data(), with_bias ? dbias.data() : nullptr,
                      scaled_dout.data(), inp.data(), w.data(), N, C, OC);

  auto d_inp = ct::UploadBf16(inp);
  auto d_w = ct::UploadBf16(w);
  auto d_bias = ct::UploadBf16(bias);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<ct::bf16> d_out(out.size()), d_dinp(dinp.size());
  DeviceBuffer<float> d_dw(dw0), d_dbias(dbias0);
  d_out.Poison();
  d_dinp.Poison();  // the GPU backward overwrites dinp: poison proves every element written

  auto fwd = mm.Forward(d_out.data(), d_inp.data(), d_w.data(),
                        with_bias ? d_bias.data() : nullptr, N, C, OC);
  ASSERT_TRUE(fwd.has_value()) << fwd.error().ToString();
  auto bwd = mm.Backward(d_dinp.data(), d_dw.data(), with_bias ? d_dbias.data() : nullptr,
                         d_dout.data(), d_inp.data(), d_w.data(), N, C, OC, alpha);
  ASSERT_TRUE(bwd.has_value()) << bwd.error().ToString();
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(ct::DownloadBf16(d_out), out), kBf16Tol) << "out";
  EXPECT_LT(RelError(ct::DownloadBf16(d_dinp), dinp), kBf16Tol) << "dinp";
  // dw: products of bf16 values are exact in float32 and summed in float32 (plus the
  // pre-filled values): a float32 path.
  EXPECT_LT(RelError(d_dw.Download(), dw), kFloatTol) << "dw";
  const std::vector<float> got_dbias = d_dbias.Download();
  if (with_bias) {
    EXPECT_LT(RelError(got_dbias, dbias), kFloatTol) << "dbias";
  } else {
    EXPECT_TRUE(BitwiseEqual(got_dbias, dbias0)) << "dbias written without a bias";
  }
}

// The epilogue switches: everything on (the default), everything off (the kernels).
const MatmulOptions kEpiloguesOn{};
const MatmulOptions kEpiloguesOff{false, false};

TEST(CudaMatmulTest, ForwardAndBackwardMatchCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  for (const MatmulOptions& o : {kEpiloguesOn, kEpiloguesOff}) {
    SCOPED_TRACE(::testing::Message() << "bias_grad_epilogue=" << o.bias_grad_epilogue);
    auto mm = Matmul::Create(kStream, o);
    ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
    CheckMatmul(*mm, 4 * 64, 768, 2304, true);  // GPT-2's qkv projection, B·T = 256
    CheckMatmul(*mm, 4 * 64, 768, 2304, true);  // the same shape again: cached algorithm
    CheckMatmul(*mm, 4 * 64, 3072, 768, false);
    CheckMatmul(*mm, 37, 64, 200, true);  // awkward sizes
    CheckMatmul(*mm, 37, 64, 200, false);
    std::printf("bias_grad_epilogue=%d: %lld bias-gradient fallbacks\n", o.bias_grad_epilogue,
                static_cast<long long>(mm->fallbacks().bias_grad));
  }
}

// The MLP's pair through ForwardGelu and BackwardGelu against the CPU's matmul + gelu:
// forward fc: pre = x·wᵀ + b, out = gelu(pre) (N, OC); backward of the next product, whose
// input is gelu(pre_in) (N, C): dinp = gelu'(pre_in) ⊙ (dout · w), dw, dbias.
void CheckMatmulGelu(Matmul& mm, int N, int C, int OC) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " OC=" << OC);
  const size_t NC = static_cast<size_t>(N) * C, NOC = static_cast<size_t>(N) * OC;
  const std::vector<float> inp = RoundBf16(RandomVector(NC, 171));
  const std::vector<float> w = RoundBf16(RandomVector(static_cast<size_t>(OC) * C, 172, 0.1f));
  const std::vector<float> bias = RoundBf16(RandomVector(OC, 173, 0.5f));
  std::vector<float> pre(NOC), out(NOC);
  cpu::MatmulForward(pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  cpu::GeluForward(out.data(), pre.data(), NOC);

  auto d_inp = ct::UploadBf16(inp);
  auto d_w = ct::UploadBf16(w);
  auto d_bias = ct::UploadBf16(bias);
  DeviceBuffer<ct::bf16> d_out(NOC), d_pre(NOC);
  d_out.Poison();
  d_pre.Poison();
  auto fwd = mm.ForwardGelu(d_out.data(), d_pre.data(), d_inp.data(), d_w.data(), d_bias.data(),
                            N, C, OC);
  ASSERT_TRUE(fwd.has_value()) << fwd.error().ToString();
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(ct::DownloadBf16(d_pre), pre), kBf16Tol) << "pre-activation";
  EXPECT_LT(RelError(ct::DownloadBf16(d_out), out), kBf16Tol) << "gelu out";

  // Backward: pre_in (N, C) bf16, the product's input gelu(pre_in) rounded to bf16 as the
  // GPU stores it.
  const std::vector<float> pre_in = RoundBf16(RandomVector(NC, 174, 2.0f));
  std::vector<float> act(NC);
  cpu::GeluForward(act.data(), pre_in.data(), NC);
  act = RoundBf16(act);
  const std::vector<float> dout = RoundBf16(RandomVector(NOC, 175));
  const std::vector<float> dw0 = RandomVector(static_cast<size_t>(OC) * C, 176, 0.5f);
  const std::vector<float> dbias0 = RandomVector(OC, 177, 0.5f);
  std::vector<float> dact(NC, 0.0f), dinp(NC, 0.0f), dw = dw0, dbias = dbias0;
  cpu::MatmulBackward(dact.data(), dw.data(), dbias.data(), dout.data(), act.data(), w.data(), N,
                      C, OC);
  cpu::GeluBackward(dinp.data(), pre_in.data(), dact.data(), NC);

  auto d_pre_in = ct::UploadBf16(pre_in);
  auto d_act = ct::UploadBf16(act);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<ct::bf16> d_dinp(NC);
  DeviceBuffer<float> d_dw(dw0), d_dbias(dbias0);
  d_dinp.Poison();
  auto bwd = mm.BackwardGelu(d_dinp.data(), d_pre_in.data(), d_dw.data(), d_dbias.data(),
                             d_dout.data(), d_act.data(), d_w.data(), N, C, OC);
  ASSERT_TRUE(bwd.has_value()) << bwd.error().ToString();
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(ct::DownloadBf16(d_dinp), dinp), kBf16Tol) << "dinp through gelu'";
  EXPECT_LT(RelError(d_dw.Download(), dw), kFloatTol) << "dw";
  EXPECT_LT(RelError(d_dbias.Download(), dbias), kFloatTol) << "dbias";
}

TEST(CudaMatmulTest, GeluEpiloguesMatchCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  for (const MatmulOptions& o : {kEpiloguesOn, kEpiloguesOff}) {
    SCOPED_TRACE(::testing::Message() << "gelu_epilogue=" << o.gelu_epilogue);
    auto mm = Matmul::Create(kStream, o);
    ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
    CheckMatmulGelu(*mm, 4 * 32, 768, 3072);  // GPT-2's fc (forward) and fc_proj (backward)
    CheckMatmulGelu(*mm, 4 * 32, 768, 3072);  // cached algorithms
    CheckMatmulGelu(*mm, 40, 64, 200);
    const MatmulFallbacks f = mm->fallbacks();
    std::printf("gelu_epilogue=%d: fallbacks gelu forward %lld, backward %lld, bias grad %lld\n",
                o.gelu_epilogue, static_cast<long long>(f.gelu_forward),
                static_cast<long long>(f.gelu_backward), static_cast<long long>(f.bias_grad));
    if (!o.gelu_epilogue) {
      EXPECT_EQ(f.total(), 0) << "fallbacks counted with the epilogues off";
    }
  }
}

// A leading dimension cuBLASLt's GELU aux matrix cannot have (not a multiple of 8): the
// products take the kernels, are counted, and still compute the same function.
TEST(CudaMatmulTest, GeluFallsBackWhereTheEpilogueCannotRun) {
  COHORT_SKIP_WITHOUT_GPU();
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  CheckMatmulGelu(*mm, 24, 36, 44);  // forward aux ld 44, backward aux ld 36
  EXPECT_EQ(mm->fallbacks().gelu_forward, 1);
  EXPECT_EQ(mm->fallbacks().gelu_backward, 1);
}

#ifdef COHORT_CUDA_EMULATED
// The emulated cuBLASLt made to offer no algorithm for each epilogue, as the real one may
// on some shape or type: every product falls back to the kernels, is counted once per call,
// and the results still match the CPU.
TEST(CudaMatmulTest, EveryEpilogueFallsBackWhenCublasLtHasNoAlgorithm) {
  for (uint32_t e : {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                     CUBLASLT_EPILOGUE_BGRADB}) {
    CohortEmuCublasLtDeclineEpilogue(e, 1);
  }
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  CheckMatmulGelu(*mm, 40, 64, 200);
  CheckMatmulGelu(*mm, 40, 64, 200);  // the declined problem is remembered, still counted
  CheckMatmul(*mm, 37, 64, 200, true);
  for (uint32_t e : {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                     CUBLASLT_EPILOGUE_BGRADB}) {
    CohortEmuCublasLtDeclineEpilogue(e, 0);
  }
  const MatmulFallbacks f = mm->fallbacks();
  EXPECT_EQ(f.gelu_forward, 2);
  EXPECT_EQ(f.gelu_backward, 2);
  EXPECT_EQ(f.bias_grad, 3);  // two BackwardGelu, one Backward
}
#endif

// alpha scales both products (the single-pass classifier's loss_scale); with a bias
// gradient it is refused, since the column sums would not scale.
TEST(CudaMatmulTest, BackwardAlphaScalesDout) {
  COHORT_SKIP_WITHOUT_GPU();
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  CheckMatmul(*mm, 37, 64, 200, false, 0.5f);
  CheckMatmul(*mm, 2 * 16, 128, 384, false, 0.37f);  // the small model's classifier
  DeviceBuffer<ct::bf16> buf(64);
  DeviceBuffer<float> dw(64), dbias(8);
  auto r = mm->Backward(nullptr, dw.data(), dbias.data(), buf.data(), buf.data(), nullptr, 8, 8,
                        8, 0.5f);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("alpha"), std::string::npos) << r.error().message;
}

TEST(CudaMatmulTest, BackwardSkipsNullDinp) {
  COHORT_SKIP_WITHOUT_GPU();
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  const int N = 16, C = 32, OC = 48;
  const std::vector<float> inp = RoundBf16(RandomVector(static_cast<size_t>(N) * C, 81));
  const std::vector<float> dout = RoundBf16(RandomVector(static_cast<size_t>(N) * OC, 82));
  const std::vector<float> dw0 = RandomVector(static_cast<size_t>(OC) * C, 83);
  std::vector<float> dw = dw0;
  cpu::MatmulBackward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), nullptr, N, C, OC);
  auto d_inp = ct::UploadBf16(inp);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<float> d_dw(dw0);
  auto r = mm->Backward(nullptr, d_dw.data(), nullptr, d_dout.data(), d_inp.data(), nullptr, N,
                        C, OC);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(d_dw.Download(), dw), kFloatTol);
}

TEST(CudaMatmulTest, RejectsBadShapes) {
  COHORT_SKIP_WITHOUT_GPU();
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  DeviceBuffer<ct::bf16> buf(64);
  auto r = mm->Forward(buf.data(), buf.data(), buf.data(), nullptr, 0, 8, 8);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  // The GELU pair's output and pre-activation (resp. dinp and pre) must be apart.
  auto fwd = mm->ForwardGelu(buf.data(), buf.data() + 8, buf.data(), buf.data(), nullptr, 2, 8, 8);
  ASSERT_FALSE(fwd.has_value());
  EXPECT_EQ(fwd.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(fwd.error().message.find("overlap"), std::string::npos) << fwd.error().ToString();
  DeviceBuffer<float> dw(64);
  auto bwd = mm->BackwardGelu(buf.data(), buf.data(), dw.data(), nullptr, buf.data(), buf.data(),
                              buf.data(), 2, 8, 8);
  ASSERT_FALSE(bwd.has_value());
  EXPECT_EQ(bwd.error().code, ErrorCode::kInvalidArgument);
  Matmul moved = std::move(*mm);
  auto after = mm->Forward(buf.data(), buf.data(), buf.data(), nullptr, 2, 8, 8);
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().code, ErrorCode::kFailedPrecondition);
}

// dbias (OC) += Σ_rows dout (N, OC) through `add(dbias, dout)`, twice from the same start:
// close to the sums and bitwise equal run to run.
template <typename AddFn>
void CheckBiasGradDeterministic(int N, int OC, AddFn add) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " OC=" << OC);
  const std::vector<float> dout = RoundBf16(RandomVector(static_cast<size_t>(N) * OC, 91));
  const std::vector<float> db0 = RandomVector(OC, 92);
  std::vector<float> ref = db0;
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) ref[o] += dout[static_cast<size_t>(n) * OC + o];
  }
  auto d_dout = ct::UploadBf16(dout);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<float> d_db(db0);
    add(d_db.data(), d_dout.data());
    COHORT_ASSERT_LAUNCHES_OK();
    std::vector<float> got = d_db.Download();
    EXPECT_LT(RelError(got, ref), kFloatTol);
    if (run == 0) {
      first = std::move(got);
    } else {
      EXPECT_TRUE(BitwiseEqual(first, got));
    }
  }
}

// The kernels (BiasGradient) and Matmul::Backward with the BGRADB epilogue (or, where
// cuBLASLt offers none, the kernels again: the printed count says which ran).
TEST(CudaMatmulTest, BiasGradientIsDeterministic) {
  COHORT_SKIP_WITHOUT_GPU();
  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  const int C = 64;
  for (auto [N, OC] : {std::pair{5000, 200}, std::pair{37, 13}, std::pair{1, 8}}) {
    DeviceBuffer<char> scratch(BiasGradScratchBytes(N, OC));
    CheckBiasGradDeterministic(N, OC, [&](float* db, const bf16* dout) {
      scratch.Poison();
      BiasGradient(db, dout, N, OC, scratch.data(), kStream);
    });
    auto d_inp = ct::UploadBf16(RoundBf16(RandomVector(static_cast<size_t>(N) * C, 94)));
    DeviceBuffer<float> d_dw(static_cast<size_t>(OC) * C);
    CheckBiasGradDeterministic(N, OC, [&](float* db, const bf16* dout) {
      auto r = mm->Backward(nullptr, d_dw.data(), db, dout, d_inp.data(), nullptr, N, C, OC);
      ASSERT_TRUE(r.has_value()) << r.error().ToString();
    });
  }
  std::printf("bias-gradient epilogue fallbacks: %lld of 6 calls\n",
              static_cast<long long>(mm->fallbacks().bias_grad));
}

// ---------------------------------------------------------------------------------------
// gelu.cuh, residual.cuh

void CheckGelu(size_t n, size_t offset) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset);
  std::vector<float> inp = RoundBf16(RandomVector(n + offset, 101, 4.0f));
  std::vector<float> dout = RoundBf16(RandomVector(n + offset, 102));
  std::vector<float> out(n), dinp(n, 0.0f);
  cpu::GeluForward(out.data(), inp.data() + offset, n);
  cpu::GeluBackward(dinp.data(), inp.data() + offset, dout.data() + offset, n);
  auto tail = [offset](std::vector<float> v) {
    v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(offset));
    return v;
  };

  auto d_inp = ct::UploadBf16(inp);
  auto d_dout = ct::UploadBf16(dout);
  DeviceBuffer<ct::bf16> d_out(n + offset), d_dinp(n + offset);
  d_out.Poison();
  d_dinp.Poison();
  GeluForward(d_out.data() + offset, d_inp.data() + offset, n, kStream);
  GeluBackward(d_dinp.data() + offset, d_inp.data() + offset, d_dout.data() + offset, n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_out)), out), kBf16Tol) << "forward";
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_dinp)), dinp), kBf16Tol) << "backward";

  // In place: out aliases inp, dinp aliases dout.
  GeluForward(d_inp.data() + offset, d_inp.data() + offset, n, kStream);
  GeluBackward(d_dout.data() + offset, d_out.data() + offset /* any input */, d_dout.data() + offset,
               n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_inp)), out), kBf16Tol) << "forward in place";
  std::vector<float> gelu_of_out = tail(ct::DownloadBf16(d_out));
  std::vector<float> dinp2(n, 0.0f);
  cpu::GeluBackward(dinp2.data(), gelu_of_out.data(), dout.data() + offset, n);
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_dout)), dinp2), kBf16Tol) << "backward in place";
}

TEST(CudaGeluTest, MatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckGelu(8 * 1000, 0);
  CheckGelu(100003, 0);  // n % 8 != 0: vector body and scalar tail
  CheckGelu(1001, 1);    // unaligned: scalar path
}

void CheckResidual(size_t n, size_t offset) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset);
  const std::vector<float> a = RoundBf16(RandomVector(n + offset, 111));
  const std::vector<float> b = RoundBf16(RandomVector(n + offset, 112));
  std::vector<float> sum(n);
  cpu::ResidualForward(sum.data(), a.data() + offset, b.data() + offset, n);
  auto tail = [offset](std::vector<float> v) {
    v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(offset));
    return v;
  };
  auto d_a = ct::UploadBf16(a);
  auto d_b = ct::UploadBf16(b);
  DeviceBuffer<ct::bf16> d_out(n + offset);
  d_out.Poison();
  ResidualForward(d_out.data() + offset, d_a.data() + offset, d_b.data() + offset, n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_out)), sum), kBf16Tol) << "forward";
  // AddInPlace: a += b; then the forward aliasing its output with b: b = a + b.
  AddInPlace(d_a.data() + offset, d_b.data() + offset, n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  const std::vector<float> a_plus_b = tail(ct::DownloadBf16(d_a));
  EXPECT_LT(RelError(a_plus_b, sum), kBf16Tol) << "AddInPlace";
  ResidualForward(d_b.data() + offset, d_a.data() + offset, d_b.data() + offset, n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  std::vector<float> ref2(n);
  cpu::ResidualForward(ref2.data(), a_plus_b.data(), b.data() + offset, n);
  EXPECT_LT(RelError(tail(ct::DownloadBf16(d_b)), ref2), kBf16Tol) << "forward in place";
}

TEST(CudaResidualTest, MatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckResidual(8 * 999, 0);
  CheckResidual(65537, 0);
  CheckResidual(77, 1);
}

// The row-parallel finish: bf16(bf16(sum + bias[c]) + residual), exactly the two roundings,
// in place over the residual.
TEST(CudaResidualTest, BiasResidualFromSumRoundsTwice) {
  COHORT_SKIP_WITHOUT_GPU();
  const int N = 37, C = 24;
  const std::vector<float> sum = RandomVector(static_cast<size_t>(N) * C, 121);
  const std::vector<float> bias = RoundBf16(RandomVector(C, 122));
  const std::vector<float> res = RoundBf16(RandomVector(static_cast<size_t>(N) * C, 123));
  std::vector<float> ref(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    const float y = ct::Bf16BitsToFloat(ct::Bf16Bits(sum[i] + bias[i % C]));
    ref[i] = ct::Bf16BitsToFloat(ct::Bf16Bits(y + res[i]));
  }
  DeviceBuffer<float> d_sum(sum);
  auto d_bias = ct::UploadBf16(bias);
  auto d_res = ct::UploadBf16(res);
  BiasResidualFromSum(d_res.data(), d_sum.data(), d_bias.data(), d_res.data(), N, C, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_TRUE(BitwiseEqual(ct::DownloadBf16(d_res), ref));
}

// ---------------------------------------------------------------------------------------
// cross_entropy.cuh

// T: the rows are N / T sequences of T; the training pass also sets each sequence's last
// row (b·T + T − 1) aside, and the copy must be the logits before the pass, bitwise.
void CheckClassifier(int N, int V, int Vp, int T) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " V=" << V << " Vp=" << Vp << " T=" << T);
  ASSERT_EQ(N % T, 0);
  std::vector<float> logits = RoundBf16(RandomVector(static_cast<size_t>(N) * Vp, 121, 4.0f));
  std::vector<int32_t> targets = RandomTokens(N, V, 122);
  targets[1] = -1;  // ignored rows
  targets[N - 1] = -1;
  targets[0] = V - 1;  // the last real column
  int count = 0;
  std::vector<float> lse(N);
  cpu::CrossEntropyForward(lse.data(), logits.data(), targets.data(), N, V, Vp, &count);
  ASSERT_EQ(count, N - 2);
  std::vector<float> losses(N);
  double total = 0.0;
  for (int n = 0; n < N; ++n) {
    const int t = targets[n];
    losses[n] = t < 0 ? 0.0f : lse[n] - logits[static_cast<size_t>(n) * Vp + t];
    total += losses[n];
  }
  const float loss_scale = 3.0f;
  const float scale = loss_scale / static_cast<float>(count);
  std::vector<float> dlogits = logits;
  cpu::CrossEntropyBackwardInPlace(dlogits.data(), lse.data(), targets.data(), N, V, Vp, scale);

  DeviceBuffer<int32_t> d_targets(targets);
  DeviceBuffer<float> d_losses(N), d_sum(1);

  // Evaluation: losses only, logits untouched.
  auto d_logits = ct::UploadBf16(logits);
  d_losses.Poison();
  FusedClassifier(d_logits.data(), d_losses.data(), d_targets.data(), N, V, Vp, scale, false,
                  /*last_rows=*/nullptr, T, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  EXPECT_LT(RelError(d_losses.Download(), losses), kFloatTol) << "losses (eval)";
  EXPECT_TRUE(BitwiseEqual(ct::DownloadBf16(d_logits), logits)) << "eval wrote the logits";

  // Training: losses and dlogits in place, the last rows set aside.
  d_losses.Poison();
  DeviceBuffer<ct::bf16> d_last(static_cast<size_t>(N / T) * Vp);
  d_last.Poison();
  FusedClassifier(d_logits.data(), d_losses.data(), d_targets.data(), N, V, Vp, scale, true,
                  d_last.data(), T, kStream);
  d_sum.Poison();
  SumLosses(d_sum.data(), d_losses.data(), N, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  const std::vector<float> got_losses = d_losses.Download();
  EXPECT_LT(RelError(got_losses, losses), kFloatTol) << "losses";
  const std::vector<float> got = ct::DownloadBf16(d_logits);
  EXPECT_LT(RelError(got, dlogits), kBf16Tol) << "dlogits";
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < Vp; ++v) {
      const float g = got[static_cast<size_t>(n) * Vp + v];
      if (targets[n] < 0 || v >= V) {
        ASSERT_EQ(g, 0.0f) << "row " << n << " column " << v << " must be zero";
      }
    }
  }
  EXPECT_NEAR(d_sum.Download()[0], total, kFloatTol * std::abs(total)) << "SumLosses";
  const std::vector<float> last = ct::DownloadBf16(d_last);
  for (int b = 0; b < N / T; ++b) {
    const size_t row = static_cast<size_t>(b) * T + T - 1;
    for (int v = 0; v < Vp; ++v) {
      ASSERT_EQ(ct::Bf16Bits(last[static_cast<size_t>(b) * Vp + v]),
                ct::Bf16Bits(logits[row * Vp + v]))
          << "sequence " << b << " (row " << row << ", target " << targets[row] << ") column "
          << v << " set aside";
    }
  }
}

TEST(CudaCrossEntropyTest, FusedClassifierMatchesCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  // The ignored row N − 1 is always a last row: the copy on the ignored path.
  CheckClassifier(37, 1000, 1024, 37);   // padded vocabulary, 16-byte path
  CheckClassifier(37, 1000, 1024, 1);    // every row a sequence's last
  CheckClassifier(8, 50257, 50304, 4);   // GPT-2's vocabulary
  CheckClassifier(5, 257, 259, 5);       // Vp % 8 != 0: scalar path
  CheckClassifier(6, 3, 8, 2);           // fewer columns than threads
}

// The single-pass classifier as GptCudaModel runs it with loss_scale 0.5: the classifier
// writes (softmax − onehot) / count, then the head's products take alpha = loss_scale; the
// same products as when the classifier writes loss_scale·(softmax − onehot) / count and
// the products take alpha 1 (the two-pass path), and as the CPU.
TEST(CudaCrossEntropyTest, SinglePassWithLossScaleMatchesTwoPass) {
  COHORT_SKIP_WITHOUT_GPU();
  const int B = 2, T = 8, N = B * T, C = 64, V = 300, Vp = 384;
  const float loss_scale = 0.5f;
  const std::vector<float> logits =
      RoundBf16(RandomVector(static_cast<size_t>(N) * Vp, 181, 4.0f));
  const std::vector<float> lnf = RoundBf16(RandomVector(static_cast<size_t>(N) * C, 182));
  const std::vector<float> wte = RoundBf16(RandomVector(static_cast<size_t>(Vp) * C, 183, 0.1f));
  std::vector<int32_t> targets = RandomTokens(N, V, 184);
  targets[3] = -1;
  int count = 0;
  std::vector<float> lse(N);
  cpu::CrossEntropyForward(lse.data(), logits.data(), targets.data(), N, V, Vp, &count);
  std::vector<float> dlogits = logits;
  cpu::CrossEntropyBackwardInPlace(dlogits.data(), lse.data(), targets.data(), N, V, Vp,
                                   loss_scale / static_cast<float>(count));
  std::vector<float> dlnf(static_cast<size_t>(N) * C, 0.0f), dwte(static_cast<size_t>(Vp) * C);
  cpu::MatmulBackward(dlnf.data(), dwte.data(), nullptr, dlogits.data(), lnf.data(), wte.data(),
                      N, C, Vp);

  auto mm = Matmul::Create(kStream);
  ASSERT_TRUE(mm.has_value()) << mm.error().ToString();
  DeviceBuffer<int32_t> d_targets(targets);
  DeviceBuffer<float> d_losses(N);
  auto d_lnf = ct::UploadBf16(lnf);
  auto d_wte = ct::UploadBf16(wte);
  std::vector<std::vector<float>> got_dlnf, got_dwte;
  for (bool single : {true, false}) {
    SCOPED_TRACE(single ? "single pass" : "two passes");
    auto d_logits = ct::UploadBf16(logits);
    DeviceBuffer<ct::bf16> d_dlnf(dlnf.size());
    DeviceBuffer<float> d_dwte(dwte.size());
    COHORT_ASSERT_CUDA(cudaMemset(d_dwte.data(), 0, dwte.size() * sizeof(float)));
    d_dlnf.Poison();
    const float scale = (single ? 1.0f : loss_scale) / static_cast<float>(count);
    FusedClassifier(d_logits.data(), d_losses.data(), d_targets.data(), N, V, Vp, scale, true,
                    nullptr, T, kStream);
    auto r = mm->Backward(d_dlnf.data(), d_dwte.data(), nullptr, d_logits.data(), d_lnf.data(),
                          d_wte.data(), N, C, Vp, single ? loss_scale : 1.0f);
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    COHORT_ASSERT_LAUNCHES_OK();
    got_dlnf.push_back(ct::DownloadBf16(d_dlnf));
    got_dwte.push_back(d_dwte.Download());
    EXPECT_LT(RelError(got_dlnf.back(), dlnf), kBf16Tol) << "dlnf";
    EXPECT_LT(RelError(got_dwte.back(), dwte), kBf16Tol) << "dwte";
  }
  // loss_scale 0.5 is a power of two: scaling before or after the bf16 rounding of dlogits
  // gives the same products.
  EXPECT_TRUE(BitwiseEqual(got_dwte[0], got_dwte[1])) << "dwte, single pass vs two passes";
  EXPECT_TRUE(BitwiseEqual(got_dlnf[0], got_dlnf[1])) << "dlnf, single pass vs two passes";
}

// The vocabulary-parallel pieces on `shards` column slices of (N, Vp) logits: each shard's
// statistics match the CPU shard kernels, and combined as the tensor group combines them
// (max, then sums) they give the whole row's losses and dlogits (kernels/cpu).
void CheckShardedClassifier(int N, int V, int Vp, int shards) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " V=" << V << " Vp=" << Vp
                                    << " shards=" << shards);
  ASSERT_EQ(Vp % shards, 0);
  const int Vs = Vp / shards;
  std::vector<float> logits = RoundBf16(RandomVector(static_cast<size_t>(N) * Vp, 171, 4.0f));
  std::vector<int32_t> targets = RandomTokens(N, V, 172);
  targets[1] = -1;
  targets[0] = V - 1;
  int count = 0;
  std::vector<float> lse(N);
  cpu::CrossEntropyForward(lse.data(), logits.data(), targets.data(), N, V, Vp, &count);
  const float scale = 2.0f / static_cast<float>(count);
  std::vector<float> dlogits = logits;
  cpu::CrossEntropyBackwardInPlace(dlogits.data(), lse.data(), targets.data(), N, V, Vp, scale);

  std::vector<std::vector<float>> slices(shards, std::vector<float>(static_cast<size_t>(N) * Vs));
  for (int r = 0; r < shards; ++r) {
    for (int n = 0; n < N; ++n) {
      std::memcpy(slices[r].data() + static_cast<size_t>(n) * Vs,
                  logits.data() + static_cast<size_t>(n) * Vp + r * Vs, Vs * sizeof(float));
    }
  }
  DeviceBuffer<int32_t> d_targets(targets);
  DeviceBuffer<float> d_a(N), d_b(N), d_stat(N);
  // Max over the group.
  std::vector<float> group_max(N, -INFINITY);
  for (int r = 0; r < shards; ++r) {
    auto d_logits = ct::UploadBf16(slices[r]);
    d_a.Poison();
    CrossEntropyShardMax(d_a.data(), d_logits.data(), N, Vs, r * Vs, V, kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    std::vector<float> want(N);
    cpu::CrossEntropyShardMax(want.data(), slices[r].data(), N, Vs, r * Vs, V);
    const std::vector<float> got = d_a.Download();
    EXPECT_TRUE(BitwiseEqual(got, want)) << "row max of shard " << r;
    for (int n = 0; n < N; ++n) group_max[n] = std::max(group_max[n], got[n]);
  }
  // Sums with the group's max.
  d_stat.Upload(group_max);
  std::vector<double> sum(N, 0.0), target_logit(N, 0.0);
  for (int r = 0; r < shards; ++r) {
    auto d_logits = ct::UploadBf16(slices[r]);
    d_a.Poison();
    d_b.Poison();
    CrossEntropyShardSums(d_a.data(), d_b.data(), d_logits.data(), d_targets.data(),
                          d_stat.data(), N, Vs, r * Vs, V, kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    std::vector<float> want_sum(N), want_target(N);
    cpu::CrossEntropyShardSums(want_sum.data(), want_target.data(), slices[r].data(),
                               targets.data(), group_max.data(), N, Vs, r * Vs, V);
    const std::vector<float> got_sum = d_a.Download(), got_target = d_b.Download();
    EXPECT_LT(RelError(got_sum, want_sum), kFloatTol) << "sum of exponentials of shard " << r;
    EXPECT_TRUE(BitwiseEqual(got_target, want_target)) << "target logit of shard " << r;
    for (int n = 0; n < N; ++n) {
      sum[n] += got_sum[n];
      target_logit[n] += got_target[n];
    }
  }
  std::vector<float> group_lse(N), losses(N), want_losses(N);
  for (int n = 0; n < N; ++n) {
    group_lse[n] = group_max[n] + static_cast<float>(std::log(sum[n]));
    const int t = targets[n];
    losses[n] = t < 0 ? 0.0f : group_lse[n] - static_cast<float>(target_logit[n]);
    want_losses[n] = t < 0 ? 0.0f : lse[n] - logits[static_cast<size_t>(n) * Vp + t];
  }
  EXPECT_LT(RelError(losses, want_losses), kFloatTol) << "losses";
  // Backward on each shard from the group's lse; the slices together are the row's dlogits.
  d_stat.Upload(group_lse);
  std::vector<float> got(static_cast<size_t>(N) * Vp);
  for (int r = 0; r < shards; ++r) {
    auto d_logits = ct::UploadBf16(slices[r]);
    CrossEntropyShardBackward(d_logits.data(), d_stat.data(), d_targets.data(), N, Vs, r * Vs,
                              V, scale, kStream);
    COHORT_ASSERT_LAUNCHES_OK();
    const std::vector<float> slice = ct::DownloadBf16(d_logits);
    for (int n = 0; n < N; ++n) {
      std::memcpy(got.data() + static_cast<size_t>(n) * Vp + r * Vs,
                  slice.data() + static_cast<size_t>(n) * Vs, Vs * sizeof(float));
    }
  }
  EXPECT_LT(RelError(got, dlogits), kBf16Tol) << "dlogits";
  for (int n = 0; n < N; ++n) {
    for (int v = V; v < Vp; ++v) {
      ASSERT_EQ(got[static_cast<size_t>(n) * Vp + v], 0.0f) << "padded column " << v;
    }
  }
}

TEST(CudaCrossEntropyTest, VocabularyParallelPiecesCombineToTheWholeRow) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckShardedClassifier(37, 1000, 1024, 2);  // 16-byte path, padding in the last shard
  CheckShardedClassifier(8, 50257, 50304, 4);  // GPT-2's vocabulary on 4 ranks
  CheckShardedClassifier(5, 257, 264, 2);      // Vs % 8 != 0: scalar path
  CheckShardedClassifier(6, 20, 64, 4);        // shards holding only padding
}

TEST(CudaCrossEntropyTest, SumLossesIsDeterministic) {
  COHORT_SKIP_WITHOUT_GPU();
  for (int n : {1, 37, 5000, 100003}) {
    const std::vector<float> losses = RandomVector(n, 131, 5.0f);
    double total = 0.0, abs_total = 0.0;
    for (float x : losses) {
      total += x;
      abs_total += std::abs(x);
    }
    DeviceBuffer<float> d_losses(losses), d_sum(1);
    float first = 0.0f;
    for (int run = 0; run < 2; ++run) {
      d_sum.Poison();
      SumLosses(d_sum.data(), d_losses.data(), n, kStream);
      COHORT_ASSERT_LAUNCHES_OK();
      const float got = d_sum.Download()[0];
      // Random signs: judge the float32 rounding against the sum of magnitudes.
      EXPECT_NEAR(got, total, 1e-5 * abs_total + 1e-6) << "n=" << n;
      if (run == 0) {
        first = got;
      } else {
        EXPECT_EQ(std::memcmp(&first, &got, sizeof(float)), 0) << "n=" << n;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// adamw.cuh

TEST(CudaAdamWTest, SeveralStepsMatchEngineAdamW) {
  COHORT_SKIP_WITHOUT_GPU();
  const size_t n = 10007, split = 4999;  // decay on [0, split), none on [split, n)
  AdamWConfig config;
  config.weight_decay = 0.1f;
  auto cpu_opt = AdamW::Create(n, {{0, split, true}, {split, n - split, false}}, config);
  ASSERT_TRUE(cpu_opt.has_value()) << cpu_opt.error().ToString();

  std::vector<float> params = RandomVector(n, 141);
  DeviceBuffer<float> d_params(params), d_m(n), d_v(n), d_grads(n);
  DeviceBuffer<ct::bf16> d_bf16(n);
  COHORT_ASSERT_CUDA(cudaMemset(d_m.data(), 0, n * sizeof(float)));
  COHORT_ASSERT_CUDA(cudaMemset(d_v.data(), 0, n * sizeof(float)));
  DeviceBuffer<float> d_scale(std::vector<float>{0.37f});

  for (int step = 1; step <= 6; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const float lr = 1e-3f * static_cast<float>(step);
    std::vector<float> grads = RandomVector(n, 150 + step, 0.1f * step);
    d_grads.Upload(grads);
    // Steps 4..6 pass the clip factor through grad_scale; the CPU scales the gradients
    // first, as the trainer does after ClipGradNorm.
    const bool scaled = step >= 4;
    if (scaled) {
      for (float& g : grads) g *= 0.37f;
    }
    cpu_opt->Step(params, grads, lr);

    d_bf16.Poison();
    for (auto [offset, count, decay] :
         {std::tuple{size_t{0}, split, true}, std::tuple{split, n - split, false}}) {
      AdamWStep s;
      s.lr = lr;
      s.beta1 = config.beta1;
      s.beta2 = config.beta2;
      s.eps = config.eps;
      s.weight_decay = decay ? config.weight_decay : 0.0f;
      s.t = step;
      s.grad_scale = scaled ? d_scale.data() : nullptr;
      AdamWUpdate(d_params.data() + offset, d_bf16.data() + offset, d_grads.data() + offset,
                  d_m.data() + offset, d_v.data() + offset, count, s, kStream);
    }
    COHORT_ASSERT_LAUNCHES_OK();
    const std::vector<float> got = d_params.Download();
    EXPECT_LT(RelError(got, params), kFloatTol) << "params";
    EXPECT_LT(RelError(d_m.Download(), std::vector<float>(cpu_opt->m().begin(), cpu_opt->m().end())),
              kFloatTol)
        << "m";
    EXPECT_LT(RelError(d_v.Download(), std::vector<float>(cpu_opt->v().begin(), cpu_opt->v().end())),
              kFloatTol)
        << "v";
    // The bf16 copy is exactly the rounding of the updated float32 parameters.
    const std::vector<ct::bf16> copy = d_bf16.Download();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(ct::Bf16Bits(ct::ToFloat(copy[i])), ct::Bf16Bits(got[i])) << "element " << i;
    }
  }
  EXPECT_EQ(cpu_opt->t(), 6);
}

// AdamWUpdateRuns: a vector of many decay runs of odd lengths (1, 2, 3, 5, ... and one
// empty run), alternating decay, over six steps (the clip factor on the last three), in one
// launch: against engine AdamW on the same ranges, and bitwise against AdamWUpdate launched
// once per run. At offset 0 (the 16-byte path, with a tail: n % 4 == 3) and offset 1 (the
// scalar path).
void CheckAdamWRuns(size_t offset) {
  SCOPED_TRACE(::testing::Message() << "offset " << offset);
  std::vector<DecayRange> ranges;
  size_t n = 0;
  bool decay = true;
  for (size_t len : {size_t{1}, size_t{2}, size_t{3}, size_t{0}, size_t{5}, size_t{333},
                     size_t{7}, size_t{1001}, size_t{4}, size_t{13}, size_t{2047}, size_t{1},
                     size_t{511}, size_t{6079}}) {
    ranges.push_back({n, len, decay});
    n += len;
    decay = !decay;
  }
  ASSERT_EQ(n % 4, 3u);
  std::vector<AdamWRun> table;
  for (const DecayRange& r : ranges) {
    table.push_back(AdamWRun{r.offset + r.count, r.decay ? 1u : 0u, 0u});
  }
  AdamWConfig config;
  config.weight_decay = 0.1f;
  std::vector<DecayRange> nonempty;  // engine AdamW sorts by offset: no ties
  std::copy_if(ranges.begin(), ranges.end(), std::back_inserter(nonempty),
               [](const DecayRange& r) { return r.count > 0; });
  auto cpu_opt = AdamW::Create(n, nonempty, config);
  ASSERT_TRUE(cpu_opt.has_value()) << cpu_opt.error().ToString();

  std::vector<float> params = RandomVector(n, 191);
  // Two copies of the state on the device: `fused` (one launch) and `per_run`.
  struct State {
    DeviceBuffer<float> p, m, v;
    DeviceBuffer<ct::bf16> half;
  };
  auto make_state = [&] {
    State st{DeviceBuffer<float>(n + offset), DeviceBuffer<float>(n + offset),
             DeviceBuffer<float>(n + offset), DeviceBuffer<ct::bf16>(n + offset)};
    EXPECT_EQ(cudaMemcpy(st.p.data() + offset, params.data(), n * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemset(st.m.data(), 0, (n + offset) * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemset(st.v.data(), 0, (n + offset) * sizeof(float)), cudaSuccess);
    return st;
  };
  State fused = make_state(), per_run = make_state();
  DeviceBuffer<float> d_grads(n + offset);
  DeviceBuffer<AdamWRun> d_table(table);
  DeviceBuffer<float> d_scale(std::vector<float>{0.37f});
  auto at = [offset](auto& buf) { return buf.data() + offset; };
  auto tail = [offset](const auto& buf) {
    auto all = buf.Download();
    return std::vector<typename decltype(all)::value_type>(all.begin() + offset, all.end());
  };

  for (int step = 1; step <= 6; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const float lr = 1e-3f * static_cast<float>(step);
    std::vector<float> grads = RandomVector(n, 200 + step, 0.1f * step);
    COHORT_ASSERT_CUDA(cudaMemcpy(at(d_grads), grads.data(), n * sizeof(float),
                                  cudaMemcpyHostToDevice));
    const bool scaled = step >= 4;
    if (scaled) {
      for (float& g : grads) g *= 0.37f;
    }
    cpu_opt->Step(params, grads, lr);

    AdamWStep s;
    s.lr = lr;
    s.beta1 = config.beta1;
    s.beta2 = config.beta2;
    s.eps = config.eps;
    s.t = step;
    s.grad_scale = scaled ? d_scale.data() : nullptr;
    fused.half.Poison();
    s.weight_decay = config.weight_decay;
    AdamWUpdateRuns(at(fused.p), at(fused.half), at(d_grads), at(fused.m), at(fused.v), n,
                    d_table.data(), static_cast<int>(table.size()), s, kStream);
    for (const DecayRange& r : ranges) {
      s.weight_decay = r.decay ? config.weight_decay : 0.0f;
      AdamWUpdate(at(per_run.p) + r.offset, at(per_run.half) + r.offset, at(d_grads) + r.offset,
                  at(per_run.m) + r.offset, at(per_run.v) + r.offset, r.count, s, kStream);
    }
    COHORT_ASSERT_LAUNCHES_OK();
    const std::vector<float> got = tail(fused.p);
    EXPECT_LT(RelError(got, params), kFloatTol) << "params";
    EXPECT_LT(RelError(tail(fused.m), std::vector<float>(cpu_opt->m().begin(), cpu_opt->m().end())),
              kFloatTol)
        << "m";
    EXPECT_LT(RelError(tail(fused.v), std::vector<float>(cpu_opt->v().begin(), cpu_opt->v().end())),
              kFloatTol)
        << "v";
    EXPECT_TRUE(BitwiseEqual(got, tail(per_run.p))) << "params: one launch vs one per run";
    EXPECT_TRUE(BitwiseEqual(tail(fused.m), tail(per_run.m))) << "m: one launch vs one per run";
    EXPECT_TRUE(BitwiseEqual(tail(fused.v), tail(per_run.v))) << "v: one launch vs one per run";
    const std::vector<ct::bf16> copy = fused.half.Download();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(ct::Bf16Bits(ct::ToFloat(copy[offset + i])), ct::Bf16Bits(got[i]))
          << "element " << i;
    }
  }
}

TEST(CudaAdamWTest, OneLaunchOverManyRunsMatchesEngineAdamW) {
  COHORT_SKIP_WITHOUT_GPU();
  CheckAdamWRuns(0);
  CheckAdamWRuns(1);
}

TEST(CudaAdamWTest, NullBf16CopyIsSkipped) {
  COHORT_SKIP_WITHOUT_GPU();
  const size_t n = 333;
  const std::vector<float> p0 = RandomVector(n, 161), g = RandomVector(n, 162);
  DeviceBuffer<float> d_p(p0), d_g(g), d_m(n), d_v(n);
  COHORT_ASSERT_CUDA(cudaMemset(d_m.data(), 0, n * sizeof(float)));
  COHORT_ASSERT_CUDA(cudaMemset(d_v.data(), 0, n * sizeof(float)));
  AdamWStep s;
  s.lr = 0.01f;
  s.t = 1;
  AdamWUpdate(d_p.data(), nullptr, d_g.data(), d_m.data(), d_v.data(), n, s, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  AdamWConfig config;
  config.weight_decay = 0.0f;
  auto cpu_opt = AdamW::Create(n, {{0, n, false}}, config);
  ASSERT_TRUE(cpu_opt.has_value());
  std::vector<float> p = p0;
  cpu_opt->Step(p, g, 0.01f);
  EXPECT_LT(RelError(d_p.Download(), p), kFloatTol);
}

// ---------------------------------------------------------------------------------------
// grad_norm.cuh

TEST(CudaGradNormTest, NormAndClipScaleMatchEngine) {
  COHORT_SKIP_WITHOUT_GPU();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    for (float max_norm : {0.0f, 1.0f, 1e9f}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " max_norm=" << max_norm);
      const std::vector<float> grads = RandomVector(n, 171 + n);
      const double norm = GlobalNorm(grads);
      std::vector<float> clipped = grads;
      ClipGradNorm(clipped, max_norm);
      // The factor ClipGradNorm applied (1 when it did not clip).
      float factor = 1.0f;
      if (max_norm > 0.0f) {
        const double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) factor = static_cast<float>(coef);
      }
      DeviceBuffer<float> d_grads(grads), d_scale(1);
      DeviceBuffer<double> d_norm_sq(1);
      DeviceBuffer<char> scratch(GradNormScratchBytes(n));
      double first = 0.0;
      for (int run = 0; run < 2; ++run) {
        d_scale.Poison();
        d_norm_sq.Poison();
        scratch.Poison();
        GlobalNormAndClipScale(d_norm_sq.data(), d_scale.data(), d_grads.data(), n, max_norm,
                               scratch.data(), kStream);
        COHORT_ASSERT_LAUNCHES_OK();
        const double norm_sq = d_norm_sq.Download()[0];
        const float scale = d_scale.Download()[0];
        EXPECT_LT(std::abs(std::sqrt(norm_sq) - norm), kFloatTol * norm);
        if (factor == 1.0f) {
          EXPECT_EQ(scale, 1.0f);
        } else {
          EXPECT_LT(std::abs(scale - factor), kFloatTol * factor);
        }
        if (run == 0) {
          first = norm_sq;
        } else {
          EXPECT_EQ(std::memcmp(&first, &norm_sq, sizeof(double)), 0) << "not deterministic";
        }
      }
      // Scaling in place reproduces ClipGradNorm's clipped gradients.
      ScaleInPlace(d_grads.data(), d_scale.data(), n, kStream);
      COHORT_ASSERT_LAUNCHES_OK();
      EXPECT_LT(RelError(d_grads.Download(), clipped), kFloatTol);
    }
  }
}

TEST(CudaGradNormTest, ScaleInPlaceMultipliesEveryElement) {
  COHORT_SKIP_WITHOUT_GPU();
  const size_t n = 4097;
  const std::vector<float> g = RandomVector(n, 181);
  DeviceBuffer<float> d_g(g), d_scale(std::vector<float>{0.5f});
  ScaleInPlace(d_g.data(), d_scale.data(), n, kStream);
  COHORT_ASSERT_LAUNCHES_OK();
  const std::vector<float> got = d_g.Download();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], g[i] * 0.5f) << "element " << i;
}

// ---------------------------------------------------------------------------------------
// kv_attention.cuh: the serving attention over the block cache against the CPU's.

// Sequences of the given lengths, their keys and values stored through shuffled block
// tables; `rows` (sequence, context) query rows attend to the first `context` positions of
// their sequence (decode rows at context = length, prefill rows before it).
void CheckKvAttention(int C, int NH, int block_size, const std::vector<int>& lengths,
                      const std::vector<std::pair<int, int>>& rows) {
  SCOPED_TRACE(::testing::Message() << "C=" << C << " NH=" << NH << " block_size=" << block_size);
  const size_t C3 = 3 * static_cast<size_t>(C);
  int blocks_total = 0;
  for (int len : lengths) blocks_total += (len + block_size - 1) / block_size;
  std::vector<int> pool(blocks_total);
  for (int i = 0; i < blocks_total; ++i) pool[i] = (i * 7919) % blocks_total;  // scattered
  std::vector<int> order(pool);
  std::sort(order.begin(), order.end());
  ASSERT_TRUE(std::adjacent_find(order.begin(), order.end()) == order.end()) << "blocks_total must be prime to 7919";
  // Every sequence's qkv rows (bf16-rounded), written into both caches.
  std::vector<std::vector<float>> seq_qkv;
  std::vector<std::vector<int>> tables;
  std::vector<float> k_cpu(static_cast<size_t>(blocks_total) * block_size * C), v_cpu(k_cpu.size());
  std::vector<float> all_qkv;
  std::vector<int32_t> slots;
  int next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int len = lengths[s];
    seq_qkv.push_back(RoundBf16(RandomVector(static_cast<size_t>(len) * C3, 300 + s)));
    tables.emplace_back(pool.begin() + next, pool.begin() + next + (len + block_size - 1) / block_size);
    next += static_cast<int>(tables.back().size());
    const cpu::KvChunk whole{0, len, 0, tables.back().data()};
    cpu::KvCacheWrite(k_cpu.data(), v_cpu.data(), seq_qkv.back().data(), &whole, 1, block_size, C);
    all_qkv.insert(all_qkv.end(), seq_qkv.back().begin(), seq_qkv.back().end());
    for (int p = 0; p < len; ++p) slots.push_back(tables.back()[p / block_size] * block_size + p % block_size);
  }
  // The query rows, and the CPU reference.
  const int N = static_cast<int>(rows.size());
  std::vector<float> q_rows;
  std::vector<cpu::KvChunk> chunks;
  std::vector<int32_t> context, table_offset, flat_tables;
  std::vector<int> offsets;
  for (const auto& t : tables) {
    offsets.push_back(static_cast<int>(flat_tables.size()));
    flat_tables.insert(flat_tables.end(), t.begin(), t.end());
  }
  int max_context = 1;
  for (int r = 0; r < N; ++r) {
    const auto [s, ctx] = rows[r];
    q_rows.insert(q_rows.end(), seq_qkv[s].begin() + static_cast<size_t>(ctx - 1) * C3,
                  seq_qkv[s].begin() + static_cast<size_t>(ctx) * C3);
    chunks.push_back({r, 1, ctx - 1, tables[s].data()});
    context.push_back(ctx);
    table_offset.push_back(offsets[s]);
    max_context = std::max(max_context, ctx);
  }
  std::vector<float> ref(static_cast<size_t>(N) * C);
  cpu::KvAttentionForward(ref.data(), q_rows.data(), k_cpu.data(), v_cpu.data(), chunks.data(), N, block_size, C, NH);

  const size_t cache = static_cast<size_t>(blocks_total) * block_size * C;
  DeviceBuffer<ct::bf16> d_k(cache), d_v(cache), d_out(ref.size());
  auto d_all = ct::UploadBf16(all_qkv);
  DeviceBuffer<int32_t> d_slots(slots);
  KvCacheWrite(d_k.data(), d_v.data(), d_all.data(), d_slots.data(), static_cast<int>(slots.size()), C, kStream);
  auto d_q = ct::UploadBf16(q_rows);
  DeviceBuffer<int32_t> d_ctx(context), d_toff(table_offset), d_tables(flat_tables);
  d_out.Poison();
  ASSERT_EQ(KvAttentionForward(d_out.data(), d_q.data(), d_k.data(), d_v.data(), d_ctx.data(), d_toff.data(),
                               d_tables.data(), N, max_context, block_size, C, NH, kStream),
            cudaSuccess);
  COHORT_ASSERT_LAUNCHES_OK();
  const std::vector<float> got = ct::DownloadBf16(d_out);
  EXPECT_LT(RelError(got, ref), kBf16Tol);
  // Row by row too: a row whose context one warp's range leaves empty is still right.
  for (int r = 0; r < N; ++r) {
    const std::span<const float> g(got.data() + static_cast<size_t>(r) * C, C), w(ref.data() + static_cast<size_t>(r) * C, C);
    EXPECT_LT(RelError(g, w), kBf16Tol) << "row " << r << " (context " << rows[r].second << ")";
  }
}

TEST(CudaKvAttentionTest, DecodeRowsMatchCpuOverManyBlocksAndOddLengths) {
  COHORT_SKIP_WITHOUT_GPU();
  // hs 64 (GPT-2's), blocks of 16: contexts shorter than the warps, odd, over many blocks.
  CheckKvAttention(128, 2, 16, {1, 3, 17, 100, 333}, {{0, 1}, {1, 3}, {2, 17}, {3, 100}, {4, 333}});
  // Prefill-like rows: one sequence's positions at several contexts, and a 1-position block.
  CheckKvAttention(64, 4, 1, {41}, {{0, 1}, {0, 2}, {0, 5}, {0, 40}, {0, 41}});
  // Head sizes: 80 (lanes past it idle in the second slice), 256 (the largest), 16, 2; blocks of 5.
  CheckKvAttention(160, 2, 5, {29, 64}, {{0, 29}, {1, 64}, {1, 7}});
  CheckKvAttention(256, 1, 16, {70}, {{0, 70}});
  CheckKvAttention(64, 4, 16, {9}, {{0, 9}});
  CheckKvAttention(8, 4, 16, {21}, {{0, 21}, {0, 20}});
}

TEST(CudaKvAttentionTest, LongContextsMatchCpu) {
  COHORT_SKIP_WITHOUT_GPU();
  // Past the 8,192 positions the kernel used to keep in shared memory.
  CheckKvAttention(64, 1, 16, {9001, 2049}, {{0, 9001}, {1, 2049}});
}

TEST(CudaKvAttentionTest, RefusesHeadsItCannotHold) {
  COHORT_SKIP_WITHOUT_GPU();
  EXPECT_EQ(KvAttentionForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 16,
                               2 * KvAttentionMaxHeadSize(), 1, kStream),
            cudaErrorInvalidValue);
  EXPECT_EQ(KvAttentionForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1,
                               KvAttentionMaxContext() + 1, 16, 64, 1, kStream),
            cudaErrorInvalidValue);
  // Keys and values are read in bf16 pairs: an odd head size is refused.
  EXPECT_EQ(KvAttentionForward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 16, 45, 3, kStream),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace cohort::engine::cuda
