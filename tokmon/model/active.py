"""Each arm's own time, and the tokens that arrived in it.

An arm's whole-run tokens/s is the tokens that arrived while the arm was active over the
seconds it was active: both from the same spans. A managed server's drain and restart,
a pause and another arm's segment are outside the arm's spans, so the tokens its last
requests deliver there are counted in neither (before, they were counted in the
tokens and not in the seconds: 410.9 tok/s from 8 streams that can make 321).
"""

from __future__ import annotations

import numpy as np

from tokmon.model.stats import GrowArray

Span = tuple[int, int]


def active_spans(
    segments: list[tuple[int, str, int, int | None]],
    t_end: int,
    t_measure: int | None,
    concurrent_arms: bool,
    arms: list[str],
    t_start: int,
    idle: list[tuple[int, int | None]] | None = None,
) -> dict[str, list[Span]]:
    """Per arm, the spans (ns, sorted, disjoint) it was measured in: its segments (every
    arm the whole run when the arms run side by side) from the end of the warm-up
    (``t_measure``), less the spans when nothing was sent (``idle``)."""
    t0 = t_measure if t_measure is not None else t_start
    gaps = sorted((s, t_end if e is None else min(e, t_end)) for s, e in idle or ())

    def less_idle(s: int, e: int) -> list[Span]:
        out: list[Span] = []
        cur = s
        for g0, g1 in gaps:
            if g1 <= cur or g0 >= e:
                continue
            if g0 > cur:
                out.append((cur, g0))
            cur = max(cur, g1)
        if cur < e:
            out.append((cur, e))
        return out

    if concurrent_arms:
        whole = less_idle(t0, t_end) if t_end > t0 else []
        return {a: list(whole) for a in arms}
    spans: dict[str, list[Span]] = {a: [] for a in arms}
    for _, arm, s, e in segments:
        e2 = t_end if e is None else min(e, t_end)
        s2 = max(s, t0)
        if e2 > s2:
            spans.setdefault(arm, []).extend(less_idle(s2, e2))
    return spans


def seconds(spans: list[Span]) -> float:
    return sum(e - s for s, e in spans) / 1e9


class ArmTokens:
    """The token buckets of each arm (start time, tokens), kept to be counted against
    the arm's spans when a figure is asked for: a span's end (a drain, a switch) is
    known only after tokens inside it have arrived."""

    def __init__(self, bucket_ns: int = 250_000_000) -> None:
        self.bucket_ns = bucket_ns
        self.t: dict[str, GrowArray] = {}
        self.n: dict[str, GrowArray] = {}

    def add(self, t: int, arm: str, n: int) -> None:
        if arm not in self.t:
            self.t[arm], self.n[arm] = GrowArray(256), GrowArray(256)
        self.t[arm].append(float(t))
        self.n[arm].append(float(n))

    def within(self, arm: str, spans: list[Span]) -> float:
        """Tokens of ``arm`` that arrived within ``spans``: a bucket that straddles a
        span's edge counts for the share of its width inside it (the part outside is a
        drain or a ramp, never faster than inside: the count is not above the truth)."""
        if arm not in self.t or not spans:
            return 0.0
        t0 = self.t[arm].values
        n = self.n[arm].values
        inside = _covered(spans, t0 + self.bucket_ns) - _covered(spans, t0)
        return float(np.sum(n * inside) / self.bucket_ns)


def _covered(spans: list[Span], x: np.ndarray) -> np.ndarray:
    """How much of ``spans`` (sorted, disjoint) lies before each ``x``: O(n log k)."""
    s = np.array([a for a, _ in spans], dtype=np.float64)
    e = np.array([b for _, b in spans], dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    i = np.searchsorted(s, x, side="right")
    over = np.where(i > 0, np.clip(e[np.maximum(i - 1, 0)] - x, 0, None), 0.0)
    return cum[i] - over
