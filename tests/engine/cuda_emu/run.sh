#!/usr/bin/env bash
# Runs the attention kernels on the CPU emulator by hand, for any filter, including the
# large shapes ctest leaves out (T=1024 and B=4097 take several minutes each):
#   tests/engine/cuda_emu/run.sh [BUILD_DIR] [GTEST_FILTER]
# See tests/engine/cuda_emu.cmake for what the emulator checks and what it cannot prove
# (its mma.sync/ldmatrix fragment layouts are written from the PTX ISA tables, not
# measured on hardware; it says nothing about speed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BUILD=${1:-$ROOT/build}
FILTER=${2:-*}
cmake --build "$BUILD" --target engine_cuda_attention_emu_test
"$BUILD/tests/engine/engine_cuda_attention_emu_test" --gtest_filter="$FILTER"
