"""Each arm's own time, and the tokens that arrived in it.

An arm's whole-run tokens/s is the tokens that arrived while the arm was active over the
seconds it was active: both from the same spans. A managed server's drain and restart,
a pause and another arm's segment are outside the arm's spans, so the tokens its last
requests deliver there are counted in neither (before, they were counted in the
tokens and not in the seconds: 410.9 tok/s from 8 streams that can make 321).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


CHUNK = 4096  # buckets a block of storage holds (17 minutes at 250 ms)


class ArmTokens:
    """Each arm's tokens per bucket, on the engines' bucket grid (bucket ``i`` holds the
    tokens that arrived in [origin + i·w, origin + (i+1)·w) of the run's clock), kept to
    be counted against the arm's spans when a figure is asked for: a span's end (a
    drain, a switch) is known only after tokens inside it have arrived.

    Stored in blocks of ``CHUNK`` buckets, only those that hold tokens: 8 bytes a bucket
    of a run (2.8 MB a day an arm), and a crafted bucket a year away costs one block, not
    a year of them. Counting is O(blocks + spans): a day of alternating arms, a few ms."""

    def __init__(self, bucket_ns: int = 250_000_000) -> None:
        self.bucket_ns = bucket_ns
        self.blocks: dict[str, dict[int, np.ndarray]] = {}
        # where the engines' grid lies on the run's clock: the first bucket's offset
        # (every engine's buckets start at multiples of the width on one clock)
        self.origin: int | None = None

    def add(self, t: int, arm: str, n: int) -> None:
        if self.origin is None:
            self.origin = t % self.bucket_ns - self.bucket_ns  # (a bucket may start before 0)
        # (a Ray worker's times, moved by its clock offset, fall in the nearest bucket)
        i = max(0, (t - self.origin) // self.bucket_ns)
        blocks = self.blocks.setdefault(arm, {})
        b = blocks.get(i // CHUNK)
        if b is None:
            b = blocks[i // CHUNK] = np.zeros(CHUNK, dtype=np.int64)
        b[i % CHUNK] += n

    def within(self, arm: str, spans: list[Span]) -> float:
        """Tokens of ``arm`` that arrived within ``spans``: a bucket that straddles a
        span's edge counts for the share of its width inside it (the part outside is a
        drain or a ramp, never faster than inside: the count is not above the truth)."""
        blocks = self.blocks.get(arm)
        if not blocks or not spans:
            return 0.0
        keys = np.array(sorted(blocks), dtype=np.int64)
        data = np.stack([blocks[int(k)] for k in keys])  # (blocks, CHUNK)
        inner = np.concatenate([np.zeros((len(keys), 1), np.int64), np.cumsum(data, 1)], 1)
        before_block = np.concatenate([[0], np.cumsum(inner[:, -1])])
        w = self.bucket_ns
        o = self.origin or 0

        def before(x: np.ndarray) -> np.ndarray:  # tokens before time x, pro rata
            x = np.maximum(x - o, 0)
            i = x // w  # the bucket x falls in
            blk, pos = i // CHUNK, i % CHUNK
            j = np.searchsorted(keys, blk)  # blocks wholly before: j (or j + 1)
            here = (j < len(keys)) & (keys[np.minimum(j, len(keys) - 1)] == blk)
            jj = np.minimum(j, len(keys) - 1)
            part = inner[jj, pos] + data[jj, pos] * ((x - i * w) / w)
            return before_block[j] + np.where(here, part, 0.0)

        s = np.array([a for a, _ in spans], dtype=np.int64)
        e = np.array([b for _, b in spans], dtype=np.int64)
        return float(np.sum(before(e) - before(s)))


@dataclass
class Segment:
    """A stretch of the run on one arm (arms switched by hand or by alternation)."""

    id: int
    arm: str
    t0: int
    t1: int | None = None


class Turns:
    """Which arm runs when: the A/B's segments, its complete cycles, and the spans when
    nothing was sent (a pause, a managed server's drain and restart). Arms side by side
    (``concurrent``) share one segment and every span."""

    def __init__(self, arms: list[str], t0: int, concurrent: bool) -> None:
        self.arms = arms
        self.arm = arms[0]
        self.t0 = t0
        self.concurrent = concurrent
        self.segments = [Segment(0, self.arm, t0)]
        self.alternations = 0
        # segments per arm, kept as they come (a day switching every 30 s has 2,880:
        # counting them all again at every switch was a quadratic cost)
        self._count: dict[str, int] = {self.arm: 1}
        self.idle: list[list[int | None]] = []  # [start, end or None]

    def switch(self, new_arm: str, t: int) -> None:
        """End the current segment and start one for ``new_arm``."""
        cur = self.segments[-1]
        if t <= cur.t0 and cur.id == 0:
            # (the arm in force where a window of a run begins: no segment of the other
            # arm before it, which would count as a cycle of the A/B)
            self._count[cur.arm] -= 1
            self._count[new_arm] = self._count.get(new_arm, 0) + 1
            cur.arm = new_arm
            self.arm = new_arm
            return
        cur.t1 = t
        self.segments.append(Segment(cur.id + 1, new_arm, t))
        self._count[new_arm] = self._count.get(new_arm, 0) + 1
        # Complete A-B cycles: the fewest segments any arm has had (ABAB -> 2).
        self.alternations = min(self._count.get(a, 0) for a in self.arms)
        self.arm = new_arm

    def next_segment(self) -> int:
        """The id the next arm switch gives its segment (the engines tag requests with it)."""
        return self.segments[-1].id + 1

    def pause(self, t: int, begins: bool) -> None:
        """Nothing is sent from ``t`` (``begins``) or again from ``t``: the spans are
        left out of each arm's active time."""
        open_ = bool(self.idle) and self.idle[-1][1] is None
        if begins and not open_:
            self.idle.append([t, None])
        elif not begins and open_:
            self.idle[-1][1] = t

    def of(self, arm: str) -> list[Segment]:
        """``arm``'s segments (arms side by side: all of them)."""
        return [sg for sg in self.segments if sg.arm == arm or self.concurrent]

    def spans(self, t: int, t_measure: int | None) -> dict[str, list[Span]]:
        """Per arm, its measured spans up to ``t`` (see ``active_spans``)."""
        return active_spans(
            [(sg.id, sg.arm, sg.t0, sg.t1) for sg in self.segments],
            t,
            t_measure,
            self.concurrent,
            self.arms,
            self.t0,
            [(int(a), b) for a, b in self.idle if a is not None],
        )
