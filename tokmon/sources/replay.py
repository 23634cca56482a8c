"""Replay a recording through the same aggregation as a live run: a dashboard source.

A virtual clock advances at the chosen speed; every fact whose time has come is fed to
an ``Aggregator``. Seeking back rebuilds from the start (fast: no drawing, a coarse tick
before the part that is on screen). In follow mode the file is re-read as it grows.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from typing import Any, Literal

import numpy as np

from tokmon.model.fold import Aggregator, mix_weights
from tokmon.model.snapshot import Snapshot
from tokmon.model.stats import Slo
from tokmon.recording.reader import Recording, read_more, read_recording, recording_summary

SPEEDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class ReplaySource:
    commands = frozenset({"play", "speed", "seek", "jump", "end"})

    def __init__(
        self, path: str, *, speed: float = 1.0, follow: bool = False, rec: Recording | None = None
    ) -> None:
        self.path = path
        self.rec = rec or read_recording(path)
        self.follow = follow
        self.speed = speed
        self.playing = True
        self.lock = threading.RLock()
        self._snap: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset()

    # ------------------------------------------------------------------ timeline
    def _build_timeline(self) -> None:
        """Requests in order of their end, as column rows; everything else (token ticks,
        events, probe samples: a few a second) as a sorted list beside them."""
        self.order = np.empty(0, dtype=np.int64)
        self.items: list[tuple[int, int, Any]] = []
        self.ri = 0  # next request, in order of end
        self.idx = 0  # next item
        self._extend_timeline(0, 0, 0, 0)

    def _extend_timeline(self, n_req: int, n_tick: int, n_ev: int, n_smp: int) -> None:
        """Put the facts from these counts on into the part of the timeline not yet
        played (kept sorted; what is before the current position is fed at once)."""
        rec = self.rec
        t_end = rec.requests.cols["t_end"]
        tail = np.concatenate([self.order[self.ri :], np.arange(n_req, len(rec.requests))])
        tail = tail[np.argsort(t_end[tail], kind="stable")]
        self.order = np.concatenate([self.order[: self.ri], tail])
        self.req_t = t_end[self.order]
        new: list[tuple[int, int, Any]] = [(t, 1, (t, a, n)) for t, a, n in rec.ticks[n_tick:]]
        new += [(ev.t, 2, ev) for ev in rec.events[n_ev:]]
        new += [(t, 3, (src, v)) for t, src, v in rec.samples[n_smp:]]
        rest = self.items[self.idx :] + new
        rest.sort(key=lambda x: (x[0], x[1]))
        self.items = self.items[: self.idx] + rest
        last = int(t_end.max()) if t_end.size else 0
        self.end_t = max(rec.t_end or 0, self.items[-1][0] if self.items else 0, last)
        self.event_times = sorted(ev.t for ev in rec.events if ev.kind != "engine")

    def _reset(self) -> None:
        h = self.rec.header
        s = h.get("settings") or {}
        self.agg = Aggregator(
            self.rec.arms,
            slo=Slo(**(h.get("slo") or {})),
            assign=s.get("assign", "switch"),
            mode=s.get("mode", "concurrency"),
            level=float(s.get("concurrency", 0) if s.get("mode") != "rate" else s.get("rate", 0)),
            t_start=0,
            kind_weights=mix_weights(s),
        )
        self.probes: dict[str, dict[str, Any]] = {}
        # From the start, on a timeline sorted whole again (following a file may have put
        # late facts after the part that was played).
        self._build_timeline()
        self.pos = 0
        self.next_tick = 1_000_000_000

    def _feed_requests(self, upto: int, side: Literal["left", "right"], now: int) -> None:
        """Requests that ended before ``upto`` (or at it, ``side="right"``), column-wise;
        the ones that can still be in the window at ``now`` become live-window records."""
        # (only the part not yet fed is sorted for sure: following a file adds rows)
        hi = self.ri + int(np.searchsorted(self.req_t[self.ri :], upto, side=side))
        if hi > self.ri:
            rows = self.order[self.ri : hi]
            self.agg.add_table(
                self.rec.requests, rows, window_from=now - int(self.agg.window_s * 1e9)
            )
            self.ri = hi

    def _feed_until(self, t: int, fine_from: int = 0, quick: bool = False) -> None:
        """Feed every fact up to ``t``; tick each second from ``fine_from``, every 10 s before.

        The order is the live one: a tick sees the requests that ended before it."""
        items = self.items
        while True:
            nt = self.next_tick
            no = items[self.idx][0] if self.idx < len(items) else None
            if nt <= t and (no is None or nt <= no):
                self._feed_requests(nt, "left", nt)
                self._tick(nt, quick)
                self.next_tick += 1_000_000_000 if nt >= fine_from else 10_000_000_000
            elif no is not None and no <= t:
                # (requests wait for the next tick: the other facts do not touch them, and
                # feeding a thousand at once costs what feeding ten does)
                self._apply(items[self.idx])
                self.idx += 1
            else:
                break
        self._feed_requests(t, "right", t)
        self.pos = t

    def _apply(self, item: tuple[int, int, Any]) -> None:
        _when, kind, obj = item
        if kind == 1:
            self.agg.add_ticks({(obj[0], obj[1]): obj[2]})
        elif kind == 2:
            self.agg.apply(obj)
        else:
            src, v = obj
            self.probes[src] = v
            if self.agg.steps:  # as the live session does while a ladder runs
                self.agg.note_probe(_when, v)

    def _tick(self, t: int, quick: bool = False) -> None:
        probes: dict[str, Any] = {}
        for src in ("host", "gpu", "server"):
            probes.update(self.probes.get(src, {}))
        done = t >= self.end_t and not self.follow
        meta = {
            "target": (self.rec.header.get("target") or {}).get("url", self.path),
            "model": (self.rec.header.get("target") or {}).get("model", ""),
            "replay": {
                "speed": self.speed,
                "playing": self.playing,
                "pos_s": t / 1e9,
                "end_s": self.end_t / 1e9,
                "truncated": self.rec.truncated,
            },
        }
        self._snap = self.agg.tick(t, probes=probes, meta=meta, final=done, quick=quick)

    # ------------------------------------------------------------------ source
    def start(self) -> None:
        with self.lock:
            self._feed_until(0)
            self._tick(0)
        self._thread = threading.Thread(target=self._run, name="tokmon-replay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        last_reload = last
        while not self._stop.wait(0.05):
            now = time.monotonic()
            dt, last = now - last, now
            if self.follow and now - last_reload > 1.0:
                last_reload = now
                self._reload()
            with self.lock:
                if self.playing and self.pos < self.end_t:
                    target = min(self.end_t, self.pos + int(dt * self.speed * 1e9))
                    self._feed_until(target, fine_from=0)
                    if target >= self.end_t:
                        self._tick(self.end_t)

    def _reload(self) -> None:
        """Follow mode: read what was appended and put it on the timeline, after what
        was played (a fact from before the current position is fed at once)."""
        with self.lock:
            n_req, n_ev = len(self.rec.requests), len(self.rec.events)
            n_tick, n_smp = len(self.rec.ticks), len(self.rec.samples)
            offset = self.rec.offset
            try:
                if not read_more(self.rec):
                    return
            except Exception:
                return
            if offset is None:  # a gzip file was read again whole: start over
                pos = self.pos
                self._reset()
                self._feed_until(pos, fine_from=max(0, pos - 600_000_000_000), quick=True)
                return
            self._extend_timeline(n_req, n_tick, n_ev, n_smp)

    def snapshot(self) -> Snapshot | None:
        return self._snap

    def seek_to(self, t: int) -> None:
        t = max(0, min(self.end_t, t))
        with self.lock:
            if t < self.pos:
                self._reset()
            self._feed_until(t, fine_from=max(0, t - 600_000_000_000), quick=True)
            self._tick(t)

    def command(self, name: str, *args: Any) -> str | None:
        if name == "play":
            self.playing = not self.playing
            self._retick()
            return "playing" if self.playing else "paused"
        if name == "speed":
            i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
            i = max(0, min(len(SPEEDS) - 1, i + int(args[0] if args else 1)))
            self.speed = SPEEDS[i]
            self._retick()
            return f"speed {self.speed:g}×"
        if name == "seek":
            self.seek_to(self.pos + int(float(args[0]) * 1e9))
            return f"at {self.pos / 1e9:.0f} s"
        if name == "jump":
            direction = int(args[0]) if args else 1
            if direction > 0:
                i = bisect_right(self.event_times, self.pos)
                t = self.event_times[i] if i < len(self.event_times) else self.end_t
            else:
                i = bisect_right(self.event_times, self.pos - 1_000_000_000) - 1
                t = self.event_times[i] if i >= 0 else 0
            self.seek_to(t)
            return f"at {self.pos / 1e9:.0f} s"
        if name == "end":
            self.seek_to(self.end_t)
            return "at the end"
        return None

    def _retick(self) -> None:
        with self.lock:
            self._tick(self.pos)

    def summary(self) -> dict[str, Any]:
        return recording_summary(self.rec)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
