from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator

import pytest

from tokmon.sim.server import SimConfig, SimServer

# Machines like CI's set PYTHONDONTWRITEBYTECODE: then every `tokmon` a test starts (some
# 400 in the quick suite, each with its engine process) compiled the package from source
# again, 0.3 of its 1.4 CPU-s. Bytecode is written once here and read by them all (a
# user's own runs write it as usual).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


class ThreadSim:
    """A simulator on a loopback port, in a thread of the test process."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.loop = asyncio.new_event_loop()
        self.sim: SimServer | None = None
        self.port = 0
        self._ready = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self.sim = SimServer(self.cfg)
            self.port = await self.sim.start("127.0.0.1", 0)
            self._ready.set()

        self.loop.run_until_complete(main())
        self.loop.run_forever()

    def start(self) -> ThreadSim:
        self._t.start()
        assert self._ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def call(self, fn, *a):  # run fn in the sim's loop thread
        fut = asyncio.run_coroutine_threadsafe(_acall(fn, *a), self.loop)
        return fut.result(10)

    def stop(self) -> None:
        async def close() -> None:
            assert self.sim is not None
            await self.sim.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._t.join(5)


async def _acall(fn, *a):
    return fn(*a)


@pytest.fixture
def make_sim() -> Iterator:
    sims: list[ThreadSim] = []

    def make(**kw) -> ThreadSim:
        s = ThreadSim(SimConfig(**kw)).start()
        sims.append(s)
        return s

    yield make
    for s in sims:
        s.stop()
