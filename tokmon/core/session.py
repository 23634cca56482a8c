"""A live session: starts the engine processes, folds their records into statistics,
and hands out frozen snapshots. It is a dashboard *source*; the headless printer uses it
the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import deque
from datetime import UTC, datetime
from multiprocessing.connection import Connection, wait
from time import perf_counter_ns
from typing import Any

from tokmon.core.config import RunConfig
from tokmon.core.engine import engine_main
from tokmon.core.history import History, Point
from tokmon.core.records import EngineStatus, Event, RequestRecord
from tokmon.core.snapshot import ArmView, Snapshot
from tokmon.core.stats import ArmTotals, Slo, TokenWindow, window_stats
from tokmon.core.summary import active_time, build_summary, compare

WINDOW_S = 10.0


class LiveSession:
    commands = frozenset({"switch", "pause", "level", "marker", "stop", "record"})

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
        self.arm = self.arm_names[0]
        self.totals = {n: ArmTotals(n) for n in self.arm_names}
        self.window: deque[RequestRecord] = deque()
        self.tokens = TokenWindow()
        self.history = History()
        self.events: deque[Event] = deque(maxlen=500)
        self.statuses: dict[int, EngineStatus] = {}
        self.segments: list[tuple[int, str, int, int | None]] = []
        self.alternations = 0
        self.paused = False
        self.level = float(cfg.concurrency if cfg.mode == "concurrency" else cfg.rate)
        self.t_start = 0
        self.t_stop: int | None = None
        self.wall_start = 0.0
        self.started_at = ""
        self.t_measure: int | None = None
        self.procs: list[Any] = []
        self.cmd_conns: list[Connection] = []
        self.out_conns: list[Connection] = []
        self._snap: Snapshot | None = None
        self._reader: threading.Thread | None = None
        self._done = threading.Event()
        self._next_tick = 0
        self._comparison: dict[str, Any] | None = None
        self._next_compare = 0
        self._pending_marks: list[str] = []
        self._last_errors = 0
        self.stopping = False
        self.finished_workers: set[int] = set()

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.t_start = perf_counter_ns()
        self.wall_start = time.time()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.segments.append((0, self.arm, self.t_start, None))
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
            if self.recorder is not None:
                pr.on_sample = self.recorder.sample
            pr.start()
        self._event("start", f"run started: {self.cfg.mode} {self._level_str()}")
        self._reader = threading.Thread(target=self._read_loop, name="tokmon-reader", daemon=True)
        self._reader.start()
        if self.cfg.alternate_s and len(self.arm_names) > 1 and self.cfg.assign == "switch":
            threading.Thread(target=self._alternator, name="tokmon-alternate", daemon=True).start()

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
    def _send(self, cmd: tuple[Any, ...]) -> None:
        for c in self.cmd_conns:
            try:
                c.send(cmd)
            except (BrokenPipeError, OSError):
                pass

    def _level_str(self) -> str:
        return (
            f"{self.level:g} streams" if self.cfg.mode == "concurrency" else f"{self.level:g} req/s"
        )

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
                i = self.arm_names.index(self.arm)
                new = (
                    target
                    if target in self.arm_names
                    else self.arm_names[(i + 1) % len(self.arm_names)]
                )
                if new == self.arm:
                    return None
                seg_id, arm, s, _ = self.segments[-1]
                self.segments[-1] = (seg_id, arm, s, now)
                self.segments.append((seg_id + 1, new, now, None))
                self.alternations = len(self.segments) // len(self.arm_names) - 1
                self.arm = new
                self._send(("arm", new, seg_id + 1, now))
                self._event("arm", f"arm → {new}", {"arm": new, "segment": seg_id + 1})
                self._pending_marks.append("arm")
                return f"arm → {new}"
            if name == "pause":
                self.paused = not self.paused
                self._send(("pause",) if self.paused else ("resume",))
                self._event("pause", "paused sending" if self.paused else "resumed sending")
                return "paused" if self.paused else "resumed"
            if name == "level":
                sign = args[0] if args else 1
                if len(args) > 1:
                    new_level = float(args[1])
                else:
                    step = self.level_step or (
                        max(1.0, round(self.level * 0.25))
                        if self.cfg.mode == "concurrency"
                        else max(0.1, self.level * 0.25)
                    )
                    new_level = self.level + sign * step
                if self.cfg.mode == "concurrency":
                    new_level = float(min(max(1, round(new_level)), self.cfg.max_concurrency))
                else:
                    new_level = max(0.01, round(new_level, 3))
                self.level = new_level
                self._send(("level", new_level))
                self._event("level", f"load → {self._level_str()}", {"level": new_level})
                return f"load → {self._level_str()}"
            if name == "marker":
                note = str(args[0]) if args and args[0] else "marker"
                self._event("marker", note)
                self._pending_marks.append("marker")
                return f"marker: {note}"
            if name == "stop":
                hard = bool(args[0]) if args else False
                if self.stopping and not hard:
                    hard = True  # a second stop does not wait any longer
                self.stopping = True
                self._send(("stop", hard))
                self._event(
                    "stop", "stopping now" if hard else "stopping: draining in-flight requests"
                )
                return "stopping"
            if name == "record" and self.recorder is not None:
                return self.recorder.toggle()
        return None

    def _event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        ev = Event(
            t=t or perf_counter_ns(), kind=kind, message=message, data=data or {}, wall=time.time()
        )
        self.events.append(ev)
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
                    self.finished_workers.add(by_conn[id(c)])
                    continue
                self._ingest(msg)
                if msg[5].done:
                    conns.remove(c)
                    self.finished_workers.add(msg[1])
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
        if self.recorder is not None:
            self.recorder.summary(self.summary())
            self.recorder.close()
        self._done.set()

    def _ingest(self, msg: tuple[Any, ...]) -> None:
        _, worker, records, ticks, events, status = msg
        with self.lock:
            for r in records:
                self.totals.setdefault(r.arm, ArmTotals(r.arm)).add(r, self.slo)
                self.window.append(r)
                if r.counted and self.t_measure is None:
                    self.t_measure = r.t_sched
                if r.stalls:
                    self._pending_marks.append("stall")
            for (t, arm), n in ticks.items():
                self.tokens.add(t, arm, n)
            self.statuses[worker] = status
            if self.recorder is not None:
                self.recorder.records(records)

    def _tick(self, now: int, final: bool = False) -> None:
        """Once a second: window statistics, a history point, and a new snapshot."""
        self._next_tick = now + 1_000_000_000
        with self.lock:
            lim = now - int(self.window_s * 1e9)
            w = self.window
            while w and w[0].t_end < lim:
                w.popleft()
            self.tokens.trim(now)
            elapsed = (now - self.t_start) / 1e9
            width = min(self.window_s, max(elapsed, 1e-3))
            # Buckets still being filled by the engine are left out: the window ends at
            # the last bucket that is surely complete.
            t1 = now - 150_000_000
            t1 -= t1 % self.tokens.bucket_ns
            tok = self.tokens.tokens(t1 - int(width * 1e9), t1)
            recs = list(w)
            win = window_stats(recs, sum(tok.values()), now, width, "", self.slo)
            arm_views = []
            for name in self.arm_names:
                ar = [r for r in recs if r.arm == name]
                aw = window_stats(ar, tok.get(name, 0), now, width, name, self.slo)
                t = self.totals[name]
                arm_views.append(ArmView(name, t.ok, t.failed, aw))
            probes = self._probe_fields()
            acc_rate = probes.get("spec_acceptance_rate", win.acceptance_rate)
            acc_len = probes.get("spec_acceptance_length", win.acceptance_length)
            if probes.get("spec_acceptance_rate") is not None:
                win = _with_acc(
                    win,
                    probes["spec_acceptance_rate"],
                    probes.get("spec_acceptance_length"),
                    probes.get("spec_source", "server counters"),
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
                    acc_rate=acc_rate,
                    acc_len=acc_len,
                    gpu_util=probes.get("gpu_util"),
                    gpu_mem_pct=probes.get("gpu_mem_pct"),
                    kv_pct=probes.get("kv_pct"),
                    queue=probes.get("queue"),
                    send_lag=lag,
                    marks=marks,
                    arm_tok_s=tuple((v.name, v.window.tokens_per_s) for v in arm_views if v.window),
                )
            )
            if (now >= self._next_compare or final) and len(self.arm_names) >= 2:
                self._next_compare = now + 3_000_000_000
                names = self.arm_names
                self._comparison = compare(
                    self.totals[names[0]], self.totals[names[1]], self.alternations
                )
            warming = self.t_measure is None and (
                self.cfg.warmup_requests > 0 or self.cfg.warmup_s > 0
            )
            ok = sum(t.ok for t in self.totals.values())
            self._snap = Snapshot(
                t=now,
                elapsed_s=elapsed,
                target=self.target,
                model=self.model,
                arm=self.arm if self.cfg.assign == "switch" else self.cfg.assign,
                arms=tuple(self.arm_names),
                mode=self.cfg.mode,
                level=self.level,
                paused=self.paused,
                sent=sum(s.sent for s in stat),
                ok=ok,
                failed=n_failed,
                in_flight=sum(s.in_flight for s in stat),
                warming_up=warming,
                recording=self.recorder.path
                if self.recorder is not None and self.recorder.active
                else None,
                window=win,
                arm_views=tuple(arm_views),
                recent=tuple(self.history.recent),
                whole=tuple(self.history.whole_view()),
                events=tuple(self.events),
                comparison=self._comparison,
                probes=probes,
                done=final,
                loop_lag_ms=max((s.loop_lag_ms for s in stat), default=0.0),
                send_lag_ms=lag,
                insecure=self.cfg.insecure,
            )

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
        srv = self._server_probe(self.arm)
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
            if len(pr.arms) == 1 or self.cfg.assign != "switch":
                tot = pr.totals(t0=self.t_measure) if len(pr.arms) == 1 else None
            else:
                segs = [
                    (max(s, self.t_measure or s), e) for _, a, s, e in self.segments if a == arm
                ]
                tot = pr.totals(segments=segs)
            if tot is not None:
                out[arm] = tot
        return out

    # ------------------------------------------------------------------ outputs
    def snapshot(self) -> Snapshot | None:
        return self._snap

    def summary(self) -> dict[str, Any]:
        with self.lock:
            t_end = self.t_stop or perf_counter_ns()
            active = active_time(
                self.segments,
                t_end,
                self.t_measure,
                self.cfg.assign != "switch",
                self.arm_names,
                self.t_start,
            )
            server_spec = self._server_spec()
            return build_summary(
                started_at=self.started_at,
                duration_s=(t_end - self.t_start) / 1e9,
                target={
                    "url": self.target,
                    "model": self.model,
                    "endpoint": self.cfg.arms[0].endpoint or "chat",
                },
                totals=self.totals,
                active_s=active,
                alternations=self.alternations,
                server_spec=server_spec,
                slo_good=self.slo.any,
            )


def _with_acc(w: Any, rate: float, length: float | None, source: str) -> Any:
    from dataclasses import replace

    return replace(w, acceptance_rate=rate, acceptance_length=length, acceptance_source=source)
