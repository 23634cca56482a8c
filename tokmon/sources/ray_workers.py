"""Engine workers on a Ray cluster (``tokmon run --ray ADDRESS --workers N``).

Each worker is a Ray actor running the same engine loop as a local engine process, on
its share of the load. The parent sees it exactly as it sees a local one — a pipe of
``EngineBatch`` out and a pipe of commands in — through a bridge thread per actor that
fetches the actor's finished batches every ``flush_s`` and forwards commands, so the
fold, the dashboard, the recording and the reports are unchanged. Ray is used rather
than a protocol of our own: inference teams already run it (vLLM and SGLang place their
multi-node servers with it), and it gives placement, transport and failure detection.

Clocks: every duration is measured on the worker's host and needs no alignment. The
times that place a request on the run's axis (scheduled, sent, ended; token buckets)
are moved by the worker's clock offset, estimated at start by round trips (the tightest
of several) and re-checked every ``RECHECK_S``; each estimate, with its uncertainty (half
the round trip) and the worker's host, is an event in the recording.

A worker that is lost (its node gone, its process killed) is an event; the requests it
had in flight end as ``cancelled`` ("worker lost"), and the run goes on with the rest
(``--ray-on-loss stop`` ends it instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any

from tokmon.model.data.records import EngineBatch, EngineFailure, EngineStatus, RequestRecord
from tokmon.model.workloads.config import RunConfig

INSTALL = "--ray needs Ray: pip install 'tokmon-live[ray]'"
RECHECK_S = 30.0
PROBES = 7  # round trips per offset estimate: the tightest is kept


class RayUnavailable(Exception):
    pass


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(INSTALL) from None
    return ray


def connect(address: str, workers: int) -> None:
    """Join the cluster at ``address`` (``local``: start one in this process, for a
    laptop or a test). Raises RayUnavailable with one line."""
    ray = import_ray()
    kw: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    try:
        if address == "local":
            ray.init(num_cpus=max(2, workers), include_dashboard=False,
                     object_store_memory=128 << 20, **kw)  # fmt: skip
        else:
            ray.init(address=address, **kw)
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError …
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise RayUnavailable(f"--ray: cannot join the cluster at {address}: {why}") from None


def shutdown() -> None:
    """Leave the cluster (and stop it, if this process started it): no actor of this run
    is left behind."""
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():
            ray.shutdown()


class EngineActor:
    """The engine loop inside a Ray actor: it runs in a thread of its own with its own
    event loop (the actor's methods answer meanwhile), keeping its batches until the
    parent's bridge takes them."""

    def __init__(self, cfg: RunConfig, worker: int, nworkers: int) -> None:
        from tokmon.engine.worker import Engine

        self.host = socket.gethostname()
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engine = Engine(cfg, worker, nworkers, None, start_trace=False)
        self.failure: str | None = None
        self.thread = threading.Thread(target=self._run, name="tokmon-engine", daemon=True)
        self.thread.start()
        self.ready.wait(30)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready.set()
        try:
            self.loop.run_until_complete(self.engine.run())
        except Exception as e:  # a bug: the parent says why in one line
            self.failure = f"{type(e).__name__}: {e}"[:300]

    def clock(self) -> int:
        return perf_counter_ns()

    def hello(self) -> tuple[str, int]:
        return self.host, perf_counter_ns()

    def command(self, cmd: Any) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.engine.on_command, cmd)

    def take(self) -> tuple[list[EngineBatch], dict[int, tuple[str, int, str, int]], str | None]:
        """The batches so far (appended by the engine's thread: taken from the front, so
        one appended meanwhile stays for the next take), the requests in flight, and why
        the engine failed (None: it did not)."""
        b = self.engine.batches
        n = len(b)
        out = b[:n]
        del b[:n]
        return out, dict(self.engine.in_flight), self.failure


@dataclass(frozen=True, slots=True)
class Offset:
    """A worker's clock against the parent's: ``worker − parent`` in ns, ± ``uncertainty``."""

    ns: int
    uncertainty: int


