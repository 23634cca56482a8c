"""The one fold: facts in, the figures the dashboard draws and the summary reports out.

A live session, a replay and a report all hand ``Fold.apply`` the same typed facts
(``tokmon.model.data.facts``) in the same order, and nothing else derives figures; a recording
stores exactly those facts, so a replay is the live run again and a report says what the
live summary said.

Live, the fold also *derives* events from the figures (a stall, a server down and back,
an error burst, an alert) and returns them to be recorded; a replay or a report takes
them from the recording instead (``derive=False``), so they are never raised twice.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

import tokmon.model.folding.judgments  # noqa: F401  (registers every judgment)
from tokmon.model.contract.eventlog import REGIME_KINDS, EventLog, listed_events
from tokmon.model.contract.history import History, Point
from tokmon.model.contract.registry import Context, Judgments
from tokmon.model.contract.views import Price, RestartView
from tokmon.model.data.events import (
    ArmSwitch,
    LadderEnds,
    LevelSet,
    OutputCheck,
    Pause,
    SearchNews,
    ServerNews,
    StepBegins,
    meaning,
)
from tokmon.model.data.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.data.records import EngineStatus, Event
from tokmon.model.data.samples import ServerSample
from tokmon.model.data.samples import read as read_sample
from tokmon.model.data.table import RequestTable, distinct
from tokmon.model.env.environment import ServerEnv
from tokmon.model.folding.derived import Derivations, Raised, change_alert
from tokmon.model.folding.snapshot import ArmView, Snapshot
from tokmon.model.judge.ab_live import LiveComparison
from tokmon.model.judge.active import ArmTokens, Segment, Turns
from tokmon.model.judge.alerts import AlertEngine
from tokmon.model.judge.capacity import CapacityReducer, capacity_summary
from tokmon.model.judge.changepoint import ChangePoint, StepWatch
from tokmon.model.judge.costs import Costs
from tokmon.model.judge.managed import ManagedServers
from tokmon.model.judge.probe_state import ProbeState
from tokmon.model.judge.quality import QualityReducer
from tokmon.model.judge.slo import slo_verdict
from tokmon.model.judge.steps import Steps
from tokmon.model.judge.summary import alerts_from_events, build_summary, slo_counted
from tokmon.model.judge.timesplit import TimeSplitReducer
from tokmon.model.statistics.stats import ArmTotals, Slo, TokenWindow, window_stats
from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S
from tokmon.model.workloads.structured import GUIDED, GUIDED_FREE


class Pace(Enum):
    """What a tick does: the one entry point's modes (``Fold.tick``)."""

    DRAW = "draw"  # live: window figures, a history point, alerts, a new snapshot
    FINAL = "final"  # the run's last tick
    # a report's tick, or one a replay's seek passes over: the window moves on (a report
    # streamed from a file holds no more requests than the live run did) and the step
    # detector's seconds close as they did live; nothing is drawn
    CLOSE = "close"
    # a tick drawn while a replay seeks: all but the whole-run A/B comparison (a
    # bootstrap over every request), which SETTLE makes once, at the end
    SEEK = "seek"
    SETTLE = "settle"  # after a seek: the comparison and the trends at its last tick


@dataclass(frozen=True)
class FoldSettings:
    """What the figures depend on besides the facts: written in a recording's header
    (``fold``), so that a replay and a report fold with the live run's settings."""

    arms: tuple[str, ...]
    window_s: float = WINDOW_S
    slo: Slo = field(default_factory=Slo)
    assign: str = "switch"
    mode: str = "concurrency"
    level: float = 0.0
    warmup: bool = False
    # the task mix the workload was built with: the A/B ratio's stratum weights
    kind_weights: tuple[tuple[str, float], ...] | None = None
    gpu_hour_price: float | None = None
    gpus: int | None = None  # None: as many as the GPU probe sees
    drift_alert_pct_h: float = DRIFT_ALERT_PCT_H
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
    if GUIDED in out:  # (half its requests are the control, without the schema)
        out[GUIDED] = out[GUIDED_FREE] = out[GUIDED] / 2
    return tuple(out.items()) if len(out) > 1 else None


