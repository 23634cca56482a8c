"""Dashboard cost: bytes per second written to the terminal and CPU of the dashboard
process, during ``tokmon demo`` in a pseudo-terminal of a given size.

    python bench/dashboard_cost.py [--seconds 30] [--sizes 80x24,120x40,200x50]

Only the dashboard's own process is charged CPU (the engine and the simulators run in
their own processes). Bytes are counted after the first 5 seconds (start-up paints the
whole screen once).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

sys.path.insert(0, os.path.dirname(__file__))
import psutil  # noqa: E402
from _common import machine, table  # noqa: E402


def run(cols: int, rows: int, seconds: float, warm: float, extra: list[str]) -> tuple[float, float]:
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.environ.pop("NO_COLOR", None)
        os.execvp(sys.executable, [sys.executable, "-m", "tokmon", "demo", *extra])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.kill(pid, signal.SIGWINCH)
    proc = psutil.Process(pid)
    start = time.monotonic()
    counted = 0
    cpu0 = None
    t_count = 0.0
    while time.monotonic() - start < seconds:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if time.monotonic() - start >= warm:
                counted += len(data)
        if cpu0 is None and time.monotonic() - start >= warm:
            t = proc.cpu_times()
            cpu0 = t.user + t.system
            t_count = time.monotonic()
    t = proc.cpu_times()
    cpu = t.user + t.system - (cpu0 or 0)
    elapsed = time.monotonic() - t_count
    os.write(fd, b"q")
    time.sleep(0.5)
    os.write(fd, b"y")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                os.read(fd, 65536)
        except OSError:
            break
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    else:
        os.kill(pid, signal.SIGKILL)
    return counted / elapsed, 100 * cpu / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=6)
    ap.add_argument("--sizes", default="80x24,120x40,200x50")
    ap.add_argument("--fps", default="4")
    a = ap.parse_args()
    rows = [["terminal", "bytes/s", "dashboard CPU % of a core"]]
    for size in a.sizes.split(","):
        c, r = (int(x) for x in size.split("x"))
        bps, cpu = run(c, r, a.seconds, a.warmup, ["--fps", a.fps, "--no-faults"])
        rows.append([size, f"{bps / 1024:.1f} KiB/s", f"{cpu:.1f}%"])
    print(
        f"dashboard cost · {machine()} · tokmon demo · {a.fps} redraws/s max · "
        f"{a.seconds:g} s each, first {a.warmup:g} s not counted"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
