#!/usr/bin/env bash
# bench/gpu/run.sh — run ON THE DEVICE MACHINE, in the repository root, with bench/gpu/carry
# carried (made here by bench/gpu/pack.sh):
#
#   device run: command='bash bench/gpu/run.sh', carry=['bench/gpu/carry']
#
# In one call: unpacks the carry to /tmp/cohort-gpu, finds the device's cuBLASLt and NCCL
# (CUDA toolkit or PyTorch's cu13 wheels), prints the versions, runs every gpu-labelled
# test binary, then bench_train_throughput --device cuda (GPT-2 124M) and the PyTorch
# baseline (bench/gpu/train_gpt2_torch.py, eager and torch.compile), and prints a side-by-
# side table last. Logs and JSON go to $OUT (the device tool brings them back; at most 8
# files): versions.txt, tests.log, cohort.json, torch.json, bench.log, summary.txt.
#
# Environment: BATCH (8), STEPS (20), RUN_TESTS (1), RUN_BENCH (1), TORCH_MODES
# (eager,compile; empty: no PyTorch run), GTEST_FILTER (all), TEST_TIMEOUT (300 s per test binary), SANITIZE
# (memcheck,racecheck,synccheck: compute-sanitizer tools run over the kernel and attention
# parity tests and the small model tests, SANITIZE_FILTER; empty skips them),
# SANITIZE_TIMEOUT (120 s per tool and binary). sanitizer.log holds their reports.
# VARIANTS=1 (default 0): bench_train_throughput --variants (every GptCudaOptions lever off,
# each alone, all on: each lever's before and after in this one call). SERVE=1 (default 1):
# bench_serve_gpu, the server's GPU backend beside PyTorch generation (into bench.log).
# PROFILE=1 (default 0) also runs two steps (one warm-up) of the Cohort benchmark under
# Nsight Compute, one metric (gpu__time_duration) per kernel, summed per kernel name into
# ncu.txt: where the step's time goes, kernel by kernel.
# Exit status: 0 when every step ran and every test passed, 1 otherwise (the table is
# printed either way).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=$ROOT/bench/gpu/carry
OUTDIR=${OUT:-/tmp/cohort-gpu-out}
PKG=/tmp/cohort-gpu
BATCH=${BATCH:-8}
STEPS=${STEPS:-20}
RUN_TESTS=${RUN_TESTS:-1}
RUN_BENCH=${RUN_BENCH:-1}
TORCH_MODES=${TORCH_MODES-eager,compile}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
SANITIZE=${SANITIZE-memcheck,racecheck,synccheck}
PROFILE=${PROFILE:-0}
VARIANTS=${VARIANTS:-0}
SERVE=${SERVE:-1}
SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-120}
# The parity tests small enough to run under the sanitizer (it slows kernels 10-100x):
# every kernel test, the attention shapes but the two largest, the one-step model, shard
# and trainer tests.
SANITIZE_BINARIES=${SANITIZE_BINARIES:-engine_cuda_kernels_test engine_cuda_attention_test engine_cuda_model_test engine_cuda_shard_test engine_cuda_trainer_test}
SANITIZE_FILTER=${SANITIZE_FILTER:--*B1_T1024*:*B4097*:*HundredSteps*:*TrainCli*:*Ddp*:*PlanFor124M*}
mkdir -p "$OUTDIR"
status=0
log() { echo "run.sh: $*" | tee -a "$OUTDIR/summary.txt"; }

if [[ ! -f "$CARRY/cohort-gpu.tar.gz" ]]; then
  echo "run.sh: $CARRY/cohort-gpu.tar.gz is missing: run bench/gpu/pack.sh here and carry bench/gpu/carry" >&2
  exit 2
fi
rm -rf "$PKG"
tar -xzf "$CARRY/cohort-gpu.tar.gz" -C /tmp

