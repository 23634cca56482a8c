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
import psutil  # noqa: E402
from _common import machine, table  # noqa: E402

from tokmon.engine.worker import request_id  # noqa: E402
from tokmon.recording.reader import read_recording  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402


def run(
    url: str, streams: int, seconds: float, path: str, dashboard: bool, tokens: str, load: str
) -> None:
    if load == "poisson":
        # The rate that keeps `streams` in flight on average (Little's law).
        lo, _, hi = tokens.partition(":")
        mean_tokens = (int(lo) + int(hi or lo)) / 2
        per_request_s = (TTFT_MS + GAP_MS * (mean_tokens - 1)) / 1000
        shape = ["--rate", f"{streams / per_request_s:.3f}", "--max-concurrency", "100000"]
    else:
        shape = ["-c", str(streams)]
    args = [
        sys.executable,
        "-m",
        "tokmon",
        "run",
        "--url",
        url,
        *shape,
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


TTFT_MS, GAP_MS = 100.0, 40.0


def server_late(url: str) -> dict[str, dict[float, float]]:
    """The simulator's own lateness histogram (cumulative counts per bucket), per chunk kind."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.replace("/v1", "/metrics"), timeout=5).text
    out: dict[str, dict[float, float]] = {"first": {}, "next": {}}
    for fam in text_string_to_metric_families(text):
        if fam.name == "tokmon_sim:schedule_lateness_seconds":
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    out[s.labels["chunk"]][float(s.labels["le"])] = s.value
    return out


def share_over(h0: dict[float, float], h1: dict[float, float], limit: float) -> float:
    """Fraction of the observations between two scrapes that were later than ``limit``."""
    total = h1.get(float("inf"), 0) - h0.get(float("inf"), 0)
    within = h1.get(limit, 0) - h0.get(limit, 0)
    return (total - within) / total if total else 0.0


def write_log(url: str) -> dict[str, list[int]]:
    """When the simulator wrote each chunk of each request since the last call."""
    import httpx

    return httpx.post(url.replace("/v1", "/admin/write-log"), timeout=30).json()


def errors(
    path: str, ttft: float, gap: float, log: dict[str, list[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Errors against the schedule (TTFT, gaps), and against the moments the server
    really wrote each chunk (first chunk, gaps): the client's own share."""
    rec = read_recording(path)
    run_id = rec.header.get("settings", {}).get("run_id", "")
    t0 = rec.header["t0_perf_ns"]
    ok = [r for r in rec.records if r.ok and r.counted and r.ttft_ms is not None]
    t = np.array([r.ttft_ms - ttft for r in ok])
    g = np.concatenate([np.frombuffer(r.gaps, dtype="<f4") for r in ok if r.gaps]) - gap
    own_t, own_g = [], []
    for r in ok:
        w = log.get(request_id(run_id, r.rid))
        if not w or r.t_send is None:
            continue
        own_t.append((t0 + r.t_send + r.ttft_ms * 1e6 - w[0]) / 1e6)
        if r.gaps and len(w) == len(r.gaps) // 4 + 1:
            own_g.append(np.frombuffer(r.gaps, dtype="<f4") - np.diff(w) / 1e6)
    og = np.concatenate(own_g) if own_g else np.zeros(0)
    return t, g, np.array(own_t), og


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--streams", default="1,64,256,1024")
    ap.add_argument("--ttft", type=float, default=100.0)
    ap.add_argument("--gap", type=float, default=40.0)
    ap.add_argument("--server-nice", type=int, default=None)
    ap.add_argument(
        "--load",
        choices=("closed", "poisson"),
        default="closed",
        help="closed: N streams back to back (they march in step); poisson: arrivals at "
        "the rate that keeps N in flight on average",
    )
    ap.add_argument("--tokens", default="50", help="output tokens: N, or LO:HI")
    a = ap.parse_args()
    rows = [
        [
            "streams",
            "view",
            "TTFT err p50",
            "p99",
            "max",
            "gap err p50",
            "p99",
            "max",
            "requests",
            "TTFT err > 2 ms",
            "server's own > 2 ms",
            "client TTFT err p50",
            "p99",
            "max",
            "client |gap err| p99",
            "matched",
        ]
    ]
    global TTFT_MS, GAP_MS
    TTFT_MS, GAP_MS = a.ttft, a.gap
    sim = SimProcess(SimConfig(schedule=(a.ttft, a.gap, 1)))
    sim.start()
    if a.server_nice is not None:
        # A steadier ruler: the server wakes on time even while the client and the
        # dashboard hold both cores (it needs the right to raise priority, e.g. root).
        try:
            psutil.Process(sim.proc.pid).nice(a.server_nice)
        except (psutil.Error, OSError) as e:
            print(f"cannot set the server's nice level: {e}")
    try:
        with tempfile.TemporaryDirectory() as d:
            for n in (int(x) for x in a.streams.split(",")):
                for view in ("headless", "dashboard"):
                    path = os.path.join(d, f"{n}-{view}.jsonl")
                    h0 = server_late(sim.url)
                    write_log(sim.url)
                    run(sim.url, n, a.seconds, path, view == "dashboard", a.tokens, a.load)
                    h1 = server_late(sim.url)
                    t, g, ot, og = errors(path, a.ttft, a.gap, write_log(sim.url))
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
                            f"{np.mean(t > 2) * 100:.1f}%",
                            f"{share_over(h0['first'], h1['first'], 0.002) * 100:.1f}%",
                            f"{np.median(ot):.3f}" if ot.size else "-",
                            f"{np.percentile(ot, 99):.3f}" if ot.size else "-",
                            f"{ot.max():.3f}" if ot.size else "-",
                            f"{np.percentile(np.abs(og), 99):.3f}" if og.size else "-",
                            f"{ot.size:,}",
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
