#!/usr/bin/env python3
"""Heartbeat gaps on a local cluster, one run per cohort binary (a baseline beside yours).

For each BINARY: a head (--insecure, the product's timing: heartbeat 1 s, fence 2 s) and two
agents with 4 simulated GPUs each, running one job of 2 nodes x 4 tasks, each task 40
`sleep` processes (so every /proc pass of an agent reads ~900 processes with the node's
own). For SECONDS it polls the head's /metrics every 50 ms for each node's
cohort_node_heartbeat_age_seconds (the head's record of the last heartbeat's arrival), and
prints the age's p50, p99 and max, the agents' "heartbeats sent X apart ... built in Y"
warnings (logged for a gap over half the fence timeout, at most every 5 s per agent) with
the build times they give, and the load average. Run it under scripts/cpu-burn.sh (nest it
for more busy loops), e.g.:

  scripts/cpu-burn.sh python3 bench/heartbeat_gaps.py --seconds 60 OLD/cohort build/cohort

Scratch directories go under /tmp/heartbeat-gaps-*, removed at the end.
"""
import argparse, json, os, re, shutil, signal, subprocess, tempfile, time, urllib.request


def run(binary, seconds):
    d = tempfile.mkdtemp(prefix="heartbeat-gaps-", dir="/tmp")
    procs = []

    def spawn(argv, log):
        procs.append(subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True))

    try:
        spawn([binary, "head", "--host", "127.0.0.1", "--port", "0", "--state-dir", d + "/head", "--port-file",
               d + "/head.port", "--insecure", "--client-config", ""], d + "/head.log")
        for _ in range(400):
            if os.path.exists(d + "/head.port") and open(d + "/head.port").read().strip():
                break
            time.sleep(0.05)
        url = "http://127.0.0.1:" + open(d + "/head.port").read().strip()
        for n in ("n1", "n2"):
            spawn([binary, "agent", "--head", url, "--name", n, "--address", "127.0.0.1", "--simulated-gpus", "4",
                   "--cpus", "4", "--work-dir", d + "/" + n, "--task-user", "agent", "--container-runtime", "none"],
                  d + "/" + n + ".log")

        def get(path):
            return urllib.request.urlopen(url + path, timeout=10).read().decode()

        age = re.compile(r'cohort_node_heartbeat_age_seconds\{node="(n\d)"\} ([0-9.e+-]+)')
        for _ in range(400):
            if len(age.findall(get("/metrics"))) == 2:
                break
            time.sleep(0.05)
        spec = {"command": ["sh", "-c", "for i in $(seq 40); do sleep 600 & done; wait"], "nodes": 2,
                "tasks_per_node": 4}
        req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(spec).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()
        time.sleep(3)  # the tasks start
        ages = []
        end = time.time() + seconds
        while time.time() < end:
            try:
                ages += [float(v) for _, v in age.findall(get("/metrics"))]
            except OSError:
                pass
            time.sleep(0.05)
        load = open("/proc/loadavg").read().split()[:3]
        built = []
        warnings = 0
        for n in ("n1", "n2"):
            for line in open(d + "/" + n + ".log"):
                if "heartbeats sent" not in line:
                    continue
                warnings += 1
                m = re.search(r"built in ([0-9.]+)(ms|s)\b", line)
                if m:
                    built.append(float(m.group(1)) * (1000 if m.group(2) == "s" else 1))
        states = re.findall(r'"state":\s*"(\w+)"', get("/v1/nodes"))
        ages.sort()
        q = lambda f: ages[min(len(ages) - 1, int(f * len(ages)))]
        built.sort()
        print(f"{binary}: heartbeat age p50 {q(0.5):.3f} s, p99 {q(0.99):.3f} s, max {ages[-1]:.3f} s "
              f"({len(ages)} readings over {seconds:.0f} s); slow-heartbeat warnings {warnings}, built in "
              f"median {built[len(built) // 2] if built else 0:.0f} ms, max {built[-1] if built else 0:.0f} ms; "
              f"nodes {','.join(states[:2])}; load {' '.join(load)}", flush=True)
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binaries", nargs="+", help="cohort binaries, the baseline first")
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    for b in args.binaries:
        run(b, args.seconds)
