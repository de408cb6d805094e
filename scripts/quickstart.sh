#!/usr/bin/env bash
# Brings up a local Cohort cluster (a head and 2 agents x 4 simulated GPUs), runs the
# example 2-node x 4-task job end to end, shows it finishing, and stops the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target cohort -j"$(nproc)"
cohort=./build/cohort

state=$(mktemp -d /tmp/cohort-quickstart-XXXXXX)
echo "== cohort up --agents 2 --gpus-per-agent 4 (state in $state)"
"$cohort" up --agents 2 --gpus-per-agent 4 --port 0 --state-dir "$state" &
up_pid=$!
stop_cluster() {
  if kill -0 "$up_pid" 2>/dev/null; then
    kill -INT "$up_pid"
    wait "$up_pid" || true
  fi
}
trap stop_cluster EXIT

for _ in $(seq 1 300); do
  [ -s "$state/head.port" ] && "$cohort" --head "http://127.0.0.1:$(cat "$state/head.port")" nodes --json 2>/dev/null \
    | grep -c '"state":"UP"' | grep -qx 2 && break
  kill -0 "$up_pid" 2>/dev/null || { echo "cohort up exited"; exit 1; }
  sleep 0.1
done
export COHORT_HEAD="http://127.0.0.1:$(cat "$state/head.port")"

echo; echo "== cohort nodes"
"$cohort" nodes
echo; echo "== cohort submit examples/hello.yaml"
out=$("$cohort" submit examples/hello.yaml)
echo "$out"
job=$(echo "$out" | awk '{print $NF}')
echo; echo "== cohort logs -f $job"
"$cohort" logs -f "$job"
echo; echo "== cohort show $job"
for _ in $(seq 1 100); do
  "$cohort" show "$job" --json | grep -q '"state":"\(SUCCEEDED\|FAILED\|CANCELLED\)"' && break
  sleep 0.1
done
"$cohort" show "$job"
echo; echo "== cohort queue --all"
"$cohort" queue --all
"$cohort" show "$job" --json | grep -q '"state":"SUCCEEDED"'
echo; echo "== job $job SUCCEEDED; stopping the cluster (Ctrl-C to cohort up)"
