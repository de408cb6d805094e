#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA parts too when nvcc exists) and
# runs the whole test suite with ctest. The last lines are ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
cd build
# ctest lists skipped tests (GPU tests without a GPU) after its summary; repeat the
# summary line last so the output ends with it, and keep ctest's exit code.
set +e
ctest --output-on-failure --timeout 300 -j"$(nproc)" 2>&1 | tee ctest-output.log
rc=${PIPESTATUS[0]}
set -e
grep -E "tests passed|tests failed out of" ctest-output.log | tail -n 1
exit "$rc"