def estimate_offset(ray: Any, actor: Any, probes: int = PROBES) -> Offset:
    """Round trips to the actor: the one with the shortest round trip bounds the offset
    best (the worker read its clock somewhere inside it; the middle is the estimate)."""
    best: Offset | None = None
    for _ in range(probes):
        t0 = perf_counter_ns()
        t_w = ray.get(actor.clock.remote(), timeout=30)
        t1 = perf_counter_ns()
        est = Offset(t_w - (t0 + t1) // 2, (t1 - t0) // 2)
        if best is None or est.uncertainty < best.uncertainty:
            best = est
    assert best is not None
    return best


def shift_batch(b: EngineBatch, off: int) -> EngineBatch:
    """A worker's batch on the parent's time axis (durations untouched)."""
    if off == 0:
        return b

    def rec(r: RequestRecord) -> RequestRecord:
        return replace(
            r,
            t_sched=r.t_sched - off,
            t_end=r.t_end - off,
            t_send=None if r.t_send is None else r.t_send - off,
        )

    return replace(
        b,
        records=[rec(r) for r in b.records],
        ticks={(t - off, a): n for (t, a), n in b.ticks.items()},
        events=[replace(e, t=e.t - off) for e in b.events],
        status=replace(
            b.status, t=b.status.t - off, paused_t=b.status.paused_t and b.status.paused_t - off
        ),
    )


def lost_records(
    flight: dict[int, tuple[str, int, str, int]], off: int, worker: int, now: int
) -> list[RequestRecord]:
    """The requests a lost worker had in flight, ended as cancelled."""
    return [
        RequestRecord(
            rid=rid,
            arm=arm,
            outcome="cancelled",
            t_sched=t_sched - off,
            t_end=max(now, t_sched - off),
            kind=kind,
            segment=seg,
            error="worker lost",
            worker=worker,
        )
        for rid, (arm, t_sched, kind, seg) in sorted(flight.items())
    ]


class RayWorker:
    """One Ray actor as the parent sees a local engine: ``out`` (batches) and ``cmd``
    (commands) pipes, and a process-like ``exitcode``/``join``/``kill``."""

    def __init__(
        self,
        ray: Any,
        cfg: RunConfig,
        worker: int,
        nworkers: int,
        out: Connection,
        cmd: Connection,
        on_event: Any,
        options: dict[str, Any],
    ) -> None:
        self.ray = ray
        self.cfg = cfg
        self.worker = worker
        self.out = out
        self.cmd = cmd
        self.on_event = on_event
        self.exitcode: int | None = None
        self.actor = ray.remote(EngineActor).options(**options).remote(cfg, worker, nworkers)
        self.host = "?"
        self.offset = Offset(0, 0)
        self._stop = threading.Event()
        self.thread = threading.Thread(
            target=self._bridge, name=f"tokmon-ray-{worker}", daemon=True
        )
        self.thread.start()

    def _forward_commands(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.cmd.poll(0.05):
                    continue
                c = self.cmd.recv()
            except (EOFError, OSError):
                return
            with contextlib.suppress(Exception):  # (a lost actor is seen by the bridge)
                self.actor.command.remote(c)

    def _recheck(self) -> None:
        off = estimate_offset(self.ray, self.actor)
        self.offset = off
        self.on_event(
            "worker",
            f"worker {self.worker} on {self.host}: clock offset {off.ns / 1e6:+.3f} ms "
            f"± {off.uncertainty / 1e6:.3f}",
            {
                "worker": self.worker,
                "host": self.host,
                "offset_ms": off.ns / 1e6,
                "uncertainty_ms": off.uncertainty / 1e6,
            },  # fmt: skip
        )

    def _bridge(self) -> None:
        ray = self.ray
        flight: dict[int, tuple[str, int, str, int]] = {}
        try:
            self.host, _ = ray.get(self.actor.hello.remote(), timeout=120)
            self._recheck()
        except Exception as e:
            self._lost(f"never started: {type(e).__name__}: {str(e)[:200]}", flight)
            return
        threading.Thread(target=self._forward_commands, daemon=True).start()
        next_check = time.monotonic() + RECHECK_S
        while not self._stop.is_set():
            try:
                batches, flight, failure = ray.get(self.actor.take.remote(), timeout=60)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + RECHECK_S
                    self._recheck()
            except Exception as e:
                self._lost(f"lost: {type(e).__name__}", flight)
                return
            # (``flight`` was read after these batches: none of theirs is in it)
            for b in batches:
                self.out.send(shift_batch(b, self.offset.ns))
                if b.status.done:
                    self.exitcode = 0
                    self._stop.set()
            if failure is not None:
                self.out.send(EngineFailure(self.worker, failure))
                self.exitcode = 1
                self._stop.set()
            else:
                self._stop.wait(self.cfg.flush_s)
        with contextlib.suppress(Exception):
            ray.kill(self.actor)

    def _lost(self, why: str, flight: dict[int, tuple[str, int, str, int]]) -> None:
        now = perf_counter_ns()
        recs = lost_records(flight, self.offset.ns, self.worker, now)
        with contextlib.suppress(OSError):
            if recs:
                st = EngineStatus(t=now, in_flight=0, sent=0, paused=False, arm="", level=0.0,
                                  mode=self.cfg.mode, loop_lag_ms=0.0, send_lag_ms=0.0,
                                  worker=self.worker)  # fmt: skip
                self.out.send(EngineBatch(self.worker, recs, {}, [], st))
            self.out.send(EngineFailure(self.worker, f"worker on {self.host} {why}", lost=True))
        self.exitcode = 1
        self._stop.set()

    # (process-like, for the parent's bookkeeping)
    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def kill(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self.ray.kill(self.actor)
