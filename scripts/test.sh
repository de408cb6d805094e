#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA parts too when nvcc exists) and
# runs the whole test suite with ctest. Then it prints how long each phase took (and, with
# ccache, this build's cache hits), and last ctest's summary line; it exits with ctest's code.
set -euo pipefail
cd "$(dirname "$0")/.."

# ccache (the build's compiler launcher when installed) hashes paths under the checkout
# relative to it, so checkouts at different paths share hits.
export CCACHE_BASEDIR="$PWD"
export CCACHE_NOHASHDIR=true

have_ccache=0
command -v ccache >/dev/null 2>&1 && have_ccache=1

now_ms() { echo $(($(date +%s%N) / 1000000)); }
phase_names=()
phase_ms=()
phase=""
phase_start=0
begin_phase() {
  phase=$1
  phase_start=$(now_ms)
}
# Records how long the running phase took; $1 is appended to its name.
end_phase() {
  phase_names+=("$phase${1:-}")
  phase_ms+=($(($(now_ms) - phase_start)))
  phase=""
}
# "cache hits misses" from ccache's machine-readable counters (empty if it has none).
ccache_counters() {
  [ "$have_ccache" = 1 ] || return 0
  ccache --print-stats 2>/dev/null |
    awk '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
         $1 == "cache_miss" { m += $2 } END { if (NR) print h + 0, m + 0 }' || true
}
print_phases() {
  local i total=0 ms
  echo "== phase times =="
  for i in "${!phase_names[@]}"; do
    ms=${phase_ms[$i]}
    total=$((total + ms))
    printf '%-18s %7.1f s  (%dm%02ds)\n' "${phase_names[$i]}" "$((ms / 100))e-1" \
      $((ms / 60000)) $((ms / 1000 % 60))
  done
  printf '%-18s %7.1f s  (%dm%02ds)\n' total "$((total / 100))e-1" \
    $((total / 60000)) $((total / 1000 % 60))
  if [ "$have_ccache" = 1 ]; then
    local after hits misses
    after=$(ccache_counters)
    if [ -n "$ccache_before" ] && [ -n "$after" ]; then
      read -r hits misses <<<"$(echo "$ccache_before $after" | awk '{ print $3 - $1, $4 - $2 }')"
      echo "ccache this build: $hits hits, $misses misses" \
        "($(awk -v h="$hits" -v m="$misses" 'BEGIN { printf "%.1f", h + m ? 100 * h / (h + m) : 0 }')% hits)"
    fi
    ccache -s 2>/dev/null | grep -E '^ *(Hits|Misses):' | sed 's/^ */ccache total: /' || true
  fi
}
ccache_before=""
# A failure before the tests still says where the time went.
printed=0
on_exit() {
  local rc=$?
  if [ "$printed" = 0 ] && [ "$rc" != 0 ]; then
    [ -z "$phase" ] || end_phase " (failed)"
    print_phases
  fi
}
trap on_exit EXIT

begin_phase "install deps"
scripts/install-deps.sh
scripts/setup-podman.sh   # the container jobs' test needs a Podman that can run here
# Re-check: install-deps may just have installed it.
command -v ccache >/dev/null 2>&1 && have_ccache=1
end_phase
begin_phase configure
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
end_phase
ccache_before=$(ccache_counters)
begin_phase build
cmake --build build -j"$(nproc)"
end_phase
cd build
# One test per core (docs/ARCHITECTURE.md, "Tests and CI", says why not more). Each test
# has its COST (tests/test_costs.cmake), so a fresh clone starts the longest first, as a
# build with ctest's own cost data does.
# ctest lists skipped tests (GPU tests without a GPU) after its summary; repeat the
# summary line last so the output ends with it, and keep ctest's exit code.
begin_phase tests
set +e
ctest --output-on-failure --timeout 300 -j"$(nproc)" 2>&1 | tee ctest-output.log
rc=${PIPESTATUS[0]}
set -e
end_phase
print_phases
printed=1
grep -E "tests passed|tests failed out of" ctest-output.log | tail -n 1
exit "$rc"
