#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer, a build directory of their own) and runs each over its seed
# corpus in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh [--build-dir DIR] [--runs N | --time SECONDS] [--keep] [--jobs N]
#                   [TARGET...]
#
# DIR (default build/fuzz, where ctest's Fuzz.Corpus builds too): ccache shares compiles
#   between checkouts whose fuzz build sits at the same depth below the checkout.
# --runs N (default 2000): N inputs per target, the seeds first, with a fixed seed
#   (-seed=1), so a run is repeatable; CI (ctest -L fuzz) runs 1000. New inputs go to a
#   temporary directory: the repository's corpus is only read.
# --time SECONDS: fuzz each target that long instead (still from the seeds, -seed=1).
# --keep: keep what the targets find in DIR/corpus/<target>/ and start from it next time
#   (to hunt for bugs: --time 600 --keep).
# A crash, a leak, a sanitizer report, an input slower than 10 s or one that needs more
# than 2 GiB stops that target: the script names the input saved under DIR/artifacts/ and
# the command that reproduces it, runs the remaining targets, and exits 1. At the end it
# prints one line per target: inputs run, executions per second, seconds.
# Exits 77 (skipped) when no clang with libFuzzer is installed (scripts/install-deps.sh
# installs clang-16 and libclang-rt-16-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build_dir="$root/build/fuzz"
runs=2000
seconds=""
keep=0
jobs=$(nproc)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --runs) runs=$2; seconds=""; shift 2 ;;
    --time) seconds=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ "${#targets[@]}" -eq 0 ]; then
  for d in "$root"/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi

# The longest input each target is given: files (a GPT-2-like vocabulary, a safetensors
# model) need more room than API bodies.
max_len_of() {
  case "$1" in
    bpe_tokenizer|safetensors|token_shard) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# A clang that links -fsanitize=fuzzer (clang alone is not enough: libFuzzer is in
# libclang-rt-N-dev).
probe_dir=$(mktemp -d)
# The targets' scratch files (fuzz_util.h's ScratchDir), removed even when a target
# crashed; in memory when /dev/shm exists.
scratch=$(mktemp -d "$([ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "$probe_dir")/cohort-fuzz.XXXXXX")
export COHORT_FUZZ_SCRATCH=$scratch
trap 'rm -rf "$probe_dir" "$scratch"' EXIT
clang=""
for c in clang++-16 clang++-17 clang++-18 clang++; do
  command -v "$c" >/dev/null 2>&1 || continue
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$probe_dir/probe.cc"
  if "$c" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" \
       >/dev/null 2>&1; then
    clang=$(command -v "$c")
    break
  fi
done
if [ -z "$clang" ]; then
  echo "SKIPPED: no clang++ with libFuzzer (scripts/install-deps.sh installs clang-16 and" \
       "libclang-rt-16-dev)"
  exit 77
fi

# Sanitizer reports name functions and lines when a symbolizer is found.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer-16 llvm-symbolizer-17 llvm-symbolizer-18 llvm-symbolizer-14 llvm-symbolizer; do
    if command -v "$s" >/dev/null 2>&1; then
      export ASAN_SYMBOLIZER_PATH UBSAN_SYMBOLIZER_PATH
      ASAN_SYMBOLIZER_PATH=$(command -v "$s")
      UBSAN_SYMBOLIZER_PATH=$ASAN_SYMBOLIZER_PATH
      break
    fi
  done
fi

# ccache hashes paths under the checkout relative to it (as scripts/test.sh sets it), so
# every checkout shares the fuzz build's cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(now_ms)
mkdir -p "$build_dir"
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCOHORT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER="$clang" >"$build_dir/configure.log" 2>&1 ||
  { cat "$build_dir/configure.log"; exit 1; }
nice -n 10 cmake --build "$build_dir" -j"$jobs" --target fuzz_targets
echo "fuzz.sh: built with $clang in $(( ($(now_ms) - start) / 1000 )) s"

failed=()
summary=()
mkdir -p "$build_dir/artifacts"
for t in "${targets[@]}"; do
  bin="$build_dir/fuzz/fuzz_$t"
  seeds="$root/fuzz/corpus/$t"
  [ -x "$bin" ] && [ -d "$seeds" ] || { echo "fuzz.sh: no target '$t'" >&2; exit 2; }
  if [ "$keep" = 1 ]; then
    out="$build_dir/corpus/$t"
    mkdir -p "$out"
  else
    out=$(mktemp -d "$probe_dir/$t.XXXX")
  fi
  if [ -n "$seconds" ]; then
    mode=(-max_total_time="$seconds" -seed=1)
  else
    mode=(-runs="$runs" -seed=1)
  fi
  log="$build_dir/$t.log"
  t0=$(now_ms)
  set +e
  # The seed directory is read; new inputs go to $out (libFuzzer writes to the first).
  (cd "$build_dir" && "$bin" "$out" "$seeds" "${mode[@]}" -max_len="$(max_len_of "$t")" \
     -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
     -artifact_prefix="$build_dir/artifacts/$t-") >"$log" 2>&1
  rc=$?
  set -e
  ms=$(($(now_ms) - t0))
  executed=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  rate=$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log")
  summary+=("$(printf '%-22s %9s inputs %8s exec/s %7.1f s' "$t" "${executed:-?}" "${rate:-?}" \
    "$((ms / 100))e-1")")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED (exit $rc); its log, $log, ends:"
    grep -v '^#[0-9]' "$log" | tail -n 40
    artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -n 1 | cut -d' ' -f5)
    if [ -n "$artifact" ]; then
      echo "fuzz.sh: reproduce with: $bin $artifact"
    fi
  fi
done

if [ -n "$seconds" ]; then
  echo "== fuzz targets ($seconds s each, -seed=1) =="
else
  echo "== fuzz targets ($runs runs each, -seed=1) =="
fi
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets passed"
