#!/usr/bin/env python3
"""What waiting and a run cost the server (issue 21). See bench/README.md.

usage: wait_cost.py BIN HOST PORT WAITERS OUT.json

- server cost: commands (INFO commandstats, the scripts' own commands included) and Redis
  time per uncontended run (acquire + release), averaged over 50 runs with a warm script
  cache; the scripts' time (EVALSHA/EVAL usec, their inner commands included) and the
  server's CPU (INFO cpu, connection handling included).
- waiter cost: WAITERS wrappers queued one by one on a held key; then, over 10 s, attempts
  (EVALSHA/EVAL) and all commands a second, and connections per waiter (CLIENT LIST); then
  the holder lets go and every waiter runs `echo` once: inversions of arrival order and the
  handoff gap (one command's start to the next one's, median and p90).
"""
import json, os, socket, subprocess, sys, tempfile, time

BIN, HOST, PORT, N, OUT = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
URL = f"redis://{HOST}:{PORT}"


class Redis:
    """Just enough RESP2 to ask INFO, CONFIG, ZCARD and CLIENT LIST."""

    def __init__(self):
        self.s = socket.create_connection((HOST, PORT))
        self.f = self.s.makefile("rb")

    def __call__(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


r = Redis()


def commandstats():
    stats = {}
    for line in r("INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, fields = line[len("cmdstat_"):].split(":", 1)
        if name.startswith(("config", "info", "client", "zcard")):
            continue  # this script's own
        f = dict(kv.split("=") for kv in fields.split(","))
        stats[name] = (int(f["calls"]), int(f["usec"]))
    return stats


def cpu():
    f = dict(l.split(":") for l in r("INFO", "cpu").splitlines() if ":" in l)
    return float(f["used_cpu_sys"]) + float(f["used_cpu_user"])


def run(*args, **kw):
    return subprocess.run([BIN, "--redis", URL, *args], **kw)


result = {}

# ---- server cost of one uncontended run
RUNS = 50
run("--key", "wc-warm", "--", "true", check=True)
r("CONFIG", "RESETSTAT")
cpu0 = cpu()
for _ in range(RUNS):
    run("--key", "wc-uncontended", "--", "true", check=True)
cpu1 = cpu()
stats = commandstats()
calls = sum(c for c, _ in stats.values())
scripts_us = sum(u for n, (_, u) in stats.items() if n in ("evalsha", "eval"))
result["server"] = {
    "runs": RUNS,
    "commands_per_run": calls / RUNS,
    "by_command": {n: c / RUNS for n, (c, _) in sorted(stats.items())},
    "script_us_per_run": scripts_us / RUNS,
    "cpu_us_per_run": (cpu1 - cpu0) * 1e6 / RUNS,
}

# ---- waiter cost
tmp = tempfile.mkdtemp(prefix="redlock-wait-cost.")
go, order = os.path.join(tmp, "go"), os.path.join(tmp, "order")
queue = "{redlock:wc-wait}:queue"
held = os.path.join(tmp, "held")
holder = subprocess.Popen([BIN, "--redis", URL, "--key", "wc-wait", "--", "sh", "-c",
                           f"touch {held}; while [ ! -e {go} ]; do sleep 0.05; done"])
while not os.path.exists(held):
    time.sleep(0.01)
waiters = []
t0 = time.monotonic()
for i in range(1, N + 1):
    waiters.append(subprocess.Popen(
        [BIN, "--redis", URL, "--key", "wc-wait", "--wait", "30m", "--",
         "sh", "-c", f"echo {i} $(date +%s%N) >> {order}"],
        stderr=subprocess.DEVNULL))
    while r("ZCARD", queue) < i:
        time.sleep(0.002)
queued_in = time.monotonic() - t0
time.sleep(3)  # every waiter subscribed and at its pace
clients = len(r("CLIENT", "LIST").splitlines()) - 2  # the holder and this script
r("CONFIG", "RESETSTAT")
cpu0, t0 = cpu(), time.monotonic()
time.sleep(10)
stats, secs, cpu1 = commandstats(), time.monotonic() - t0, cpu()
attempts = sum(c for n, (c, _) in stats.items() if n in ("evalsha", "eval"))
everything = sum(c for c, _ in stats.values())
open(go, "w").close()
holder.wait()
rcs = [w.wait() for w in waiters]
runs = [tuple(map(int, l.split())) for l in open(order)]
served = [i for i, _ in runs]
inversions = sum(1 for a in range(len(served)) for b in range(a + 1, len(served))
                 if served[a] > served[b]) if N <= 2000 else None
gaps = sorted((b[1] - a[1]) / 1e6 for a, b in zip(runs, runs[1:]))
pct = lambda p: gaps[min(len(gaps) - 1, int(p * len(gaps)))] if gaps else 0.0
result["waiters"] = {
    "n": N,
    "queued_in_s": queued_in,
    "attempts_per_s": attempts / secs,
    "attempts_per_s_per_waiter": attempts / secs / N,
    "commands_per_s": everything / secs,
    "cpu_share": (cpu1 - cpu0) / secs,
    "connections_per_waiter": clients / N,
    "exit_0": sum(1 for c in rcs if c == 0),
    "served": len(served),
    "inversions": inversions,
    "gap_median_ms": pct(0.5),
    "gap_p90_ms": pct(0.9),
}
json.dump(result, open(OUT, "w"), indent=1)
print(json.dumps(result, indent=1), file=sys.stderr)
