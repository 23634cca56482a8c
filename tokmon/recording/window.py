"""A window of a run (``report --from/--to``, and a later part of a rotated run read
alone): the facts of a recording cut to a stretch of its time, so that the same fold
reads them as a run that began, in the state the run was in, at the window's start.

What a window counts (METRICS.md, "A window of a run"):

* the requests sent in it that also ended in it (``t_sched >= from``, ``t_end <= to``):
  a request that straddles an edge belongs to neither side, as a warm-up request
  belongs to no measurement;
* the tokens that arrived in it, over the time measured in it (each arm's spans, from
  the first request sent in the window, as after a warm-up): the tokens of a request
  sent before the window that arrive in it are counted, as they are live after a
  warm-up, and no token is counted against time that was not;
* the probe samples, ticks, markers and alerts in it;
* the run's state at its start (the arm in force, the load level, an open ladder step,
  a pause), as if each had been set at that instant.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator

import numpy as np

from tokmon.model.data.facts import Requests, Tick, Tokens, time_of
from tokmon.model.data.records import Event
from tokmon.model.statistics.words import hms
from tokmon.recording import Window
from tokmon.recording.parts import CARRIED, LATE_LINE_NS
from tokmon.recording.reader import Item, Recording, Session, hold, no_gc, scan

__all__ = ["Window", "read_window", "window_of", "windowed"]


def window_of(rec: Recording, asked: Window | None) -> Window | None:
    """The window a report of ``rec`` covers: the one asked for; a later part read alone
    covers its own time (from the instant it began); else the whole run (None)."""
    if asked is not None:
        return asked
    if rec.window is not None:
        return rec.window  # (read as a window: ``read_window``)
    rot = rec.header.get("rotation")
    if rec.part > 1 and isinstance(rot, dict):
        t = rot.get("from_ns")
        if isinstance(t, int) and not isinstance(t, bool) and t > 0:
            return Window(t)
    return None


def windowed(items: Iterable[Item], w: Window) -> Iterator[Item]:
    """The items of a scan (after its ``Session``) cut to ``w``: what a window counts
    (the module's doc), the run's state at its start as events at that instant."""
    lo = w.t_from
    hi = w.t_to if w.t_to is not None else 2**62
    state: dict[str, Event] = {}  # the last event of each carried kind before the window
    inside = False
    for item in items:
        if isinstance(item, Session):  # (a later session of the file: it starts again)
            yield item
            state, inside = {}, False
            continue
        if isinstance(item, Requests):
            keep = mask_of(item.table.cols, w)
            if keep.all():
                yield item
            elif keep.any():
                yield Requests(item.table.take(keep))
            continue
        t = time_of(item)
        if t is None:
            if inside:
                yield item  # (a status: no time of its own)
            continue
        if t < lo:
            if isinstance(item, Event) and item.kind in CARRIED:
                state[item.kind] = item
            continue
        if not inside:
            inside = True
            yield from carried(state, lo)
            if lo > 0 and not (isinstance(item, Tick) and t == lo):
                yield Tick(lo)  # (a replay of the window draws its first frame at its start)
        if isinstance(item, Tokens):  # (the buckets of a tick: those inside, each by its time)
            kept = tuple(b for b in item.buckets if lo <= b.t < hi)
            if kept:
                yield item if len(kept) == len(item.buckets) else Tokens(kept)
            continue
        if t > hi:
            if isinstance(item, Tick) and t > hi + LATE_LINE_NS:
                break  # (the requests that ended in the window are all read)
            continue
        yield item
    if not inside:
        yield from carried(state, lo)


def carried(state: dict[str, Event], t: int) -> list[Event]:
    """The run's state before ``t`` as events at ``t``: the arm in force, the load
    level, a ladder step still open (with what is left of its warm-up), a pause."""
    out = []
    end = state.get("ladder")
    for kind in ("arm", "level", "step", "pause"):
        ev = state.get(kind)
        if ev is None:
            continue
        data = dict(ev.data)
        if kind == "step":
            if end is not None and end.t >= ev.t:
                continue  # the ladder had ended
            warm = data.get("warm_s")
            if isinstance(warm, (int, float)) and not isinstance(warm, bool):
                data["warm_s"] = max(0.0, (ev.t + warm * 1e9 - t) / 1e9)
        if kind == "pause" and not ev.message.startswith("paused"):
            continue
        out.append(dataclasses.replace(ev, t=t, data={**data, "carried": True}))
    return out


def past_end(w: Window, run_end: int) -> str | None:
    """Why a window holds nothing of a run that ended at ``run_end`` (None: it does)."""
    if w.t_from < run_end:
        return None
    return f"--from is past the run's end (it ran {hms(run_end / 1e9, hours=True)})"


def mask_of(cols: dict[str, np.ndarray], w: Window) -> np.ndarray:
    """The rows of a request table the window counts."""
    keep: np.ndarray = cols["t_sched"] >= w.t_from
    if w.t_to is not None:
        keep &= cols["t_end"] <= w.t_to
    return keep


def read_window(path: str, w: Window) -> Recording:
    """A window of a recording held in memory (``replay --from/--to``): of a rotated run,
    only the parts it needs are read."""
    with no_gc():
        items = scan(path, start_ns=w.t_from)
        first = next(items)
        rec = hold(itertools.chain([first], windowed(items, w)))
    rec.window = w
    return rec
