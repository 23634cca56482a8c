"""The fleet: what a live run starts, watches and stops — its engine processes (local, or
Ray actors behind the same pipes) and the servers it manages itself (arms that take
turns on one GPU, each with a server tokmon starts, warms and stops).

The fleet performs; it does not decide. The conductor (``sources/conductor.py``) says
when the load changes and when the arms take turns; the live session folds what comes
back. The fleet acts on the run only through the session's surface (``Stage``): an
event for each phase (so the fold, live and replayed, sees the same run), the engines'
commands, and a stop when the run cannot go on as asked.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any

from tokmon.engine.worker import engine_main
from tokmon.model.data.commands import StopRun
from tokmon.model.data.records import Command, Pause, SwitchArm
from tokmon.model.workloads.config import RunConfig
from tokmon.sources.stage import Stage

DRAIN_POLL_S = 0.05  # how often the engines' in-flight counts are read while draining
WATCH_S = 1.0  # how often a managed server is checked for life


class Engines:
    """The engine processes (or Ray actors) of a run, each behind two pipes: its batches
    out, the commands in."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.procs: list[Any] = []
        self.cmd_conns: list[Connection] = []
        self.out_conns: list[Connection] = []

    def start(self, event: Any) -> None:
        """``event``: the session's event sink (a Ray worker's own events)."""
        n = max(1, self.cfg.workers)
        if self.cfg.ray is not None:
            self._start_ray(n, event)
            return
        ctx = mp.get_context("spawn")
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

    def _start_ray(self, n: int, event: Any) -> None:
        """The engines as Ray actors (``sources/ray_workers.py``), each behind the same
        two pipes as a local engine process."""
        from multiprocessing import Pipe

        from tokmon.sources.ray_workers import RayWorker, import_ray

        ray = import_ray()
        opts = {"scheduling_strategy": "SPREAD", "num_cpus": 1} | dict(self.cfg.ray_options)
        for i in range(n):
            out_r, out_w = Pipe(duplex=False)
            cmd_r, cmd_w = Pipe(duplex=False)
            w = RayWorker(ray, self.cfg, i, n, out_w, cmd_r, event, opts)
            self.procs.append(w)
            self.out_conns.append(out_r)
            self.cmd_conns.append(cmd_w)

    def send(self, cmd: Command) -> None:
        for c in self.cmd_conns:
            try:
                c.send(cmd)
            except (BrokenPipeError, OSError):
                pass

    def exit_code(self, worker: int) -> int | None:
        return self.procs[worker].exitcode  # type: ignore[no-any-return]

    def failures(self, known: list[str], lost: dict[int, str]) -> list[str]:
        """An engine that exited with an error and said nothing of it (``known``: what
        was said; ``lost``: Ray workers lost while the run went on, events already)."""
        out = []
        for i, p in enumerate(self.procs):
            code = p.exitcode
            if i in lost:
                continue  # (an event; its requests in flight are counted as cancelled)
            if code not in (0, None) and not any(m.startswith(f"engine {i} ") for m in known):
                out.append(f"engine {i} failed: exit code {code}")
        return out

    def close(self) -> None:
        """No engine process is left."""
        for p in self.procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=1.0)
        if self.cfg.ray is not None:
            from tokmon.sources.ray_workers import shutdown

            shutdown()


