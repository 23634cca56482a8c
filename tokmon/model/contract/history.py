"""Time series for the sparklines: full resolution for the last minutes, and the whole
run compressed to a bounded number of points (a 12-hour soak still fits one screen).

Memory is bounded: ``recent`` is a ring, ``whole`` halves its resolution when full.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, TypeVar

T = TypeVar("T")

FIELDS = (
    "tok_s",
    "ttft_p50",
    "ttft_p95",
    "tpot_p50",
    "decode_p50",
    "errors",
    "err_rate",
    "acc_rate",
    "acc_len",
    "gpu_util",
    "gpu_mem_pct",
    "kv_pct",
    "queue",
    "send_lag",
)


@dataclass(frozen=True, slots=True)
class Point:
    """One second of the run (or, in the whole-run view, the mean of several)."""

    t: float  # seconds since the run started
    span: float = 1.0  # seconds this point stands for
    arm: str = ""
    tok_s: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    tpot_p50: float | None = None
    decode_p50: float | None = None
    errors: float | None = None  # failures that ended in this second
    err_rate: float | None = None
    acc_rate: float | None = None
    acc_len: float | None = None
    gpu_util: float | None = None
    gpu_mem_pct: float | None = None
    kv_pct: float | None = None
    queue: float | None = None
    send_lag: float | None = None
    marks: tuple[str, ...] = ()  # "arm", "marker", "alert", "stall" in this span
    arm_tok_s: tuple[tuple[str, float], ...] = ()


def merge(a: Point, b: Point) -> Point:
    """Two adjacent points as one: means of what each has, sums of counts, union of marks."""
    kw: dict[str, Any] = {}
    for f in FIELDS:
        va, vb = getattr(a, f), getattr(b, f)
        if va is None:
            kw[f] = vb
        elif vb is None:
            kw[f] = va
        elif f == "errors":
            kw[f] = va + vb
        else:
            kw[f] = (va * a.span + vb * b.span) / (a.span + b.span)
    arms: dict[str, float] = {}
    for name, v in a.arm_tok_s + b.arm_tok_s:
        arms[name] = arms.get(name, 0.0) + v / 2
    return replace(
        a,
        span=a.span + b.span,
        arm=b.arm,
        marks=tuple(dict.fromkeys(a.marks + b.marks)),
        arm_tok_s=tuple(arms.items()),
        **kw,
    )  # type: ignore[arg-type]


def merge_all(pts: list[Point]) -> Point:
    """Adjacent points as one, in one pass (a column of a chart that stands for many):
    each field the mean of the points that have it, weighted by their spans; failures
    summed; each arm's tokens/s the mean over the whole span (0 where a point has none).
    Equal to ``merge`` for two points of equal span."""
    if len(pts) == 1:
        return pts[0]
    total = sum(p.span for p in pts)
    kw: dict[str, Any] = {}
    for f in FIELDS:
        num = den = 0.0
        for p in pts:
            v = getattr(p, f)
            if v is not None:
                if f == "errors":
                    num += v
                else:
                    num += v * p.span
                    den += p.span
        if f == "errors":
            kw[f] = num if any(p.errors is not None for p in pts) else None
        else:
            kw[f] = num / den if den > 0 else None
    arms: dict[str, float] = {}
    for p in pts:
        for name, v in p.arm_tok_s:
            arms[name] = arms.get(name, 0.0) + v * p.span
    marks: dict[str, None] = {}
    for p in pts:
        marks.update(dict.fromkeys(p.marks))
    return replace(
        pts[0],
        span=total,
        arm=pts[-1].arm,
        marks=tuple(marks),
        arm_tok_s=tuple((n, v / total) for n, v in arms.items()),
        **kw,
    )  # type: ignore[arg-type]


class History:
    def __init__(self, recent_points: int = 3600, whole_points: int = 1024) -> None:
        self.recent: deque[Point] = deque(maxlen=recent_points)
        self.whole: list[Point] = []
        self.whole_cap = whole_points
        self.whole_span = 1.0
        self._pending: Point | None = None

    def add(self, p: Point) -> None:
        self.recent.append(p)
        cur = self._pending
        cur = p if cur is None else merge(cur, p)
        if cur.span >= self.whole_span:
            self.whole.append(cur)
            self._pending = None
            if len(self.whole) > self.whole_cap:
                w = self.whole
                self.whole = [
                    merge(w[i], w[i + 1]) if i + 1 < len(w) else w[i] for i in range(0, len(w), 2)
                ]
                self.whole_span *= 2
        else:
            self._pending = cur

    def whole_view(self) -> list[Point]:
        return self.whole + ([self._pending] if self._pending is not None else [])


POINT_FIELDS = tuple(f.name for f in fields(Point))


class Thinned(Generic[T]):
    """A run's per-second points at decreasing resolution: every one for the last hour,
    one per 10 s for the last day, one per minute beyond (the first of each). What a
    trend over hours needs -- the alerts take one point per window anyway -- in memory
    that grows by 1,440 points a day, not 86,400."""

    TIERS = ((3600.0, 10.0), (86400.0, 60.0))  # (older than, keep one per)

    def __init__(self, t: Callable[[T], float]) -> None:
        self._t = t
        self.fine: deque[T] = deque()
        self.mid: deque[T] = deque()
        self.coarse: list[T] = []

    def append(self, p: T) -> None:
        self.fine.append(p)
        now = self._t(p)
        (age1, step1), (age2, step2) = self.TIERS
        while self._t(self.fine[0]) < now - age1:
            self._keep(self.mid, self.fine.popleft(), step1)
        while self.mid and self._t(self.mid[0]) < now - age2:
            self._keep(self.coarse, self.mid.popleft(), step2)

    def _keep(self, into: deque[T] | list[T], p: T, step: float) -> None:
        if not into or self._t(p) // step != self._t(into[-1]) // step:
            into.append(p)

    def __iter__(self) -> Iterator[T]:
        return itertools.chain(self.coarse, self.mid, self.fine)

    def __len__(self) -> int:
        return len(self.coarse) + len(self.mid) + len(self.fine)

    def __bool__(self) -> bool:
        return bool(self.fine)

    def last(self) -> T:
        return self.fine[-1]
