"""The events a live run derives from its figures: a stall, a server down and back, an
error burst, a change of the server, answers worse than the baseline's. Live, each is
recorded and folded like any other event; a replay or a report takes them from the
recording instead (``on=False``), so none is raised twice. What a figure shows (which
arm is down, since when) is kept either way.
"""

from __future__ import annotations

import numpy as np

from tokmon.model.contract.registry import Raised
from tokmon.model.data.table import RequestTable
from tokmon.model.judge.changepoint import WATCHED, ChangePoint
from tokmon.model.judge.changepoint import H as CUSUM_H
from tokmon.model.judge.quality import QualityDiff
from tokmon.model.statistics.stats import WindowStats

# (kind, message, data): an event to raise (the fold gives it its time)

STALL_EVERY_NS = 1_000_000_000  # a stall is listed with its request, one a second at most
BURST_EVERY_NS = 30_000_000_000  # an error burst, once in 30 s at most


def change_alert(arm: str, cp: ChangePoint, basis: str) -> Raised:
    label = WATCHED[cp.metric][0]
    return (
        "alert",
        f"change point: {label} of {arm} {cp.before:.1f} → {cp.after:.1f} "
        f"({cp.change_pct:+.0f}%) from {cp.t:.0f} s, found at {cp.t_found:.0f} s "
        f"(CUSUM {cp.score:.0f} > {CUSUM_H:g}, {basis})",
        {
            "alert": "change_point",
            "metric": cp.metric,
            "arm": arm,
            "at_s": cp.t,
            "found_s": cp.t_found,
            "before": cp.before,
            "after": cp.after,
            "change_pct": cp.change_pct,
            "score": cp.score,
        },
    )


class Derivations:
    def __init__(self, on: bool) -> None:
        self.on = on
        self.down_since: dict[str, int] = {}  # an arm's first connect failure
        self.stalls_total = 0
        self._last_stall = -(10**18)
        self._last_burst = -(10**18)
        self._quality_alerted = False

    def live(self, raised: list[Raised]) -> list[Raised]:
        """``raised`` where events are derived (live), else none."""
        return raised if self.on else []

    def requests(self, tb: RequestTable) -> list[tuple[int, Raised]]:
        """A batch's stalls and an arm's server down or back, each with its time."""
        c = tb.cols
        out: list[tuple[int, Raised]] = []
        st = c["stalls"]
        for i in np.flatnonzero(st).tolist():
            self.stalls_total += int(st[i])
            t_end = int(c["t_end"][i])
            if self.on and t_end - self._last_stall >= STALL_EVERY_NS:
                self._last_stall = t_end
                arm = tb.vocab["arm"][c["arm"][i]]
                gap = float(c["max_gap_ms"][i])
                gap_ms = None if gap != gap else gap
                n = self.stalls_total
                out.append((t_end, (
                    "stall",
                    f"stall: request {int(c['rid'][i])} ({arm}) waited "
                    f"{gap_ms or 0:.0f} ms between chunks "
                    f"({n} stall{'s' if n != 1 else ''} so far)",
                    {"rid": int(c["rid"][i]), "arm": arm, "gap_ms": gap_ms},
                )))  # fmt: skip
        out += self._down(tb)
        return out

    def _down(self, tb: RequestTable) -> list[tuple[int, Raised]]:
        """An arm is down from its first connect failure until a request gets an answer."""
        c = tb.cols
        conn = c["outcome"] == tb.code("outcome", "connect")
        if not conn.any() and not self.down_since:
            return []
        out: list[tuple[int, Raised]] = []
        answered = ~np.isnan(c["http_status"])
        for i in np.flatnonzero(conn | answered).tolist():
            arm = tb.vocab["arm"][c["arm"][i]]
            t = int(c["t_end"][i])
            if conn[i]:
                if arm not in self.down_since:
                    self.down_since[arm] = t
                    err = tb.vocab["error"][c["error"][i]]
                    out.append(
                        (t, ("down", f"server of arm {arm} unreachable: {err}", {"arm": arm}))
                    )
            elif arm in self.down_since:
                since = self.down_since.pop(arm)
                msg = f"server of arm {arm} back after {(t - since) / 1e9:.1f} s"
                out.append((t, ("up", msg, {"arm": arm})))
        return out if self.on else []

    def burst(self, now: int, win: WindowStats, width: float) -> list[Raised]:
        """Errors in at least a tenth of the window's requests (5 at least). Requests the
        client cancelled (at a stop, or an overloaded probe's backlog aborted) are no
        burst of the server's errors."""
        bad = win.failed - win.errors.get("cancelled", 0)
        if not (self.on and bad >= 5 and bad >= 0.1 * win.ended):
            return []
        if now - self._last_burst < BURST_EVERY_NS:
            return []
        self._last_burst = now
        errs = {k: v for k, v in win.errors.items() if k != "cancelled"}
        classes = ", ".join(f"{k} {v}" for k, v in sorted(errs.items()))
        msg = f"error burst: {bad} of {win.ended} requests failed in the last {width:.0f} s ({classes})"
        return [("errors", msg, {"errors": errs})]

    def quality(self, qd: QualityDiff | None) -> list[Raised]:
        """An arm whose answers are worse beyond the interval: once, as an alert."""
        if not self.on or self._quality_alerted or qd is None or qd.verdict != "worse":
            return []
        self._quality_alerted = True
        return [("alert", f"quality: {qd.text()}",
                 {"alert": "quality", "metric": "accuracy", "arm": qd.other,
                  "diff": round(qd.diff, 4), "ci95": [round(qd.lo, 4), round(qd.hi, 4)]})]  # fmt: skip
