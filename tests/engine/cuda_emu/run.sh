#!/usr/bin/env bash
# Runs the attention kernels on the CPU emulator by hand, for any filter, including the
# large shapes ctest leaves out (T=1024 takes ~2 minutes, B=4097 over 10):
#   tests/engine/cuda_emu/run.sh [BUILD_DIR] [GTEST_FILTER]
# EMU_TEST=engine_cuda_kernels_emu_test runs the other kernel families instead, and
# EMU_TEST=engine_cuda_model_emu_test the whole GPU model (GptCudaModelTest.HundredSteps*,
# not run in CI, takes ~7 minutes).
# See tests/engine/cuda_emu.cmake for what the emulator checks and what it cannot prove
# (its mma.sync/ldmatrix fragment layouts are written from the PTX ISA tables, not
# measured on hardware; it says nothing about speed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BUILD=${1:-$ROOT/build}
FILTER=${2:-*}
TEST=${EMU_TEST:-engine_cuda_attention_emu_test}
cmake --build "$BUILD" --target "$TEST"
"$BUILD/tests/engine/$TEST" --gtest_filter="$FILTER"
