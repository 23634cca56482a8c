"""A live session: starts the engine processes, folds their records into statistics,
and hands out frozen snapshots. It is a dashboard *source*; the headless printer uses it
the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from datetime import UTC, datetime
from multiprocessing.connection import Connection, wait
from time import perf_counter_ns
from typing import Any

from tokmon.engine.worker import engine_main
from tokmon.model.config import RunConfig
from tokmon.model.fold import Aggregator, mix_weights
from tokmon.model.records import (
    BeginStep,
    Command,
    EngineBatch,
    EngineFailure,
    Event,
    Pause,
    SetLevel,
    Stop,
    SwitchArm,
)
from tokmon.model.snapshot import Snapshot
from tokmon.model.stats import Slo
from tokmon.model.summary import alerts_from_events

WINDOW_S = 10.0


class LiveSession:
    commands = frozenset({"switch", "pause", "level", "marker", "stop", "record", "check"})

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
        drift_alert: float = 5.0,
        gpu_hour_price: float | None = None,
        gpus: int | None = None,
        ladder: Any = None,
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
        self.arm_names = [a.name for a in cfg.arms]
        self.agg = Aggregator(
            self.arm_names,
            window_s=window_s,
            slo=self.slo,
            assign=cfg.assign,
            mode=cfg.mode,
            level=float(cfg.concurrency if cfg.mode == "concurrency" else cfg.rate),
            warmup=cfg.warmup_requests > 0 or cfg.warmup_s > 0,
            kind_weights=mix_weights(cfg.redacted()),
        )
        self.agg.on_event = lambda kind, msg, data, t: self._event(kind, msg, data, t=t)
        self.ladder = ladder
        self.agg.gpu_hour_price = gpu_hour_price
        self.agg.gpus = gpus or 1
        self._gpus_given = gpus is not None
        from tokmon.model.alerts import AlertEngine

        self.alerts = AlertEngine(drift_alert_pct_h=drift_alert, window_s=window_s)
        self.t_start = 0
        self.t_stop: int | None = None
        self.wall_start = 0.0
        self.started_at = ""
        self.procs: list[Any] = []
        self.cmd_conns: list[Connection] = []
        self.out_conns: list[Connection] = []
        self._snap: Snapshot | None = None
        self._reader: threading.Thread | None = None
        self._done = threading.Event()
        self._next_tick = 0
        self.stopping = False
        self.finished_workers: set[int] = set()
        self.engine_errors: list[str] = []  # why an engine process died, one line each
        self.on_finished: Any = None  # called with the summary when the run has ended
        self.final: dict[str, Any] | None = None  # that summary, computed once
        self.output_check: dict[str, Any] | None = None
        self._all_alerts: list[Event] = []
        self.check_n = check_outputs_n
        self._checking = False

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.t_start = perf_counter_ns()
        self.wall_start = time.time()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.agg.t_start = self.t_start
        self.agg.segments = [(0, self.agg.arm, self.t_start, None)]
        if self.recorder is not None:
            self.recorder.open(
                {**self.header, "started_at": self.started_at, "wall_start": self.wall_start},
                self.t_start,
            )
        n = max(1, self.cfg.workers)
        for i in range(n):
            out_r, out_w = ctx.Pipe(duplex=False)
            cmd_r, cmd_w = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=engine_main,
                args=(self.cfg, i, n, out_w, cmd_r),
                name=f"tokmon-engine-{i}",
                daemon=True,
            )
            p.start()
            out_w.close()
            cmd_r.close()
            self.procs.append(p)
            self.out_conns.append(out_r)
            self.cmd_conns.append(cmd_w)
        for pr in self.probes:
            pr.on_event = lambda kind, msg, data: self._event(kind, msg, data)
            pr.on_sample = self._on_sample
            pr.start()
        self._event("start", f"run started: {self.cfg.mode} {self._level_str()}")
        self._reader = threading.Thread(target=self._read_loop, name="tokmon-reader", daemon=True)
        self._reader.start()
        if self.check_n and len(self.arm_names) > 1:
            self.start_output_check()
        if self.ladder is not None:
            threading.Thread(target=self._ladder_run, name="tokmon-ladder", daemon=True).start()
        elif self.cfg.alternate_s and len(self.arm_names) > 1 and self.cfg.assign == "switch":
            threading.Thread(target=self._alternator, name="tokmon-alternate", daemon=True).start()

    def _on_sample(self, src: str, t: int, values: dict[str, Any]) -> None:
        if self.ladder is not None:
            with self.lock:
                self.agg.note_probe(t, values)
        if src == "gpu" and values.get("gpu_power_w") is not None:
            with self.lock:
                self.agg.add_power(t, float(values["gpu_power_w"]))
                if not self._gpus_given and values.get("gpu_devices"):
                    self.agg.gpus = len(values["gpu_devices"])
        if self.recorder is not None:
            self.recorder.sample(src, t, values)

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
                self.output_check = res
                self._event("check", "output check: " + describe_output_check(res), {"result": res})
            except Exception as e:  # reported, never fatal
                self._event("check", f"output check failed: {type(e).__name__}: {e}")
            finally:
                self._checking = False

        threading.Thread(target=run, name="tokmon-outputcheck", daemon=True).start()
        self._event("check", f"output check started: {n} greedy prompts per arm")
        return f"output check: {n} prompts per arm"

    def _ladder_run(self) -> None:
        """Each step for every arm in turn; stop early when the server is saturated."""
        from tokmon.model.ladder import stop_reason

        lad = self.ladder
        n = len(lad.values)
        per_arm = len(self.arm_names) > 1 and self.cfg.assign == "switch"
        arms: list[str | None] = list(self.arm_names) if per_arm else [None]
        for i, v in enumerate(lad.values):
            for arm in arms:
                if self.stopping:
                    return
                now = perf_counter_ns()
                with self.lock:
                    if arm is not None and arm != self.agg.arm:
                        self._switch_to(arm, now)
                    a = arm or self.agg.arm
                    # the step's event is what begins it in the figures (Aggregator.apply)
                    self._event(
                        "step",
                        f"ladder step {i + 1}/{n}: {lad.param} {v}"
                        + (f" · arm {a}" if per_arm else ""),
                        {"step": i, "arm": a, "value": v, "warm_s": lad.warmup_s,
                         "param": lad.param},
                        t=now,
                    )  # fmt: skip
                self._send(
                    BeginStep(
                        step=i,
                        t=now,
                        prompt_tokens=v if lad.param == "prompt-tokens" else None,
                        max_tokens=v if lad.param == "max-tokens" else None,
                        warm_s=lad.warmup_s,
                    )
                )
                if lad.param in ("concurrency", "rate"):
                    self._send(SetLevel(float(v)))
                if self._done.wait(lad.step_s) or self.stopping:
                    return
            with self.lock:
                figs = [st.figures(perf_counter_ns()) for st in self.agg.steps if st.step == i]
            for f in figs:
                reason = stop_reason(lad, f)
                if reason and i + 1 < n:
                    self._end_ladder(f"saturated at {lad.param} {v} ({f['arm']}): {reason}")
                    return
        self._end_ladder(None)

    def _end_ladder(self, reason: str | None) -> None:
        now = perf_counter_ns()
        self._event(
            "ladder",
            "ladder done" if reason is None else f"ladder stopped: {reason}",
            {"reason": reason},
            t=now,
        )
        self.command("stop")

    def _alternator(self) -> None:
        assert self.cfg.alternate_s
        while not self._done.wait(self.cfg.alternate_s):
            if self.stopping:
                return
            self.command("switch")

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def close(self) -> None:
        """Stop at once and make sure no engine process is left."""
        if not self._done.is_set():
            self.command("stop", True)
            self._done.wait(5.0)
        for p in self.procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=1.0)
        for pr in self.probes:
            try:
                pr.stop()
            except Exception:
                pass

    # ------------------------------------------------------------------ commands
    def _send(self, cmd: Command) -> None:
        for c in self.cmd_conns:
            try:
                c.send(cmd)
            except (BrokenPipeError, OSError):
                pass

    def _level_str(self, level: float | None = None) -> str:
        lv = self.agg.level if level is None else level
        return f"{lv:g} streams" if self.cfg.mode == "concurrency" else f"{lv:g} req/s"

    def _switch_to(self, arm: str, now: int) -> None:
        """Tell the engines, then fold the switch in through its event."""
        seg = self.agg.segments[-1][0] + 1  # the id Aggregator.switch will give it
        self._send(SwitchArm(arm, seg, now))
        self._event("arm", f"arm → {arm}", {"arm": arm, "segment": seg}, t=now)

    def command(self, name: str, *args: Any) -> str | None:
        with self.lock:
            now = perf_counter_ns()
            if name == "switch":
                if len(self.arm_names) < 2 or self.cfg.assign != "switch":
                    return (
                        "only one arm: nothing to switch"
                        if len(self.arm_names) < 2
                        else f"arms are assigned per request ({self.cfg.assign})"
                    )
                target = args[0] if args else None
                cur = self.agg.arm
                i = self.arm_names.index(cur)
                new = (
                    target
                    if target in self.arm_names
                    else self.arm_names[(i + 1) % len(self.arm_names)]
                )
                if new == cur:
                    return None
                self._switch_to(new, now)
                return f"arm → {new}"
            if name == "pause":
                paused = not self.agg.paused  # the event below sets it (Aggregator.apply)
                self._send(Pause(paused))
                self._event("pause", "paused sending" if paused else "resumed sending")
                return "paused" if paused else "resumed"
            if name == "level":
                sign = args[0] if args else 1
                if len(args) > 1:
                    new_level = float(args[1])
                else:
                    step = self.level_step or (
                        max(1.0, round(self.agg.level * 0.25))
                        if self.cfg.mode == "concurrency"
                        else max(0.1, self.agg.level * 0.25)
                    )
                    new_level = self.agg.level + sign * step
                if self.cfg.mode == "concurrency":
                    new_level = float(min(max(1, round(new_level)), self.cfg.max_concurrency))
                else:
                    new_level = max(0.01, round(new_level, 3))
                self._send(SetLevel(new_level))
                self._event("level", f"load → {self._level_str(new_level)}", {"level": new_level})
                return f"load → {self._level_str()}"
            if name == "marker":
                note = str(args[0]) if args and args[0] else "marker"
                self._event("marker", note)
                return f"marker: {note}"
            if name == "stop":
                hard = bool(args[0]) if args else False
                if self.stopping and not hard:
                    hard = True  # a second stop does not wait any longer
                self.stopping = True
                self._send(Stop(hard))
                self._event(
                    "stop", "stopping now" if hard else "stopping: draining in-flight requests"
                )
                return "stopping"
            if name == "record":
                if self.recorder is None:
                    return "start tokmon with --record FILE to record"
                return self.recorder.toggle()
            if name == "check":
                return self.start_output_check()
        return None

    def _engine_died(self, worker: int, why: str) -> None:
        msg = f"engine {worker} failed: {why}"
        self.engine_errors.append(msg)
        self._event("error", msg)
        if not self.stopping:
            self.command("stop", True)  # the rest of the load is not the run asked for

    def note(self, kind: str, message: str) -> None:
        """An event from outside the measuring (the recorder's write errors)."""
        self._event(kind, message)

    def failures(self) -> list[str]:
        """What went wrong with the run itself (not with requests): non-zero exit."""
        out = list(self.engine_errors)
        for i, p in enumerate(self.procs):
            code = p.exitcode
            if code not in (0, None) and not any(m.startswith(f"engine {i} ") for m in out):
                out.append(f"engine {i} failed: exit code {code}")
        return out

    def _event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        ev = Event(
            t=t or perf_counter_ns(), kind=kind, message=message, data=data or {}, wall=time.time()
        )
        with self.lock:
            self.agg.apply(ev)
            if ev.kind == "alert":
                self._all_alerts.append(ev)
        if self.recorder is not None:
            self.recorder.event(ev)

    # ------------------------------------------------------------------ ingest
    def _read_loop(self) -> None:
        conns: list[Any] = list(self.out_conns)
        by_conn = {id(c): i for i, c in enumerate(self.out_conns)}
        while conns:
            ready: list[Any] = wait(conns, timeout=0.2)
            for c in ready:
                try:
                    msg: Any = c.recv()
                except (EOFError, OSError):
                    conns.remove(c)
                    w = by_conn[id(c)]
                    self.finished_workers.add(w)
                    if not self.stopping or self.procs[w].exitcode not in (0, None):
                        self._engine_died(w, "ended without a word")
                    continue
                if isinstance(msg, EngineFailure):
                    conns.remove(c)
                    self.finished_workers.add(msg.worker)
                    self._engine_died(msg.worker, msg.why)
                    continue
                self._ingest(msg)
                if msg.status.done:
                    conns.remove(c)
                    self.finished_workers.add(msg.worker)
            now = perf_counter_ns()
            if now >= self._next_tick:
                self._tick(now)
        self.t_stop = perf_counter_ns()
        self._tick(self.t_stop, final=True)
        for pr in self.probes:
            try:
                pr.stop()
            except Exception:
                pass
        final = self.final = self.summary()
        if self.recorder is not None:
            self.recorder.summary(final)
            self.recorder.end(self.t_stop)
            self.recorder.close()
        if self.on_finished is not None:
            try:
                self.on_finished(final)
            except Exception as e:  # reported, never fatal
                self._event("error", f"summary: {type(e).__name__}: {e}")
        self._done.set()

    def _ingest(self, b: EngineBatch) -> None:
        with self.lock:
            self.agg.add_records(b.records)
            self.agg.add_ticks(b.ticks)
            self.agg.statuses[b.worker] = b.status
        if self.recorder is not None:
            self.recorder.records(b.records)
            self.recorder.ticks(b.ticks)

    def _tick(self, now: int, final: bool = False) -> None:
        """Once a second: window statistics, a history point, and a new snapshot."""
        self._next_tick = now + 1_000_000_000
        probes = self._probe_fields()
        meta = {
            "target": self.target,
            "model": self.model,
            "insecure": self.cfg.insecure,
            "output_check": self.output_check,
            "recording": self.recorder.path
            if self.recorder is not None and self.recorder.active
            else None,
        }
        from tokmon.model.alerts import cost_figures, kind_cost_figures

        with self.lock:
            tr = {k: (v.pct_per_hour, v.lo, v.hi) for k, v in self.alerts.trends.items()}
            meta["trends"] = tr
            if self._snap is not None:
                costs: dict[str, dict[str, Any]] = {}
                for v in self._snap.arm_views:
                    c: dict[str, Any] = cost_figures(
                        v.window.tokens_per_s if v.window else None,
                        gpu_hour_price=self.agg.gpu_hour_price,
                        gpus=self.agg.gpus,
                        power_w=probes.get("gpu_power_w"),
                    )
                    t = self.agg.totals.get(v.name)
                    if t is not None and len(t.kinds) > 1:
                        c["by_kind"] = kind_cost_figures(c, t.kinds)
                    costs[v.name] = c
                meta["costs"] = costs
            self._snap = self.agg.tick(now, probes=probes, meta=meta, final=final)
            point = self.agg.history.recent[-1]
            warming = self._snap.warming_up
        if warming:  # the ramp of a warm-up is not a change of the server
            return
        for kind, msg, data in self.alerts.add(point, probes.get("self_rss_mib")):
            self._event(kind, msg, data)

    def _server_probe(self, arm: str) -> Any:
        for pr in self.probes:
            if getattr(pr, "name", "") == "server" and arm in getattr(pr, "arms", ()):
                return pr
        return None

    def _probe_fields(self) -> dict[str, Any]:
        """Latest probe fields; server fields from the active arm's server."""
        out: dict[str, Any] = {}
        for pr in self.probes:
            if getattr(pr, "name", "") == "server":
                continue
            try:
                out.update(pr.latest())
            except Exception:
                pass
        srv = self._server_probe(self.agg.arm)
        if srv is not None:
            out.update(srv.latest())
        elif not any(getattr(p, "name", "") == "server" for p in self.probes):
            out["server_note"] = "server metrics off"
        return out

    def _server_spec(self) -> dict[str, dict[str, Any]]:
        """Acceptance per arm from server counters over the measured part of the run."""
        out: dict[str, dict[str, Any]] = {}
        for arm in self.arm_names:
            pr = self._server_probe(arm)
            if pr is None:
                continue
            t_measure = self.agg.t_measure
            if len(pr.arms) == 1 or self.cfg.assign != "switch":
                tot = pr.totals(t0=t_measure) if len(pr.arms) == 1 else None
            else:
                segs = [(max(s, t_measure or s), e) for _, a, s, e in self.agg.segments if a == arm]
                tot = pr.totals(segments=segs)
            if tot is not None:
                out[arm] = tot
        return out

    # ------------------------------------------------------------------ outputs
    def snapshot(self) -> Snapshot | None:
        return self._snap

    def summary(self) -> dict[str, Any]:
        with self.lock:
            s = self.agg.summary(
                t_end=self.t_stop or perf_counter_ns(),
                started_at=self.started_at,
                target={
                    "url": self.target,
                    "model": self.model,
                    "endpoint": self.cfg.arms[0].endpoint or "chat",
                },
                server_spec=self._server_spec(),
            )
        if self.output_check is not None:
            s["output_check"] = self.output_check
        s["alerts"] = alerts_from_events(list(self._all_alerts), self.t_start)
        return s