class Fold:
    """The reducers that own the run's state, fed the same facts, and the two
    projectors: the snapshot (each tick) and the summary. A new capability is a new
    reducer fed here and placed by a projector, not new state on this class."""

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
        # the string codes every Requests table of this fold uses (a live session builds
        # its batches with it; a replay's batches are slices of one table)
        self.vocab: dict[str, list[Any]] = vocab if vocab is not None else {}
        self.arm_names = list(s.arms)
        self.level = s.level
        self.paused = False
        self.slo = s.slo
        self.t0 = t0
        self.t_measure: int | None = None  # the first counted request's send (after warm-up)
        self.t_last = 0
        # the reducers, each owning its piece of the run
        self.totals = {n: ArmTotals(n) for n in self.arm_names}  # whole-run figures per arm
        self.window: deque[RequestTable] = deque()  # the last window_s of requests
        self.tokens = TokenWindow()
        self.arm_tokens = ArmTokens()  # the whole run's, counted against each arm's spans
        self.turns = Turns(self.arm_names, t0, s.assign != "switch")
        self.history = History()
        self.log = EventLog()
        self.derived = Derivations(derive)
        self.statuses: dict[int, EngineStatus] = {}
        self.probes = ProbeState(self.arm_names, s.gpus, s.server_metrics)
        self.managed = ManagedServers()
        self.ladder = Steps()
        self.alerts = AlertEngine(drift_alert_pct_h=s.drift_alert_pct_h, window_s=s.window_s)
        # step changes, on the requests themselves, within the regime the user set
        self.watch = StepWatch()
        self.split = TimeSplitReducer()  # where each arm's time goes
        self.quality = QualityReducer()  # quality probes' answers, per arm and task
        self.capacity = CapacityReducer()  # --find-capacity: each arm's search
        # each arm's cost and energy per token, from the reducers that hold its parts
        self.costs = Costs(s.gpu_hour_price, self.probes, self.turns, self.arm_tokens, self.totals)
        # the registered judgments (``model/contract/registry.py``), each its own piece of the run
        self.judgments = Judgments(Context(settings, tuple(self.arm_names)))
        self.output_check: dict[str, Any] | None = None
        self.watch.new_regime(0.0)
        self.regimes: list[float] = [0.0]  # when each regime began (s)
        self.change_points: list[tuple[str, ChangePoint]] = []  # (arm, change), all found
        # what the projectors keep between ticks
        self.ab = LiveComparison(
            self.arm_names, dict(settings.kind_weights) if settings.kind_weights else None
        )
        self._last_errors = 0
        self.snapshot: Snapshot | None = None

    # what the live session, its conductor and the tests read of the reducers
    @property
    def arm(self) -> str:
        return self.turns.arm

    @property
    def segments(self) -> list[Segment]:
        return self.turns.segments

    @property
    def events(self) -> deque[Event]:
        return self.log.recent

    @property
    def stalls_total(self) -> int:
        return self.derived.stalls_total

    @property
    def down_since(self) -> dict[str, int]:
        return self.derived.down_since

    # ------------------------------------------------------------------ the fold
    def apply(self, fact: Fact) -> list[Event]:
        """Fold one fact in; returns the events it derived (live only), already folded."""
        out: list[Event] = []
        if isinstance(fact, Requests):
            if fact.table.n:
                self.arrive(fact.table)
                self.count(fact.table, out)
        elif isinstance(fact, Tokens):
            for b in fact.buckets:
                self._tokens(b.t, b.arm, b.tokens)
        elif isinstance(fact, Event):
            self._event(fact)
        elif isinstance(fact, Sample):
            self._sample(fact)
        elif isinstance(fact, Status):
            self.statuses[fact.status.worker] = fact.status
            self.judgments.feed(lambda j: j.status(fact.status))
        elif isinstance(fact, Tick):
            out = self.tick(fact.t, Pace.FINAL if fact.final else Pace.DRAW)
        return out

    def tick(self, t: int, pace: Pace = Pace.DRAW) -> list[Event]:
        """The one tick entry point (see ``Pace``); returns the events derived (live)."""
        out: list[Event] = []
        if pace is Pace.CLOSE:
            self.t_last = t
            self._trim(t)
            for arm, cp, _ in self.watch.close(t / 1e9):
                self.change_points.append((arm, cp))
        elif pace is Pace.SETTLE:
            if self.snapshot is None:
                return out
            self.ab.update(t, True, self.totals, self.turns, self.split, self.ladder)
            if not self.snapshot.warming_up:
                self.alerts.check()
            self.snapshot = replace(
                self.snapshot, comparison=self.ab.view(), trends=dict(self.alerts.trends)
            )
        else:
            self._tick(t, pace is Pace.FINAL, out, quick=pace is Pace.SEEK)
        return out

    def _raise(self, out: list[Event], t: int, raised: Raised) -> None:
        """An event derived live: folded at once, and returned to be recorded."""
        kind, msg, data = raised
        ev = Event(t=t, kind=kind, message=msg, data=data, wall=self.settings.wall_start + t / 1e9)
        self._event(ev)
        out.append(ev)

    # ------------------------------------------------------------------ requests
    def arrive(self, tb: RequestTable) -> None:
        """What depends on where a batch falls among the ticks and token buckets: the step
        detector leaves out a value whose second it already judged, and a token bucket is
        watched once the first counted request began. A report calls this for every batch
        in its place, and ``count`` for the requests of a stretch at once (the figures do
        not depend on how requests are batched: the live run's batches are not the
        file's); a live run calls both for each batch."""
        if tb.n == 0:
            return
        c = tb.cols
        counted = np.flatnonzero(tb.counted())
        if counted.size == 0:
            return
        t0 = int(c["t_sched"][counted].min())
        if self.t_measure is None or t0 < self.t_measure:
            self.t_measure = t0
        ok = counted[c["outcome"][counted] == tb.code("outcome", "ok")]
        if ok.size:
            arm_ok = c["arm"][ok]
            for code in distinct(arm_ok):
                sel = ok[arm_ok == code]
                self.watch.requests(
                    tb.vocab["arm"][code],
                    c["t_end"][sel] / 1e9,
                    c["decode_tps"][sel],
                    c["ttft_ms"][sel],
                )

    def count(self, tb: RequestTable, out: list[Event] | None = None) -> None:
        """The batch in every figure that does not depend on where it fell (``arrive``)."""
        if tb.n == 0:
            return
        out = [] if out is None else out
        c = tb.cols
        rows = np.arange(tb.n)
        arms = c["arm"]
        for code in distinct(arms):
            name = tb.vocab["arm"][code]
            tot = self.totals.get(name)
            if tot is None:
                tot = self.totals[name] = ArmTotals(name)
            tot.add(tb, rows[arms == code], self.slo)
        counted = np.flatnonzero(tb.counted())
        ok = counted[c["outcome"][counted] == tb.code("outcome", "ok")]
        self.split.requests(tb, ok)
        self.quality.requests(tb)
        self.judgments.feed(lambda j: j.requests(tb))
        if counted.size:
            self.ladder.requests(tb, counted, self.slo)
        if c["stalls"].any():
            self.log.mark("stall")
        for t, raised in self.derived.requests(tb):
            self._raise(out, t, raised)
        self.window.append(tb)

    def _tokens(self, t: int, arm: str, n: int) -> None:
        self.tokens.add(t, arm, n)
        self.arm_tokens.add(t, arm, n)
        if self.t_measure is not None or not self.settings.warmup:
            self.watch.token_bucket(arm, t / 1e9, n)
        self.ladder.tokens(t, arm, n)

    # ------------------------------------------------------------------ samples
    def _sample(self, smp: Sample) -> None:
        r = read_sample(smp.src, smp.values)  # typed and checked, here where it is read
        if r is None:
            return
        served = self.probes.sample(smp.t, r)
        if served is not None and isinstance(r, ServerSample):
            one = served[0] if len(served) == 1 else None
            if one is None and self.settings.assign == "switch" and self.arm in served:
                one = self.arm  # arms take turns on this server: the one in force
            self.split.server(smp.t, one, served, r, self.ladder.current())
        self.ladder.sample(smp.t, r)
        self.judgments.feed(lambda j: j.sample(smp.t, r))

    # ------------------------------------------------------------------ events
    def _event(self, ev: Event) -> None:
        """An event's effect on the figures (its typed meaning: ``model/data/events.py``),
        then the event itself. Arm switches, ladder steps and their end, load levels and
        pauses change what the figures mean."""
        if ev.kind in REGIME_KINDS:
            # the user changed what runs: detectors and trends start again from here
            self.watch.new_regime(ev.t / 1e9)
            self.alerts.new_regime(ev.t / 1e9)
            self.regimes.append(ev.t / 1e9)
        match meaning(ev):
            case ArmSwitch(arm=arm) if arm in self.arm_names and arm != self.arm:
                self.turns.switch(arm, ev.t)
            case StepBegins() as st:
                self.ladder.begin(st.step, st.arm, st.value, ev.t, st.warm_s, st.param)
                if st.level is not None:
                    self.level = st.level
            case SearchNews(kind=kind, arm=arm, data=data):
                self.capacity.event(kind, arm, data)
            case LadderEnds(reason=reason):
                self.ladder.end(ev.t, reason)
            case LevelSet(level=level):
                self.level = level
            case Pause(paused=paused):
                self.paused = paused
                self.turns.pause(ev.t, paused)
            case ServerNews():
                # a managed server restarting as the arms take turns: idle time
                idle = self.managed.event(ev)
                if idle is not None:
                    self.turns.pause(ev.t, idle)
            case OutputCheck(result=result):
                self.output_check = result
        self.log.add(ev)
        self.judgments.feed(lambda j: j.event(ev))
        if self.snapshot is not None and self.snapshot.done:
            # after the run's last tick no tick follows to show an event: an alert that
            # tick derived (a quality verdict reached on the last requests) is shown in
            # the last snapshot, live and in a replay alike (both fold it here)
            self.snapshot = replace(self.snapshot, events=tuple(self.log.recent))

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
        """The snapshot's projector: window figures, one history point, alerts and a new
        snapshot."""
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
        probes = self.probes.reading(self.arm)
        srv = probes.server
        if srv.acceptance_rate is not None or srv.acceptance_length is not None:
            win = replace(
                win,
                acceptance_rate=srv.acceptance_rate,
                acceptance_length=srv.acceptance_length,
                acceptance_source=srv.spec_source or "server counters",
            )
        # events derived at a tick are folded after its snapshot: the recording holds them
        # after the tick, and a replay must draw the tick as the live run drew it
        later = self.derived.burst(now, win, width)
        # what the registered judgments raise (the disk about to fill: once)
        later += self.derived.live(self.judgments.derive(now))
        qd = self.quality.diff(*self.arm_names[:2]) if len(self.arm_names) >= 2 else None
        later += self.derived.quality(qd)
        n_failed = sum(t.failed for t in self.totals.values())
        new_err = n_failed - self._last_errors
        self._last_errors = n_failed
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
            gpu_util=probes.gpu.util,
            gpu_mem_pct=probes.gpu.mem_pct,
            kv_pct=srv.kv_pct,
            queue=srv.queue,
            send_lag=lag,
            marks=self.log.take_marks(),
            arm_tok_s=tuple((v.name, v.window.tokens_per_s) for v in arm_views if v.window),
        )
        self.history.add(point)
        if not quick:
            self.ab.update(now, final, self.totals, self.turns, self.split, self.ladder)
        warming = s.warmup and self.t_measure is None
        for arm, cp, basis in self.watch.close(now / 1e9):
            self.change_points.append((arm, cp))
            later += self.derived.live([change_alert(arm, cp, basis)])
        if not warming:  # the ramp of a warm-up is not a change of the server
            rss = probes.host.self_rss_mib
            if quick:  # (a seek checks once, at its end: the checks read the whole run)
                self.alerts.note(point, rss)
            else:
                later += self.derived.live(self.alerts.add(point, rss))
        costs = self.costs.views(now, self.t_measure, self.arm_names)
        restarting = self.managed.restarting
        self.snapshot = Snapshot(
            t=now,
            elapsed_s=now / 1e9,
            # the server of the arm in force (arms side by side: the run's target)
            target=self.server_of(self.arm) if s.assign == "switch" else s.target,
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
            events=tuple(self.log.recent),
            comparison=self.ab.view(),
            probes=probes.view(),
            done=final,
            loop_lag_ms=max((x.loop_lag_ms for x in stat), default=0.0),
            send_lag_ms=lag,
            insecure=s.insecure,
            output_check=self.output_check,
            down={a: (now - t) / 1e9 for a, t in self.derived.down_since.items()},
            trends=dict(self.alerts.trends),
            ladder=self.ladder.view(now),
            workers=tuple(self.statuses[w] for w in sorted(self.statuses)),
            restarting=None
            if restarting is None
            else RestartView(restarting[0], restarting[1], (now - restarting[2]) / 1e9),
            costs=costs,
            price=None if s.gpu_hour_price is None else Price(s.gpu_hour_price, self.probes.gpus),
            time_split=self.split.shown(
                now, final, self.arm_names, self.totals, self.probes.rtt_ms
            ),
            capacity=self.capacity.views(self.ladder.running()),
            crossovers=self.ab.crossovers,
            scenario=s.scenario,
            causes=self.ab.causes,
            causes_by_kind=self.ab.causes_by_kind,
            quality=self.quality.views(),
            quality_diff=qd,
            slo=tuple(
                slo_verdict(n, t.good, slo_counted(t), self.slo) for n, t in self.totals.items()
            )
            if self.slo.any
            else (),
            judgments=self.judgments.views(now),
        )
        for raised in later:
            self._raise(out, now, raised)

    def server_of(self, arm: str) -> str:
        """The arm's server: its URL, or its managed command as run (the port filled in
        once it started: the settings hold the command as given, ``--port {port}``)."""
        return self.managed.shown(arm) or self.settings.server_of(arm)

    # ------------------------------------------------------------------ the summary
    def server_spec(self) -> dict[str, dict[str, Any]]:
        """Acceptance per arm from its server's counters over the measured part of the run."""
        return self.probes.server_spec(self.turns.segments, self.t_measure, self.turns.concurrent)

    def summary(self, t_end: int) -> dict[str, Any]:
        """The summary's projector: the run summary (the ``--summary-json`` object) at
        ``t_end``."""
        s = self.settings
        own = self.costs.own_time(t_end, self.t_measure)
        out = build_summary(
            started_at=s.started_at,
            duration_s=t_end / 1e9,
            target={"url": s.target, "model": s.model, "endpoint": s.endpoint},
            totals=self.totals,
            active_s={a: secs for a, (_, secs) in own.items()},
            active_tokens={a: toks for a, (toks, _) in own.items()},
            streams=self.level if s.mode == "concurrency" and not self.ladder.steps else None,
            alternations=self.turns.alternations,
            server_spec=self.server_spec(),
            slo=self.slo if self.slo.any else None,
            kind_weights=dict(s.kind_weights) if s.kind_weights else None,
        )
        for name, a in out["arms"].items():
            a["server"] = self.server_of(name)
        if s.scenario:
            out["scenario"] = {"name": s.scenario, "headline": s.scenario_headline}
        names = self.arm_names
        lad = self.ladder.summary(
            t_end,
            s.gpu_hour_price,
            self.probes.gpus,
            lambda st: self.split.view(
                st.arm, self.probes.rtt_ms(st.arm), st.ttft, st.tpot, st.step
            ).to_json(),
            (names[0], names[1]) if len(names) >= 2 else None,
            dict(s.kind_weights) if s.kind_weights else None,
        )
        if lad is not None:
            out["ladder"] = lad
        self.costs.summarise(out["arms"], t_end, self.t_measure)
        if self.output_check is not None:
            out["output_check"] = self.output_check
        for name, block in self.judgments.blocks(t_end).items():
            out[name] = block.to_json()  # each registered judgment's part, under its name
        out["alerts"] = alerts_from_events(self.log.alerts, 0)
        out["events"] = listed_events(self.log.listed)
        if s.environment:
            out["environment"] = {e.url: e.to_json(raw=False) for e in s.environment}
        net = self.probes.network_summary(self.totals)
        if net:
            out["network"] = net
        self.split.summarise(out, self.arm_names, self.totals, self.probes.rtt_ms)
        if self.quality.counts or self.quality.unjudged:
            out["quality"] = self.quality.to_json(list(self.arm_names))
        if self.capacity.searches:
            out["capacity_search"] = capacity_summary(
                self.capacity.to_json(), (out.get("ladder") or {}).get("steps") or []
            )
        if self.managed.servers:
            out["managed_servers"] = self.managed.to_json()
        return out
