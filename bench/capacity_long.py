"""A capacity search on long answers: does it finish in minutes? (#58)

    python bench/capacity_long.py [--scale 2] [--runs 1]

A simulated server that holds 8 streams (a batch of 8) with answers of 2 × SCALE
seconds (80 tokens, 25 × SCALE ms a step), under an SLO of TTFT ≤ 0.5 × SCALE s: a
ninth stream waits a whole answer, so the truth is 8. Scale 2 is the issue's case
(4-second answers, TTFT ≤ 1 s; the suite runs scale 1). Prints, per run, the capacity
found, where it failed, the probes' seconds and the search's wall time; the target is
under four minutes of probes at scale 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokmon.sim.model import parse_profile
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def one(scale: float, seed: int) -> tuple[float, float, float, float]:
    prof = parse_profile("zero", f"step_base_ms={25 * scale},max_batch=8")
    with tempfile.TemporaryDirectory() as d, SimProcess(SimConfig(profile=prof, seed=seed)) as sim:
        out = Path(d) / "s.json"
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "tokmon", "run", "--url", sim.url, "--find-capacity",
             "concurrency", "--slo", f"ttft={500 * scale:g}", "--max-tokens", "80",
             "--ignore-eos", "--headless", "--no-gpu", "--summary-json", str(out),
             "--status-interval", "1h"],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        wall = time.monotonic() - t0
        if r.returncode != 0:
            raise SystemExit(f"tokmon failed: {r.stderr[-500:]}")
        cap = json.loads(out.read_text())["capacity_search"]["default"]
    return cap["capacity"], cap["fails_at"], cap["probe_seconds"], wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    print(f"answers of {2 * a.scale:g} s, 8 streams held, SLO TTFT ≤ {0.5 * a.scale:g} s")
    probes = []
    for i in range(a.runs):
        c, f, ps, wall = one(a.scale, 3 + i)
        probes.append(ps)
        print(f"run {i + 1}: capacity {c:g} (fails at {f:g}), probes {ps:.0f} s, wall {wall:.0f} s")
    print(f"median probe seconds {statistics.median(probes):.0f} (target < {120 * a.scale:.0f})")


if __name__ == "__main__":
    main()
