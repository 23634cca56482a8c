"""Drift over a long run: a robust slope (Theil–Sen on binned medians) in % per hour of
the run's median, with a bootstrap interval over bins (METRICS.md, Drift and jitter)."""

from __future__ import annotations

from typing import Any

import numpy as np


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(x.size, 1)
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return 0.0
    return float(np.median((y[j] - y[i])[ok] / dx[ok]))


def drift(
    t_s: np.ndarray, values: np.ndarray, bin_s: float | None = None, reps: int = 300, seed: int = 7
) -> dict[str, Any] | None:
    """Slope of ``values`` over time ``t_s`` (seconds) in % per hour, with a 95% interval."""
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
    if len(xs) < 5:
        return None
    x, y = np.array(xs), np.array(ys)
    med = float(np.median(values))
    if med == 0:
        return None
    slope = theil_sen(x, y)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(reps):
        idx = rng.integers(0, x.size, x.size)
        boots.append(theil_sen(x[idx], y[idx]))
    lo, hi = np.percentile(boots, [2.5, 97.5])
    k = 3600.0 / med * 100.0
    return {
        "pct_per_hour": slope * k,
        "ci95": [float(lo * k), float(hi * k)],
        "bins": len(xs),
        "bin_s": bin_s,
    }
