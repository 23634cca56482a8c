"""Run simulators in child processes that never outlive their parent."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
from typing import Any

from tokmon.sim.config import SimConfig
from tokmon.sim.server import serve


def _child(cfg: SimConfig, host: str, port: int, conn: Any) -> None:
    from tokmon.engine.worker import set_pdeathsig

    set_pdeathsig()
    # a session of its own, as a managed server has: the server under test, not tokmon
    # (tokmon's CPU and memory count its own session only), and out of reach of a Ctrl-C
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def ready(p: int) -> None:
        conn.send(("ok", p))
        conn.close()

    try:
        asyncio.run(serve(cfg, host, port, ready))
    except OSError as e:
        with contextlib.suppress(Exception):
            conn.send(("error", f"cannot listen on {host}:{port}: {e.strerror or e}"))


class SimProcess:
    """A simulator in a child process on a loopback port (0 = a free one)."""

    def __init__(self, cfg: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cfg = cfg
        self.host = host
        self.port = port
        self.proc: Any = None

    def start(self, timeout: float = 15.0) -> int:
        ctx = mp.get_context("spawn")
        r, w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_child, args=(self.cfg, self.host, self.port, w), name="tokmon-sim", daemon=True
        )
        self.proc.start()
        w.close()
        if not r.poll(timeout):
            self.stop()
            raise RuntimeError("the simulator did not start in time")
        try:
            status, val = r.recv()
        except EOFError:
            self.stop()
            raise RuntimeError("the simulator exited at start") from None
        if status != "ok":
            self.stop()
            raise RuntimeError(str(val))
        self.port = int(val)
        return self.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        p = self.proc
        if p is None:
            return
        if p.is_alive():
            p.terminate()
            p.join(timeout=3)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        self.proc = None

    def __enter__(self) -> SimProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