# The large CUDA libraries the carry leaves out, from the device: the toolkit first, then
# the CUDA wheels PyTorch brings, then anywhere under /usr and /opt.
find_lib() {
  local name=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [[ -e "$d/$name" ]] && { echo "$d"; return 0; }
  done
  local site
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for d in $site; do
    local hit
    hit=$(find "$d/nvidia" -name "$name" 2>/dev/null | head -1)
    [[ -n "$hit" ]] && { dirname "$hit"; return 0; }
  done
  local hit
  hit=$(find /usr /opt -name "$name" 2>/dev/null | head -1)
  [[ -n "$hit" ]] && { dirname "$hit"; return 0; }
  return 1
}
extra=""
for name in libcublasLt.so.13 libnccl.so.2; do
  if dir=$(find_lib "$name"); then
    extra="$extra:$dir"
    log "using $dir/$name"
  else
    log "ERROR: $name not found on this machine (needed by the carried binaries)"
    status=1
  fi
done
export LD_LIBRARY_PATH="$PKG/lib${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The device's libstdc++ unless it is older than the one the binaries were built against.
if ldd "$PKG/bin/cohort" 2>&1 | grep -q 'GLIBCXX.*not found'; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PKG/lib/fallback"
  log "the device's libstdc++ is too old: using the carried one"
fi
if ldd "$PKG/bin/cohort" | grep -q 'not found'; then
  log "ERROR: unresolved libraries:"
  ldd "$PKG/bin/cohort" | grep 'not found' | tee -a "$OUTDIR/summary.txt"
  status=1
fi
export COHORT_BINARY=$PKG/bin/cohort  # engine_cuda_model_test's `cohort train` runs

