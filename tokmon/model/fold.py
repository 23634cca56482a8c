"""The one fold: facts in, the figures the dashboard draws and the summary reports out.

A live session, a replay and a report all hand ``Fold.apply`` the same typed facts
(``tokmon.model.facts``) in the same order, and nothing else derives figures; a recording
stores exactly those facts, so a replay is the live run again and a report says what the
live summary said.

Live, the fold also *derives* events from the figures (a stall, a server down and back,
an error burst, an alert) and returns them to be recorded; a replay or a report takes
them from the recording instead (``derive=False``), so they are never raised twice.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from tokmon.model.active import ArmTokens, active_spans, seconds
from tokmon.model.alerts import AlertEngine, cost_figures, kind_cost_figures
from tokmon.model.capacity import CapacityReducer
from tokmon.model.changepoint import WATCHED, ChangePoint, StepWatch
from tokmon.model.changepoint import H as CUSUM_H
from tokmon.model.coerce import integer, number, text
from tokmon.model.crossover import AtLoad, Crossover, crossover
from tokmon.model.environment import ServerEnv
from tokmon.model.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.history import History, Point
from tokmon.model.ladder import StepTotals, knee, knee_json
from tokmon.model.quality import KIND_PREFIX, QualityReducer
from tokmon.model.records import EngineStatus, Event
from tokmon.model.sketch import Quantiles
from tokmon.model.snapshot import ArmView, Snapshot
from tokmon.model.stats import (
    MIN_SAMPLES,
    ArmTotals,
    GrowArray,
    Slo,
    TokenWindow,
    ratio_ci_requests,
    window_stats,
)
from tokmon.model.storage import StorageReducer
from tokmon.model.summary import alerts_from_events, build_summary, compare
from tokmon.model.table import RequestTable
from tokmon.model.timesplit import SpeedupCauses, TimeSplit, TimeSplitReducer
from tokmon.model.views import (
    ArmCost,
    ComparisonView,
    Cost,
    LadderView,
    Price,
    ProbeView,
    RestartView,
)

# events that start a regime: the user changed what runs (never a change point)
REGIME_KINDS = frozenset({"arm", "step", "level", "pause"})
MARK_KINDS = {
    "arm": "arm",
    "marker": "marker",
    "alert": "alert",
    "restart": "alert",
    "down": "alert",
    "errors": "alert",
    "stall": "stall",
}
COMPARE_EVERY_NS = 3_000_000_000  # the whole-run A/B comparison: a bootstrap, not every tick
SPLIT_EVERY_NS = 2_000_000_000  # the time split: medians over the run, not every tick
SERVER_OFF = {"server_note": "server metrics off"}
INCONSISTENT = "inconsistent: more tokens accepted than drafted"


def _change_alert(arm: str, cp: ChangePoint, basis: str) -> tuple[str, str, dict[str, Any]]:
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


@dataclass(frozen=True)
class FoldSettings:
    """What the figures depend on besides the facts: written in a recording's header
    (``fold``), so that a replay and a report fold with the live run's settings."""

    arms: tuple[str, ...]
    window_s: float = 10.0
    slo: Slo = field(default_factory=Slo)
    assign: str = "switch"
    mode: str = "concurrency"
    level: float = 0.0
    warmup: bool = False
    # the task mix the workload was built with: the A/B ratio's stratum weights
    kind_weights: tuple[tuple[str, float], ...] | None = None
    gpu_hour_price: float | None = None
    gpus: int | None = None  # None: as many as the GPU probe sees
    drift_alert_pct_h: float = 5.0
    target: str = ""
    model: str = ""
    endpoint: str = "chat"
    insecure: bool = False
    server_metrics: bool = True
    started_at: str = ""
    wall_start: float = 0.0
    # what each server said of itself before the run (its raw answers stay in the
    # header's ``servers``): the summary's environment block
    environment: tuple[ServerEnv, ...] = ()
    # each arm's server: its URL, or its managed command, short and redacted
    arm_servers: tuple[tuple[str, str], ...] = ()
    # --scenario: which kind of service the run stands for, and its headline figures
    scenario: str = ""
    scenario_headline: str = ""

    def server_of(self, arm: str) -> str:
        return dict(self.arm_servers).get(arm) or self.target

    def to_json(self) -> dict[str, Any]:
        d = asdict(replace(self, environment=()))
        d["environment"] = [e.to_json(raw=False) for e in self.environment]
        d["slo"] = {k: v for k, v in d["slo"].items() if v is not None}
        d["kind_weights"] = (
            None if self.kind_weights is None else [list(p) for p in self.kind_weights]
        )
        d["arm_servers"] = [list(p) for p in self.arm_servers]
        return d


# events every report lists, but these: a stall is one a second at most and each is in
# the requests (their stall counts); a clock estimate is a worker's offset
UNLISTED_KINDS = frozenset({"stall", "clock"})


def capacity_summary(searches: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Each arm's search with what it serves at its capacity (the probe's throughput,
    cost per Mtok and TTFT p95, from its step), and with two arms the ratio of their
    capacities, bracketed by what each search left open (capacity to fails_at)."""
    for arm, r in searches.items():
        cap = r.get("capacity")
        at = [st for st in steps if st.get("arm") == arm and cap is not None
              and _level(st.get("value")) == cap]  # fmt: skip
        if at:
            st = at[-1]
            r["serves"] = {k: st.get(k) for k in
                           ("tokens_per_s", "cost_per_million_tokens", "ttft_p95", "tpot_p50")}  # fmt: skip
    arms = list(searches)
    if len(arms) == 2:
        a, b = (searches[x] for x in arms)
        ca, cb, fa, fb = a.get("capacity"), b.get("capacity"), a.get("fails_at"), b.get("fails_at")
        if ca and cb:
            searches[arms[1]]["ratio_to"] = {
                "baseline": arms[0],
                "ratio": round(cb / ca, 4),
                # the true capacities lie in [capacity, fails_at): the ratio in between
                "bracket": [round(cb / fa, 4) if fa else None, round(fb / ca, 4) if fb else None],
            }
    return searches


def _level(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def listed_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The events every report lists (the summary's ``events``), from a fold or straight
    from a recording: the same list either way."""
    return [event_entry(e) for e in events if e.kind not in UNLISTED_KINDS]


