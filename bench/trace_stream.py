"""A large trace is streamed: how long before the run starts, and how much memory?

    python bench/trace_stream.py [--lines 3000000] [--runs 3]

Writes a Mooncake trace of --lines requests (each with a few hash ids, ~150 bytes a
line), then in a fresh process each time: loads it as tokmon did before 0.9 (parsed and
held whole: ``stream_over`` above the file's size) and as it does now (scanned: counted,
its first 100 lines checked, its first and last times read), and reads one engine's
share of two from the file as the engines do during the run. Prints the medians of the
seconds and of the peak RSS (MB) of each. Then one real run against the simulator with
``-n 200 --trace-speed 50``: the seconds from the command to its end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402

from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402

CHILD = """
import resource, sys, time
from tokmon.inputs import load_mooncake, read_share
path, how = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if how == "held":
    tr = load_mooncake(path, stream_over=1 << 62)
elif how == "scan":
    tr = load_mooncake(path)
else:
    tr = load_mooncake(path)
    n = sum(1 for _ in read_share(tr, 0, 2))
dt = time.perf_counter() - t0
print(dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def write(path: str, n: int) -> None:
    with open(path, "w") as f:
        t = 0
        for i in range(n):
            t += 3 + (i * 7919) % 11
            f.write(json.dumps({"timestamp": t, "input_length": 1500 + i % 700,
                                "output_length": 16 + i % 48,
                                "hash_ids": [i % 5, 100 + i % 13, 10_000 + i]}) + "\n")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=3_000_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.jsonl")
        write(path, a.lines)
        size = os.path.getsize(path) / 1e6
        print(f"trace: {a.lines:,} lines, {size:.0f} MB")
        rows = []
        for how, what in (("held", "held whole (before)"), ("scan", "scanned (now)"),
                          ("share", "scan + one engine's share of 2 read")):  # fmt: skip
            got = []
            for _ in range(a.runs if how != "held" else 1):
                out = subprocess.run([sys.executable, "-c", CHILD, path, how],
                                     capture_output=True, text=True, check=True)  # fmt: skip
                s, rss = out.stdout.split()
                got.append((float(s), float(rss)))
            rows.append([what, f"{statistics.median(g[0] for g in got):.2f}",
                         f"{statistics.median(g[1] for g in got):.0f}"])  # fmt: skip
        print(table([["load", "seconds", "peak RSS MB"], *rows]))
        with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=3)) as sim:
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "tokmon", "run", "--url", sim.url, "--trace", path,
                 "-n", "200", "--trace-speed", "50", "--headless", "--no-gpu",
                 "--approx-prompt-tokens", "--status-interval", "1h"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600,
            )  # fmt: skip
            print(
                f"tokmon run --trace (-n 200 at 50×): {time.perf_counter() - t0:.1f} s end to end"
            )


if __name__ == "__main__":
    main()