{
  echo "# versions ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  cat "$PKG/MANIFEST"
  echo "## device"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit \
    --format=csv 2>&1 || echo "nvidia-smi failed"
  echo "## nvcc: $(nvcc --version 2>/dev/null | grep -oE 'release [0-9.,V ]+' || echo 'not on PATH')"
  echo "## python3: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1)"
  echo "## device libraries used: $(for n in libcublasLt.so.13 libnccl.so.2; do
    for d in ${extra//:/ }; do [[ -e "$d/$n" ]] && readlink -f "$d/$n"; done; done | tr '\n' ' ')"
  echo "## libraries resolved for bin/cohort:"
  ldd "$PKG/bin/cohort" | grep -E 'cublas|nccl|cudart|stdc\+\+|openblas'
  echo "## cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} >"$OUTDIR/versions.txt" 2>&1
cat "$OUTDIR/versions.txt"

# --- tests ---------------------------------------------------------------------------------
if [[ "$RUN_TESTS" == 1 ]]; then
  : >"$OUTDIR/tests.log"
  for t in "$PKG"/bin/tests/*; do
    name=$(basename "$t")
    start=$(date +%s)
    timeout "$TEST_TIMEOUT" "$t" --gtest_color=no ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} \
      >"/tmp/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    { echo "===== $name (exit $rc, ${secs}s)"; cat "/tmp/$name.log"; } >>"$OUTDIR/tests.log"
    passed=$(grep -oE '\[  PASSED  \] [0-9]+' "/tmp/$name.log" | grep -oE '[0-9]+$' || echo 0)
    skipped=$(grep -oE '\[  SKIPPED \] [0-9]+ test' "/tmp/$name.log" | grep -oE '[0-9]+' || echo 0)
    failed=$(grep -oE '[0-9]+ FAILED TEST' "/tmp/$name.log" | grep -oE '^[0-9]+' || echo 0)
    log "test $name: exit $rc in ${secs}s: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
    if [[ $rc -ne 0 ]]; then
      status=1
      grep -E '^\[  FAILED  \]|Failure|error:|Expected|Which is|actual' "/tmp/$name.log" | head -40
    fi
    # The figures the parity tests print (worst errors, losses).
    grep -E 'rel err|loss cpu|100 steps|whole step|GiB' "/tmp/$name.log" | head -20
  done
fi

# --- compute-sanitizer ---------------------------------------------------------------------
if [[ -n "$SANITIZE" ]]; then
  : >"$OUTDIR/sanitizer.log"
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null ||
       find /usr/local /opt -name compute-sanitizer -type f 2>/dev/null | head -1)
  if [[ -z "$cs" ]]; then
    log "ERROR: compute-sanitizer not found"
    status=1
  else
    for tool in ${SANITIZE//,/ }; do
      for name in $SANITIZE_BINARIES; do
        start=$(date +%s)
        # memcheck: API errors are not reported: NCCL's initialisation probes kernels it has
        # no image for and clears the error itself (seen 2026-11-27 on an H200); our code
        # checks every CUDA call's return. racecheck reports hazards inside cuBLASLt's own
        # Hopper GEMM kernels (nvjet_*, seen 2026-11-27): NVIDIA's code, which synchronises
        # through TMA mbarriers. Leaving those kernels out with --kernel-name-exclude made
        # cuBLASLt's launches fail under the tool (CUBLAS_STATUS_EXECUTION_FAILED, "failed to
        # handle a hardware exception", 2026-11-27), so racecheck runs everything and only a
        # hazard outside nvjet_* (or a failing test) counts against us.
        extra=(--error-exitcode 86)
        [[ "$tool" == memcheck ]] && extra+=(--report-api-errors no)
        [[ "$tool" == racecheck ]] && extra=()
        timeout "$SANITIZE_TIMEOUT" "$cs" --tool "$tool" "${extra[@]}" \
          "$PKG/bin/tests/$name" --gtest_color=no --gtest_filter="$SANITIZE_FILTER" \
          >"/tmp/cs-$tool-$name.log" 2>&1
        rc=$?
        if [[ "$tool" == racecheck && $rc -eq 0 ]] &&
           grep -A1 -E 'Race reported between' "/tmp/cs-$tool-$name.log" | grep -E ' at ' |
             grep -vq 'nvjet_'; then
          rc=86  # a hazard in a kernel of ours
        fi
        secs=$(( $(date +%s) - start ))
        { echo "===== $tool $name (exit $rc, ${secs}s)"; cat "/tmp/cs-$tool-$name.log"; } >>"$OUTDIR/sanitizer.log"
        summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "/tmp/cs-$tool-$name.log" | tail -1)
        ours=$(grep -E 'Race reported between' "/tmp/cs-$tool-$name.log" | grep -vc 'nvjet_')
        [[ "$tool" == racecheck ]] && summary="$summary ($ours outside cuBLASLt's nvjet_*)"
        log "sanitizer $tool $name: exit $rc in ${secs}s: ${summary:-no summary}"
        if [[ $rc -ne 0 ]]; then
          status=1
          grep -E '^=========.*(Invalid|Race|Barrier|Error|at |by thread)|FAILED' "/tmp/cs-$tool-$name.log" | head -12
        fi
      done
    done
  fi
fi

# --- benchmark -----------------------------------------------------------------------------
if [[ "$RUN_BENCH" == 1 ]]; then
  : >"$OUTDIR/bench.log"
  log "bench: cohort, GPT-2 124M, B=$BATCH T=1024, $STEPS steps"
  variant_flag=()
  [[ "$VARIANTS" == 1 ]] && variant_flag=(--variants)
  "$PKG/bin/bench_train_throughput" --device cuda --model gpt2-124m --batch "$BATCH" \
    --steps "$STEPS" --warmup 5 --json "$OUTDIR/cohort.json" "${variant_flag[@]}" \
    2>&1 | tee -a "$OUTDIR/bench.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { log "ERROR: bench_train_throughput failed"; status=1; }
  if [[ -n "$TORCH_MODES" ]]; then
    log "bench: PyTorch ($TORCH_MODES), same model and batch"
    PYTHONUNBUFFERED=1 python3 "$ROOT/bench/gpu/train_gpt2_torch.py" --batch "$BATCH" --seq 1024 \
      --steps "$STEPS" --warmup 10 --modes "$TORCH_MODES" --json "$OUTDIR/torch.json" 2>&1 |
      tee -a "$OUTDIR/bench.log"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || { log "ERROR: train_gpt2_torch.py failed"; status=1; }
  fi

  # The side-by-side table, last.
  python3 - "$OUTDIR/cohort.json" "$OUTDIR/torch.json" <<'EOF' | tee -a "$OUTDIR/summary.txt"
import json, sys

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a missing side prints as such
        return {"error": str(e)}

cohort, torch = load(sys.argv[1]), load(sys.argv[2])
rows = []
if "tokens_per_s" in cohort:
    rows.append(("cohort (bf16, cuBLASLt + own kernels)", cohort["tokens_per_s"],
                 cohort["step_ms"], cohort["mfu"]))
else:
    rows.append(("cohort", None, None, None))
for mode, r in torch.get("modes", {}).items():
    rows.append((f"torch {torch.get('torch', '?')} {mode}", r.get("tokens_per_s"),
                 r.get("step_ms"), r.get("mfu")))
eager = next((r[1] for r in rows if r[0].endswith(" eager") and r[1]), None)
device = cohort.get("device") or torch.get("device", "?")
print(f"\n== GPT-2 124M training step, B={cohort.get('batch', torch.get('batch', '?'))} "
      f"T={cohort.get('seq', torch.get('seq', '?'))}, {device}; MFU vs dense bf16 peak "
      f"{(cohort.get('peak_flops') or torch.get('peak_flops') or 0) / 1e12:.1f} TFLOP/s ==")
print(f"{'implementation':44s} {'tokens/s':>10s} {'step ms':>9s} {'MFU':>7s} {'vs eager':>9s}")
for name, tps, ms, mfu in rows:
    if tps is None:
        print(f"{name:44s} {'failed':>10s}")
        continue
    rel = f"{tps / eager:.2f}x" if eager else "-"
    print(f"{name:44s} {tps:10.0f} {ms:9.2f} {100 * mfu:6.1f}% {rel:>9s}")
if "forward_ms" in cohort:
    print(f"cohort step: forward {cohort['forward_ms']:.2f} ms, backward {cohort['backward_ms']:.2f} ms, "
          f"clip+AdamW {cohort['optimizer_ms']:.2f} ms; targets: MFU >= 40%, faster than torch eager")
EOF
fi
# --- serving -------------------------------------------------------------------------------
if [[ "$SERVE" == 1 ]]; then
  log "bench: serving, cohort's GPU backend beside PyTorch generation (bf16, same weights)"
  timeout 300 "$PKG/bin/bench_serve_gpu" --torch-script "$ROOT/bench/torch_generate.py" \
    2>&1 | tee -a "$OUTDIR/bench.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { log "ERROR: bench_serve_gpu failed"; status=1; }
  # The same 64 streams with the step budget fixed at 2,048 tokens (four prefill steps for
  # 64 prompts of 128), beside the auto budget above: the time to first token it costs.
  log "bench: serving at 64 streams with --max-step-tokens 2048 (the budget before the auto one)"
  timeout 180 "$PKG/bin/bench_serve_gpu" --torch-script "$ROOT/bench/torch_generate.py" \
    --concurrency 64 --max-step-tokens 2048 2>&1 | tee -a "$OUTDIR/bench.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { log "ERROR: bench_serve_gpu --max-step-tokens 2048 failed"; status=1; }
fi

# --- per-kernel profile ----------------------------------------------------------------------
if [[ "$PROFILE" == 1 ]]; then
  ncu=$(command -v ncu || find /usr/local /opt -name ncu -type f 2>/dev/null | head -1)
  if [[ -z "$ncu" ]]; then
    log "ERROR: ncu not found"
    status=1
  else
    start=$(date +%s)
    # --clock-control none: measure the card as it is (METHOD.md: leave the clocks alone).
    timeout 240 "$ncu" --clock-control none --metrics gpu__time_duration.sum \
      --print-summary per-kernel "$PKG/bin/bench_train_throughput" --device cuda \
      --model gpt2-124m --batch "$BATCH" --steps 1 --warmup 1 >"$OUTDIR/ncu.txt" 2>&1
    rc=$?
    log "profile: ncu exit $rc in $(( $(date +%s) - start ))s (ncu.txt: 2 steps, per kernel name)"
    [[ $rc -eq 0 ]] || status=1
  fi
fi
log "done (status $status)"
exit "$status"
