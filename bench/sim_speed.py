"""How fast the simulator streams: tokens per CPU-second of the simulator process, at one
token per chunk with no artificial delay (the issue's target: at least 50,000 on one core).

    python bench/sim_speed.py [--seconds 10] [--concurrency 64] [--repeat 3]

The load comes from a raw asyncio socket reader in this process (the cheapest client), so
that the simulator's own CPU is what is measured; tokens are the simulator's own counter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, median, server_tokens, table, tree_cpu  # noqa: E402

from tokmon.sim.model import PROFILES  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402


async def reader(port: int, stop: float, max_tokens: int) -> None:
    body = json.dumps(
        {
            "model": "sim-27b",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    req = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    r, w = await asyncio.open_connection("127.0.0.1", port)
    while time.monotonic() < stop:
        w.write(req)
        buf = b""
        while not buf.endswith(b"0\r\n\r\n"):
            chunk = await r.read(65536)
            if not chunk:
                return
            buf = buf[-8:] + chunk
    w.close()


async def load(port: int, seconds: float, conc: int, max_tokens: int) -> None:
    stop = time.monotonic() + seconds
    await asyncio.gather(*(reader(port, stop, max_tokens) for _ in range(conc)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rows = [["run", "tokens", "sim CPU s", "tokens per CPU-s", "wall tokens/s"]]
    rates = []
    for i in range(a.repeat):
        sim = SimProcess(SimConfig(profile=PROFILES["zero"]))
        sim.start()
        try:
            os.sched_setaffinity(sim.proc.pid, {0})
            tok0, cpu0, t0 = server_tokens(sim.url), tree_cpu(sim.proc.pid), time.monotonic()
            asyncio.run(load(sim.port, a.seconds, a.concurrency, a.max_tokens))
            tok1, cpu1, t1 = server_tokens(sim.url), tree_cpu(sim.proc.pid), time.monotonic()
        finally:
            sim.stop()
        tok, cpu = tok1 - tok0, cpu1 - cpu0
        rates.append(tok / cpu)
        rows.append(
            [
                str(i + 1),
                f"{tok:,.0f}",
                f"{cpu:.2f}",
                f"{tok / cpu:,.0f}",
                f"{tok / (t1 - t0):,.0f}",
            ]
        )
    print(
        f"simulator speed · {machine()} · {a.concurrency} streams of {a.max_tokens} one-token chunks"
    )
    print(table(rows))
    print(f"median: {median(rates):,.0f} tokens per CPU-second of the simulator (target >= 50,000)")


if __name__ == "__main__":
    main()