def event_entry(e: Event) -> dict[str, Any]:
    """An event as the summary lists it: when (s from the run's start), what kind, what
    it said, and its plain fields (a marker's note is its message)."""
    out: dict[str, Any] = {"t_s": round(e.t / 1e9, 3), "kind": e.kind, "message": e.message}
    for k, v in e.data.items():
        if isinstance(v, (str, int, float, bool)) and k not in out:
            out[k] = v
    return out


def mix_weights(settings: dict[str, Any] | None) -> tuple[tuple[str, float], ...] | None:
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
    return tuple(out.items()) if len(out) > 1 else None


@dataclass
class Segment:
    """A stretch of the run on one arm (arms switched by hand or by alternation)."""

    id: int
    arm: str
    t0: int
    t1: int | None = None


@dataclass
class _Server:
    """What one server's /metrics samples gave: its arms and the counter deltas."""

    arms: tuple[str, ...]
    deltas: list[tuple[int, float, float, float]] = field(default_factory=list)
    # (t, prompt tokens looked up in the prefix cache, of which hit)
    prefix: list[tuple[int, float, float]] = field(default_factory=list)


@dataclass
class _Net:
    """What one server's network probe gave: its arms and every round trip (ms)."""

    arms: tuple[str, ...]
    rtt: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)


def _arm_names(v: Any) -> tuple[str, ...]:
    return tuple(a for a in v if isinstance(a, str)) if isinstance(v, list) else ()


def _in_spans(t: int, t0: int | None, segments: list[tuple[int, int | None]] | None) -> bool:
    if t0 is not None and t < t0:
        return False
    return segments is None or any(s <= t <= (e if e is not None else t) for s, e in segments)


def prefix_hit_rate(
    prefix: list[tuple[int, float, float]],
    t0: int | None = None,
    segments: list[tuple[int, int | None]] | None = None,
) -> float | None:
    """The server's prefix-cache hit rate over a span: prompt tokens found cached over
    those looked up, from its own counters (vLLM ``prefix_cache_hits``/``_queries``)."""
    q = h = 0.0
    for t, dq, dh in prefix:
        if _in_spans(t, t0, segments):
            q, h = q + dq, h + dh
    return h / q if q > 0 else None


def spec_totals(
    deltas: list[tuple[int, float, float, float]],
    t0: int | None = None,
    segments: list[tuple[int, int | None]] | None = None,
) -> dict[str, Any] | None:
    """Acceptance over a span (or over segments) from /metrics counter deltas
    (drafts, draft tokens, accepted tokens), as docs/METRICS.md defines it."""
    dn = dd = da = 0.0
    for t, a, b, c in deltas:
        if _in_spans(t, t0, segments):
            dn, dd, da = dn + a, dd + b, da + c
    if dd <= 0:
        return None
    if da > dd:
        return {
            "acceptance_rate": None,
            "source": f"server counters ({INCONSISTENT})",
        }
    return {
        "acceptance_rate": da / dd,
        "source": "server counters",
        "acceptance_length": 1 + da / dn if dn > 0 else None,
        "draft_tokens": dd,
        "accepted_tokens": da,
        "drafts": dn,
    }


