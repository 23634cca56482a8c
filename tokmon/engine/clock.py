"""The kernel's wall-clock stamps, moved onto perf_counter's monotonic clock.

The kernel stamps a socket's reads and sends with CLOCK_REALTIME; every figure lives on
``perf_counter_ns`` (CLOCK_MONOTONIC). The offset between the two is read by bracketing
one ``time_ns()`` between two ``perf_counter_ns()`` calls: a bracket that the scheduler
interrupted is wide, so of several the narrowest is kept. Reading the offset as
``time_ns() - perf_counter_ns()`` at each stamp (as tokmon once did) put any preemption
between the two calls straight into the figure: TTFTs 10 ms shorter than the server's
own delay, and some below zero, on a busy client.

The offset is re-estimated at most once per ``refresh_ns``. NTP slews the wall clock by
at most 0.5 ms/s, so between refreshes the offset drifts by well under a microsecond;
a larger jump is a step of the wall clock (counted in ``steps``), and the new offset is
taken at once.
"""

from __future__ import annotations

import time
from time import perf_counter_ns

_TRIES = 7  # brackets per estimate; the narrowest wins
_GOOD_NS = 20_000  # a bracket this narrow is good enough to stop early
_STEP_NS = 2_000_000  # an offset change larger than this is a wall-clock step


def bracket() -> tuple[int, int]:
    """(offset, width): realtime - monotonic, read between two monotonic reads."""
    best_off, best_w = 0, 1 << 62
    for _ in range(_TRIES):
        a = perf_counter_ns()
        w = time.time_ns()
        b = perf_counter_ns()
        if b - a < best_w:
            best_off, best_w = w - (a + b) // 2, b - a
            if best_w <= _GOOD_NS:
                break
    return best_off, best_w


class WallToMono:
    """Converts kernel wall-clock stamps (ns) to perf_counter ns."""

    __slots__ = ("offset", "width", "refresh_ns", "next_ns", "steps")

    def __init__(self, refresh_ns: int = 1_000_000_000) -> None:
        self.offset, self.width = bracket()
        self.refresh_ns = refresh_ns
        self.next_ns = perf_counter_ns() + refresh_ns
        self.steps = 0

    def refresh(self, now: int) -> None:
        off, w = bracket()
        self.next_ns = now + self.refresh_ns
        if abs(off - self.offset) > _STEP_NS + w + self.width:
            self.steps += 1  # the wall clock stepped: believe the new reading at once
            self.offset, self.width = off, w
        elif w <= max(self.width, _GOOD_NS) * 4:
            # a comparable bracket: follow the slew; a much wider one (we were
            # preempted inside it) is not allowed to move the offset
            self.offset, self.width = off, w

    def to_mono(self, wall_ns: int, now: int) -> int:
        """``wall_ns`` on the monotonic clock; ``now`` is perf_counter_ns() of the caller."""
        if now >= self.next_ns:
            self.refresh(now)
        return wall_ns - self.offset


CLOCK = WallToMono()
