"""Memory over a long run: push N requests through a live session against the zero-delay
simulator and print the resident memory of tokmon (dashboard-side process + engine) at
intervals. The goal: growth under 50 MB between 100,000 and 1,000,000 requests.

    python bench/memory.py [--requests 1000000] [--concurrency 64] [--max-tokens 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import psutil  # noqa: E402
from _common import machine, table  # noqa: E402

from tokmon.model.workloads.arms import Arm  # noqa: E402
from tokmon.model.workloads.config import RunConfig  # noqa: E402
from tokmon.model.workloads.workload import LengthDist  # noqa: E402
from tokmon.sim.model import PROFILES  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402
from tokmon.sources.live import LiveSession  # noqa: E402


def rss_mib(pids: list[int]) -> float:
    tot = 0
    for p in pids:
        try:
            tot += psutil.Process(p).memory_info().rss
        except psutil.Error:
            pass
    return tot / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--every", type=int, default=100_000)
    a = ap.parse_args()
    sim = SimProcess(SimConfig(profile=PROFILES["zero"]))
    sim.start()
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=a.concurrency,
        requests=a.requests,
        max_tokens=LengthDist("fixed", a.max_tokens),
        prompt_tokens=LengthDist("fixed", 8),
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b")
    s.start()
    rows = [["requests", "parent RSS MiB", "engine RSS MiB", "elapsed s"]]
    t0 = time.monotonic()
    nxt = a.every
    marks: dict[int, tuple[float, float]] = {}
    try:
        while not s.wait(0.5):
            snap = s.snapshot()
            done = 0 if snap is None else snap.ok + snap.failed
            if done >= nxt:
                parent = rss_mib([os.getpid()])
                engine = rss_mib([p.pid for p in s.procs])
                marks[nxt] = (parent, engine)
                rows.append(
                    [f"{done:,}", f"{parent:.1f}", f"{engine:.1f}", f"{time.monotonic() - t0:.0f}"]
                )
                print(rows[-1], flush=True)
                nxt += a.every
    finally:
        s.close()
        sim.stop()
    print(
        f"memory over a long run · {machine()} · {a.requests:,} requests of {a.max_tokens} tokens"
    )
    print(table(rows))
    keys = sorted(marks)
    if len(keys) >= 2:
        g = (marks[keys[-1]][0] + marks[keys[-1]][1]) - (marks[keys[0]][0] + marks[keys[0]][1])
        print(f"growth from {keys[0]:,} to {keys[-1]:,} requests: {g:+.1f} MiB (goal < 50 MB)")


if __name__ == "__main__":
    main()
