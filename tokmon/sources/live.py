"""A live session: has the fleet start the engines (``sources/fleet.py``) and the
conductor run the schedule (``sources/conductor.py``), starts the probes, and hands out
frozen snapshots. What comes in is folded and recorded by its intake (``intake.py``),
what the user asks is done by its controls (``controls.py``), and the conductor and the
fleet act through its stage (``stage.py``). It is a dashboard *source*; the headless
printer uses it the same way.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from time import perf_counter_ns
from typing import Any

from tokmon.model.data.commands import LIVE, StopRun
from tokmon.model.data.commands import Command as UserCommand
from tokmon.model.data.records import Command
from tokmon.model.folding.fold import Fold, FoldSettings, mix_weights
from tokmon.model.folding.snapshot import Snapshot
from tokmon.model.statistics.stats import Slo
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S
from tokmon.model.workloads.workload import load_text
from tokmon.sources.controls import Controls
from tokmon.sources.fleet import Engines, Servers
from tokmon.sources.intake import Intake
from tokmon.sources.stage import Stage


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
        self.finished = threading.Event()  # set once the run has ended
        self.stopping = False
        self.finished_workers: set[int] = set()
        self.engine_errors: list[str] = []  # why an engine process died, one line each
        self.workers_lost: dict[int, str] = {}  # Ray workers lost while the run went on
        self.on_finished: Any = None  # called with the summary when the run has ended
        self.final: dict[str, Any] | None = None  # that summary, computed once
        self.check_n = check_outputs_n
        # its parts: what comes in, what the user asks, and the door the conductor and the
        # fleet use (``stage.py``)
        self.intake = Intake(self)
        self.controls = Controls(self)
        self.stage = Stage(self, self.intake, self.controls)
        # managed servers (the arms take turns on one GPU): restarts run in one thread
        self.servers = None if managed is None else Servers(self.stage, managed)
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

            self.prom = PromServer(*self.prometheus_at, lambda: gauges(self))
        for pr in self.probes:
            pr.on_event = lambda kind, msg, data: self.event(kind, msg, data)
            pr.on_sample = self.intake.sample
            pr.start()
        self.event(
            "start", f"run started: {self.cfg.mode} {load_text(self.cfg.mode, self.fold.level)}"
        )
        for kind, msg in self.notes:
            self.event(kind, msg)
        self._reader = threading.Thread(
            target=self.intake.read_loop, name="tokmon-reader", daemon=True
        )
        self._reader.start()
        if self.check_n and len(self.arm_names) > 1:
            self.controls.output_check()
        if self.ladder is not None:
            # the schedule of the load: a ladder's steps, or a capacity search's probes
            from tokmon.sources.conductor import conduct

            threading.Thread(
                target=conduct, args=(self.stage, self.ladder), name="tokmon-conductor",
                daemon=True,
            ).start()  # fmt: skip
        elif self.cfg.alternate_s and len(self.arm_names) > 1 and self.cfg.assign == "switch":
            from tokmon.sources.conductor import alternate

            threading.Thread(
                target=alternate,
                args=(self.stage, self.cfg.alternate_s, self.cycles),
                name="tokmon-alternate",
                daemon=True,
            ).start()
        if self.servers is not None:
            self.servers.start()

    @property
    def managed(self) -> Any:
        """The managed servers (``sources/managed.py``), None where the run has none."""
        return None if self.servers is None else self.servers.m

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def close(self) -> None:
        """Stop at once and make sure no engine process is left."""
        if not self.finished.is_set():
            self.command(StopRun(hard=True))
            self.finished.wait(5.0)
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

    # ------------------------------------------------------------------ in and out
    def send(self, cmd: Command) -> None:
        """A command to every engine."""
        self.engines.send(cmd)

    def command(self, cmd: UserCommand) -> str | None:
        """The user's command (``controls.py``); what it did, in words."""
        return self.controls.command(cmd)

    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        """An event from the session (a command, the ladder, a probe): ``t`` on the
        monotonic clock, now if not given."""
        self.intake.event(kind, message, data, t)

    def note(self, kind: str, message: str) -> None:
        """An event from outside the measuring (the recorder's write errors)."""
        self.intake.event(kind, message)

    def failures(self) -> list[str]:
        """What went wrong with the run itself (not with requests): non-zero exit."""
        out = list(self.engine_errors)
        if self.servers is not None:
            out += self.servers.strays()  # a server that outlived its stop
        return out + self.engines.failures(out, self.workers_lost)

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


def gauges(s: LiveSession) -> Any:
    """The live gauges of --prometheus, at a scrape."""
    from tokmon.sources.prometheus import LiveGauges

    with s.lock:
        f = s.fold
        snap = f.snapshot
        st = list(f.statuses.values())
        acc = {}
        for v in snap.arm_views if snap is not None else ():
            w = v.window
            if w is not None and w.acceptance_rate is not None:
                acc[v.name] = (w.acceptance_rate, w.acceptance_source or "response")
        lad = snap.ladder if snap is not None else None
        return LiveGauges(
            arms=tuple(s.arm_names),
            arm=f.arm,
            level=f.level,
            mode=s.cfg.mode,
            in_flight=sum(x.in_flight for x in st),
            send_lag_s=max((x.send_lag_ms for x in st), default=0.0) / 1000.0,
            ladder_step=lad.step if lad is not None and lad.running else None,
            acceptance=acc,
        )
