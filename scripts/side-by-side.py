#!/usr/bin/env python3
"""Runs one `txcast bench ...` command with two binaries in turn and compares them.

usage: side-by-side.py N OLD NEW -- bench KIND [options...]

Runs N rounds, alternating which binary goes first, each with `--json`; for every latency
row (case, bytes) it prints the p50 of both (medians over the rounds) and the ratio
new / old of each round, with the median of the p50 and p99 ratios. The machine is shared
and noisy: read the ratios, pair by pair.
"""
import json
import statistics
import subprocess
import sys


def main():
    if "--" not in sys.argv or len(sys.argv) < 5:
        sys.exit(__doc__)
    n, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    args = sys.argv[sys.argv.index("--") + 1:]
    rows = {}
    for k in range(n):
        order = [("old", old), ("new", new)] if k % 2 == 0 else [("new", new), ("old", old)]
        for tag, binary in order:
            out = subprocess.run([binary] + args + ["--json"], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{binary} failed: {out.stderr.strip()[-400:]}")
            for line in out.stdout.splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if "p50_ns" not in row:
                    continue
                key = (row["case"], row.get("bytes"))
                rows.setdefault(key, {"old": [], "new": []})[tag].append(
                    (row["p50_ns"], row["p99_ns"]))
        print(f"round {k + 1} of {n} done", file=sys.stderr, flush=True)
    for key in sorted(rows, key=str):
        v = rows[key]
        m = min(len(v["old"]), len(v["new"]))
        if m == 0:
            continue
        r50 = [v["new"][i][0] / v["old"][i][0] for i in range(m)]
        r99 = [v["new"][i][1] / v["old"][i][1] for i in range(m)]
        old_us = statistics.median(x[0] for x in v["old"]) / 1000
        new_us = statistics.median(x[0] for x in v["new"]) / 1000
        print(f"{key[0]} {key[1]} B: p50 {old_us:.2f} -> {new_us:.2f} us; "
              f"ratios {' '.join(f'{x:.2f}' for x in r50)}; "
              f"median p50 {statistics.median(r50):.3f}, p99 {statistics.median(r99):.3f}")


if __name__ == "__main__":
    main()
