#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA parts too when nvcc exists) and
# runs the whole test suite with ctest. The last lines are ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
cd build
exec ctest --output-on-failure --timeout 300 -j"$(nproc)"
