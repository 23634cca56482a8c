"""Replay a recording: a dashboard source that plays the live run again.

A virtual clock advances at the chosen speed and the recording's facts, up to it, go
through the fold as they went live (``tokmon.recording.play``). Seeking back starts over
(fast: nothing is drawn, one tick in ten before the last ten minutes). In follow mode the
file is re-read as it grows.

A rotated run (a soak of hours or days) is played as it is read (``StreamPlayer``): the
first frame needs only the first part's beginning, and memory stays that of a part. A
seek far ahead (more than ``NEAR_NS``) or back opens the run again at the part in force
there, in the run's state at that instant, and its whole-run figures then cover from the
part's start, which the header says ("figures from"); a seek near ahead folds the way.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from dataclasses import replace
from typing import Any

from tokmon.model.data.commands import REPLAY, Command, End, Jump, Play, Seek, Speed
from tokmon.model.folding.snapshot import Snapshot
from tokmon.recording import Window
from tokmon.recording.play import Player, StreamPlayer, summary_of
from tokmon.recording.reader import (
    Recording,
    part_start,
    read_more,
    read_recording,
    rotation_of,
)
from tokmon.recording.window import read_window

SPEEDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
FINE_NS = 600_000_000_000  # a seek draws every tick of the last ten minutes before it
NEAR_NS = 600_000_000_000  # a streamed run: a seek this near ahead folds the way there


class ReplaySource:
    commands = REPLAY
    near_ns = NEAR_NS  # (a test of a short run makes it shorter)

    def __init__(
        self,
        path: str,
        *,
        speed: float = 1.0,
        follow: bool = False,
        rec: Recording | None = None,
        window: Window | None = None,
    ) -> None:
        """``window``: replay that stretch of the run (``--from/--to``): it opens at its
        start, in the state the run was in, and its figures cover the window."""
        self.path = path
        # (a run written in parts, --record-rotate or --record-max-size: played as read)
        self.streamed = rec is None and not follow and rotation_of(path) is not None
        self.window = window
        self.player: Player | StreamPlayer
        if self.streamed:
            self.player = StreamPlayer(path, window)
            self.rec = self.player.rec  # (it fills as the scan goes: events, the end)
        else:
            self.rec = rec or (
                read_recording(path) if window is None else read_window(path, window)
            )
            self.player = Player(self.rec)
        self.follow = follow
        self.speed = speed
        self.playing = True
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pos = self.player.start  # (a window of the run: where it begins)
        self._shown: Snapshot | None = None
        self._shown_key: tuple[Any, ...] = ()
        self._events()

    def _events(self) -> None:
        self.event_times = sorted(ev.t for ev in self.rec.events if ev.kind != "engine")

    @property
    def end_t(self) -> int:
        return self.player.end_t

    # ------------------------------------------------------------------ source
    def start(self) -> None:
        with self.lock:
            self.player.play_until(self.pos)
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
                    self.pos = min(self.end_t, self.pos + int(dt * self.speed * 1e9))
                    self.player.play_until(self.pos)

    def _reload(self) -> None:
        """Follow mode: read what was appended; a gzip file, read again whole (or a file
        without ticks), is played again from the start up to where the replay was."""
        with self.lock:
            offset = self.rec.offset
            try:
                if not read_more(self.rec):
                    return
            except Exception:
                return
            self._events()
            if offset is None or not self.rec.clocked:  # (no ticks: they are made anew)
                self.player = Player(self.rec)
                self.player.play_until(self.pos, fine_from=max(0, self.pos - FINE_NS), seeking=True)
            else:
                assert isinstance(self.player, Player)  # (following: never streamed)
                self.player.extend()

    def snapshot(self) -> Snapshot | None:
        with self.lock:
            snap = self.player.fold.snapshot
            if snap is None:
                return None
            key = (id(snap), self.speed, self.playing, self.pos, self.end_t, self.rec.truncated)
            if key == self._shown_key:  # the same object: the dashboard draws no frame
                return self._shown
            self._shown_key = key
            self._shown = replace(
                snap,
                target=snap.target or self.path,
                done=snap.done and not self.follow,
                replay={
                    "speed": self.speed,
                    "playing": self.playing,
                    "pos_s": self.pos / 1e9,
                    "end_s": self.end_t / 1e9,
                    "truncated": self.rec.truncated,
                    **({"from_s": self.player.start / 1e9} if self.player.start else {}),
                },
            )
            return self._shown

    def seek_to(self, t: int) -> None:
        with self.lock:
            if isinstance(self.player, StreamPlayer):
                self._seek_stream(t)
                return
            t = max(self.player.start, min(self.end_t, t))
            if t < self.player.pos:
                self.player = Player(self.rec)
            self.player.play_until(t, fine_from=max(0, t - FINE_NS), seeking=True)
            self.pos = t

    def _seek_stream(self, t: int) -> None:
        """A streamed run: fold the way to a time near ahead; else open the run again at
        the part in force there (a window asked for: never before its start)."""
        p = self.player
        assert isinstance(p, StreamPlayer)
        lo = self.window.t_from if self.window is not None else 0
        t = max(lo, min(self.end_t, t))
        if not (p.pos <= t <= p.pos + self.near_ns):
            at = max(lo, part_start(self.path, t))
            if not (p.start == at and p.pos <= t):  # (ahead in the part open: go on)
                w = Window(at, self.window.t_to if self.window is not None else None)
                p = StreamPlayer(self.path, w if at > 0 else self.window, end_t=p.end_t)
                self.player, self.rec = p, p.rec
        p.play_until(t, fine_from=max(0, t - FINE_NS), seeking=True)
        self.pos = t

    def command(self, cmd: Command) -> str | None:
        match cmd:
            case Play():
                self.playing = not self.playing
                return "playing" if self.playing else "paused"
            case Speed():
                i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
                i = max(0, min(len(SPEEDS) - 1, i + cmd.step))
                self.speed = SPEEDS[i]
                return f"speed {self.speed:g}×"
            case Seek():
                self.seek_to(self.pos + int(cmd.seconds * 1e9))
                return f"at {self.pos / 1e9:.0f} s"
            case Jump():
                with self.lock:
                    self.seek_to(self._event_from(cmd.direction))
                return f"at {self.pos / 1e9:.0f} s"
            case End():
                self.seek_to(self.end_t)
                return "at the end"
        return None

    def _event_from(self, direction: int) -> int:
        """The next event's time after the position (the end if none), or the last one
        before it (0 if none). A streamed run knows the events read so far (some lie
        ahead of the position); forward past them, it reads on to the next one."""
        p = self.player
        if isinstance(p, StreamPlayer):
            self._events()
        if direction < 0:
            i = bisect_right(self.event_times, self.pos - 1_000_000_000) - 1
            return self.event_times[i] if i >= 0 else 0
        i = bisect_right(self.event_times, self.pos)
        if i < len(self.event_times):
            return self.event_times[i]
        if isinstance(p, StreamPlayer):
            if self.pos > p.pos:
                p.play_until(self.pos, fine_from=self.pos, seeking=True)
            nxt = p.play_to_event(self.pos)
            return self.end_t if nxt is None else nxt
        return self.end_t

    def summary(self) -> dict[str, Any]:
        if isinstance(self.player, StreamPlayer):
            return self.player.summary()
        return summary_of(self.rec)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
