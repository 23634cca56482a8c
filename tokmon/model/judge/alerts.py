"""Stability, live: drift, change points, saturation and leaks turned into alerts while the
run goes on (METRICS.md, Drift and jitter). Fed one history point a second; cheap enough
to run in the aggregation thread (Sen's slope on at most a few hundred points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokmon.model.contract.history import Point, Thinned
from tokmon.model.contract.registry import Raised
from tokmon.model.contract.views import Cost
from tokmon.model.statistics.trend import can_tell, per_hour_pct, sen_slope
from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S

# metric key on Point -> (label, direction that is bad: +1 rising is bad, -1 falling is bad)
DRIFT_METRICS = {
    "tok_s": ("tokens/s", -1),
    "tpot_p50": ("TPOT p50", +1),
    "ttft_p95": ("TTFT p95", +1),
    "err_rate": ("error rate", +1),
    "gpu_mem_pct": ("GPU memory", +1),
    "kv_pct": ("KV cache", +1),
}


@dataclass(frozen=True)
class Trend:
    metric: str
    pct_per_hour: float
    lo: float
    hi: float
    # the interval can tell a drift that matters from none: narrower than the alert
    # threshold, or wholly beyond it (before that the dashboard says "too short to tell")
    known: bool = True

    @property
    def significant(self) -> bool:
        return self.lo > 0 or self.hi < 0


class AlertEngine:
    def __init__(
        self,
        *,
        drift_alert_pct_h: float = DRIFT_ALERT_PCT_H,
        min_span_s: float = 600.0,
        window_s: float = WINDOW_S,
        every_s: float = 10.0,
        max_points: int = 240,
        saturation_span_s: float = 180.0,
    ) -> None:
        self.drift_alert = drift_alert_pct_h
        self.min_span_s = min_span_s
        self.window_s = window_s
        self.every_s = every_s
        self.max_points = max_points
        self.saturation_span_s = saturation_span_s  # how long the queue must keep growing
        self.points: Thinned[Point] = Thinned(lambda p: p.t)
        self.trends: dict[str, Trend] = {}
        self.fired: set[str] = set()
        self.alerts: list[dict[str, Any]] = []
        self._next = 0.0
        self.regime_t0 = 0.0  # trends are fitted within the regime (seconds)
        self._rss: Thinned[tuple[float, float]] = Thinned(lambda p: p[0])

    def add(self, p: Point, self_rss_mib: float | None = None) -> list[Raised]:
        """One point (one second); returns new alerts as (kind, message, data)."""
        self.note(p, self_rss_mib)
        if p.t < self._next:
            return []
        return self.check()

    def note(self, p: Point, self_rss_mib: float | None = None) -> None:
        """A point kept without checking (a replay seeking: checked once at the end)."""
        self.points.append(p)
        if self_rss_mib is not None:
            self._rss.append((p.t, self_rss_mib))

    def check(self) -> list[Raised]:
        """Every check on the points so far; returns new alerts."""
        if not self.points:
            return []
        p = self.points.last()
        self._next = p.t + self.every_s
        out: list[Raised] = []
        out += self._drift()
        out += self._saturation()
        out += self._leak()
        for _, msg, data in out:
            self.alerts.append({"t_s": p.t, "message": msg, **data})
        return out

    # ------------------------------------------------------------------ checks
    def new_regime(self, t_s: float) -> None:
        """The user changed what runs (an arm, the load, a ladder step): a trend is never
        fitted across that."""
        self.regime_t0 = t_s
        self.trends.clear()

    def _series(self, key: str, pts: list[Point] | None = None) -> tuple[np.ndarray, np.ndarray]:
        pts = [q for q in self.points if q.t >= self.regime_t0] if pts is None else pts
        # Points a second apart share most of their sliding window: keep one per window so
        # that the slope's interval is not made narrow by counting the same data ten times.
        xs, ys = [], []
        last = -1e18
        for q in pts:
            v = getattr(q, key)
            if v is not None and q.t - last >= self.window_s:
                xs.append(q.t)
                ys.append(v)
                last = q.t
        x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
        if x.size > self.max_points:  # thin evenly: Sen's slope is O(n²)
            idx = np.linspace(0, x.size - 1, self.max_points).astype(int)
            x, y = x[idx], y[idx]
        return x, y

    def trend(self, key: str) -> Trend | None:
        x, y = self._series(key)
        if x.size < 8 or x[-1] - x[0] < self.min_span_s:
            return None
        med = float(np.median(y))
        if med == 0:
            return None
        # 99.9% interval: the check runs many times over a soak, so each must be strict.
        r = sen_slope(x, y, z=3.29)
        if r is None:
            return None
        k = per_hour_pct(med)
        lo, hi = r[1] * k, r[2] * k
        return Trend(key, r[0] * k, lo, hi, known=can_tell(lo, hi, self.drift_alert))

    def _drift(self) -> list[Raised]:
        out = []
        for key, (label, bad) in DRIFT_METRICS.items():
            tr = self.trend(key)
            if tr is None:
                continue
            self.trends[key] = tr
            name = f"drift:{key}"
            if (
                tr.significant
                and tr.known
                and abs(tr.pct_per_hour) >= self.drift_alert
                and tr.pct_per_hour * bad > 0
                and name not in self.fired
            ):
                self.fired.add(name)
                out.append(
                    (
                        "alert",
                        f"drift: {label} {tr.pct_per_hour:+.1f}%/h [{tr.lo:+.1f}, {tr.hi:+.1f}]",
                        {
                            "alert": "drift",
                            "metric": key,
                            "pct_per_hour": tr.pct_per_hour,
                            "ci95": [tr.lo, tr.hi],
                        },
                    )
                )
        return out

    def _saturation(self) -> list[Raised]:
        """The queue keeps growing while throughput stays flat: more load adds only wait."""
        span = self.saturation_span_s
        pts = [q for q in self.points if q.t >= max(self.points.last().t - span, self.regime_t0)]
        if not pts or pts[-1].t - pts[0].t < span / 2 or "saturation" in self.fired:
            return []
        for qkey, label in (("queue", "server queue"), ("send_lag", "client send lag")):
            x, q = self._series(qkey, pts)
            x2, tok = self._series("tok_s", pts)
            if x.size < 8 or x2.size < 8 or float(np.median(tok)) <= 0:
                continue
            rq = sen_slope(x, q)
            rt = sen_slope(x2, tok)
            if rq is None or rt is None:
                continue
            growing = rq[1] > 0 and (q[-1] - q[0]) > max(2.0, 0.5 * abs(float(np.median(q))))
            flat = abs(rt[0] * 60) < 0.1 * float(np.median(tok))  # < 10% change a minute
            if growing and flat:
                self.fired.add("saturation")
                return [
                    (
                        "alert",
                        f"saturation: {label} keeps growing while tokens/s stays flat "
                        f"— the server is saturated at this load",
                        {"alert": "saturation", "signal": qkey},
                    )
                ]
        return []

    def _leak(self) -> list[Raised]:
        out = []
        if len(self._rss) >= 8 and "leak:self" not in self.fired:
            x = np.array([a for a, _ in self._rss])
            y = np.array([b for _, b in self._rss])
            if x[-1] - x[0] >= self.min_span_s:
                r = sen_slope(
                    x[:: max(1, x.size // self.max_points)], y[:: max(1, x.size // self.max_points)]
                )
                if r is not None and r[1] > 0 and r[0] * 3600 > 50:  # > 50 MiB per hour
                    self.fired.add("leak:self")
                    out.append(
                        (
                            "alert",
                            f"memory: tokmon's own memory grows {r[0] * 3600:.0f} MiB/h",
                            {"alert": "leak", "what": "tokmon"},
                        )
                    )
        return out


def cost_figures(
    tok_s: float | None, *, gpu_hour_price: float | None, gpus: int, power_w: float | None
) -> Cost:
    """Cost per million output tokens and energy per token at the measured throughput."""
    if not tok_s or tok_s <= 0:
        return Cost()
    cost = gpu_hour_price * gpus / 3600.0 / tok_s * 1e6 if gpu_hour_price is not None else None
    if power_w is None or power_w <= 0:
        return Cost(cost)
    return Cost(cost, power_w / tok_s, tok_s / power_w)


def kind_cost_figures(arm: Cost, kinds: dict[str, Any]) -> dict[str, Cost]:
    """Cost and energy per token of each task kind, from the arm's figures.

    Kinds share one server, so the arm's GPU time is split by the stream time each kind
    held (a request in a batch of eight holds an eighth of each step, and a stream that
    finishes sooner — speculative decoding on code — holds less): a kind's cost per token
    is the arm's times its stream-seconds per token relative to the arm's.
    ``kinds`` maps a kind to anything with ``stream_s`` and ``output_tokens``.
    """
    total_s = sum(k.stream_s for k in kinds.values())
    total_tok = sum(k.output_tokens for k in kinds.values())
    out: dict[str, Cost] = {}
    if total_s <= 0 or total_tok <= 0:
        return out
    for name, k in kinds.items():
        if k.output_tokens <= 0:
            continue
        f = (k.stream_s / total_s) / (k.output_tokens / total_tok)
        out[name] = Cost(
            None if arm.cost_per_mtok is None else arm.cost_per_mtok * f,
            None if arm.joules_per_token is None else arm.joules_per_token * f,
        )
    return out
