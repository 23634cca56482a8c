"""Trends: Sen's slope with its rank-based (Kendall) interval — the one trend estimator
of tokmon, used by the live alerts (on window points) and by a report's drift (on
binned medians), so that the two cannot disagree about how a slope is taken."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def sen_slope(x: np.ndarray, y: np.ndarray, z: float = 1.96) -> tuple[float, float, float] | None:
    """Theil–Sen slope with its rank-based (Kendall) confidence interval: (slope, lo, hi).
    ``z`` sets the interval (1.96: 95%; 3.29: 99.9%). None under 8 points."""
    n = x.size
    if n < 8:
        return None
    i, j = np.triu_indices(n, 1)
    dx = x[j] - x[i]
    ok = dx != 0
    s = np.sort((y[j] - y[i])[ok] / dx[ok])
    m = s.size
    if m == 0:
        return None
    c = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo_i = max(0, int((m - c) / 2))
    hi_i = min(m - 1, int(math.ceil((m + c) / 2)))
    return float(np.median(s)), float(s[lo_i]), float(s[hi_i])


def per_hour_pct(med: float) -> float:
    """What turns a slope (units per second) into % of the median per hour."""
    return 3600.0 * 100.0 / abs(med)


def can_tell(lo: float, hi: float, threshold_pct_h: float) -> bool:
    """A drift interval (%/h) can tell a drift that matters from none: it is narrower
    than the threshold, or lies wholly beyond it (a drift far faster than the threshold
    is plain long before). The one rule of the live alerts and the report."""
    return hi - lo < threshold_pct_h or lo > threshold_pct_h or hi < -threshold_pct_h


def drift(t_s: np.ndarray, values: np.ndarray, bin_s: float | None = None) -> dict[str, Any] | None:
    """Slope of ``values`` over time ``t_s`` (seconds) in % per hour of their median, with
    a 95% interval: Sen's slope over per-bin medians (40 bins over the span by default)."""
    if values.size < 20:
        return None
    span = float(t_s.max() - t_s.min())
    if span <= 0:
        return None
    if bin_s is None:
        bin_s = max(span / 40.0, 1.0)
    b = ((t_s - t_s.min()) // bin_s).astype(np.int64)
    xs, ys = [], []
    for k in np.unique(b):
        sel = values[b == k]
        if sel.size >= 3:
            xs.append((k + 0.5) * bin_s)
            ys.append(float(np.median(sel)))
    med = float(np.median(values))
    r = sen_slope(np.array(xs), np.array(ys)) if med != 0 else None
    if r is None:
        return None
    slope, lo, hi = r
    k = per_hour_pct(med)
    return {
        "pct_per_hour": slope * k,
        "ci95": [float(lo * k), float(hi * k)],
        "bins": len(xs),
        "bin_s": bin_s,
    }
