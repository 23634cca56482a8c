"""Ray workers: client CPU per million streamed tokens through a Ray actor against a local
engine process, and the tokens/s one worker sustains.

    pip install -e '.[ray]'
    python bench/ray_workers.py [--seconds 15] [--concurrency 32] [--repeat 3]

Starts a Ray head on 127.0.0.1 (two CPUs) and the simulator with zero delay; runs
``tokmon run -c N --workers 1`` with a local engine process and with ``--ray``, taking
turns each round. The CPU counted is tokmon's whole process tree plus, for Ray, the
worker actor's process (user+sys), over a steady-state window; tokens are the server's
own counter. Medians and ranges over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
import psutil  # noqa: E402
from _common import machine, median, table  # noqa: E402
from client_capacity import measure  # noqa: E402

from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402

RAY = str(Path(sys.executable).parent / "ray")


def actor_cpu() -> float:
    total = 0.0
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "EngineActor" in " ".join(p.info["cmdline"] or []):
                t = p.cpu_times()
                total += t.user + t.system
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=8)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    tmp = tempfile.mkdtemp(prefix="tkray", dir="/tmp")
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
         str(port), "--num-cpus", "2", "--include-dashboard", "false", "--temp-dir", tmp,
         "--object-store-memory", str(100 << 20), "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        time.sleep(0.5)
    got: dict[str, list[tuple[float, float]]] = {"local engine process": [], "Ray actor": []}
    try:
        with SimProcess(SimConfig(schedule=(0.0, 0.0, 1), seed=1)) as sim:
            for _ in range(a.repeat):
                for name in got:
                    ray = name == "Ray actor"
                    cmd = [sys.executable, "-m", "tokmon", "run", "--url", sim.url,
                           "--headless", "--no-gpu", "--no-server-metrics", "--no-env",
                           "--approx-prompt-tokens", "-c", str(a.concurrency), "--max-tokens",
                           "256", "--prompt-tokens", "16", "--workers", "1", "--duration",
                           f"{a.seconds + a.warmup + 2:g}s", "--status-interval", "1h",
                           *(["--ray", f"127.0.0.1:{port}"] if ray else [])]  # fmt: skip
                    got[name].append(
                        measure(cmd, sim.url, a.seconds, a.warmup, actor_cpu if ray else None)
                    )
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # (stops what it started, nothing else)
        head.wait(60)
    print(f"Ray workers · {machine()} · -c {a.concurrency}, {a.repeat} rounds\n")
    rows = [["client", "CPU s / M tokens", "range", "tokens/s", "range"]]
    for name, v in got.items():
        cpu = [x for x, _ in v]
        tps = [y for _, y in v]
        rows.append([name, f"{median(cpu):.1f}", f"{min(cpu):.1f}–{max(cpu):.1f}",
                     f"{median(tps):,.0f}", f"{min(tps):,.0f}–{max(tps):,.0f}"])  # fmt: skip
    print(table(rows))


if __name__ == "__main__":
    main()
