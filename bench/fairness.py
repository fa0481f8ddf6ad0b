#!/usr/bin/env python3
"""Fair waiting and handoff gap, for bench/run: flock(1) and redlock-run in the same run.

Each round: a holder takes the lock, 8 waiters arrive 100 ms apart (each blocks on the lock),
the holder lets go. Every waiter's command logs its start and end (ns). Reported per tool:
- inversions: pairs of waiters served in the opposite order of their arrival, over all rounds
  (0 = first come, first served);
- handoff gap: from one waiter's command ending to the next one's starting, median and p90.

usage: fairness.py BIN URL LOCKFILE ROUNDS OUT_JSON
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN, URL, LOCKFILE, ROUNDS, OUT = sys.argv[1:6]
ROUNDS = int(ROUNDS)
WAITERS = 8
APART = 0.1
JOB = 'echo "start $W $(date +%s%N)" >> log; sleep 0.01; echo "end $W $(date +%s%N)" >> log'
HOLD = "touch held; i=0; while [ ! -e go ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done"


def command(tool, script):
    if tool == "flock":
        return ["flock", "-w", "60", LOCKFILE, "sh", "-c", script]
    return [BIN, "--key", "bench-fair", "--redis", URL, "--wait", "60s", "--", "sh", "-c", script]


def wait_for(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"fairness.py: {path} never appeared")
        time.sleep(0.005)


def one_round(tool):
    with tempfile.TemporaryDirectory() as d:
        holder = subprocess.Popen(command(tool, HOLD), cwd=d, stderr=subprocess.DEVNULL)
        wait_for(os.path.join(d, "held"))
        waiters = []
        for w in range(WAITERS):
            env = dict(os.environ, W=str(w))
            waiters.append(
                subprocess.Popen(command(tool, JOB), cwd=d, env=env, stderr=subprocess.DEVNULL)
            )
            time.sleep(APART)
        open(os.path.join(d, "go"), "w").close()
        codes = [p.wait(timeout=120) for p in [holder] + waiters]
        if any(codes):
            raise SystemExit(f"fairness.py: {tool} exit codes {codes}")
        starts, ends = {}, {}
        for line in open(os.path.join(d, "log")):
            kind, w, t = line.split()
            (starts if kind == "start" else ends)[int(w)] = int(t)
    order = sorted(starts, key=starts.get)
    inversions = sum(1 for i, a in enumerate(order) for b in order[i + 1:] if a > b)
    gaps = [(starts[b] - ends[a]) / 1e6 for a, b in zip(order, order[1:])]
    return inversions, gaps


results = {}
for tool in ("flock", "redlock-run"):
    inversions, gaps = 0, []
    for _ in range(ROUNDS):
        n, g = one_round(tool)
        inversions += n
        gaps += g
    gaps.sort()
    results[tool] = {
        "rounds": ROUNDS,
        "inversions": inversions,
        "gap_median_ms": statistics.median(gaps),
        "gap_p90_ms": gaps[int(len(gaps) * 0.9)],
    }
json.dump(results, open(OUT, "w"))
