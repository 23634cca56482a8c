"""Folding finished facts into live statistics: the one place where records become
windows, history points, totals and snapshots. A live session and a replay both feed
an ``Aggregator``; so the dashboard shows the same figures either way.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from tokmon.model.history import History, Point
from tokmon.model.records import EngineStatus, Event, RequestRecord
from tokmon.model.snapshot import ArmView, Snapshot
from tokmon.model.stats import ArmTotals, Slo, TokenWindow, window_stats, window_stats_rows
from tokmon.model.summary import active_time, build_summary, compare
from tokmon.model.table import RequestTable

MARK_KINDS = {
    "arm": "arm",
    "marker": "marker",
    "alert": "alert",
    "restart": "alert",
    "down": "alert",
    "errors": "alert",
    "stall": "stall",
}


def mix_weights(settings: dict[str, Any] | None) -> dict[str, float] | None:
    """The task mix of a run's settings (a recording's header or a RunConfig), when the
    workload was built from one (not from a prompt file, whose kinds come as they are)."""
    if not settings or settings.get("prompts"):
        return None
    out: dict[str, float] = {}
    for item in settings.get("mix") or ():
        if isinstance(item, (list, tuple)) and len(item) == 2:
            k, w = item
            if isinstance(k, str) and isinstance(w, (int, float)) and math.isfinite(w) and w > 0:
                out[k] = float(w)
    return out if len(out) > 1 else None


def _num(v: Any) -> float | None:
    """A number from an event's data (which may come from a file)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _int(v: Any) -> int:
    n = _num(v)
    return int(n) if n is not None else 0


