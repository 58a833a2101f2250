#!/usr/bin/env python3
"""Runs a rate benchmark with two binaries in turn and compares them.

usage: rate-pairs.py N OLD NEW throughput|dc|crmem

throughput: `bench throughput --json`, messages/s per case.
dc: `dc --clients 512 --seconds 3 --warmup 1 --json`, transfers/s and the CPU of the whole
run (user + system, from getrusage) per committed transfer.
crmem: `bench crmem --sections commit,synthetic,tpcb --parallel 1,16 --depths 256 --handlers
engine,polled --seconds 2 --json`, commit p50 (ns) and transactions/s per point.

N rounds, alternating which binary goes first; prints the medians and the ratio new / old
of each round with their median. The machine is shared and noisy: read the ratios.
"""
import json
import resource
import statistics
import subprocess
import sys


def run(binary, kind):
    if kind == "throughput":
        out = subprocess.run([binary, "bench", "throughput", "--json"],
                             capture_output=True, text=True, check=True).stdout
        rows = {}
        for line in out.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "throughput":
                rows[r["case"] + " msgs/s"] = r["msgs_per_s"]
        return rows
    if kind == "crmem":
        out = subprocess.run([binary, "bench", "crmem", "--sections", "commit,synthetic,tpcb",
                              "--parallel", "1,16", "--depths", "256", "--handlers",
                              "engine,polled", "--seconds", "2", "--commits", "5000",
                              "--warmup", "500", "--json"],
                             capture_output=True, text=True, check=True).stdout
        rows = {}
        for line in out.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("bench") != "crmem":
                continue
            h = r["handlers"]
            if r["section"] == "commit":
                rows[f"commit p50 ns {h}"] = r["commit_p50_ns"]
            elif r.get("mode") == "threads":
                rows[f"{r['section']} {h} {r['parallel']} threads txn/s"] = r["txn_per_s"]
            elif r.get("mode") == "in-flight":
                rows[f"{r['section']} {h} {r['depth']} in flight txn/s"] = r["txn_per_s"]
        return rows
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([binary, "dc", "--clients", "512", "--seconds", "3", "--warmup", "1",
                          "--json"], capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    d = json.loads(out.strip().splitlines()[-1])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"dc txn/s": d["tps"], "dc CPU us/txn": cpu * 1e6 / d["committed"]}


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("throughput", "dc", "crmem"):
        sys.exit(__doc__)
    n, old, new, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    got = {"old": [], "new": []}
    for k in range(n):
        order = [("old", old), ("new", new)] if k % 2 == 0 else [("new", new), ("old", old)]
        for tag, binary in order:
            got[tag].append(run(binary, kind))
        print(f"round {k + 1} of {n} done", file=sys.stderr, flush=True)
    for key in got["old"][0]:
        o = [r[key] for r in got["old"]]
        w = [r[key] for r in got["new"]]
        ratios = [b / a for a, b in zip(o, w)]
        print(f"{key}: {statistics.median(o):.4g} -> {statistics.median(w):.4g}; ratios "
              + " ".join(f"{x:.2f}" for x in ratios)
              + f"; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
