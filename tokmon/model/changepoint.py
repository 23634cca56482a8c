"""Change points in a windowed series: a two-sided CUSUM on robustly standardised values.

Used on per-window medians (decode speed, TTFT, tokens/s): a step change — a throughput
drop after a server-side event, TTFT jumping when the KV cache fills — is flagged with
where it happened and how big it is, and the detector restarts after each flag.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first window of the new level
    t: float  # its time, in the series' unit
    before: float
    after: float

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.after - self.before) / self.before if self.before else float("nan")


def robust_sigma(x: np.ndarray) -> float:
    """Noise level from successive differences (insensitive to steps and slow drift)."""
    if x.size < 3:
        return 0.0
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2))


def cusum(
    t: np.ndarray,
    x: np.ndarray,
    k: float = 0.5,
    h: float = 12.0,
    min_len: int = 8,
    min_shift: float = 2.0,
) -> list[ChangePoint]:
    """Page–Hinkley (a CUSUM against the running mean), both directions.

    Values are standardised by the series' noise (from successive differences); a shift
    of more than about ``k`` noise units accumulates until it passes ``h``. The change is
    placed at the split that best separates two levels, the detector restarts
    after the alarm, and a level must hold ``min_len`` windows to count.
    """
    out: list[ChangePoint] = []
    sigma = robust_sigma(x)
    if sigma <= 0 or x.size < 2 * min_len:
        return out
    start = 0
    while x.size - start >= 2 * min_len:
        z = (x[start:] - x[start]) / sigma
        mean = np.cumsum(z) / np.arange(1, z.size + 1)
        up = np.cumsum(z - mean - k)  # rises when the level went up
        dn = np.cumsum(-(z - mean) - k)  # rises when it went down
        hit = None
        for i in range(min_len, z.size):
            if up[i] - up[: i + 1].min() > h:
                hit = i
                break
            if dn[i] - dn[: i + 1].min() > h:
                hit = i
                break
        if hit is None:
            break
        # Where: the split of the windows so far (and up to min_len after the alarm) that
        # best separates two levels -- the likelihood-ratio estimate of a single shift.
        # (Page-Hinkley's own extreme lags: its reference is a running mean.)
        seg = z[: min(z.size, hit + min_len)]
        n = seg.size
        cs = np.cumsum(seg)
        js = np.arange(1, n)
        stat = np.abs(cs[:-1] - js / n * cs[-1]) / np.sqrt(js * (n - js) / n)
        j = int(np.argmax(stat)) + 1
        idx = start + max(j, 1)
        if idx + min_len > x.size:
            break
        before = float(np.median(x[max(start, idx - 2 * min_len) : idx]))
        after = float(np.median(x[idx : idx + 2 * min_len]))
        if abs(after - before) >= min_shift * sigma:  # a real step, not a wander
            out.append(ChangePoint(index=idx, t=float(t[idx]), before=before, after=after))
        # Restart from the alarm, not from the estimated start: the few windows between
        # them would otherwise look like a second change.
        start = max(idx, start + hit)
    return out