class Aggregator:
    def __init__(
        self,
        arm_names: list[str],
        *,
        window_s: float = 10.0,
        slo: Slo | None = None,
        assign: str = "switch",
        mode: str = "concurrency",
        level: float = 0.0,
        t_start: int = 0,
        warmup: bool = False,
        kind_weights: dict[str, float] | None = None,
    ) -> None:
        self.arm_names = list(arm_names)
        # the task mix the workload was built with: the A/B ratio's stratum weights
        self.kind_weights = kind_weights
        self.window_s = window_s
        self.slo = slo or Slo()
        self.assign = assign
        self.mode = mode
        self.level = level
        self.paused = False
        self.warmup = warmup
        self.arm = self.arm_names[0]
        self.totals = {n: ArmTotals(n) for n in self.arm_names}
        self.window: deque[RequestRecord] = deque()
        # A replay's window: rows of its table (no record objects for millions of rows).
        self.table: RequestTable | None = None
        self.window_rows: deque[np.ndarray] = deque()
        self.tokens = TokenWindow()
        self.history = History()
        self.events: deque[Event] = deque(maxlen=500)
        self.statuses: dict[int, EngineStatus] = {}
        self.t_start = t_start
        self.t_measure: int | None = None
        self.segments: list[tuple[int, str, int, int | None]] = [(0, self.arm, t_start, None)]
        self.alternations = 0
        self.comparison: dict[str, Any] | None = None
        self._next_compare = 0
        self._pending_marks: list[str] = []
        self._last_errors = 0
        self.down_since: dict[str, int] = {}
        self.stalls_total = 0
        self._last_burst = -(10**18)
        self._last_stall_event = -(10**18)
        self.power: list[tuple[int, float]] = []  # (t, GPU watts): energy per token
        self.ladder_param: str | None = None
        self.steps: list[Any] = []  # StepTotals, in the order they ran
        self.ladder_stopped: str | None = None
        self.gpu_hour_price: float | None = None
        self.gpus = 1
        # Set by a live session: derived events (server down / back). A replay leaves it
        # None, since those events are in the recording already.
        self.on_event: Any = None

    # ------------------------------------------------------------------ input
    def add_records(self, records: list[RequestRecord]) -> None:
        for r in records:
            tot = self.totals.get(r.arm)
            if tot is None:  # (not setdefault: that would build an ArmTotals every time)
                tot = self.totals[r.arm] = ArmTotals(r.arm)
            tot.add(r, self.slo)
            self.window.append(r)
            if r.counted and (self.t_measure is None or r.t_sched < self.t_measure):
                self.t_measure = r.t_sched
            if r.step >= 0 and r.counted and self.steps:
                self._add_to_step(r)
            if r.stalls:
                self._pending_marks.append("stall")
                self.stalls_total += r.stalls
                # Each stall is listed with its request; at most one event a second.
                if self.on_event is not None and r.t_end - self._last_stall_event >= 1_000_000_000:
                    self._last_stall_event = r.t_end
                    self.on_event(
                        "stall",
                        f"stall: request {r.rid} ({r.arm}) waited "
                        f"{r.max_gap_ms or 0:.0f} ms between chunks "
                        f"({self.stalls_total} stalls so far)",
                        {"rid": r.rid, "arm": r.arm, "gap_ms": r.max_gap_ms},
                        r.t_end,
                    )
            if r.outcome == "connect":
                if r.arm not in self.down_since:
                    self.down_since[r.arm] = r.t_end
                    if self.on_event is not None:
                        self.on_event(
                            "down",
                            f"server of arm {r.arm} unreachable: {r.error}",
                            {"arm": r.arm},
                            r.t_end,
                        )
            elif r.http_status is not None and r.arm in self.down_since:
                since = self.down_since.pop(r.arm)
                if self.on_event is not None:
                    self.on_event(
                        "up",
                        f"server of arm {r.arm} back after {(r.t_end - since) / 1e9:.1f} s",
                        {"arm": r.arm},
                        r.t_end,
                    )

    def _add_to_step(self, r: RequestRecord) -> None:
        for st in reversed(self.steps):
            if st.step == r.step and st.arm == r.arm:
                if r.ok:
                    st.ok += 1
                    if r.ttft_ms is not None:
                        st.ttft.append(r.ttft_ms)
                    if r.tpot_ms is not None:
                        st.tpot.append(r.tpot_ms)
                    if r.decode_tps is not None:
                        st.decode.append(r.decode_tps)
                else:
                    st.failed += 1
                break

    def add_table(self, tb: RequestTable, idx: np.ndarray, window_from: int | None = None) -> None:
        """``add_records`` for rows of a recording's table, column by column (a replay or a
        report of millions of requests). Only rows that end at or after ``window_from``
        become records in the live window; derived events are not raised (a recording
        holds them already)."""
        if idx.size == 0:
            return
        c = tb.cols
        arms = c["arm"][idx]
        for code in np.unique(arms):
            name = tb.vocab["arm"][code]
            tot = self.totals.get(name)
            if tot is None:
                tot = self.totals[name] = ArmTotals(name)
            tot.add_rows(tb, idx[arms == code], self.slo)
        counted = idx[~c["warmup"][idx] & ~c["settle"][idx]]
        if counted.size:
            t0 = int(c["t_sched"][counted].min())
            if self.t_measure is None or t0 < self.t_measure:
                self.t_measure = t0
            if self.steps:  # a ladder's steps: few rows, added one by one
                for i in counted[c["step"][counted] >= 0]:
                    self._add_to_step(tb.record(int(i)))
        st = c["stalls"][idx]
        if st.any():
            self._pending_marks.append("stall")
            self.stalls_total += int(st.sum())
        self._track_down(tb, idx)
        if window_from is not None:
            recent = idx[c["t_end"][idx] >= window_from]
            if recent.size:
                self.table = tb
                self.window_rows.append(recent)

    def _track_down(self, tb: RequestTable, idx: np.ndarray) -> None:
        """An arm is down from its first connect failure until a request gets an answer."""
        c = tb.cols
        conn = c["outcome"][idx] == tb.code("outcome", "connect")
        if not conn.any() and not self.down_since:
            return
        answered = ~np.isnan(c["http_status"][idx])
        for j in np.flatnonzero(conn | answered):
            i = int(idx[j])
            arm = tb.vocab["arm"][c["arm"][i]]
            if conn[j]:
                self.down_since.setdefault(arm, int(c["t_end"][i]))
            else:
                self.down_since.pop(arm, None)

    def add_ticks(self, ticks: dict[tuple[int, str], int]) -> None:
        for (t, arm), n in ticks.items():
            self.tokens.add(t, arm, n)
            if self.steps:
                for st in reversed(self.steps):
                    if st.arm == arm and st.t0 <= t and (st.t1 is None or t < st.t1):
                        st.tokens += n
                        break

    # ------------------------------------------------------------------ ladder
    def begin_step(
        self, step: int, arm: str, value: str, t_start: int, warm_s: float, param: str
    ) -> None:
        """A ladder step starts at ``t_start``; it is measured after ``warm_s``."""
        from tokmon.model.ladder import StepTotals

        self.ladder_param = param
        if self.steps and self.steps[-1].t1 is None:
            self.steps[-1].t1 = t_start
        self.steps.append(StepTotals(step, arm, value, t_start + int(warm_s * 1e9)))

    def _ladder_view(self, now: int) -> dict[str, Any]:
        from tokmon.model.ladder import knee

        cur = self.steps[-1]
        figs = [st.figures(now) for st in self.steps if st.t1 is not None]
        arms = list(dict.fromkeys(f["arm"] for f in figs))
        return {
            "param": self.ladder_param,
            "step": cur.step,
            "value": cur.value,
            "arm": cur.arm,
            "running": cur.t1 is None,
            "since_s": (now - cur.t0) / 1e9,
            "done": figs,
            "knee": {a: knee([f for f in figs if f["arm"] == a]) for a in arms},
            "stopped": self.ladder_stopped,
        }

    def end_ladder(self, t: int, reason: str | None = None) -> None:
        if self.steps and self.steps[-1].t1 is None:
            self.steps[-1].t1 = t
        if reason:
            self.ladder_stopped = reason

    def note_probe(self, t: int, values: dict[str, Any]) -> None:
        """GPU memory and KV cache per step (long inputs are where memory runs out)."""
        for st in reversed(self.steps):
            if not (st.t0 <= t and (st.t1 is None or t < st.t1)):
                continue
            for key, attr in (("gpu_mem_pct", "gpu_mem_max"), ("kv_pct", "kv_max")):
                v = values.get(key)
                if v is not None:
                    cur = getattr(st, attr)
                    setattr(st, attr, v if cur is None else max(cur, v))
            break

    def ladder_summary(self, t_end: int) -> dict[str, Any] | None:
        from tokmon.model.ladder import knee
        from tokmon.model.stats import ratio_ci_requests

        if not self.steps:
            return None
        from tokmon.model.alerts import cost_figures

        figs = [st.figures(t_end) for st in self.steps]
        if self.gpu_hour_price is not None:
            for f in figs:  # what a million tokens costs at each step's throughput
                f["cost_per_million_tokens"] = cost_figures(
                    f["tokens_per_s"],
                    gpu_hour_price=self.gpu_hour_price,
                    gpus=self.gpus,
                    power_w=None,
                )["cost_per_mtok"]
        arms = list(dict.fromkeys(f["arm"] for f in figs))
        out: dict[str, Any] = {
            "param": self.ladder_param,
            "steps": figs,
            "knee": {a: knee([f for f in figs if f["arm"] == a]) for a in arms},
            "stopped_early": self.ladder_stopped,
        }
        if len(arms) >= 2:
            import numpy as np

            speedup = []
            by = {(st.step, st.arm): st for st in self.steps}
            for step in sorted({st.step for st in self.steps}):
                a, b = by.get((step, arms[0])), by.get((step, arms[1]))
                if a is None or b is None:
                    continue
                r = ratio_ci_requests(np.asarray(a.decode), np.asarray(b.decode))
                speedup.append(
                    {
                        "step": step,
                        "value": a.value,
                        "baseline": arms[0],
                        "other": arms[1],
                        "decode_ratio": None
                        if r is None
                        else {"ratio": r[0], "ci95": [r[1], r[2]]},
                    }
                )
            out["speedup"] = speedup
        return out

    def apply(self, ev: Event) -> None:
        """An event's effect on the figures, then the event itself.

        Arm switches, ladder steps and their end, load levels and pauses change what the
        figures mean; the live session, the replay and the report all fold events
        through here, in the same order, so that a replay shows what the live run showed
        and a report says what its summary said.
        """
        d = ev.data
        arm = d.get("arm")
        if ev.kind == "arm":
            if isinstance(arm, str) and arm in self.arm_names and arm != self.arm:
                self.switch(arm, ev.t)
        elif ev.kind == "step" and isinstance(arm, str):
            param = str(d.get("param"))
            self.begin_step(
                _int(d.get("step")),
                arm,
                str(d.get("value")),
                ev.t,
                _num(d.get("warm_s")) or 0.0,
                param,
            )
            level = _num(d.get("value"))
            if param in ("concurrency", "rate") and level is not None:
                self.level = level
        elif ev.kind == "ladder":
            reason = d.get("reason")
            self.end_ladder(ev.t, reason if isinstance(reason, str) else None)
        elif ev.kind == "level":
            level = _num(d.get("level"))
            if level is not None:
                self.level = level
        elif ev.kind == "pause":
            self.paused = ev.message.startswith("paused")
        self.add_event(ev)

    def add_event(self, ev: Event) -> None:
        self.events.append(ev)
        mark = MARK_KINDS.get(ev.kind)
        if mark:
            self._pending_marks.append(mark)

    def add_power(self, t: int, watts: float) -> None:
        self.power.append((t, watts))

    def mean_power(self, arm: str, t_end: int) -> float | None:
        """Mean GPU power while ``arm`` was active (after the warm-up)."""
        t0 = self.t_measure if self.t_measure is not None else self.t_start
        spans = [
            (s, e if e is not None else t_end)
            for _, a, s, e in self.segments
            if a == arm or self.assign != "switch"
        ]
        vals = [w for t, w in self.power if t >= t0 and any(s <= t < e for s, e in spans)]
        return sum(vals) / len(vals) if vals else None

    def switch(self, new_arm: str, t: int) -> int:
        """End the current segment and start one for ``new_arm``; returns its id."""
        seg_id, arm, s, _ = self.segments[-1]
        self.segments[-1] = (seg_id, arm, s, t)
        self.segments.append((seg_id + 1, new_arm, t, None))
        # Complete A-B cycles: the fewest segments any arm has had (ABAB -> 2).
        self.alternations = min(
            sum(1 for sg in self.segments if sg[1] == a) for a in self.arm_names
        )
        self.arm = new_arm
        return seg_id + 1

    # ------------------------------------------------------------------ output
    def tick(
        self,
        now: int,
        *,
        probes: dict[str, Any],
        meta: dict[str, Any],
        final: bool = False,
        quick: bool = False,
    ) -> Snapshot:
        """Window statistics, one history point, and a new snapshot (about once a second).

        ``quick``: a tick a replay passes over while seeking, never shown: the history
        point only, without the whole-run comparison."""
        lim = now - int(self.window_s * 1e9)
        w = self.window
        while w and w[0].t_end < lim:
            w.popleft()
        self.tokens.trim(now)
        elapsed = (now - self.t_start) / 1e9
        width = min(self.window_s, max(elapsed, 1e-3))
        # Token buckets still being filled by the engine are left out: the window ends at
        # the last bucket that is surely complete.
        t1 = now - 150_000_000
        t1 -= t1 % self.tokens.bucket_ns
        tok = self.tokens.tokens(t1 - int(width * 1e9), t1)
        arm_views = []
        if self.table is not None:
            tb = self.table
            te = tb.cols["t_end"]
            kept = [r for r in (b[te[b] >= lim] for b in self.window_rows) if r.size]
            self.window_rows = deque(kept)
            rows = np.concatenate(kept) if kept else np.empty(0, dtype=np.int64)
            win = window_stats_rows(tb, rows, sum(tok.values()), now, width, "", self.slo)
            arms = tb.cols["arm"][rows]
            for name in self.arm_names:
                sel = rows[arms == tb.code("arm", name)]
                aw = window_stats_rows(tb, sel, tok.get(name, 0), now, width, name, self.slo)
                t = self.totals[name]
                arm_views.append(ArmView(name, t.ok, t.failed, aw))
        else:
            recs = list(w)
            win = window_stats(recs, sum(tok.values()), now, width, "", self.slo)
            for name in self.arm_names:
                aw = window_stats(
                    [r for r in recs if r.arm == name],
                    tok.get(name, 0),
                    now,
                    width,
                    name,
                    self.slo,
                )
                t = self.totals[name]
                arm_views.append(ArmView(name, t.ok, t.failed, aw))
        if (
            probes.get("spec_acceptance_rate") is not None
            or probes.get("spec_acceptance_length") is not None
        ):
            win = replace(
                win,
                acceptance_rate=probes.get("spec_acceptance_rate"),
                acceptance_length=probes.get("spec_acceptance_length"),
                acceptance_source=probes.get("spec_source", "server counters"),
            )
        if (
            self.on_event is not None
            and win.failed >= 5
            and win.failed >= 0.1 * win.ended
            and now - self._last_burst >= 30_000_000_000
        ):
            self._last_burst = now
            classes = ", ".join(f"{k} {v}" for k, v in sorted(win.errors.items()))
            self.on_event(
                "errors",
                f"error burst: {win.failed} of {win.ended} requests failed "
                f"in the last {width:.0f} s ({classes})",
                {"errors": win.errors},
                now,
            )
        n_failed = sum(t.failed for t in self.totals.values())
        new_err = n_failed - self._last_errors
        self._last_errors = n_failed
        marks = tuple(dict.fromkeys(self._pending_marks))
        self._pending_marks.clear()
        stat = list(self.statuses.values())
        lag = max((s.send_lag_ms for s in stat), default=0.0)
        self.history.add(
            Point(
                t=elapsed,
                arm=self.arm,
                tok_s=win.tokens_per_s,
                ttft_p50=win.ttft_p50,
                ttft_p95=win.ttft_p95,
                tpot_p50=win.tpot_p50,
                decode_p50=win.decode_p50,
                errors=float(new_err),
                err_rate=(win.failed / win.ended) if win.ended else None,
                acc_rate=win.acceptance_rate,
                acc_len=win.acceptance_length,
                gpu_util=probes.get("gpu_util"),
                gpu_mem_pct=probes.get("gpu_mem_pct"),
                kv_pct=probes.get("kv_pct"),
                queue=probes.get("queue"),
                send_lag=lag,
                marks=marks,
                arm_tok_s=tuple((v.name, v.window.tokens_per_s) for v in arm_views if v.window),
            )
        )
        if (now >= self._next_compare or final) and len(self.arm_names) >= 2 and not quick:
            self._next_compare = now + 3_000_000_000
            self.comparison = compare(
                self.totals[self.arm_names[0]],
                self.totals[self.arm_names[1]],
                self.alternations,
                self.kind_weights,
            )
        return Snapshot(
            t=now,
            elapsed_s=elapsed,
            target=meta.get("target", ""),
            model=meta.get("model", ""),
            arm=self.arm if self.assign == "switch" else self.assign,
            arms=tuple(self.arm_names),
            mode=self.mode,
            level=self.level,
            paused=self.paused,
            sent=sum(s.sent for s in stat),
            ok=sum(t.ok for t in self.totals.values()),
            failed=n_failed,
            in_flight=sum(s.in_flight for s in stat),
            warming_up=self.warmup and self.t_measure is None,
            recording=meta.get("recording"),
            window=win,
            arm_views=tuple(arm_views),
            recent=tuple(self.history.recent),
            whole=tuple(self.history.whole_view()),
            events=tuple(self.events),
            comparison=self.comparison,
            probes=probes,
            done=final,
            loop_lag_ms=max((s.loop_lag_ms for s in stat), default=0.0),
            send_lag_ms=lag,
            replay=meta.get("replay"),
            insecure=bool(meta.get("insecure")),
            output_check=meta.get("output_check"),
            down={a: (now - t) / 1e9 for a, t in self.down_since.items()},
            trends=meta.get("trends") or {},
            ladder=self._ladder_view(now) if self.steps else None,
            costs=meta.get("costs") or {},
        )

    def summary(
        self,
        *,
        t_end: int,
        started_at: str,
        target: dict[str, str],
        server_spec: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        active = active_time(
            self.segments,
            t_end,
            self.t_measure,
            self.assign != "switch",
            self.arm_names,
            self.t_start,
        )
        out = build_summary(
            started_at=started_at,
            duration_s=(t_end - self.t_start) / 1e9,
            target=target,
            totals=self.totals,
            active_s=active,
            alternations=self.alternations,
            server_spec=server_spec,
            slo_good=self.slo.any,
            kind_weights=self.kind_weights,
        )
        lad = self.ladder_summary(t_end)
        if lad is not None:
            out["ladder"] = lad
        from tokmon.model.alerts import cost_figures, kind_cost_figures

        for name, a in out["arms"].items():
            # With two arms on separate servers, both share what the GPU probe sees; with
            # one arm at a time, the power of each arm's own segments.
            pw = self.mean_power(name, t_end)
            c = cost_figures(
                a["output_tokens_per_s"],
                gpu_hour_price=self.gpu_hour_price,
                gpus=self.gpus,
                power_w=pw,
            )
            a["mean_gpu_power_w"] = None if pw is None else round(pw, 3)
            a["cost_per_million_tokens"] = c["cost_per_mtok"]
            a["joules_per_token"] = c["joules_per_token"]
            a["tokens_per_joule"] = c["tokens_per_joule"]
            if a.get("by_kind"):
                kc = kind_cost_figures(c, self.totals[name].kinds)
                for k, v in a["by_kind"].items():
                    v["cost_per_million_tokens"] = kc.get(k, {}).get("cost_per_mtok")
                    v["joules_per_token"] = kc.get(k, {}).get("joules_per_token")
        return out
