"""A report's analyses, folded as the requests come: per segment, drift per regime,
jitter and errors by class.

Each is a reducer that takes the same facts as the fold (request batches, events) and
holds memory bounded by what it shows, not by the run's requests, so that a report of a
day-long recording folds it in one pass (``tokmon.recording.play.fold_report``) and a
report of a short one gives the figures it always gave:

* ``SegmentFigures`` -- each segment's counts and medians. A segment's values are held
  until two later segments have begun, then it is settled to its figures (a request
  that ends after that is counted, and said to be left out of the medians).
* ``DriftFigures`` -- the drift of each arm within each regime. A regime's rows (up to
  ``DRIFT_ROWS`` per arm, past that a uniform sample by request-id hash) are held until
  two later regimes have begun, then its drift is taken.
* ``JitterFigures`` -- the spread of TPOT and of chunk gaps, stalls, the longest gap.
* ``ErrorCounts`` -- failed requests per arm and class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.eventlog import REGIME_KINDS
from tokmon.model.data.records import Event
from tokmon.model.data.table import RequestTable, distinct, distinct_pairs
from tokmon.model.statistics.sketch import Quantiles, RowSample, row_keys
from tokmon.model.statistics.trend import can_tell, drift

MIN_DRIFT_SPAN_S = 600.0  # a regime shorter than this cannot bound a drift of a few %/h
DRIFT_ROWS = 1 << 16  # rows of one arm and regime a drift is taken from, at most
OPEN = 2  # segments (regimes) held open behind the newest: requests still finishing


def counted(tb: RequestTable) -> np.ndarray:
    """Rows every whole-run figure is made of (``RequestTable.counted``)."""
    return tb.counted()


def ok_rows(tb: RequestTable) -> np.ndarray:
    return tb.cols["outcome"] == tb.code("outcome", "ok")


def _median(q: Quantiles) -> float | None:
    return q.median() if len(q) else None


@dataclass
class _Segment:
    ok: int = 0
    failed: int = 0
    # (float64: only the open segments hold values, and their medians are exact)
    decode: Quantiles | None = field(default_factory=lambda: Quantiles(np.float64))
    ttft: Quantiles | None = field(default_factory=lambda: Quantiles(np.float64))
    decode_p50: float | None = None
    ttft_p50: float | None = None
    late: int = 0  # ok requests that ended after the segment was settled


class SegmentFigures:
    """Per segment (a stretch during which one arm was active): ok and failed requests,
    median decode speed and TTFT."""

    def __init__(self) -> None:
        self.segments: dict[int, _Segment] = {}
        self.newest = -1
        # segments whose values are still held (settled ones hold two figures): only
        # these are looked at when a newer segment begins, not every segment of the run
        self._open: set[int] = set()

    def requests(self, tb: RequestTable) -> None:
        c = tb.cols
        rows = np.flatnonzero(counted(tb))
        if rows.size == 0:
            return
        ok = ok_rows(tb)
        seg = c["segment"][rows]
        for s in distinct(seg):
            rs = rows[seg == s]
            oks = rs[ok[rs]]
            sg = self.segments.get(int(s))
            if sg is None:
                sg = self.segments[int(s)] = _Segment()
                self._open.add(int(s))
            sg.ok += int(oks.size)
            sg.failed += int(rs.size - oks.size)
            if sg.decode is None or sg.ttft is None:
                sg.late += int(oks.size)
                continue
            for q, col in ((sg.decode, "decode_tps"), (sg.ttft, "ttft_ms")):
                v = c[col][oks]
                q.extend(v[~np.isnan(v)])
        newest = int(seg.max())
        if newest > self.newest:
            self.newest = newest
            for s in [s for s in self._open if s <= newest - OPEN]:
                self._open.discard(s)
                self._settle(self.segments[s])

    @staticmethod
    def _settle(sg: _Segment) -> None:
        if sg.decode is not None and sg.ttft is not None:
            sg.decode_p50, sg.ttft_p50 = _median(sg.decode), _median(sg.ttft)
            sg.decode = sg.ttft = None

    def figures(self, seg: int) -> dict[str, Any]:
        sg = self.segments.get(seg) or _Segment()
        self._settle(sg)
        return {"ok": sg.ok, "failed": sg.failed, "decode_p50": sg.decode_p50,
                "ttft_p50": sg.ttft_p50, "late": sg.late}  # fmt: skip

    def table(
        self, events: list[Event], arms: list[str], end: int, start: int = 0
    ) -> list[dict[str, Any]]:
        """Every segment the run's arm switches made between ``start`` and ``end`` (a
        window of the run: the parts of its segments inside it), with its figures."""
        bounds: list[tuple[int, str, int]] = [(0, arms[0], 0)]
        for ev in events:
            arm, seg = ev.data.get("arm"), ev.data.get("segment")
            if ev.kind == "arm" and isinstance(arm, str):
                # (the id the engines tagged its requests with; a part read alone begins
                # with a segment of the run's, not with the first)
                sid = seg if isinstance(seg, int) and not isinstance(seg, bool) else len(bounds)
                bounds.append((sid, arm, ev.t))
        out = []
        for i, (seg, arm, t0) in enumerate(bounds):
            t1 = bounds[i + 1][2] if i + 1 < len(bounds) else end
            t0, t1 = max(t0, start), min(t1, end)
            if start > 0 and t1 <= t0:
                continue  # (outside the window)
            f = self.figures(seg)
            out.append({"segment": seg, "arm": arm, "start_s": t0 / 1e9,
                        "duration_s": max(0, t1 - t0) / 1e9, "ok": f["ok"],
                        "failed": f["failed"], "decode_p50": f["decode_p50"],
                        "ttft_p50": f["ttft_p50"],
                        **({"late": f["late"]} if f["late"] else {})})  # fmt: skip
        return out


_DRIFT_COLS = ("t", "decode_tps", "ttft_ms", "tpot_ms")
_DRIFTS = (("decode_tokens_per_s", "decode_tps"), ("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"))


class DriftFigures:
    """Drift per arm and per regime (a trend is never fitted across a change the user
    made); a regime too short for its interval to tell a drift of ``limit_pct_h`` from
    none gets no figure, only "too short to tell"."""

    def __init__(self, limit_pct_h: float) -> None:
        self.limit = limit_pct_h
        self.starts: list[float] = [0.0]  # when each regime began (s)
        # (arm, regime) -> its rows, and the exact first and last end time of its rows
        self.rows: dict[tuple[str, int], RowSample] = {}
        self.span: dict[tuple[str, int], list[float]] = {}
        self.found: dict[tuple[str, int], dict[str, Any]] = {}
        self.late = 0  # ok requests that ended in a regime already settled
        self.code: dict[str, int] = {}  # (arms in the order of their codes, as the table's)

    def event(self, ev: Event) -> None:
        if ev.kind in REGIME_KINDS:
            self.starts.append(ev.t / 1e9)
            for key in [k for k in self.rows if k[1] <= len(self.starts) - 1 - OPEN]:
                self._settle(key)

    def requests(self, tb: RequestTable, arm_of: list[Any]) -> None:
        c = tb.cols
        rows = np.flatnonzero(counted(tb) & ok_rows(tb))
        if rows.size == 0:
            return
        t = c["t_end"][rows] / 1e9
        reg = np.searchsorted(np.asarray(self.starts), t, side="right") - 1
        keys = row_keys(c["rid"][rows])
        arms = c["arm"][rows]
        for a, r in distinct_pairs(arms, reg):
            m = (arms == a) & (reg == r)
            self.code.setdefault(str(arm_of[a]), a)
            self._add((str(arm_of[a]), max(r, 0)), t[m], keys[m], {
                col: c[col][rows[m]] for col in _DRIFT_COLS[1:]})  # fmt: skip

    def _add(
        self, key: tuple[str, int], t: np.ndarray, keys: np.ndarray, cols: dict[str, np.ndarray]
    ) -> None:
        if key in self.found:
            self.late += int(t.size)
            return
        rs = self.rows.get(key)
        if rs is None:
            rs = self.rows[key] = RowSample(_DRIFT_COLS, DRIFT_ROWS, dtype=np.float64)
            self.span[key] = [math.inf, -math.inf]
        rs.add(keys, {"t": t, **cols})
        sp = self.span[key]
        sp[0], sp[1] = min(sp[0], float(t.min())), max(sp[1], float(t.max()))

    def _settle(self, key: tuple[str, int]) -> None:
        rs = self.rows.pop(key)
        lo, hi = self.starts[key[1]], (
            self.starts[key[1] + 1] if key[1] + 1 < len(self.starts) else math.inf)  # fmt: skip
        t = rs.col("t")
        sp = self.span.pop(key)
        beyond = t >= hi
        if beyond.any():
            # rows that ended after a regime began whose event came after them: theirs
            keys, cols = rs.keys()[beyond], {c: rs.col(c)[beyond] for c in _DRIFT_COLS}
            reg = np.searchsorted(np.asarray(self.starts), cols["t"], side="right") - 1
            for r in np.unique(reg).tolist():
                m = reg == r
                self._add((key[0], r), cols["t"][m], keys[m],
                          {c: v[m] for c, v in cols.items() if c != "t"})  # fmt: skip
            t = t[~beyond]
            sp[1] = float(t.max()) if t.size else sp[0]
            if t.size == 0:
                return
        span = sp[1] - sp[0]
        d: dict[str, Any] = {}
        for name, col in _DRIFTS:
            v = rs.col(col)[~beyond]
            m = ~np.isnan(v)
            r = drift(t[m], v[m]) if m.any() and span >= MIN_DRIFT_SPAN_S else None
            if r is not None and not can_tell(r["ci95"][0], r["ci95"][1], self.limit):
                r = None  # its interval cannot tell a drift that matters from none
            d[name] = r
        self.found[key] = {"from_s": round(max(lo, sp[0]), 3), "to_s": round(min(hi, sp[1]), 3),
                           "span_s": round(span, 3), "drift": d,
                           **({"sampled": rs.seen} if rs.seen > DRIFT_ROWS else {})}  # fmt: skip

    def figures(self) -> dict[str, list[dict[str, Any]]]:
        for key in list(self.rows):
            self._settle(key)
        out: dict[str, list[dict[str, Any]]] = {}
        for arm, r in sorted(self.found, key=lambda k: (self.code.get(k[0], 0), k[1])):
            out.setdefault(arm, []).append(self.found[(arm, r)])
        return out


@dataclass
class _Jitter:
    tpot: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    tpot_sq: float = 0.0  # the sum of squares, for the coefficient of variation
    gaps: Quantiles = field(default_factory=Quantiles)
    stalls: int = 0
    max_gap: float = -math.inf


class JitterFigures:
    """Spread of TPOT (p99/p50, coefficient of variation) and of chunk gaps, per arm."""

    def __init__(self) -> None:
        self.arms: dict[str, _Jitter] = {}
        self.code: dict[str, int] = {}

    def requests(self, tb: RequestTable, arm_of: list[Any]) -> None:
        c = tb.cols
        rows = np.flatnonzero(counted(tb) & ok_rows(tb))
        arms = c["arm"][rows]
        for a in np.unique(arms).tolist():
            rs = rows[arms == a]
            j = self.arms.setdefault(str(arm_of[a]), _Jitter())
            self.code.setdefault(str(arm_of[a]), a)
            tp = c["tpot_ms"][rs]
            tp = tp[~np.isnan(tp)]
            j.tpot.extend(tp)
            j.tpot_sq += float(np.dot(tp, tp))
            j.stalls += int(c["stalls"][rs].sum())
            if tb.gaps is not None:
                got = [np.frombuffer(tb.gaps[i], dtype="<f4") for i in rs.tolist() if tb.gaps[i]]
                if got:
                    j.gaps.extend(np.concatenate(got))
            mg = c["max_gap_ms"][rs]
            mg = mg[~np.isnan(mg)]
            if mg.size:
                j.max_gap = max(j.max_gap, float(mg.max()))

    def figures(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for arm, j in sorted(self.arms.items(), key=lambda kv: self.code[kv[0]]):
            d: dict[str, Any] = {"stalls": j.stalls}
            n = len(j.tpot)
            if n >= 2:
                p50, p99 = j.tpot.quantiles([50, 99])
                mean = j.tpot.mean() or 0.0
                var = max(0.0, j.tpot_sq / n - mean * mean)
                d["tpot_p99_over_p50"] = p99 / p50
                d["tpot_cv"] = math.sqrt(var) / mean
            if len(j.gaps):
                g50, g99 = j.gaps.quantiles([50, 99])
                d["gap_p50_ms"] = g50
                d["gap_p99_over_p50"] = g99 / g50
            if j.max_gap > -math.inf:
                d["max_gap_ms"] = j.max_gap
            out[arm] = d
        return out


class ErrorCounts:
    """Failed requests per arm and class (warm-up included: a failure is a failure)."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self.code: dict[str, int] = {}

    def requests(self, tb: RequestTable) -> None:
        c = tb.cols
        failed = np.flatnonzero(~ok_rows(tb))
        if failed.size == 0:
            return
        pairs, n = np.unique(np.stack([c["arm"][failed], c["outcome"][failed]]), axis=1,
                             return_counts=True)  # fmt: skip
        for (a, o), k in zip(pairs.T.tolist(), n.tolist(), strict=True):
            d = self.counts.setdefault(str(tb.vocab["arm"][a]), {})
            self.code.setdefault(str(tb.vocab["arm"][a]), a)
            name = str(tb.vocab["outcome"][o])
            d[name] = d.get(name, 0) + int(k)

    def figures(self) -> dict[str, dict[str, int]]:
        return dict(sorted(self.counts.items(), key=lambda kv: self.code[kv[0]]))


class Analyses:
    """The report's analyses together, taking the facts in the fold's order."""

    def __init__(self, limit_pct_h: float) -> None:
        self.segments = SegmentFigures()
        self.drift = DriftFigures(limit_pct_h)
        self.jitter = JitterFigures()
        self.errors = ErrorCounts()

    def requests(self, tb: RequestTable) -> None:
        self.arrive(tb)
        self.count(tb)

    def arrive(self, tb: RequestTable) -> None:
        """What depends on where a batch falls: a segment's requests that end after it
        was settled are counted late (as ``Fold.arrive``)."""
        self.segments.requests(tb)

    def count(self, tb: RequestTable) -> None:
        """The rest, the same however the requests are batched between two events."""
        arm_of = tb.vocab["arm"]
        self.drift.requests(tb, arm_of)
        self.jitter.requests(tb, arm_of)
        self.errors.requests(tb)

    def event(self, ev: Event) -> None:
        self.drift.event(ev)
