#!/usr/bin/env bash
# bench/gpu/pack.sh — run HERE (the build machine, no GPU needed): builds what a GPU session
# runs and packs it into bench/gpu/carry/ (git-ignored) for the device tool's `carry`.
#
#   bench/gpu/pack.sh            # BUILD_DIR=build-gpu (configured if missing), JOBS=2
#
# Builds `cohort`, `bench_train_throughput`, `bench_serve_gpu` and every test target labelled `gpu` (found in
# the build tree's <target>_labels.cmake files), strips their debug info, and copies them
# with every shared library they load that a CUDA base image may lack (found with ldd:
# OpenBLAS, PCRE2, SQLite, libgomp, gloo, fmt/spdlog/yaml-cpp, OpenSSL, zlib, cudart, ...)
# into one gzip'd tar, bench/gpu/carry/cohort-gpu.tar.gz, with a MANIFEST of what is inside.
#
# Left out: the C library family and the driver (libc, libm, libdl, libpthread, librt,
# ld-linux, libgcc_s, libcuda, libnvidia-*: the device's own), and the two large CUDA
# libraries — libcublasLt.so.13 (~540 MB) and libnccl.so.2 (~220 MB) cannot travel in a
# 64 MiB carry — which run.sh takes from the device's CUDA 13 toolkit or PyTorch's cu13
# wheels (same sonames; MANIFEST records the versions built against). libstdc++ goes in
# lib/fallback/, used by run.sh only if the device's is older than the one built against.
#
# The carry must stay under 64 MiB together with the working tree: the script fails if
# the archive exceeds LIMIT_MB (default 56).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
[[ "$BUILD" = /* ]] || BUILD=$ROOT/$BUILD
JOBS=${JOBS:-2}
LIMIT_MB=${LIMIT_MB:-56}
CARRY=$ROOT/bench/gpu/carry

if [[ ! -f "$BUILD/build.ninja" ]]; then
  echo "pack: configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
fi
if ! ninja -C "$BUILD" -t targets all | grep -q '^cohort_engine_kernels_cuda:'; then
  echo "pack: $BUILD has no CUDA targets (nvcc not found at configure time)" >&2
  exit 1
fi

# Every test target with the gpu label.
mapfile -t TESTS < <(find "$BUILD/tests" -name '*_labels.cmake' -print0 |
  xargs -0 grep -lE 'LABELS "([^"]*;)?gpu(;[^"]*)?"' |
  sed -E 's#.*/([^/]+)_labels\.cmake$#\1#' | sort -u)
if [[ ${#TESTS[@]} -eq 0 ]]; then
  echo "pack: no gpu-labelled test targets in $BUILD" >&2
  exit 1
fi
echo "pack: building cohort bench_train_throughput ${TESTS[*]} (-j$JOBS)"
ninja -C "$BUILD" -j"$JOBS" cohort cohort-data bench_train_throughput bench_serve_gpu "${TESTS[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PKG=$STAGE/cohort-gpu
mkdir -p "$PKG/bin/tests" "$PKG/lib/fallback"

BINARIES=()
add_binary() {  # path, destination folder
  strip --strip-debug -o "$2/$(basename "$1")" "$1"
  BINARIES+=("$1")
}
add_binary "$BUILD/cohort" "$PKG/bin"
# The data-plane module `cohort train` loads from beside the binary (engine_cuda_model_test's
# `cohort train` runs need it).
add_binary "$BUILD/libcohort-data.so" "$PKG/bin"
add_binary "$BUILD/bench/bench_train_throughput" "$PKG/bin"
add_binary "$BUILD/bench/bench_serve_gpu" "$PKG/bin"
for t in "${TESTS[@]}"; do
  exe=$(find "$BUILD/tests" -type f -name "$t" -perm -u+x | head -1)
  if [[ -z "$exe" ]]; then
    echo "pack: built $t but cannot find its executable" >&2
    exit 1
  fi
  add_binary "$exe" "$PKG/bin/tests"
done

# Shared libraries, by soname, from ldd of every binary.
SYSTEM='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libcuda\.so|libnvidia-)'
ON_DEVICE='^(libcublasLt\.so|libcublas\.so|libnccl\.so)'
declare -A LIBS=()
declare -A DEVICE_LIBS=()
for b in "${BINARIES[@]}"; do
  if ldd "$b" | grep -q 'not found'; then
    echo "pack: $b has unresolved libraries here:" >&2
    ldd "$b" | grep 'not found' >&2
    exit 1
  fi
  while read -r name path; do
    [[ -z "$name" || -z "$path" ]] && continue
    if [[ "$name" =~ $SYSTEM ]]; then continue; fi
    if [[ "$name" =~ $ON_DEVICE ]]; then DEVICE_LIBS[$name]=$(readlink -f "$path"); continue; fi
    LIBS[$name]=$path
  done < <(ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $1, $3}')
done
for name in "${!LIBS[@]}"; do
  if [[ "$name" == libstdc++.so* ]]; then
    cp -L "${LIBS[$name]}" "$PKG/lib/fallback/$name"
  else
    cp -L "${LIBS[$name]}" "$PKG/lib/$name"
  fi
done

{
  echo "# cohort-gpu carry, packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  nvcc_path=$(grep -E '^CMAKE_CUDA_COMPILER:' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  echo "# build: $BUILD ($(grep -E '^CMAKE_BUILD_TYPE' "$BUILD/CMakeCache.txt" | cut -d= -f2)); nvcc $("$nvcc_path" --version 2>/dev/null | grep -oE 'release [0-9.]+' | cut -d' ' -f2 || echo '?'), sm_90"
  echo "# binaries (debug info stripped):"
  (cd "$PKG" && find bin -type f | sort | sed 's/^/  /')
  echo "# libraries carried:"
  (cd "$PKG" && find lib -type f | sort | sed 's/^/  /')
  nvcc_path=$(grep -E '^CMAKE_CUDA_COMPILER:' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  inc=$(dirname "$(dirname "$nvcc_path")")/include
  ver() { grep -E "#define $2 " "$inc/$1" 2>/dev/null | awk '{print $3}'; }
  echo "# libraries the device must provide (built against cuBLAS $(ver cublas_api.h CUBLAS_VER_MAJOR).$(ver cublas_api.h CUBLAS_VER_MINOR).$(ver cublas_api.h CUBLAS_VER_PATCH), NCCL $(ver nccl.h NCCL_MAJOR).$(ver nccl.h NCCL_MINOR).$(ver nccl.h NCCL_PATCH)):"
  for name in "${!DEVICE_LIBS[@]}"; do echo "  $name ${DEVICE_LIBS[$name]}"; done | sort
  echo "# newest symbol versions needed: $(for b in "${BINARIES[@]}"; do objdump -T "$b"; done |
    grep -oE 'GLIBC_[0-9.]+|GLIBCXX_[0-9.]+' | sort -uV | awk -F_ '{v[$1]=$0} END {print v["GLIBC"], v["GLIBCXX"]}')"
} >"$PKG/MANIFEST"

rm -rf "$CARRY"
mkdir -p "$CARRY"
tar -czf "$CARRY/cohort-gpu.tar.gz" -C "$STAGE" cohort-gpu
cp "$PKG/MANIFEST" "$CARRY/MANIFEST"
unpacked=$(du -sb "$PKG" | cut -f1)
packed=$(du -sb "$CARRY" | cut -f1)
cat "$CARRY/MANIFEST"
printf 'pack: %s: %.1f MiB (unpacked %.1f MiB); limit %d MiB\n' "$CARRY" \
  "$(echo "$packed / 1048576" | bc -l)" "$(echo "$unpacked / 1048576" | bc -l)" "$LIMIT_MB"
if (( packed > LIMIT_MB * 1048576 )); then
  echo "pack: the carry is over $LIMIT_MB MiB" >&2
  exit 1
fi
echo "pack: on the device: run(command='bash bench/gpu/run.sh', carry=['bench/gpu/carry'])"
