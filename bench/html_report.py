"""The HTML report of a 10-minute two-arm run: its file size and the time to write it.

    python bench/html_report.py [--minutes 10] [--runs 3]

The recording is synthetic but shaped like a real one (bench/recording.py's requests, 50 a
second, the two arms taking turns every 10 s, ticks and probe samples at a live run's
rates). Most of the file is plotly.js, once (about 3.6 MB); the rest grows with the run's
length at one chart point a second (adaptive beyond 10 minutes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402
from recording import RATE, write  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    n = int(a.minutes * 60 * RATE)
    sizes, times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        rec, html = os.path.join(tmp, "r.jsonl"), os.path.join(tmp, "r.html")
        write(rec, n, chunks=False)
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tokmon", "report", rec, "-F", "html", "-o", html],
                           check=True, capture_output=True)  # fmt: skip
            times.append(time.perf_counter() - t0)
            sizes.append(os.path.getsize(html))
    print(machine())
    print(f"{a.minutes:g}-minute two-arm run, {n:,} requests, {a.runs} reports (medians)")
    print(table([["file size (MB)", "report time (s)"],
                 [f"{statistics.median(sizes) / 1e6:.2f}", f"{statistics.median(times):.2f}"]]))  # fmt: skip


if __name__ == "__main__":
    main()
