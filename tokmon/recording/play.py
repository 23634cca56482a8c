"""A recording folded again: the same facts, in the same order, through the same fold as
the live run, so a replay shows what the live run showed and a report says what its
summary said."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tokmon.model.data.facts import Fact, Requests, Tick, time_of
from tokmon.model.data.records import Event
from tokmon.model.data.table import RequestTable
from tokmon.model.folding.fold import Fold, FoldSettings, Pace
from tokmon.model.judge.analyses import Analyses
from tokmon.recording import RecordingError
from tokmon.recording.prefetch import read_ahead
from tokmon.recording.reader import (
    Item,
    Recording,
    Session,
    last_time,
    no_gc,
    read_recording,
    scan,
)
from tokmon.recording.settings import settings_from_header
from tokmon.recording.window import Window, window_of, windowed

COARSE_NS = 10_000_000_000  # while seeking, before the part on screen: a tick in ten at least


def settings_of(rec: Recording) -> FoldSettings:
    return settings_from_header(rec.header, rec.arms)


def end_of(rec: Recording) -> int:
    return rec.t_end if rec.t_end is not None else rec.last_t


@dataclass
class Folded:
    """A recording folded for a report: the fold (the summary, as live) and the report's
    own analyses, taken from the same facts in one pass; ``window``: the stretch of the
    run they cover (None: all of it)."""

    rec: Recording
    fold: Fold
    analyses: Analyses
    window: Window | None = None

    @property
    def end(self) -> int:
        """Where the figures end (the run's end, or the window's)."""
        run_end = end_of(self.rec)
        return run_end if self.window is None else self.window.end(run_end)


def fold_report(items: Iterable[Item], window: Window | None = None) -> Folded:
    """Every fact through the fold and the report's analyses, in one pass that holds no
    request once it is folded: a report of a day-long recording streams (``scan`` with
    ``cut=CUT``), a held recording goes through the same code (``held``). ``window``: a
    stretch of the run (``report --from/--to``); a later part read alone is the window
    of its own time.

    A tick only closes the step detector's seconds here (nothing is drawn). Requests
    arrive in their place among the ticks (``Fold.arrive``, ``Analyses.arrive``: the
    step detector, a segment's late requests) and are counted a stretch at a time, up to
    the next event or ``STRETCH`` rows (``count``): a day's 86,400 ticks cost 86,400
    passes of a few numpy calls through every reducer otherwise, most of a report's
    fold."""
    out: Folded | None = None
    stretch: Stretch | None = None
    it = iter(items)
    first = next(it, None)
    w = None
    if isinstance(first, Session):
        w = window_of(first.rec, window)
        if w is not None and w != first.rec.window:  # (one read as a window is cut already)
            it = windowed(it, w)
    for item in itertools.chain([first] if first is not None else [], it):
        if isinstance(item, Session):  # (a later session of an appended file: anew)
            rec = item.rec
            fold = Fold(settings_of(rec), vocab=rec.requests.vocab, t0=w.t_from if w else 0)
            out = Folded(rec, fold, Analyses(fold.settings.drift_alert_pct_h), w)
            stretch = Stretch(fold.vocab, fold.count, out.analyses.count)
        elif out is None or stretch is None:
            raise RecordingError("a recording's facts before its header")
        elif isinstance(item, Requests):
            out.fold.arrive(item.table)
            out.analyses.arrive(item.table)
            stretch.add(item.table)
        elif isinstance(item, Tick):
            out.fold.tick(item.t, Pace.CLOSE)
        else:
            if isinstance(item, Event):  # (an event changes what the requests after it are)
                stretch.flush()
            out.fold.apply(item)
            if isinstance(item, Event):
                out.analyses.event(item)
    if out is None or stretch is None:
        raise RecordingError("an empty recording")
    stretch.flush()
    return out


STRETCH = 50_000  # requests counted at once at most (a run with no event is not held)


class Stretch:
    """Requests arrived, not yet counted: counted together (by each of ``counters``)
    before what reads the counts (an event, a drawn tick), or at ``STRETCH`` rows."""

    def __init__(
        self, vocab: dict[str, list[Any]], *counters: Callable[[RequestTable], object]
    ) -> None:
        self.vocab = vocab
        self.counters = counters
        self.parts: list[RequestTable] = []
        self.rows = 0

    def add(self, tb: RequestTable) -> None:
        self.parts.append(tb)
        self.rows += tb.n
        if self.rows >= STRETCH:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            tb = RequestTable.concat(self.parts, self.vocab, free=False)
            self.parts, self.rows = [], 0
            for count in self.counters:
                count(tb)


CUT = (Event, Tick)  # the facts a report's fold takes the requests before


def held(rec: Recording) -> Iterator[Item]:
    """A recording read whole, as the items a scan gives (``cut=CUT``)."""
    yield Session(rec)
    tb = rec.requests
    lo = 0
    for rows, fact in rec.timeline:
        if rows > lo and isinstance(fact, CUT):
            yield Requests(tb.slice(lo, rows))
            lo = rows
        yield fact
    if lo < tb.n:
        yield Requests(tb.slice(lo, tb.n))


def stream_report(path: str, window: Window | None = None) -> Folded:
    """A recording folded as it is read: its requests are never all in memory. With a
    ``window``, the parts of a rotated run that end before it are not read."""
    with no_gc():
        items = scan(
            path, series=False, cut=CUT, start_ns=window.t_from if window else 0, ahead=True
        )
        first = next(items)
        if isinstance(first, Session) and not _arms_named(first.rec):
            # (a file whose header names no arm: its arms are known from its requests)
            return fold_report(held(read_recording(path)), window)
        return fold_report(itertools.chain([first], read_ahead(items)), window)


def _arms_named(rec: Recording) -> bool:
    s = rec.header.get("settings") or {}
    return any(isinstance(a, dict) and "name" in a for a in s.get("arms", []))


def summary_of(rec: Recording, folded: Folded | None = None) -> dict[str, Any]:
    """The run's summary: what the live run's ``--summary-json`` said (of a window of
    the run: the same figures over the window, and the window)."""
    folded = folded or fold_report(held(rec))
    out = folded.fold.summary(folded.end)
    w = folded.window
    if w is not None:
        out["window"] = w.describe(end_of(rec))
        out["duration_s"] = max(0.0, (folded.end - w.t_from) / 1e9)
        return out  # (a check of outputs was of the whole run)
    live = rec.summary or {}
    if "output_check" not in out and isinstance(live.get("output_check"), dict):
        out["output_check"] = live["output_check"]  # measured live, not recomputable
    return out


def legacy_timeline(rec: Recording) -> list[tuple[int, Fact]]:
    """A file written before ticks were recorded: a tick each second, placed by time
    (the live run's exact instants are not known; its figures are close, not equal)."""
    out: list[tuple[int, Fact]] = []
    t_end = rec.requests.cols["t_end"]
    k = 1
    for rows, fact in rec.timeline:
        t = time_of(fact) or 0
        while k * 1_000_000_000 <= t:
            out.append((rows, Tick(k * 1_000_000_000)))
            k += 1
        out.append((rows, fact))
    last = max(end_of(rec), int(t_end.max()) if t_end.size else 0)
    while k * 1_000_000_000 < last:
        out.append((rec.requests.n, Tick(k * 1_000_000_000)))
        k += 1
    out.append((rec.requests.n, Tick(last, final=True)))
    return out


class _Ticks:
    """How a player takes a tick: drawn as live; while seeking, drawn without the A/B
    comparison, and before ``fine_from`` only one every ``coarse`` (the others close
    their second only: enough for the whole-run view).

    Requests arrive in their place (``Fold.arrive``) and are counted, as a report counts
    them, a stretch at a time: before a tick that is drawn, an event, or ``STRETCH``
    rows (``_counted``). Played, that is every second, as live; a seek passes over
    most seconds without drawing them, and counts minutes of requests at once rather
    than a slice between every two facts."""

    fold: Fold
    pos: int
    end_t: int
    _coarse_next: int
    _stretch: Stretch  # requests arrived, not yet counted (made with the fold)

    def _requests(self, tb: RequestTable) -> None:
        self.fold.arrive(tb)
        self._stretch.add(tb)

    def _counted(self) -> None:
        """Every request arrived counted (before what reads the counts)."""
        self._stretch.flush()

    def _fact(self, fact: Fact) -> None:
        """A fact other than a tick, in its place."""
        if isinstance(fact, Requests):
            self._requests(fact.table)
            return
        if isinstance(fact, Event):  # (an event changes what the requests after it are)
            self._counted()
        self.fold.apply(fact)

    def _tick(self, fact: Tick, fine_from: int, seeking: bool) -> bool:
        """Take one tick; whether it was drawn."""
        drew = False
        if fact.t < fine_from and fact.t < self._coarse_next and not fact.final:
            self.fold.tick(fact.t, Pace.CLOSE)
        else:
            self._counted()
            if seeking and not fact.final:
                self.fold.tick(fact.t, Pace.SEEK)
            else:
                self.fold.apply(fact)
            self._coarse_next = fact.t + max(COARSE_NS, self.end_t // 1000)
            drew = True
        self.pos = fact.t
        return drew


class Player(_Ticks):
    """Walks a recording's timeline through a fold, a tick at a time."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.reset()

    def reset(self) -> None:
        rec = self.rec
        self.start = rec.window.t_from if rec.window is not None else 0  # (a window: its start)
        self.fold = Fold(settings_of(rec), vocab=rec.requests.vocab, t0=self.start)
        self.timeline = rec.timeline if rec.clocked else legacy_timeline(rec)
        self.i = 0  # next entry of the timeline
        self.row = 0  # next request row
        self.pos = self.start  # time of the last tick played
        self._stretch = Stretch(self.fold.vocab, self.fold.count)
        ticks = [f.t for _, f in self.timeline if isinstance(f, Tick)]
        self.end_t = max(ticks[-1] if ticks else 0, 0)
        self._coarse_next = 0

    def extend(self) -> None:
        """Follow mode: the recording grew (a plain file with ticks); the new facts join
        the part not yet played."""
        self.timeline = self.rec.timeline
        for _, f in reversed(self.timeline):
            if isinstance(f, Tick):
                self.end_t = max(self.end_t, f.t)
                break

    def _feed_rows(self, upto: int) -> None:
        if upto > self.row:
            self._requests(self.rec.requests.slice(self.row, upto))
            self.row = upto

    def play_until(self, t: int, fine_from: int = 0, seeking: bool = False) -> bool:
        """Every fact up to the last tick at or before ``t``, as the live run folded them.

        ``seeking``: the ticks are drawn without the A/B comparison (made once, at the
        end), and before ``fine_from`` only one every ``coarse`` (enough for the whole-run
        view: a seek to the end of a day's run takes seconds). Returns whether a tick was
        drawn."""
        drew = False
        tl = self.timeline
        while self.i < len(tl):
            rows, fact = tl[self.i]
            if isinstance(fact, Tick):
                if fact.t > t:
                    break
                self._feed_rows(rows)
                drew |= self._tick(fact, fine_from, seeking)
            else:
                self._feed_rows(rows)
                self._fact(fact)
            self.i += 1
        self._counted()
        if seeking and drew:
            self.fold.tick(self.fold.t_last, Pace.SETTLE)
        return drew


class StreamPlayer(_Ticks):
    """A rotated run played as it is read (``replay`` of a long soak): the facts come from
    one scan, from the run's start or from the part in force at a time asked for, and
    go through the fold as the held ``Player`` sends them, so what is drawn is the same;
    no request is held once folded, so a day-long run replays in the memory of an hour.

    Opened from a later part (``window``), the fold begins there in the run's state at
    that instant, as ``replay --from`` does: its whole-run figures cover from there, and
    the snapshot says so (``start``)."""

    def __init__(self, path: str, window: Window | None = None, end_t: int | None = None):
        self.path = path
        items = scan(path, series=False, start_ns=window.t_from if window else 0)
        first = next(items)
        if not isinstance(first, Session):
            raise RecordingError(f"{path}: a recording's facts before its header")
        self.rec = first.rec
        w = window_of(self.rec, window)
        if w is not None and w != self.rec.window:
            items = windowed(items, w)
        self.window = w
        self.items: Iterator[Item] = items
        self.start = w.t_from if w is not None else 0
        self.fold = Fold(settings_of(self.rec), vocab=self.rec.requests.vocab, t0=self.start)
        self.pos = self.start
        self.end_t = end_t if end_t is not None else (last_time(path) or 0)
        self._coarse_next = 0
        self._stretch = Stretch(self.fold.vocab, self.fold.count)
        self._next: Item | None = None
        self.ended = False  # every item read

    def _peek(self) -> Item | None:
        if self._next is None and not self.ended:
            with no_gc():
                self._next = next(self.items, None)
            if self._next is None:
                self.ended = True
                self.end_t = max(self.end_t, self.pos)
        return self._next

    def play_until(self, t: int, fine_from: int = 0, seeking: bool = False) -> bool:
        """As ``Player.play_until``: every fact up to the last tick at or before ``t``."""
        drew = False
        while (item := self._peek()) is not None:
            if isinstance(item, Tick):
                if item.t > t:
                    break
                drew |= self._tick(item, fine_from, seeking)
            elif isinstance(item, Session):
                # (a rotated run has one session; a file that holds another is replayed
                # held, where the last session is the one read)
                self.ended = True
                break
            else:
                self._fact(item)
            self._next = None
        self._counted()
        if seeking and drew:
            self.fold.tick(self.fold.t_last, Pace.SETTLE)
        return drew

    def play_to_event(self, after: int) -> int | None:
        """Play on, nothing drawn but one tick in ``coarse``, until the next fact is an
        event after ``after``; its time (None: the run ends first)."""
        while (item := self._peek()) is not None:
            if isinstance(item, Event) and item.kind != "engine" and item.t > after:
                self._counted()
                return item.t
            if isinstance(item, Tick):
                self._tick(item, item.t + 1, True)
            elif isinstance(item, Session):
                self.ended = True
                break
            else:
                self._fact(item)
            self._next = None
        self._counted()
        return None

    def summary(self) -> dict[str, Any]:
        """The summary of what has been played: once played to its end, the run's (as
        its report gives it); opened from a later part, from there (and it says so)."""
        if self.ended:
            analyses = Analyses(self.fold.settings.drift_alert_pct_h)  # (not summarised)
            return summary_of(self.rec, Folded(self.rec, self.fold, analyses, self.window))
        out = self.fold.summary(self.pos)
        if self.window is not None:
            out["window"] = self.window.describe(self.end_t)
            out["duration_s"] = max(0.0, (self.pos - self.start) / 1e9)
        return out