class Servers:
    """The servers a run manages (``sources/managed.py``: ``Managed``), taking turns: a
    restart drains the engines, stops one arm's server, starts the next one's, waits
    until it is ready, warms it, and only then switches the arm. Every phase is an
    event; nothing is sent meanwhile (idle in the figures)."""

    def __init__(self, stage: Stage, managed: Any) -> None:
        self.s = stage
        self.m = managed
        self.restarting = threading.Event()
        self.skipped: set[str] = set()  # arms whose server failed (--on-server-failure skip-arm)
        self.pauses = 0  # the Pause tokens sent: the engines say which they obeyed

    def serves(self, *arms: str) -> bool:
        return any(a in self.m.servers for a in arms)

    def start(self) -> None:
        """The servers started before the run: their ready events, then the watch."""
        for st in self.m.started:  # before the run: recorded
            self.ready(
                st.arm, st.ready_s, st.model, f"{st.arm}'s server ready in {st.ready_s:.1f} s"
            )
        threading.Thread(target=self._watch, name="tokmon-servers", daemon=True).start()

    def begin_restart(self, cur: str, new: str) -> str:
        """From ``cur`` to ``new`` in a thread of its own; the notice for the user."""
        if self.restarting.is_set():
            return "a server is restarting"
        self.restarting.set()
        threading.Thread(
            target=self._restart, args=(cur, new), name="tokmon-restart", daemon=True
        ).start()
        return f"restarting: {cur} → {new}"

    def _restart(self, cur: str, new: str) -> None:
        s, m = self.s, self.m
        try:
            with s.lock:
                user_paused = s.fold.paused
                self.pauses += 1
                s.send(Pause(True, self.pauses))
            # "stopping" is when the last engine obeyed the pause: a request one began while
            # the pause was on its way is before it, and the drain waits for it
            at = self._obeyed(self.pauses, m.drain_s)
            s.event(
                "server",
                f"restarting: {cur} → {new}",
                {"phase": "stopping", "arm": cur, "next": new},
                t=at,
            )
            old_srv = m.servers.get(cur)
            if old_srv is not None:
                s.expect_restart(m.url)  # (a planned restart: not "a restart detected")
                self._drain(m.drain_s)
                known = len(old_srv.strays)
                took = old_srv.stop(m.stop_timeout_s)
                # (imported here: the managed servers' module brings httpx, and the live
                # session's import must not bring the UI's libraries with it)
                from tokmon.sources.managed import stray_line

                for pid, mine in old_srv.strays[known:]:
                    msg = stray_line(cur, pid, old_srv.port, mine)
                    s.event("error", msg, {"arm": cur, "pid": pid})
                s.event(
                    "server",
                    f"{cur}'s server stopped in {took:.1f} s",
                    {"phase": "stopped", "arm": cur, "stop_s": took},
                )
                if not m.gpu_settled():
                    s.event("server", "GPU memory not back to its baseline; starting anyway")
            skip = m.on_failure == "skip-arm" and cur in m.servers
            model = self.start_server(new, fatal=not skip)
            if model is None and skip and not s.stopping:
                # --on-server-failure skip-arm: the run goes on with the arm it had
                self.skipped.add(new)
                s.event("server", f"arm {new} left out: its server failed")
                new = cur
                model = self.start_server(cur)
            if model is None:
                return
            with s.lock:
                now = perf_counter_ns()
                seg = s.fold.turns.next_segment()
                s.send(SwitchArm(new, seg, now, model=model))
                s.event("arm", f"arm → {new}", {"arm": new, "segment": seg}, t=now)
                s.segments_begun += 1
                if not user_paused:
                    s.send(Pause(False))
        finally:
            self.restarting.clear()

    def start_server(self, arm: str, fatal: bool = True) -> str | None:
        """Start ``arm``'s server until it is ready (with the --on-server-failure policy);
        its model, or None when the run stops."""
        s, m = self.s, self.m
        srv = m.servers[arm]
        tries = 2 if m.on_failure == "retry" else 1
        for attempt in range(tries):
            s.event("server", f"starting {arm}'s server", {"phase": "starting", "arm": arm})
            t0 = time.monotonic()
            try:
                srv.start()
                model = srv.wait_ready(m.ready_timeout_s, m.headers, stop=s.finished)
            except Exception as e:  # ServerFailed, or an OSError starting it
                srv.stop(m.stop_timeout_s)
                msg = str(e).split("\n", 1)[0]
                tail = str(e).split("\n", 1)[1] if "\n" in str(e) else srv.log_tail()
                s.event(
                    "server",
                    f"{arm}'s server failed: {msg}",
                    {"phase": "failed", "arm": arm, "log_tail": tail[-4000:]},
                )
                if attempt + 1 < tries and not s.stopping:
                    continue
                if fatal:
                    s.engine_errors.append(f"managed server of arm {arm}: {msg}")
                    s.command(StopRun(hard=True))
                return None
            ready = time.monotonic() - t0
            warmed = m.warm(srv.url, model or srv.arm.model, arm)
            self.ready(
                arm,
                ready,
                model,
                f"{arm}'s server ready in {ready:.1f} s (warmed with {warmed} requests)",
            )
            return srv.arm.model or model  # type: ignore[no-any-return]
        return None

    def ready(self, arm: str, ready_s: float, model: str, message: str) -> None:
        """The event of a managed server that became ready: its time to ready, model,
        command (secrets redacted) and environment record (surveyed once per arm)."""
        m = self.m
        self.s.event(
            "server",
            message,
            {
                "phase": "ready",
                "arm": arm,
                "ready_s": ready_s,
                "model": model,
                "command": m.command_of(arm),
                "env": m.environment(arm, m.servers[arm].url),
            },
        )

    def _obeyed(self, token: int, timeout_s: float) -> int | None:
        """When every engine had obeyed Pause ``token`` (None: not said within ``timeout_s``,
        or the run ended: the event is stamped when it is told)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.s.done:
            with self.s.lock:
                at = self.s.paused_at(token)
            if at is not None:
                return at
            time.sleep(DRAIN_POLL_S)
        return None

    def _drain(self, timeout_s: float) -> None:
        """Until no request is in flight (the engines' own counts, each sent after the
        pause), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.s.done:
            with self.s.lock:
                n = self.s.in_flight()
            if n == 0:
                return
            time.sleep(DRAIN_POLL_S)

    def _watch(self) -> None:
        """A managed server that dies while it is measured is an error, never silent."""
        s = self.s
        while not s.wait(WATCH_S):
            if s.stopping or self.restarting.is_set():
                continue
            srv = self.m.servers.get(s.fold.arm)
            if srv is not None and srv.proc is not None and not srv.alive():
                code = srv.proc.returncode
                msg = f"the server of arm {srv.arm.name} exited (code {code}) during the run"
                s.event(
                    "server",
                    msg,
                    {"phase": "failed", "arm": srv.arm.name, "log_tail": srv.log_tail()},
                )
                s.engine_errors.append(msg)
                s.command(StopRun(hard=True))
                return

    def strays(self) -> list[str]:
        return self.m.strays()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.m.close()
