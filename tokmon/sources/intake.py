"""The live session's one way in for facts: each fact folded and recorded under one
lock (so the file holds the facts in the order the fold took them), the engines' batches
read as they come, the clock's tick once a second, and the run's end — the final tick,
the summary, the recording closed — when the last engine has said so.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from multiprocessing.connection import wait
from time import perf_counter_ns
from typing import Any

from tokmon.model.data.commands import StopRun
from tokmon.model.data.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.data.records import (
    EngineBatch,
    EngineFailure,
    EngineStatus,
    Event,
    StartTrace,
    TokenTick,
)
from tokmon.model.data.records import Stop as EngineStop
from tokmon.model.data.table import RequestTable, record_to_line
from tokmon.sources.session import Session
from tokmon.textsafe import dumps

# time 0 of a trace: this long after the last engine said it is up (the command's way there)
TRACE_LEAD_NS = 20_000_000
FOLD_ERRORS_SHOWN = 3  # internal errors put on the timeline (the rest are counted)


class Intake:
    """What comes in, as facts: events, the engines' batches and statuses, probe samples
    and the clock's ticks; and the engines' latest counts (a drain reads them)."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.statuses: dict[int, EngineStatus] = {}  # the engines' latest, not yet folded
        self.folded: dict[int, EngineStatus] = {}
        self.ended = False  # the final tick is folded: no more facts
        self.fold_errors = 0  # facts the fold could not take (``_fold_failed``)
        self.next_tick = 0
        self.engines_up: set[int] = set()
        self.trace_t0: int | None = None

    # ------------------------------------------------------------------ facts
    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        """An event from the session (a command, the ladder, a probe): ``t`` on the
        monotonic clock, now if not given."""
        at = (t or perf_counter_ns()) - self.s.t_start
        self.feed(Event(t=at, kind=kind, message=message, data=plain(data or {}), wall=time.time()))

    def sample(self, src: str, t: int, values: dict[str, Any]) -> None:
        self.feed(Sample(t - self.s.t_start, src, plain(values)))

    def feed(self, fact: Fact, lines: list[dict[str, Any]] | None = None) -> None:
        """Fold a fact and record it, with the events the fold derived from it, under one
        lock: the recording holds the facts in the order the fold took them."""
        s = self.s
        with s.lock:
            if self.ended:
                return
            try:
                derived = s.fold.apply(fact)
            except Exception as e:  # a defect in tokmon: the fact is still recorded
                derived = self._fold_failed(fact, e)
            if s.prom is not None:
                s.prom.collector.fact(fact)
                for ev in derived:
                    s.prom.collector.fact(ev)
            rec = s.recorder
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
            self.s.engine_errors.append(f"{what} (the run went on; its recording holds every fact)")
        if self.fold_errors > FOLD_ERRORS_SHOWN:
            return []
        t = perf_counter_ns() - self.s.t_start
        ev = Event(t=t, kind="error", message=what, wall=time.time())
        try:
            self.s.fold.apply(ev)
        except Exception:
            pass  # (recorded below all the same)
        return [ev]

    # ------------------------------------------------------------------ the engines
    def in_flight(self) -> int | None:
        """Requests in flight by the engines' latest counts (None: none counted yet)."""
        st = list(self.statuses.values()) or list(self.s.fold.statuses.values())
        return sum(x.in_flight for x in st) if st else None

    def paused_at(self, token: int) -> int | None:
        """When the last engine obeyed Pause ``token`` (perf ns), None until every engine
        has said so: from then on their counts are after the pause, and nothing is sent."""
        st = list(self.statuses.values())
        if not st or not all(x.paused and x.pause_token >= token for x in st):
            return None
        return max(x.paused_t for x in st)

    def read_loop(self) -> None:
        s = self.s
        try:
            self._read()
        except Exception as e:  # a defect in tokmon: the run stops and says so, never hangs
            s.engine_errors.append(f"internal error: {type(e).__name__}: {e}")
            s.stopping = True
            try:
                s.send(EngineStop(True))
            except Exception:
                pass
        finally:
            s.finished.set()

    def _read(self) -> None:
        s = self.s
        conns: list[Any] = list(s.engines.out_conns)
        by_conn = {id(c): i for i, c in enumerate(s.engines.out_conns)}
        while conns:
            ready: list[Any] = wait(conns, timeout=0.2)
            for c in ready:
                try:
                    msg: Any = c.recv()
                except (EOFError, OSError):
                    conns.remove(c)
                    w = by_conn[id(c)]
                    s.finished_workers.add(w)
                    if not s.stopping or s.engines.exit_code(w) not in (0, None):
                        self._engine_died(w, "ended without a word")
                    continue
                if isinstance(msg, EngineFailure):
                    conns.remove(c)
                    s.finished_workers.add(msg.worker)
                    if msg.lost and s.cfg.ray_on_loss == "continue":
                        # the rest go on; its in-flight requests came as cancelled
                        s.workers_lost[msg.worker] = msg.why
                        self.event("error", f"engine {msg.worker}: {msg.why}; the run goes on")
                    else:
                        self._engine_died(msg.worker, msg.why)
                    continue
                self._batch(msg)
                if msg.status.done:
                    conns.remove(c)
                    s.finished_workers.add(msg.worker)
            now = perf_counter_ns()
            if now >= self.next_tick:
                self.tick(now)
        for pr in s.probes:  # (each takes a last sample: counters cover the whole run)
            try:
                pr.stop()
            except Exception:
                pass
        with s.lock:
            # The run ends here: the final tick and the summary see the same facts, and a
            # fact that comes later (a switch of the alternation thread) is not the run's.
            s.t_stop = perf_counter_ns()
            self.tick(s.t_stop, final=True)
            final = s.final = s.summary()
            self.ended = True
        if s.recorder is not None:
            s.recorder.summary(final)
            s.recorder.end(s.t_stop)
            s.recorder.close()
        if s.on_finished is not None:
            try:
                s.on_finished(final)
            except Exception as e:  # reported, never fatal
                self.event("error", f"summary: {type(e).__name__}: {e}")
        s.finished.set()

    def _engine_died(self, worker: int, why: str) -> None:
        msg = f"engine {worker} failed: {why}"
        self.s.engine_errors.append(msg)
        self.event("error", msg)
        if not self.s.stopping:
            self.s.command(StopRun(hard=True))  # the rest of the load is not the run asked for

    def _batch(self, b: EngineBatch) -> None:
        s = self.s
        t0 = s.t_start
        chunks = s.recorder is not None and s.recorder.chunks
        with s.lock:
            if b.records:
                # the lines a recording holds are the facts the fold takes (one conversion)
                lines = [record_to_line(r, t0, chunks) for r in b.records]
                self.feed(Requests(RequestTable.from_lines(lines, s.fold.vocab)), lines)
            if b.prompts and s.recorder is not None:
                s.recorder.prompts(b.prompts)
            if b.ticks:
                self.feed(Tokens(tuple(TokenTick(t - t0, a, n) for (t, a), n in b.ticks.items())))
            self.statuses[b.worker] = b.status
            if b.fault:
                # the load's file failed as it was read: the rest is not the run asked for;
                # what was measured is kept, and the exit says why
                s.engine_errors.append(b.fault)
                self.event("error", f"{b.fault}; the run stops here")
                if not s.stopping:
                    s.command(StopRun())
            if s.cfg.mode == "trace" and self.trace_t0 is None:
                self.engines_up.add(b.worker)
                if len(self.engines_up | s.finished_workers) >= max(1, s.cfg.workers):
                    # every engine is up: time 0 of the trace, a moment from now, for all
                    t0 = perf_counter_ns() + TRACE_LEAD_NS
                    self.trace_t0 = t0
                    s.send(StartTrace(t0))
                    assert s.cfg.trace is not None
                    self.event("trace", f"trace started: {s.cfg.trace.describe()}")

    def tick(self, now: int, final: bool = False) -> None:
        """Once a second: the engines' status where it changed, then the clock's tick."""
        s = self.s
        self.next_tick = now + 1_000_000_000
        with s.lock:
            for w, st in self.statuses.items():
                # (a pause's token and moment are the conductor's business, not a figure)
                st = replace(st, t=st.t - s.t_start, pause_token=0, paused_t=0)
                if replace(st, t=0) != replace(self.folded.get(w, st), t=0) or w not in self.folded:
                    self.folded[w] = st
                    self.feed(Status(st))
            self.feed(Tick(now - s.t_start, final))


def plain(d: dict[str, Any]) -> dict[str, Any]:
    """What a recording gives back of a dict (strict JSON: tuples as lists, NaN as None),
    so that the live fold takes exactly what a replay will."""
    out: dict[str, Any] = json.loads(dumps(d, compact=True))
    return out