class Fold:
    def __init__(
        self,
        settings: FoldSettings,
        *,
        derive: bool = False,
        vocab: dict[str, list[Any]] | None = None,
        t0: int = 0,
    ) -> None:
        """``t0``: where the run folded begins (a window of a run: its start)."""
        s = self.settings = settings
        self.derive = derive
        # the string codes every Requests table of this fold uses (a live session builds
        # its batches with it; a replay's batches are slices of one table)
        self.vocab: dict[str, list[Any]] = vocab if vocab is not None else {}
        self.arm_names = list(s.arms)
        self.arm = self.arm_names[0]
        self.level = s.level
        self.paused = False
        self.slo = s.slo
        self.totals = {n: ArmTotals(n) for n in self.arm_names}
        self.window: deque[RequestTable] = deque()
        self.tokens = TokenWindow()
        self.arm_tokens = ArmTokens()  # the whole run's, counted against each arm's spans
        self.history = History()
        self.events: deque[Event] = deque(maxlen=500)
        self.alert_events: list[Event] = []
        # what happened, for every report (a stall is counted, not listed: one a second)
        self.event_log: list[Event] = []
        self.statuses: dict[int, EngineStatus] = {}
        self.samples: dict[str, dict[str, Any]] = {}  # latest per source (server: per URL)
        self.servers: dict[str, _Server] = {}
        self.net: dict[str, _Net] = {}
        # spans when nothing was sent ([start, end or None]) and managed servers' restarts
        self.idle: list[list[Any]] = []
        self.restarting: tuple[str, str, int] | None = None
        self.managed: dict[str, dict[str, Any]] = {}
        self.t_measure: int | None = None
        self.t0 = t0
        self.segments = [Segment(0, self.arm, t0)]
        self.alternations = 0
        self.comparison: dict[str, Any] | None = None
        self._cmp_view: tuple[dict[str, Any], ComparisonView] | None = None
        self._next_compare = 0
        self._pending_marks: list[str] = []
        self._last_errors = 0
        self.down_since: dict[str, int] = {}
        self.stalls_total = 0
        self._last_burst = -(10**18)
        self._last_stall_event = -(10**18)
        # (t, GPU watts) of every sample: energy per token (16 bytes a sample)
        self.power_t, self.power_w = GrowArray(64, np.int64), GrowArray(64, np.float64)
        self.gpus = s.gpus or 1
        self.ladder_param: str | None = None
        self.steps: list[StepTotals] = []  # in the order they ran
        self.ladder_stopped: str | None = None
        self.output_check: dict[str, Any] | None = None
        self.alerts = AlertEngine(drift_alert_pct_h=s.drift_alert_pct_h, window_s=s.window_s)
        # step changes, on the requests themselves, within the regime the user set
        self.watch = StepWatch()
        self.split = TimeSplitReducer()  # where each arm's time goes
        self.quality = QualityReducer()  # quality probes' answers, per arm and task
        self._quality_alerted = False
        self.capacity = CapacityReducer()  # --find-capacity: each arm's search
        self.storage = StorageReducer()  # tokmon's memory, the recording, the disk left
        self._split_view: tuple[TimeSplit, ...] = ()
        self._split_next = 0
        self.causes: SpeedupCauses | None = None
        self.causes_by_kind: tuple[SpeedupCauses, ...] = ()
        self.crossovers: tuple[Crossover, ...] = ()
        self.watch.new_regime(0.0)
        self.regimes: list[float] = [0.0]  # when each regime began (s)
        self.change_points: list[tuple[str, ChangePoint]] = []  # (arm, change), all found
        self.snapshot: Snapshot | None = None
        self.t_last = 0

    # ------------------------------------------------------------------ the fold
    def apply(self, fact: Fact) -> list[Event]:
        """Fold one fact in; returns the events it derived (live only), already folded."""
        out: list[Event] = []
        if isinstance(fact, Requests):
            self._requests(fact.table, out)
        elif isinstance(fact, Tokens):
            for b in fact.buckets:
                self._tokens(b.t, b.arm, b.tokens)
        elif isinstance(fact, Event):
            self._event(fact)
        elif isinstance(fact, Sample):
            self._sample(fact)
        elif isinstance(fact, Status):
            self.statuses[fact.status.worker] = fact.status
        elif isinstance(fact, Tick):
            self._tick(fact.t, fact.final, out)
        return out

    def close_seconds(self, t: int) -> None:
        """A tick of a report (or passed over while a replay seeks): the window moves on
        (a report streamed from a file holds no more requests than the live run did) and
        the step detector's seconds close as they did live; nothing is drawn."""
        self.t_last = t
        self._trim(t)
        for arm, cp, _ in self.watch.close(t / 1e9):
            self.change_points.append((arm, cp))

    def skip_tick(self, t: int) -> None:
        """A tick passed over while a replay seeks."""
        self.close_seconds(t)

    def seek_tick(self, t: int) -> None:
        """A tick drawn while a replay seeks: all but the whole-run A/B comparison (a
        bootstrap over every request), which ``compare_now`` makes once, at the end."""
        self._tick(t, False, [], quick=True)

    def compare_now(self) -> None:
        """The A/B comparison and the trends at the last tick (after a seek)."""
        if self.snapshot is None:
            return
        if len(self.arm_names) >= 2:
            self._compare(self.t_last)
        if not self.snapshot.warming_up:
            self.alerts.check()
        self.snapshot = replace(
            self.snapshot, comparison=self._comparison_view(), trends=dict(self.alerts.trends)
        )

    def _comparison_view(self) -> ComparisonView | None:
        c = self.comparison
        if c is None:
            return None
        if self._cmp_view is None or self._cmp_view[0] is not c:
            self._cmp_view = (c, ComparisonView.of(c))
        return self._cmp_view[1]

    def _compare(self, now: int) -> None:
        self._next_compare = now + COMPARE_EVERY_NS
        s = self.settings
        self.comparison = compare(
            self.totals[self.arm_names[0]],
            self.totals[self.arm_names[1]],
            self.alternations,
            dict(s.kind_weights) if s.kind_weights else None,
        )
        self.causes = self.split.causes(self.arm_names[0], self.arm_names[1])
        self.causes_by_kind = self.split.causes_by_kind(self.arm_names[0], self.arm_names[1])
        self.crossovers = self._crossovers() if self.steps else ()

    def _crossovers(self) -> tuple[Crossover, ...]:
        """The second arm's decode speed-up over the first at each load both ran (ladder
        steps, capacity probes), and where it stops paying: per task kind where the mix
        has several, else over the whole."""
        a, b = self.arm_names[0], self.arm_names[1]
        param = self.ladder_param or ""
        if param not in ("concurrency", "rate"):
            return ()
        by: dict[tuple[str, str], StepTotals] = {}
        for st in self.steps:
            by[(st.arm, st.value)] = st  # (a level probed twice: its last run)
        levels = [v for (arm, v) in by if arm == a and (b, v) in by]
        kinds = sorted({k for st in self.steps for k in st.decode_kind
                        if not k.startswith(KIND_PREFIX)})  # fmt: skip
        out = []
        # over a mix of kinds, per kind only: a median over code and free text together
        # is neither's speed-up (and its interval jumps between the two)
        for kind in kinds if len(kinds) > 1 else [""]:
            pts = []
            for v in levels:
                x, y = by[(a, v)], by[(b, v)]
                da = x.decode if not kind else x.decode_kind.get(kind, Quantiles())
                db = y.decode if not kind else y.decode_kind.get(kind, Quantiles())
                if len(da) < MIN_SAMPLES or len(db) < MIN_SAMPLES:
                    continue
                r = ratio_ci_requests(da, db)
                if r is not None:
                    pts.append(AtLoad(float(v), r[0], r[1], r[2]))
            if pts:
                out.append(crossover(b, a, param, pts, kind))
        return tuple(out)

    def rtt_ms(self, arm: str) -> float | None:
        """The network round trip (p50 of the run's samples) to ``arm``'s server."""
        for n in self.net.values():
            if (arm in n.arms or not n.arms) and n.rtt:
                return float(np.median(n.rtt))
        return None

    def time_split(self) -> tuple[TimeSplit, ...]:
        out = []
        for a in self.arm_names:
            t = self.totals.get(a)
            ttft, tpot = (Quantiles(), Quantiles()) if t is None else (t.ttft, t.tpot)
            out.append(self.split.view(a, self.rtt_ms(a), ttft, tpot))
        return tuple(out)

    def time_split_by_kind(self, arm: str) -> dict[str, TimeSplit]:
        """``arm``'s split per task kind (the client's figures of each kind picked from
        the totals by their stratum); {} where the mix had one kind."""
        t = self.totals.get(arm)
        if t is None:
            return {}
        out = {}
        for k in self.split.kind_names():
            ids = [sid for (kind, _), sid in t.strata.items() if kind == k]
            ttft, tpot = t.by_ttft.merged(ids), t.by_tpot.merged(ids)
            out[k] = self.split.view(arm, self.rtt_ms(arm), ttft, tpot, kind=k)
        return out

    def _derived(self, out: list[Event], kind: str, msg: str, data: dict[str, Any], t: int) -> None:
        ev = Event(t=t, kind=kind, message=msg, data=data, wall=self.settings.wall_start + t / 1e9)
        self._event(ev)
        out.append(ev)

    # ------------------------------------------------------------------ requests
    def _requests(self, tb: RequestTable, out: list[Event]) -> None:
        if tb.n == 0:
            return
        c = tb.cols
        rows = np.arange(tb.n)
        arms = c["arm"]
        for code in np.unique(arms):
            name = tb.vocab["arm"][code]
            tot = self.totals.get(name)
            if tot is None:
                tot = self.totals[name] = ArmTotals(name)
            tot.add(tb, rows[arms == code], self.slo)
        counted = rows[~c["warmup"] & ~c["settle"]]
        ok = counted[c["outcome"][counted] == tb.code("outcome", "ok")]
        self.split.requests(tb, ok)
        # every answer checked (warm-up included: a timing warms up, correctness does not)
        q = rows[~np.isnan(c["quality"])]
        for code, kcode in {
            (int(a), int(k)) for a, k in zip(c["arm"][q], c["kind"][q], strict=True)
        }:
            sel = q[(c["arm"][q] == code) & (c["kind"][q] == kcode)]
            task = str(tb.vocab["kind"][kcode]).removeprefix(KIND_PREFIX)
            self.quality.add(tb.vocab["arm"][code], task, c["quality"][sel])
        if ok.size:
            arm_ok = c["arm"][ok]
            for code in np.unique(arm_ok):
                sel = ok[arm_ok == code]
                self.watch.requests(
                    tb.vocab["arm"][code],
                    c["t_end"][sel] / 1e9,
                    c["decode_tps"][sel],
                    c["ttft_ms"][sel],
                )
        if counted.size:
            t0 = int(c["t_sched"][counted].min())
            if self.t_measure is None or t0 < self.t_measure:
                self.t_measure = t0
            if self.steps:
                self._add_to_steps(tb, counted[c["step"][counted] >= 0])
        st = c["stalls"]
        if st.any():
            self._pending_marks.append("stall")
            for i in np.flatnonzero(st).tolist():
                self.stalls_total += int(st[i])
                t_end = int(c["t_end"][i])
                # each stall is listed with its request; at most one event a second
                if self.derive and t_end - self._last_stall_event >= 1_000_000_000:
                    self._last_stall_event = t_end
                    arm = tb.vocab["arm"][c["arm"][i]]
                    gap = float(c["max_gap_ms"][i])
                    gap_ms = None if gap != gap else gap
                    self._derived(
                        out,
                        "stall",
                        f"stall: request {int(c['rid'][i])} ({arm}) waited "
                        f"{gap_ms or 0:.0f} ms between chunks "
                        f"({self.stalls_total} stall{'s' if self.stalls_total != 1 else ''} so far)",
                        {"rid": int(c["rid"][i]), "arm": arm, "gap_ms": gap_ms},
                        t_end,
                    )
        self._track_down(tb, out)
        self.window.append(tb)

    def _track_down(self, tb: RequestTable, out: list[Event]) -> None:
        """An arm is down from its first connect failure until a request gets an answer."""
        c = tb.cols
        conn = c["outcome"] == tb.code("outcome", "connect")
        if not conn.any() and not self.down_since:
            return
        answered = ~np.isnan(c["http_status"])
        for i in np.flatnonzero(conn | answered).tolist():
            arm = tb.vocab["arm"][c["arm"][i]]
            t = int(c["t_end"][i])
            if conn[i]:
                if arm not in self.down_since:
                    self.down_since[arm] = t
                    if self.derive:
                        err = tb.vocab["error"][c["error"][i]]
                        self._derived(
                            out, "down", f"server of arm {arm} unreachable: {err}", {"arm": arm}, t
                        )
            elif arm in self.down_since:
                since = self.down_since.pop(arm)
                if self.derive:
                    self._derived(
                        out,
                        "up",
                        f"server of arm {arm} back after {(t - since) / 1e9:.1f} s",
                        {"arm": arm},
                        t,
                    )

    def _add_to_steps(self, tb: RequestTable, rows: np.ndarray) -> None:
        c = tb.cols
        # which met every SLO, and each SLO alone (a capacity probe says which one failed)
        slo = self.slo
        met_all = slo.met(tb, rows) if slo.any else None
        met_each = slo.met_each(tb, rows)
        arm_of, step_of = c["arm"][rows], c["step"][rows]
        okm = c["outcome"][rows] == tb.code("outcome", "ok")
        for code, step in sorted({(int(a), int(b)) for a, b in zip(arm_of, step_of, strict=True)}):
            arm = tb.vocab["arm"][code]
            st = next((x for x in reversed(self.steps) if x.step == step and x.arm == arm), None)
            if st is None:
                continue
            m = (arm_of == code) & (step_of == step)
            if met_all is not None:
                st.good += int(met_all[m].sum())
                for name, met in met_each.items():
                    st.met[name] = st.met.get(name, 0) + int(met[m].sum())
            ok = rows[m & okm]
            st.ok += int(ok.size)
            st.failed += int(m.sum()) - int(ok.size)
            for fig, name in ((st.ttft, "ttft_ms"), (st.tpot, "tpot_ms"),
                              (st.decode, "decode_tps"), (st.prompt, "prompt_tokens")):  # fmt: skip
                v = c[name][ok].astype(np.float64)
                fig.extend(v[~np.isnan(v)])
            dec, kinds = c["decode_tps"][ok].astype(np.float64), c["kind"][ok]
            for kc in np.unique(kinds).tolist():
                kind = tb.vocab["kind"][kc]
                v = dec[(kinds == kc) & ~np.isnan(dec)]
                if kind and v.size:
                    st.decode_kind.setdefault(kind, Quantiles(np.float64)).extend(v)

    def _tokens(self, t: int, arm: str, n: int) -> None:
        self.tokens.add(t, arm, n)
        self.arm_tokens.add(t, arm, n)
        if self.t_measure is not None or not self.settings.warmup:
            self.watch.token_bucket(arm, t / 1e9, n)
        for st in reversed(self.steps):
            if st.arm == arm and st.t0 <= t and (st.t1 is None or t < st.t1):
                st.tokens += n
                break

    # ------------------------------------------------------------------ samples
    def _sample(self, smp: Sample) -> None:
        v = smp.values
        key = smp.src
        if smp.src == "server":
            url = text(v.get("url"))
            key = f"server {url}"
            arms = v.get("arms")
            srv = self.servers.get(url)
            if srv is None:
                srv = self.servers[url] = _Server(_arm_names(arms))
            served = srv.arms or tuple(self.arm_names)
            one = served[0] if len(served) == 1 else None
            if one is None and self.settings.assign == "switch" and self.arm in served:
                one = self.arm  # arms take turns on this server: the one in force
            cur = self.steps[-1] if self.steps and self.steps[-1].t1 is None else None
            self.split.server(smp.t, one, served, v, cur.step if cur is not None else -1)
            d = v.get("delta")
            if isinstance(d, list) and len(d) in (3, 5) and all(number(x) is not None for x in d):
                srv.deltas.append((smp.t, float(d[0]), float(d[1]), float(d[2])))
                if len(d) == 5 and d[3] > 0 and 0 <= d[4] <= d[3]:  # never a hit rate over 100%
                    srv.prefix.append((smp.t, float(d[3]), float(d[4])))
        elif smp.src == "net":
            url = text(v.get("url"))
            key = f"net {url}"
            net = self.net.get(url)
            if net is None:
                net = self.net[url] = _Net(_arm_names(v.get("arms")))
            for name, out in (("net_rtt_ms", net.rtt), ("net_connect_ms", net.connect)):
                x = number(v.get(name))
                if x is not None and 0 <= x < 3.6e6:
                    out.append(x)
        self.samples[key] = v
        if smp.src == "host":
            self.storage.sample(smp.t, v)
        power = number(v.get("gpu_power_w"))
        if smp.src == "gpu" and power is not None:
            self.power_t.append(smp.t)
            self.power_w.append(power)
            devices = v.get("gpu_devices")
            if self.settings.gpus is None and isinstance(devices, list) and devices:
                self.gpus = len(devices)
        if self.steps:  # GPU memory and KV cache per step (long inputs run memory out)
            self._note_probe(smp.t, v)

    def _note_probe(self, t: int, values: dict[str, Any]) -> None:
        for st in reversed(self.steps):
            if not (st.t0 <= t and (st.t1 is None or t < st.t1)):
                continue
            for key, attr in (("gpu_mem_pct", "gpu_mem_max"), ("kv_pct", "kv_max")):
                v = number(values.get(key))
                if v is not None:
                    cur = getattr(st, attr)
                    setattr(st, attr, v if cur is None else max(cur, v))
            break

    def probe_fields(self) -> dict[str, Any]:
        """The latest probe fields; the server's are those of the active arm's server."""
        out: dict[str, Any] = {}
        for key in ("host", "gpu"):
            out.update(self.samples.get(key, {}))
        srv = None
        for url, s in self.servers.items():
            if self.arm in s.arms or (srv is None and not s.arms):
                srv = self.samples.get(f"server {url}")
        if srv is not None:
            out.update(srv)
        elif not self.settings.server_metrics:
            out.update(SERVER_OFF)
        for url, n in self.net.items():
            if self.arm in n.arms or not n.arms:
                out.update(self.samples.get(f"net {url}", {}))
                break
        return out

    def network_summary(self) -> dict[str, Any]:
        """Per server: the round trips sampled during the run and the share of TTFT that
        the network alone explains (round trip p50 / TTFT p50 of the arms there)."""
        out: dict[str, Any] = {}
        for url, n in self.net.items():
            if not n.rtt and not n.connect:
                continue
            rtt = np.asarray(n.rtt, dtype=np.float64)
            d: dict[str, Any] = {
                "arms": list(n.arms),
                "samples": int(rtt.size),
                "rtt_ms": None
                if not rtt.size
                else {
                    "p50": float(np.median(rtt)),
                    "min": float(rtt.min()),
                    "max": float(rtt.max()),
                },
                "connect_ms_p50": float(np.median(n.connect)) if n.connect else None,
            }
            shares = {}
            for arm in n.arms or tuple(self.arm_names):
                tot = self.totals.get(arm)
                p50 = tot.ttft.median() if tot is not None else None
                if rtt.size and p50 is not None and p50 > 0:
                    shares[arm] = min(1.0, float(np.median(rtt)) / p50)
            d["ttft_share"] = shares
            out[url] = d
        return out

    # ------------------------------------------------------------------ events
    def _event(self, ev: Event) -> None:
        """An event's effect on the figures, then the event itself.

        Arm switches, ladder steps and their end, load levels and pauses change what the
        figures mean."""
        d = ev.data
        arm = d.get("arm")
        if ev.kind in REGIME_KINDS:
            self._new_regime(ev.t)
        if ev.kind == "arm":
            if isinstance(arm, str) and arm in self.arm_names and arm != self.arm:
                self._switch(arm, ev.t)
        elif ev.kind == "step" and isinstance(arm, str):
            param = str(d.get("param"))
            self._begin_step(
                integer(d.get("step")),
                arm,
                str(d.get("value")),
                ev.t,
                number(d.get("warm_s")) or 0.0,
                param,
            )
            level = number(d.get("value"))
            if param in ("concurrency", "rate") and level is not None:
                self.level = level
        elif ev.kind in ("search", "probe", "capacity") and isinstance(arm, str):
            self.capacity.event(ev.kind, arm, d)
        elif ev.kind == "ladder":
            reason = d.get("reason")
            if self.steps and self.steps[-1].t1 is None:
                self.steps[-1].t1 = ev.t
            if isinstance(reason, str) and reason:
                self.ladder_stopped = reason
        elif ev.kind == "level":
            level = number(d.get("level"))
            if level is not None:
                self.level = level
        elif ev.kind == "pause":
            self.paused = ev.message.startswith("paused")
            self._idle(ev.t, self.paused)
        elif ev.kind == "server":
            self._server_event(ev)
        elif ev.kind == "check" and isinstance(d.get("result"), dict):
            self.output_check = d["result"]  # type: ignore[assignment]
        elif ev.kind == "alert":
            self.alert_events.append(ev)
        if ev.kind not in UNLISTED_KINDS:
            self.event_log.append(ev)
        self.events.append(ev)
        mark = MARK_KINDS.get(ev.kind)
        if mark:
            self._pending_marks.append(mark)

    def _idle(self, t: int, begins: bool) -> None:
        """Nothing is sent from ``t`` (``begins``) or again from ``t``: the spans are
        left out of each arm's active time."""
        open_ = bool(self.idle) and self.idle[-1][1] is None
        if begins and not open_:
            self.idle.append([t, None])
        elif not begins and open_:
            self.idle[-1][1] = t

    def _server_event(self, ev: Event) -> None:
        """A managed server stopping, starting, ready or failed (tokmon restarts it as
        the arms take turns): the restart is idle time, and its figures are kept."""
        d = ev.data
        arm = d.get("arm")
        phase = d.get("phase")
        if not isinstance(arm, str) or not isinstance(phase, str):
            return
        if phase in ("stopping", "starting"):
            self._idle(ev.t, True)
            self.restarting = (arm, phase, ev.t)
        elif phase in ("ready", "failed"):
            self._idle(ev.t, False)
            self.restarting = None
        ms = self.managed.setdefault(arm, {"starts": 0, "ready_s": [], "stop_s": []})
        if phase == "ready":
            ms["starts"] += 1
            r = number(d.get("ready_s"))
            if r is not None and 0 <= r < 1e6:
                ms["ready_s"].append(round(r, 3))
            cmd = d.get("command")
            if isinstance(cmd, list):
                ms["command"] = [str(x) for x in cmd[:200]]
            env = ServerEnv.from_json(d.get("env"))
            if env is not None:
                ms["env"] = env.to_json(raw=False)
        elif phase == "stopped":
            r = number(d.get("stop_s"))
            if r is not None and 0 <= r < 1e6:
                ms["stop_s"].append(round(r, 3))
        elif phase == "failed":
            ms["failed"] = ms.get("failed", 0) + 1

    def _new_regime(self, t: int) -> None:
        """The user changed what runs: detectors and trends start again from here."""
        self.watch.new_regime(t / 1e9)
        self.alerts.new_regime(t / 1e9)
        self.regimes.append(t / 1e9)

    def _switch(self, new_arm: str, t: int) -> None:
        """End the current segment and start one for ``new_arm``."""
        cur = self.segments[-1]
        if t <= cur.t0 and cur.id == 0:
            # (the arm in force where a window of a run begins: no segment of the other
            # arm before it, which would count as a cycle of the A/B)
            cur.arm = new_arm
            self.arm = new_arm
            return
        cur.t1 = t
        self.segments.append(Segment(cur.id + 1, new_arm, t))
        # Complete A-B cycles: the fewest segments any arm has had (ABAB -> 2).
        self.alternations = min(
            sum(1 for sg in self.segments if sg.arm == a) for a in self.arm_names
        )
        self.arm = new_arm

    def next_segment(self) -> int:
        """The id the next arm switch gives its segment (the engines tag requests with it)."""
        return self.segments[-1].id + 1

    def _begin_step(
        self, step: int, arm: str, value: str, t: int, warm_s: float, param: str
    ) -> None:
        """A ladder step starts at ``t``; it is measured after ``warm_s``."""
        self.ladder_param = param
        if self.steps and self.steps[-1].t1 is None:
            self.steps[-1].t1 = t
        self.steps.append(StepTotals(step, arm, value, t + int(warm_s * 1e9)))

    # ------------------------------------------------------------------ the tick
    def _trim(self, now: int) -> list[RequestTable]:
        """The window's requests at ``now`` (those that ended in the last ``window_s``)."""
        lim = now - int(self.settings.window_s * 1e9)
        w = self.window
        while w and int(w[0].cols["t_end"].max()) < lim:
            w.popleft()
        self.tokens.trim(now)
        return list(w)

    def _tick(self, now: int, final: bool, out: list[Event], quick: bool = False) -> None:
        """Window figures, one history point, alerts and a new snapshot."""
        s = self.settings
        self.t_last = now
        parts = self._trim(now)
        lim = now - int(s.window_s * 1e9)
        win_tb = (
            RequestTable.concat(parts, self.vocab, free=False)
            if parts
            else RequestTable.empty(self.vocab)
        )
        rows = np.flatnonzero(win_tb.cols["t_end"] >= lim)
        width = min(s.window_s, max(now / 1e9, 1e-3))
        # Token buckets still being filled by the engine are left out: the window ends at
        # the last bucket that is surely complete.
        t1 = now - 150_000_000
        # (the engines align buckets on their own clock: the last complete one is found on
        # their grid, where the buckets that arrived say it lies on the run's clock)
        t1 -= (t1 - (self.arm_tokens.origin or 0)) % self.tokens.bucket_ns
        tok = self.tokens.tokens(t1 - int(width * 1e9), t1)
        win = window_stats(win_tb, rows, sum(tok.values()), now, width, "", self.slo)
        arm_col = win_tb.cols["arm"][rows]
        arm_views = []
        for name in self.arm_names:
            sel = rows[arm_col == win_tb.code("arm", name)]
            aw = window_stats(win_tb, sel, tok.get(name, 0), now, width, name, self.slo)
            t = self.totals[name]
            arm_views.append(ArmView(name, t.ok, t.failed, aw))
        probes = self.probe_fields()
        acc_rate = number(probes.get("spec_acceptance_rate"))
        acc_len = number(probes.get("spec_acceptance_length"))
        if acc_rate is not None or acc_len is not None:
            win = replace(
                win,
                acceptance_rate=acc_rate,
                acceptance_length=acc_len,
                acceptance_source=text(probes.get("spec_source"), "server counters"),
            )
        # events derived at a tick are folded after its snapshot: the recording holds them
        # after the tick, and a replay must draw the tick as the live run drew it
        later: list[tuple[str, str, dict[str, Any]]] = []
        # requests the client cancelled (at a stop, or an overloaded probe's backlog
        # aborted) are no burst of the server's errors
        bad = win.failed - win.errors.get("cancelled", 0)
        if (
            self.derive
            and bad >= 5
            and bad >= 0.1 * win.ended
            and now - self._last_burst >= 30_000_000_000
        ):
            self._last_burst = now
            errs = {k: v for k, v in win.errors.items() if k != "cancelled"}
            classes = ", ".join(f"{k} {v}" for k, v in sorted(errs.items()))
            later.append(
                (
                    "errors",
                    f"error burst: {bad} of {win.ended} requests failed "
                    f"in the last {width:.0f} s ({classes})",
                    {"errors": errs},
                )
            )
        for msg, data in self.storage.take_warnings():  # the disk about to fill: once
            if self.derive:
                later.append(("disk", msg, data))
        qd = self.quality.diff(*self.arm_names[:2]) if len(self.arm_names) >= 2 else None
        # an arm whose answers are worse beyond the interval: once, as an alert
        if self.derive and not self._quality_alerted and qd is not None and qd.verdict == "worse":
            self._quality_alerted = True
            later.append(("alert", f"quality: {qd.text()}",
                          {"alert": "quality", "metric": "accuracy", "arm": qd.other,
                           "diff": round(qd.diff, 4), "ci95": [round(qd.lo, 4), round(qd.hi, 4)]}))  # fmt: skip
        n_failed = sum(t.failed for t in self.totals.values())
        new_err = n_failed - self._last_errors
        self._last_errors = n_failed
        marks = tuple(dict.fromkeys(self._pending_marks))
        self._pending_marks.clear()
        stat = list(self.statuses.values())
        lag = max((x.send_lag_ms for x in stat), default=0.0)
        point = Point(
            t=now / 1e9,
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
            gpu_util=number(probes.get("gpu_util")),
            gpu_mem_pct=number(probes.get("gpu_mem_pct")),
            kv_pct=number(probes.get("kv_pct")),
            queue=number(probes.get("queue")),
            send_lag=lag,
            marks=marks,
            arm_tok_s=tuple((v.name, v.window.tokens_per_s) for v in arm_views if v.window),
        )
        self.history.add(point)
        if (now >= self._next_compare or final) and len(self.arm_names) >= 2 and not quick:
            self._compare(now)
        warming = s.warmup and self.t_measure is None
        for arm, cp, basis in self.watch.close(now / 1e9):
            self.change_points.append((arm, cp))
            if self.derive:
                later.append(_change_alert(arm, cp, basis))
        if not warming:  # the ramp of a warm-up is not a change of the server
            rss = number(probes.get("self_rss_mib"))
            if quick:  # (a seek checks once, at its end: the checks read the whole run)
                self.alerts.note(point, rss)
            else:
                alerts = self.alerts.add(point, rss)
                if self.derive:
                    later += alerts
        costs: dict[str, ArmCost] = {}
        # Cost per arm from its whole run so far (tokens over its own active time, power
        # over its own spans), as the summary computes it: a window would price the arm
        # that is not running from the tail of its last turn. "—" before 5 s of it.
        own = self.own_time(now)
        for v in arm_views:
            toks, secs = own.get(v.name, (0.0, 0.0))
            tps = toks / secs if secs >= 5 else None
            c = cost_figures(
                tps,
                gpu_hour_price=s.gpu_hour_price,
                gpus=self.gpus,
                power_w=self.mean_power(v.name, now) if tps is not None else None,
            )
            tot = self.totals.get(v.name)
            kinds = (
                kind_cost_figures(c, tot.kinds) if tot is not None and len(tot.kinds) > 1 else {}
            )
            costs[v.name] = ArmCost(c, tuple(kinds.items()))
        self.snapshot = Snapshot(
            t=now,
            elapsed_s=now / 1e9,
            # the server of the arm in force (arms side by side: the run's target)
            target=s.server_of(self.arm) if s.assign == "switch" else s.target,
            model=s.model,
            arm=self.arm if s.assign == "switch" else s.assign,
            arms=tuple(self.arm_names),
            mode=s.mode,
            level=self.level,
            paused=self.paused,
            sent=sum(x.sent for x in stat),
            ok=sum(t.ok for t in self.totals.values()),
            failed=n_failed,
            in_flight=sum(x.in_flight for x in stat),
            warming_up=warming,
            recording=None,
            window=win,
            arm_views=tuple(arm_views),
            recent=tuple(self.history.recent),
            whole=tuple(self.history.whole_view()),
            wall_start=s.wall_start,
            events=tuple(self.events),
            comparison=self._comparison_view(),
            probes=ProbeView.of(probes),
            done=final,
            loop_lag_ms=max((x.loop_lag_ms for x in stat), default=0.0),
            send_lag_ms=lag,
            insecure=s.insecure,
            output_check=self.output_check,
            down={a: (now - t) / 1e9 for a, t in self.down_since.items()},
            trends=dict(self.alerts.trends),
            ladder=self._ladder_view(now) if self.steps else None,
            workers=tuple(self.statuses[w] for w in sorted(self.statuses)),
            restarting=None
            if self.restarting is None
            else RestartView(
                self.restarting[0], self.restarting[1], (now - self.restarting[2]) / 1e9
            ),
            costs=costs,
            price=None if s.gpu_hour_price is None else Price(s.gpu_hour_price, self.gpus),
            time_split=self._time_split_view(now, final),
            capacity=self.capacity.views(),
            crossovers=self.crossovers,
            scenario=s.scenario,
            causes=self.causes,
            causes_by_kind=self.causes_by_kind,
            quality=self.quality.views(),
            quality_diff=qd,
            storage=self.storage.view(),
        )
        for kind, msg, data in later:
            self._derived(out, kind, msg, data, now)

    def _time_split_view(self, now: int, final: bool) -> tuple[TimeSplit, ...]:
        # every 2 s of the run's clock (medians over the whole run), so a replay, ticking
        # at the same times, shows the same split
        if final or now >= self._split_next:
            self._split_next = now + SPLIT_EVERY_NS
            self._split_view = self.time_split()
        return self._split_view

    def _ladder_view(self, now: int) -> LadderView:
        cur = self.steps[-1]
        figs = [st.figures(now) for st in self.steps if st.t1 is not None]
        arms = list(dict.fromkeys(f.arm for f in figs))
        return LadderView(
            param=self.ladder_param,
            step=cur.step,
            value=cur.value,
            arm=cur.arm,
            running=cur.t1 is None,
            since_s=(now - cur.t0) / 1e9,
            done=tuple(figs),
            knee=tuple((a, knee([f for f in figs if f.arm == a])) for a in arms),
            stopped=self.ladder_stopped,
        )

    # ------------------------------------------------------------------ the summary
    def mean_power(self, arm: str, t_end: int) -> float | None:
        """Mean GPU power while ``arm`` was active (after the warm-up). Asked every tick:
        O(samples) in numpy, not samples × segments in Python (a day has 86,400 of one
        and 5,760 of the other)."""
        t0 = self.t_measure if self.t_measure is not None else 0
        segs = [sg for sg in self.segments if sg.arm == arm or self.settings.assign != "switch"]
        if not segs or not len(self.power_t):
            return None
        t, w = self.power_t.values, self.power_w.values
        starts = np.array([sg.t0 for sg in segs], dtype=np.int64)
        ends = np.array([sg.t1 if sg.t1 is not None else t_end for sg in segs], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        j = np.searchsorted(starts, t, side="right") - 1  # the last span begun by t
        inside = (j >= 0) & (t >= t0) & (t < ends[np.maximum(j, 0)])
        return float(w[inside].mean()) if inside.any() else None

    def server_spec(self) -> dict[str, dict[str, Any]]:
        """Acceptance per arm from its server's counters over the measured part of the run."""
        out: dict[str, dict[str, Any]] = {}
        for arm in self.arm_names:
            for srv in self.servers.values():
                if arm not in srv.arms:
                    continue
                if len(srv.arms) == 1:
                    tot = spec_totals(srv.deltas, t0=self.t_measure)
                    hits = prefix_hit_rate(srv.prefix, t0=self.t_measure)
                elif self.settings.assign != "switch":
                    # two arms at once on one server: counters cannot tell them apart
                    tot = hits = None
                else:
                    tm = self.t_measure
                    segs = [
                        (max(sg.t0, tm or sg.t0), sg.t1) for sg in self.segments if sg.arm == arm
                    ]
                    tot = spec_totals(srv.deltas, segments=segs)
                    hits = prefix_hit_rate(srv.prefix, segments=segs)
                if tot is not None or hits is not None:
                    out[arm] = (tot or {}) | {"prefix_cache_hit_rate": hits}
        return out

    def ladder_summary(self, t_end: int) -> dict[str, Any] | None:
        if not self.steps:
            return None
        s = self.settings
        figs = [st.figures(t_end) for st in self.steps]
        steps = [asdict(f) for f in figs]
        if s.gpu_hour_price is not None:
            for d in steps:  # what a million tokens costs at each step's throughput
                d["cost_per_million_tokens"] = cost_figures(
                    d["tokens_per_s"], gpu_hour_price=s.gpu_hour_price, gpus=self.gpus, power_w=None
                ).cost_per_mtok
        arms = list(dict.fromkeys(f.arm for f in figs))
        for d, st in zip(steps, self.steps, strict=True):  # each step's time: the knee's cause
            sp = self.split.view(st.arm, self.rtt_ms(st.arm), st.ttft, st.tpot, st.step)
            d["time_split"] = sp.to_json()
        out: dict[str, Any] = {
            "param": self.ladder_param,
            "steps": steps,
            "knee": {a: knee_json(knee([f for f in figs if f.arm == a])) for a in arms},
            "stopped_early": self.ladder_stopped,
        }
        if len(arms) >= 2:
            speedup = []
            by = {(st.step, st.arm): st for st in self.steps}
            for step in sorted({st.step for st in self.steps}):
                a, b = by.get((step, arms[0])), by.get((step, arms[1]))
                if a is None or b is None:
                    continue
                r = ratio_ci_requests(a.decode, b.decode)
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
            out["crossover"] = [c.to_json() for c in self._crossovers()]
        return out

    def own_time(self, t: int) -> dict[str, tuple[float, float]]:
        """Per arm, up to ``t``: the tokens that arrived in its own spans and their
        seconds (warm-up, other arms' segments, drains, restarts and pauses left out of
        both): the whole-run tokens/s of an arm is one over the other."""
        spans = active_spans(
            [(sg.id, sg.arm, sg.t0, sg.t1) for sg in self.segments],
            t,
            self.t_measure,
            self.settings.assign != "switch",
            self.arm_names,
            self.t0,
            [(a, b) for a, b in self.idle],
        )
        return {a: (self.arm_tokens.within(a, sp), seconds(sp)) for a, sp in spans.items()}

    def summary(self, t_end: int) -> dict[str, Any]:
        """The run summary (the ``--summary-json`` object) at ``t_end``."""
        s = self.settings
        own = self.own_time(t_end)
        out = build_summary(
            started_at=s.started_at,
            duration_s=t_end / 1e9,
            target={"url": s.target, "model": s.model, "endpoint": s.endpoint},
            totals=self.totals,
            active_s={a: secs for a, (_, secs) in own.items()},
            active_tokens={a: toks for a, (toks, _) in own.items()},
            streams=self.level if s.mode == "concurrency" and not self.steps else None,
            alternations=self.alternations,
            server_spec=self.server_spec(),
            slo_good=self.slo.any,
            kind_weights=dict(s.kind_weights) if s.kind_weights else None,
        )
        for name, a in out["arms"].items():
            a["server"] = s.server_of(name)
        if s.scenario:
            out["scenario"] = {"name": s.scenario, "headline": s.scenario_headline}
        lad = self.ladder_summary(t_end)
        if lad is not None:
            out["ladder"] = lad
        for name, a in out["arms"].items():
            # With two arms on separate servers, both share what the GPU probe sees; with
            # one arm at a time, the power of each arm's own segments.
            pw = self.mean_power(name, t_end)
            c = cost_figures(
                a["output_tokens_per_s"],
                gpu_hour_price=s.gpu_hour_price,
                gpus=self.gpus,
                power_w=pw,
            )
            a["mean_gpu_power_w"] = None if pw is None else round(pw, 3)
            a["cost_per_million_tokens"] = c.cost_per_mtok
            a["joules_per_token"] = c.joules_per_token
            a["tokens_per_joule"] = c.tokens_per_joule
            if a.get("by_kind"):
                kc = kind_cost_figures(c, self.totals[name].kinds)
                for k, v in a["by_kind"].items():
                    kk = kc.get(k, Cost())
                    v["cost_per_million_tokens"] = kk.cost_per_mtok
                    v["joules_per_token"] = kk.joules_per_token
        if self.output_check is not None:
            out["output_check"] = self.output_check
        out["storage"] = self.storage.to_json()
        out["alerts"] = alerts_from_events(self.alert_events, 0)
        out["events"] = listed_events(self.event_log)
        if s.environment:
            out["environment"] = {e.url: e.to_json(raw=False) for e in s.environment}
        net = self.network_summary()
        if net:
            out["network"] = net
        for sp in self.time_split():
            if sp.arm in out["arms"]:
                out["arms"][sp.arm]["time_split"] = sp.to_json()
                bk = out["arms"][sp.arm].get("by_kind") or {}
                for k, ksp in self.time_split_by_kind(sp.arm).items():
                    if k in bk:
                        bk[k]["time_split"] = ksp.to_json()
        if self.quality.counts:
            out["quality"] = self.quality.to_json(list(self.arm_names))
        if self.capacity.searches:
            out["capacity_search"] = capacity_summary(
                self.capacity.to_json(), (out.get("ladder") or {}).get("steps") or []
            )
        cmp = out.get("comparison")
        for pair in cmp if isinstance(cmp, list) else [cmp] if isinstance(cmp, dict) else []:
            # each pair's decode speed-up as its causes (tokens per step × step speed)
            causes = self.split.causes(str(pair.get("baseline")), str(pair.get("other")))
            pair["causes"] = None if causes is None else causes.to_json()
            for why in self.split.causes_by_kind(str(pair.get("baseline")), str(pair.get("other"))):
                if why.kind in (pair.get("by_kind") or {}):
                    pair["by_kind"][why.kind]["causes"] = why.to_json()
        if self.managed:
            out["managed_servers"] = {a: dict(m) for a, m in self.managed.items()}
        return out
