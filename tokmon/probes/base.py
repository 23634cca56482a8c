"""The sampler loop shared by every probe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

EventSink = Callable[[str, str, dict[str, Any]], None]
SampleSink = Callable[[str, int, dict[str, Any]], None]


class Sampler:
    """Calls ``sample()`` every ``interval`` seconds on a thread.

    The next tick is planned from the schedule (start + k × interval), not from when the
    last one finished, so the sampler does not drift; a tick that is late is skipped and
    counted rather than bunched.
    """

    name = "probe"

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0:
            raise ValueError("a probe interval must be positive")
        self.interval = interval
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: dict[str, Any] = {}
        self.ticks = 0
        self.missed = 0
        self.on_event: EventSink | None = None
        self.on_sample: SampleSink | None = None

    def sample(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the probe holds (e.g. NVML)."""

    def ident(self) -> dict[str, Any]:
        """Fields every sample carries, a failed one too (a server probe: its URL and arms,
        so that the fold knows whose fields they are)."""
        return {}

    def latest(self) -> dict[str, Any]:
        return self._latest

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"tokmon-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def tick(self) -> None:
        try:
            vals = self.sample()
        except Exception as e:  # a probe failure is a note, never a crash
            vals = {f"{self.name}_note": f"{self.name} failed: {type(e).__name__}"}
        vals = {**self.ident(), **vals} if vals else vals
        self._latest = vals
        if self.on_sample is not None and vals:
            # A probe may stamp its own sample (the moment it read it); else now.
            t = vals.get("t_ns") or time.perf_counter_ns()
            self.on_sample(self.name, t, {k: v for k, v in vals.items() if k != "t_ns"})

    def _loop(self) -> None:
        start = self.clock()
        k = 0
        try:
            while not self._stop.is_set():
                self.tick()
                self.ticks += 1
                k += 1
                next_t = start + k * self.interval
                now = self.clock()
                if now > next_t:
                    behind = int((now - next_t) // self.interval) + 1
                    self.missed += behind
                    k += behind
                    next_t = start + k * self.interval
                self._stop.wait(max(0.0, next_t - self.clock()))
            # One last sample at the stop, so that counters cover the whole run.
            self.tick()
        finally:
            self.close()

    def event(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        if self.on_event is not None:
            self.on_event(kind, message, data or {})
