"""A live session: has the fleet start the engines (``sources/fleet.py``) and the
conductor run the schedule (``sources/conductor.py``), starts the probes, turns what
they send into facts, folds each fact and writes it to the recording in one step (so the
file holds the facts in the order the fold took them), takes the user's typed commands,
and hands out frozen snapshots. It is a dashboard *source*; the headless printer uses it
the same way.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from multiprocessing.connection import wait
from time import perf_counter_ns
from typing import Any
from urllib.parse import urlsplit

from tokmon.model.commands import (
    LIVE,
    AbortInFlight,
    ChangeLevel,
    Check,
    Marker,
    StopRun,
    Switch,
    TogglePause,
    ToggleRecord,
)
from tokmon.model.commands import Command as UserCommand
from tokmon.model.config import RunConfig
from tokmon.model.defaults import DRIFT_ALERT_PCT_H, WINDOW_S
from tokmon.model.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.fold import Fold, FoldSettings, mix_weights
from tokmon.model.quality import QUALITY_PASS
from tokmon.model.records import (
    Abort,
    Command,
    EngineBatch,
    EngineFailure,
    EngineStatus,
    Event,
    Pause,
    QualityPass,
    SetLevel,
    StartTrace,
    Stop,
    SwitchArm,
    TokenTick,
)
from tokmon.model.snapshot import Snapshot
from tokmon.model.stats import Slo
from tokmon.model.table import RequestTable, record_to_line
from tokmon.model.workload import load_text
from tokmon.sources.fleet import Engines, Servers
from tokmon.textsafe import dumps

# time 0 of a trace: this long after the last engine said it is up (the command's way there)
TRACE_LEAD_NS = 20_000_000
FOLD_ERRORS_SHOWN = 3  # internal errors put on the timeline (the rest are counted)


class LiveSession:
    commands = LIVE

    def __init__(
        self,
        cfg: RunConfig,
        *,
        target: str = "",
        model: str = "",
        slo: Slo | None = None,
        window_s: float = WINDOW_S,
        level_step: float | None = None,
        recorder: Any = None,
        probes: list[Any] | None = None,
        header: dict[str, Any] | None = None,
        check_outputs_n: int = 0,
        drift_alert: float = DRIFT_ALERT_PCT_H,
        gpu_hour_price: float | None = None,
        gpus: int | None = None,
        ladder: Any = None,
        environment: tuple[Any, ...] = (),
        managed: Any = None,
        cycles: int | None = None,
        prometheus: tuple[str, int] | None = None,
        notes: tuple[tuple[str, str], ...] = (),
        scenario: tuple[str, str] = ("", ""),
    ) -> None:
        self.cfg = cfg
        self.target = target
        self.model = model
        self.slo = slo or Slo()
        self.window_s = window_s
        self.level_step = level_step
        self.recorder = recorder
        self.probes = probes or []
        self.header = header or {}
        self.lock = threading.RLock()
        self.notes = notes  # the set-up's warnings: events as the run starts
        self._rec_snap: tuple[Snapshot, str, Snapshot] | None = None
        self.arm_names = [a.name for a in cfg.arms]
        self.fold = Fold(
            FoldSettings(
                arms=tuple(self.arm_names),
                window_s=window_s,
                slo=self.slo,
                assign=cfg.assign,
                mode=cfg.mode,
                level=cfg.level,
                warmup=cfg.warmup_requests > 0 or cfg.warmup_s > 0,
                kind_weights=mix_weights(cfg.redacted()),
                gpu_hour_price=gpu_hour_price,
                gpus=gpus,
                drift_alert_pct_h=drift_alert,
                target=target,
                model=model,
                endpoint=cfg.arms[0].endpoint or "chat",
                insecure=cfg.insecure,
                server_metrics=any(getattr(p, "name", "") == "server" for p in self.probes),
                environment=tuple(environment),
                arm_servers=tuple((a.name, a.server() or target) for a in cfg.arms),
                scenario=scenario[0],
                scenario_headline=scenario[1],
            ),
            derive=True,
        )
        self.ladder = ladder
        self.t_start = 0
        self.t_stop: int | None = None
        self.wall_start = 0.0
        self.started_at = ""
        self.engines = Engines(cfg)
        self._reader: threading.Thread | None = None
        self._done = threading.Event()
        self._next_tick = 0
        self.stopping = False
        self.finished_workers: set[int] = set()
        self.engine_errors: list[str] = []  # why an engine process died, one line each
        self.fold_errors = 0  # facts the fold could not take (``_fold_failed``)
        self.workers_lost: dict[int, str] = {}  # Ray workers lost while the run went on
        self.on_finished: Any = None  # called with the summary when the run has ended
        self.final: dict[str, Any] | None = None  # that summary, computed once
        self._statuses: dict[int, EngineStatus] = {}  # the engines' latest, not yet folded
        self._folded: dict[int, EngineStatus] = {}
        self._ended = False  # the final tick is folded: no more facts
        self._engines_up: set[int] = set()
        self._trace_t0: int | None = None
        self.check_n = check_outputs_n
        self._checking = False
        # managed servers (the arms take turns on one GPU): restarts run in one thread
        self.servers = None if managed is None else Servers(self, managed)
        self.cycles = cycles
        self.segments_begun = 1
        self.prometheus_at = prometheus
        self.prom: Any = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self.t_start = perf_counter_ns()
        self.wall_start = time.time()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.fold.settings = replace(
            self.fold.settings,
            started_at=self.started_at,
            wall_start=self.wall_start,
        )
        if self.recorder is not None:
            self.recorder.open(
                {
                    **self.header,
                    "started_at": self.started_at,
                    "wall_start": self.wall_start,
                    "fold": self.fold.settings.to_json(),
                },
                self.t_start,
            )
        self.engines.start(self.event)
        if self.prometheus_at is not None:
            from tokmon.sources.prometheus import PromServer

            self.prom = PromServer(*self.prometheus_at, self._gauges)
        for pr in self.probes:
            pr.on_event = lambda kind, msg, data: self.event(kind, msg, data)
            pr.on_sample = self._on_sample
            pr.start()
        self.event("start", f"run started: {self.cfg.mode} {self._level_str()}")
        for kind, msg in self.notes:
            self.event(kind, msg)
        self._reader = threading.Thread(target=self._read_loop, name="tokmon-reader", daemon=True)
        self._reader.start()
        if self.check_n and len(self.arm_names) > 1:
            self.start_output_check()
        if self.ladder is not None:
            # the schedule of the load: a ladder's steps, or a capacity search's probes
            from tokmon.sources.conductor import conduct

            threading.Thread(
                target=conduct, args=(self, self.ladder), name="tokmon-conductor", daemon=True
            ).start()
        elif self.cfg.alternate_s and len(self.arm_names) > 1 and self.cfg.assign == "switch":
            from tokmon.sources.conductor import alternate

            threading.Thread(
                target=alternate,
                args=(self, self.cfg.alternate_s, self.cycles),
                name="tokmon-alternate",
                daemon=True,
            ).start()
        if self.servers is not None:
            self.servers.start()

    def _on_sample(self, src: str, t: int, values: dict[str, Any]) -> None:
        self._feed(Sample(t - self.t_start, src, _plain(values)))

    def start_quality_pass(self) -> str:
        """`o`: the next QUALITY_PASS requests of every arm ask questions with known
        answers (in the engine, as part of the load: their speed counts too). Where the
        arms take turns, the arm in force is asked now and each other one when its turn
        comes (the pass once asked only the arm in force)."""
        arms = tuple(self.arm_names)
        n = QUALITY_PASS
        self.send(QualityPass(n, arms))
        later = [a for a in arms if a != self.fold.arm] if self.cfg.assign == "switch" else []
        when = f"; {', '.join(later)} when its turn comes" if later else ""
        self.event("quality", f"quality pass: the next {n} requests of each arm ask "
                    f"questions with known answers ({', '.join(arms)}{when})",
                    {"n": n * len(arms), "arms": list(arms)})  # fmt: skip
        return f"quality pass: {n} questions" + (" of each arm" if len(arms) > 1 else "")

    def start_output_check(self) -> str:
        """Greedy outputs of every arm compared, in a thread (never in the engine)."""
        if len(self.arm_names) < 2:
            return "output check needs two arms"
        if self._checking:
            return "output check already running"
        self._checking = True
        n = self.check_n or 10

        def run() -> None:
            from tokmon.engine.outputcheck import check_outputs
            from tokmon.model.summary import describe_output_check

            try:
                hdr = dict(self.cfg.headers)
                if self.cfg.api_key:
                    hdr["authorization"] = f"Bearer {self.cfg.api_key}"
                res = check_outputs(list(self.cfg.arms), n, headers=hdr, insecure=self.cfg.insecure)
                self.event("check", "output check: " + describe_output_check(res), {"result": res})
            except Exception as e:  # reported, never fatal
                self.event("check", f"output check failed: {type(e).__name__}: {e}")
            finally:
                self._checking = False

        threading.Thread(target=run, name="tokmon-outputcheck", daemon=True).start()
        self.event("check", f"output check started: {n} greedy prompts per arm")
        return f"output check: {n} prompts per arm"

    def in_flight(self) -> int | None:
        """Requests in flight by the engines' latest counts (None: none counted yet)."""
        st = list(self._statuses.values()) or list(self.fold.statuses.values())
        return sum(x.in_flight for x in st) if st else None

    def paused_at(self, token: int) -> int | None:
        """When the last engine obeyed Pause ``token`` (perf ns), None until every engine
        has said so: from then on their counts are after the pause, and nothing is sent."""
        st = list(self._statuses.values())
        if not st or not all(x.paused and x.pause_token >= token for x in st):
            return None
        return max(x.paused_t for x in st)

    def ended(self) -> bool:
        """The final tick is folded: no fact comes after it."""
        return self._ended

    def skipped(self) -> set[str]:
        """Arms whose server failed (--on-server-failure skip-arm)."""
        return set() if self.servers is None else self.servers.skipped

    def restarting(self) -> bool:
        return self.servers is not None and self.servers.restarting.is_set()

    def expect_restart(self, url: str) -> None:
        """The managed server at ``url`` is about to be restarted: the probe of its
        metrics takes the counters going back for that restart, not one detected."""
        where = urlsplit(url).netloc
        for pr in self.probes:
            expect = getattr(pr, "expect_restart", None)
            if expect is not None and urlsplit(str(getattr(pr, "url", ""))).netloc == where:
                expect()

    @property
    def managed(self) -> Any:
        """The managed servers (``sources/managed.py``), None where the run has none."""
        return None if self.servers is None else self.servers.m

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def finished(self) -> threading.Event:
        """Set once the run has ended (what a wait elsewhere stops on)."""
        return self._done

    def close(self) -> None:
        """Stop at once and make sure no engine process is left."""
        if not self._done.is_set():
            self.command(StopRun(hard=True))
            self._done.wait(5.0)
        self.engines.close()
        for pr in self.probes:
            try:
                pr.stop()
            except Exception:
                pass
        if self.servers is not None:
            self.servers.close()
        if self.prom is not None:
            self.prom.close()

    # ------------------------------------------------------------------ commands
    def send(self, cmd: Command) -> None:
        self.engines.send(cmd)

    def _level_str(self, level: float | None = None) -> str:
        lv = self.fold.level if level is None else level
        return load_text(self.cfg.mode, lv)

    def switch_to(self, arm: str, now: int) -> None:
        """Tell the engines, then fold the switch in through its event."""
        seg = self.fold.next_segment()
        self.send(SwitchArm(arm, seg, now))
        self.event("arm", f"arm → {arm}", {"arm": arm, "segment": seg}, t=now)

    def command(self, cmd: UserCommand) -> str | None:
        with self.lock:
            now = perf_counter_ns()
            match cmd:
                case Switch():
                    return self._switch(cmd.arm, now)
                case TogglePause():
                    paused = not self.fold.paused  # the event below sets it (the fold)
                    self.send(Pause(paused))
                    self.event("pause", "paused sending" if paused else "resumed sending")
                    return "paused" if paused else "resumed"
                case ChangeLevel():
                    return self._change_level(cmd)
                case Marker():
                    note = cmd.note or "marker"
                    self.event("marker", note)
                    return f"marker: {note}"
                case StopRun():
                    hard = cmd.hard or self.stopping  # a second stop does not wait any longer
                    self.stopping = True
                    self.send(Stop(hard))
                    self.event(
                        "stop", "stopping now" if hard else "stopping: draining in-flight requests"
                    )
                    return "stopping"
                case AbortInFlight():
                    self.send(Abort(cmd.why))
                    self.event("abort", f"in-flight requests aborted: {cmd.why}")
                    return "aborted"
                case ToggleRecord():
                    if self.recorder is None:
                        return "start tokmon with --record FILE to record"
                    if self.recorder.active:  # (the event is the file's last line until resumed)
                        self.event("recording", "recording paused")
                        return str(self.recorder.toggle())
                    out = self.recorder.toggle()
                    self.event("recording", "recording resumed")
                    return str(out)
                case Check():
                    said = [self.start_quality_pass()]
                    if len(self.arm_names) > 1:  # (one arm: nothing to compare outputs with)
                        said.append(self.start_output_check())
                    return " · ".join(said)
        return None

    def _switch(self, target: str | None, now: int) -> str | None:
        if len(self.arm_names) < 2 or self.cfg.assign != "switch":
            return (
                "only one arm: nothing to switch"
                if len(self.arm_names) < 2
                else f"arms are assigned per request ({self.cfg.assign})"
            )
        cur = self.fold.arm
        i = self.arm_names.index(cur)
        turns = [
            self.arm_names[(i + k) % len(self.arm_names)] for k in range(1, len(self.arm_names) + 1)
        ]
        new = (
            target
            if target in self.arm_names
            else next((a for a in turns if a not in self.skipped()), cur)
        )
        if new == cur:
            return None
        if self.servers is not None and self.servers.serves(cur, new):
            return self.servers.begin_restart(cur, new)
        self.switch_to(new, now)
        self.segments_begun += 1
        return f"arm → {new}"

    def _change_level(self, cmd: ChangeLevel) -> str:
        if self.cfg.mode == "trace":
            return "the trace sets the load (--trace-speed)"
        if cmd.to is not None:
            new_level = float(cmd.to)
        else:
            step = self.level_step or (
                max(1.0, round(self.fold.level * 0.25))
                if self.cfg.mode == "concurrency"
                else max(0.1, self.fold.level * 0.25)
            )
            new_level = self.fold.level + cmd.sign * step
        if self.cfg.mode == "concurrency":
            new_level = float(min(max(1, round(new_level)), self.cfg.max_concurrency))
        else:
            new_level = max(0.01, round(new_level, 3))
        self.send(SetLevel(new_level))
        self.event("level", f"load → {self._level_str(new_level)}", {"level": new_level})
        return f"load → {self._level_str()}"

    def _engine_died(self, worker: int, why: str) -> None:
        msg = f"engine {worker} failed: {why}"
        self.engine_errors.append(msg)
        self.event("error", msg)
        if not self.stopping:
            self.command(StopRun(hard=True))  # the rest of the load is not the run asked for

    def note(self, kind: str, message: str) -> None:
        """An event from outside the measuring (the recorder's write errors)."""
        self.event(kind, message)

    def failures(self) -> list[str]:
        """What went wrong with the run itself (not with requests): non-zero exit."""
        out = list(self.engine_errors)
        if self.servers is not None:
            out += self.servers.strays()  # a server that outlived its stop
        return out + self.engines.failures(out, self.workers_lost)

    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        """An event from the session (a command, the ladder, a probe): ``t`` on the
        monotonic clock, now if not given."""
        at = (t or perf_counter_ns()) - self.t_start
        self._feed(
            Event(t=at, kind=kind, message=message, data=_plain(data or {}), wall=time.time())
        )

    def _feed(self, fact: Fact, lines: list[dict[str, Any]] | None = None) -> None:
        """Fold a fact and record it, with the events the fold derived from it, under one
        lock: the recording holds the facts in the order the fold took them."""
        with self.lock:
            if self._ended:
                return
            try:
                derived = self.fold.apply(fact)
            except Exception as e:  # a defect in tokmon: the fact is still recorded
                derived = self._fold_failed(fact, e)
            if self.prom is not None:
                self.prom.collector.fact(fact)
                for ev in derived:
                    self.prom.collector.fact(ev)
            rec = self.recorder
            if rec is not None:
                if lines is not None:
                    rec.request_lines(lines)
                else:
                    rec.fact(fact)
                for ev in derived:
                    rec.fact(ev)

    def _fold_failed(self, fact: Fact, e: Exception) -> list[Event]:
        """A fact the fold could not take (a defect in tokmon, not in the server): the run
        goes on, the fact is recorded all the same (a report reads it again), and the run
        ends non-zero saying so; the first few are events on the timeline too."""
        self.fold_errors += 1
        what = f"internal error folding {type(fact).__name__}: {type(e).__name__}: {e}"
        if self.fold_errors == 1:
            self.engine_errors.append(f"{what} (the run went on; its recording holds every fact)")
        if self.fold_errors > FOLD_ERRORS_SHOWN:
            return []
        ev = Event(t=perf_counter_ns() - self.t_start, kind="error", message=what, wall=time.time())
        try:
            self.fold.apply(ev)
        except Exception:
            pass  # (recorded below all the same)
        return [ev]

    # ------------------------------------------------------------------ ingest
    def _read_loop(self) -> None:
        try:
            self._read()
        except Exception as e:  # a defect in tokmon: the run stops and says so, never hangs
            self.engine_errors.append(f"internal error: {type(e).__name__}: {e}")
            self.stopping = True
            try:
                self.send(Stop(True))
            except Exception:
                pass
        finally:
            self._done.set()

    def _read(self) -> None:
        conns: list[Any] = list(self.engines.out_conns)
        by_conn = {id(c): i for i, c in enumerate(self.engines.out_conns)}
        while conns:
            ready: list[Any] = wait(conns, timeout=0.2)
            for c in ready:
                try:
                    msg: Any = c.recv()
                except (EOFError, OSError):
                    conns.remove(c)
                    w = by_conn[id(c)]
                    self.finished_workers.add(w)
                    if not self.stopping or self.engines.exit_code(w) not in (0, None):
                        self._engine_died(w, "ended without a word")
                    continue
                if isinstance(msg, EngineFailure):
                    conns.remove(c)
                    self.finished_workers.add(msg.worker)
                    if msg.lost and self.cfg.ray_on_loss == "continue":
                        # the rest go on; its in-flight requests came as cancelled
                        self.workers_lost[msg.worker] = msg.why
                        self.event("error", f"engine {msg.worker}: {msg.why}; the run goes on")
                    else:
                        self._engine_died(msg.worker, msg.why)
                    continue
                self._ingest(msg)
                if msg.status.done:
                    conns.remove(c)
                    self.finished_workers.add(msg.worker)
            now = perf_counter_ns()
            if now >= self._next_tick:
                self._tick(now)
        for pr in self.probes:  # (each takes a last sample: counters cover the whole run)
            try:
                pr.stop()
            except Exception:
                pass
        with self.lock:
            # The run ends here: the final tick and the summary see the same facts, and a
            # fact that comes later (a switch of the alternation thread) is not the run's.
            self.t_stop = perf_counter_ns()
            self._tick(self.t_stop, final=True)
            final = self.final = self.summary()
            self._ended = True
        if self.recorder is not None:
            self.recorder.summary(final)
            self.recorder.end(self.t_stop)
            self.recorder.close()
        if self.on_finished is not None:
            try:
                self.on_finished(final)
            except Exception as e:  # reported, never fatal
                self.event("error", f"summary: {type(e).__name__}: {e}")
        self._done.set()

    def _ingest(self, b: EngineBatch) -> None:
        t0 = self.t_start
        chunks = self.recorder is not None and self.recorder.chunks
        with self.lock:
            if b.records:
                # the lines a recording holds are the facts the fold takes (one conversion)
                lines = [record_to_line(r, t0, chunks) for r in b.records]
                self._feed(Requests(RequestTable.from_lines(lines, self.fold.vocab)), lines)
            if b.prompts and self.recorder is not None:
                self.recorder.prompts(b.prompts)
            if b.ticks:
                self._feed(Tokens(tuple(TokenTick(t - t0, a, n) for (t, a), n in b.ticks.items())))
            self._statuses[b.worker] = b.status
            if b.fault:
                # the load's file failed as it was read: the rest is not the run asked for;
                # what was measured is kept, and the exit says why
                self.engine_errors.append(b.fault)
                self.event("error", f"{b.fault}; the run stops here")
                if not self.stopping:
                    self.command(StopRun())
            if self.cfg.mode == "trace" and self._trace_t0 is None:
                self._engines_up.add(b.worker)
                if len(self._engines_up | self.finished_workers) >= max(1, self.cfg.workers):
                    # every engine is up: time 0 of the trace, a moment from now, for all
                    t0 = perf_counter_ns() + TRACE_LEAD_NS
                    self._trace_t0 = t0
                    self.send(StartTrace(t0))
                    assert self.cfg.trace is not None
                    self.event("trace", f"trace started: {self.cfg.trace.describe()}")

    def _tick(self, now: int, final: bool = False) -> None:
        """Once a second: the engines' status where it changed, then the clock's tick."""
        self._next_tick = now + 1_000_000_000
        with self.lock:
            for w, st in self._statuses.items():
                # (a pause's token and moment are the conductor's business, not a figure)
                st = replace(st, t=st.t - self.t_start, pause_token=0, paused_t=0)
                if (
                    replace(st, t=0) != replace(self._folded.get(w, st), t=0)
                    or w not in self._folded
                ):
                    self._folded[w] = st
                    self._feed(Status(st))
            self._feed(Tick(now - self.t_start, final))

    # ------------------------------------------------------------------ outputs
    def _gauges(self) -> Any:
        """The live gauges of --prometheus, at a scrape."""
        from tokmon.sources.prometheus import LiveGauges

        with self.lock:
            f = self.fold
            snap = f.snapshot
            st = list(f.statuses.values())
            acc = {}
            for v in snap.arm_views if snap is not None else ():
                w = v.window
                if w is not None and w.acceptance_rate is not None:
                    acc[v.name] = (w.acceptance_rate, w.acceptance_source or "response")
            lad = snap.ladder if snap is not None else None
            return LiveGauges(
                arms=tuple(self.arm_names),
                arm=f.arm,
                level=f.level,
                mode=self.cfg.mode,
                in_flight=sum(x.in_flight for x in st),
                send_lag_s=max((x.send_lag_ms for x in st), default=0.0) / 1000.0,
                ladder_step=lad.step if lad is not None and lad.running else None,
                acceptance=acc,
            )

    def snapshot(self) -> Snapshot | None:
        snap = self.fold.snapshot
        rec = self.recorder
        if snap is not None and rec is not None and rec.active:
            # the same object while nothing changed: the dashboard draws a frame only
            # for a new snapshot (a new copy every call redrew every frame)
            cached = self._rec_snap
            if cached is None or cached[0] is not snap or cached[1] != rec.path:
                cached = self._rec_snap = (snap, rec.path, replace(snap, recording=rec.path))
            return cached[2]
        return snap

    @property
    def alerts(self) -> Any:
        return self.fold.alerts

    @property
    def output_check(self) -> dict[str, Any] | None:
        return self.fold.output_check

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return self.fold.summary((self.t_stop or perf_counter_ns()) - self.t_start)


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    """What a recording gives back of a dict (strict JSON: tuples as lists, NaN as None),
    so that the live fold takes exactly what a replay will."""
    out: dict[str, Any] = json.loads(dumps(d, compact=True))
    return out
