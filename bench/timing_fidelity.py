"""Timing fidelity: how far tokmon's TTFT and chunk gaps are from a known schedule, headless
and with the dashboard drawing, at 1, 64, 256 and 1,024 concurrent streams.

    python bench/timing_fidelity.py [--seconds 15] [--streams 1,64,256,1024]

The simulator sends the first chunk TTFT ms after it has read a request, then one chunk
every GAP ms (fixed schedule mode). The error is measured − scheduled: it bounds the
client's error from above (the simulator's own timer lateness and loopback are in it).
The dashboard run draws in a pseudo-terminal of 120×40, as a user would see it.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
from _common import machine, table  # noqa: E402

from tokmon.core.recording import read_recording  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402


def run(url: str, streams: int, seconds: float, path: str, dashboard: bool, tokens: int) -> None:
    args = [
        sys.executable,
        "-m",
        "tokmon",
        "run",
        "--url",
        url,
        "-c",
        str(streams),
        "--duration",
        f"{seconds}s",
        "--max-tokens",
        str(tokens),
        "--record",
        path,
        "--record-chunks",
        "--no-gpu",
        "--warmup",
        "3s",
        "--status-interval",
        "1h",
    ]
    if not dashboard:
        subprocess.run(
            args + ["--headless"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=seconds + 120,
        )
        return
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execvp(args[0], args)
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    os.kill(pid, signal.SIGWINCH)
    t_end = time.monotonic() + seconds + 120
    quit_sent = False
    start = time.monotonic()
    while time.monotonic() < t_end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                os.read(fd, 65536)
            except OSError:
                break
        if not quit_sent and time.monotonic() - start > seconds + 3:
            os.write(fd, b"q")  # the run is finished: leave the dashboard
            quit_sent = True
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break


def errors(path: str, ttft: float, gap: float) -> tuple[np.ndarray, np.ndarray]:
    rec = read_recording(path)
    ok = [r for r in rec.records if r.ok and r.counted and r.ttft_ms is not None]
    t = np.array([r.ttft_ms - ttft for r in ok])
    g = np.concatenate([np.frombuffer(r.gaps, dtype="<f4") for r in ok if r.gaps]) - gap
    return t, g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--streams", default="1,64,256,1024")
    ap.add_argument("--ttft", type=float, default=100.0)
    ap.add_argument("--gap", type=float, default=40.0)
    ap.add_argument("--tokens", type=int, default=50)
    a = ap.parse_args()
    rows = [
        ["streams", "view", "TTFT err p50", "p99", "max", "gap err p50", "p99", "max", "requests"]
    ]
    sim = SimProcess(SimConfig(schedule=(a.ttft, a.gap, 1)))
    sim.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            for n in (int(x) for x in a.streams.split(",")):
                for view in ("headless", "dashboard"):
                    path = os.path.join(d, f"{n}-{view}.jsonl")
                    run(sim.url, n, a.seconds, path, view == "dashboard", a.tokens)
                    t, g = errors(path, a.ttft, a.gap)
                    rows.append(
                        [
                            str(n),
                            view,
                            f"{np.median(t):.2f}",
                            f"{np.percentile(t, 99):.2f}",
                            f"{t.max():.2f}",
                            f"{np.median(g):.2f}",
                            f"{np.percentile(g, 99):.2f}",
                            f"{g.max():.2f}",
                            f"{t.size:,}",
                        ]
                    )
                    print(rows[-1], flush=True)
    finally:
        sim.stop()
    print(
        f"timing fidelity · {machine()} · schedule: TTFT {a.ttft:g} ms, then 1 token every "
        f"{a.gap:g} ms, {a.tokens} tokens · errors in ms (measured − scheduled)"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
