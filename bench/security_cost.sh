#!/usr/bin/env bash
# Issue 13's cost of security, modes alternated within each round so that the machine's
# drift falls on both alike:
#   bench/security_cost.sh [ROUNDS=3] [E2E_PAIRS=5] [BUILD=build]
# Each round runs `bench_head_scale 1000 1000 15` insecure then tls (tokens, HTTPS, mTLS),
# first with every process on every CPU, then with the head alone on CPU 0
# (COHORT_BENCH_HEAD_CPUS, bench_cluster.h); then E2E_PAIRS pairs of `bench_e2e_jobs 600`,
# tls first in the odd ones.
# One line per run: the head's CPU per heartbeat (or jobs/s) and the load before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
pairs=${2:-5}
build=${3:-build}
load() { cut -d' ' -f1 /proc/loadavg; }
echo "security cost: $(git log --oneline -1 2>/dev/null | cut -c1-60), $(date -u +%FT%TZ)"
for r in $(seq "$rounds"); do
  for pin in "" 0; do
    for mode in insecure tls; do
      l0=$(load)
      res=$(COHORT_BENCH_HEAD_CPUS=$pin COHORT_BENCH_SECURITY=$mode timeout 300 \
              "$build/bench/bench_head_scale" 1000 1000 15 2>&1 |
            sed -nE 's/.*handled [0-9]+ \(([0-9]+)\/s\).*/handled \1\/s/p; s/.*\(([0-9]+) us per heartbeat.*/\1 us per heartbeat/p' |
            tr '\n' ' ')
      echo "head_scale round $r head CPUs ${pin:-all} $mode: ${res}load $l0-$(load)"
    done
  done
done
# The e2e pairs alternate their order: both modes fall run after run on this VM (ext4's
# inode allocator over the jobs' directories in /tmp), which favours whichever runs first.
for r in $(seq "$pairs"); do
  order="insecure tls"
  if (( r % 2 == 1 )); then order="tls insecure"; fi
  for mode in $order; do
    l0=$(load)
    res=$(COHORT_BENCH_SECURITY=$mode timeout 300 "$build/bench/bench_e2e_jobs" 600 2>&1 |
          sed -nE 's/.*throughput: +([0-9.]+) jobs\/s.*/\1/p')
    echo "e2e_jobs 600 pair $r $mode: $res jobs/s load $l0-$(load)"
  done
done
