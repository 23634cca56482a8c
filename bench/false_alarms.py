"""False alarms of the stability alerts on a flat soak against the simulator.

A `tokmon sim` with no faults (so nothing drifts, steps or saturates) is driven by a
headless `tokmon run` with the default alert settings for --minutes of real time; every
alert it raises is a false alarm. Prints the checks made, the alerts, and the rate.

    python bench/false_alarms.py --minutes 30
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from _common import machine, table


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "tokmon", "sim", "--port", str(port), "--seed", "7"],
        stdout=subprocess.DEVNULL,
    )
    out = os.path.join(tempfile.mkdtemp(), "summary.json")
    try:
        time.sleep(2)
        t0 = time.monotonic()
        rc = subprocess.call(
            [
                sys.executable,
                "-m",
                "tokmon",
                "run",
                "--url",
                f"http://127.0.0.1:{port}/v1",
                "--headless",
                "--status-interval",
                "600",
                "--duration",
                f"{a.minutes * 60:.0f}s",
                "-c",
                str(a.concurrency),
                "--mix",
                "code=0.3,chat=0.5,creative=0.2",
                "--max-tokens",
                "64:256",
                "--warmup",
                "30s",
                "--summary-json",
                out,
            ],
            stdout=subprocess.DEVNULL,
        )
        wall = time.monotonic() - t0
    finally:
        sim.terminate()
        sim.wait(10)
    with open(out) as f:
        s = json.load(f)
    alerts = s.get("alerts") or []
    minutes = wall / 60
    # The engine checks every 10 s: drift on 6 series once 10 min of data exist, change
    # points on 3 series, saturation on 2 signals, leaks on 1.
    ticks = int(wall // 10)
    drift_ticks = max(0, int((wall - 600) // 10))
    checks = drift_ticks * 6 + ticks * (3 + 2 + 1)
    print(f"flat soak against tokmon sim, {minutes:.1f} min, -c {a.concurrency} · {machine()}")
    print(f"(run exit code {rc}; {sum(x['requests']['ok'] for x in s['arms'].values())} ok)")
    print(
        table(
            [
                ["checks", "alerts", "per hour", "false alarms per check"],
                [
                    str(checks),
                    str(len(alerts)),
                    f"{len(alerts) / (minutes / 60):.2f}",
                    f"{len(alerts) / max(1, checks):.4f}",
                ],
            ]
        )
    )
    for x in alerts:
        print(f"  {x.get('t_s', 0):7.0f} s  {x.get('message')}")


if __name__ == "__main__":
    main()
