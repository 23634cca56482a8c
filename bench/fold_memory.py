"""Memory of a days-long soak, on a scaled clock: the fold a live run keeps in its parent
process, fed hours of synthetic requests as fast as it folds them -- 200 req/s, the
arms alternating every 30 s, tokens every 250 ms, a tick and a GPU sample every second,
as a live run feeds it. Prints the parent's RSS and the fold's traced memory at each
hour of run time. The goal (issue #41): RSS growth ≤ 5 MB per hour after the first
10 minutes, whatever the duration.

    python bench/fold_memory.py [--hours 3] [--rate 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
import psutil  # noqa: E402
from _common import machine, table  # noqa: E402

from tokmon.model.data.facts import Requests, Sample, Tick, Tokens  # noqa: E402
from tokmon.model.data.records import TokenTick  # noqa: E402
from tokmon.model.folding.fold import Fold, FoldSettings  # noqa: E402
from tokmon.sim.requests import synthetic_batch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--trace", action="store_true", help="also trace Python allocations (slower)")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    fold = Fold(FoldSettings(arms=("a", "b")), derive=True)
    proc = psutil.Process()
    if a.trace:
        tracemalloc.start()
    rows = [["run time", "requests", "parent RSS MiB", "traced MiB", "wall s"]]
    marks: dict[float, float] = {}
    t0 = time.monotonic()
    rid, end = 0, int(a.hours * 3600)
    for sec in range(end):
        seg = sec // 30
        tb = synthetic_batch(fold.vocab, rid, a.rate, sec * 10**9, rng, seg)
        rid += a.rate
        arm = "a" if seg % 2 == 0 else "b"
        fold.apply(Requests(tb))
        buckets = tuple(
            TokenTick(sec * 10**9 + k * 250_000_000, arm, a.rate * 16) for k in range(4)
        )
        fold.apply(Tokens(buckets))
        gpu = {"gpu_util": 90.0, "gpu_mem_pct": 80.0, "gpu_power_w": 300.0 + sec % 7}
        fold.apply(Sample((sec + 1) * 10**9 - 1, "gpu", gpu))
        fold.apply(Tick((sec + 1) * 10**9, False))
        minute = (sec + 1) / 60
        if minute in (10, 30) or (sec + 1) % 3600 == 0:
            rss = proc.memory_info().rss / 2**20
            traced = tracemalloc.get_traced_memory()[0] / 2**20 if a.trace else float("nan")
            marks[minute] = rss
            h, m = divmod(int(minute), 60)
            rows.append(
                [
                    f"{h}:{m:02d}",
                    f"{rid:,}",
                    f"{rss:.1f}",
                    f"{traced:.1f}",
                    f"{time.monotonic() - t0:.0f}",
                ]
            )
            print(rows[-1], flush=True)
    print(
        f"fold memory over a long run · {machine()} · {a.rate} req/s, {a.hours:g} h of run time "
        f"on a scaled clock ({fold.summary(end * 10**9)['arms']['a']['ttft_ms']['count']:,} "
        "requests of arm a counted)"
    )
    print(table(rows))
    hours = [m for m in marks if m >= 60]
    if 10 in marks and hours:
        last = max(hours)
        per_h = (marks[last] - marks[10]) / ((last - 10) / 60)
        print(f"RSS growth after the first 10 minutes: {per_h:+.1f} MB per hour (goal ≤ 5)")


if __name__ == "__main__":
    main()
