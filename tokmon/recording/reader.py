"""Reading a recording: every complete line, in bounded memory, a crafted file refused
in one line (the format: ``tokmon.recording``)."""

from __future__ import annotations

import functools
import gc
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tokmon import __version__
from tokmon.model.data.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.data.records import EngineStatus, Event, RequestRecord, SentPrompt, TokenTick
from tokmon.model.data.table import RequestTable
from tokmon.recording import SCHEMA_VERSION, RecordingError, Window, arrow_lines, companion, jsonl
from tokmon.recording.jsonl import (
    AHEAD,
    MAX_ARMS,
    MAX_T_NS,
    PARSERS,
    Lines,
    line_bounds,
    load_line,
    rotation_of,
)
from tokmon.recording.jsonl import DecodeError as _DecodeError
from tokmon.recording.parts import LATE_LINE_NS, part_numbers, part_path
from tokmon.recording.prefetch import map_ahead, read_ahead


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    requests: RequestTable = field(default_factory=RequestTable.empty)
    ticks: list[tuple[int, str, int]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    t_end: int | None = None
    truncated: bool = False
    corrupt: int = 0
    lines: int = 0  # complete lines read
    gaps: list[dict[str, Any]] = field(default_factory=list)  # parts not recorded
    lost_lines: int = 0  # lines the writer could not write (a full disk)
    sessions: int = 1  # sessions in the file (--append); the last is the one read
    offset: int | None = 0  # where a follow-mode read goes on (None: from the start)
    # Every fact but the requests, in the order of the file, each with the number of
    # request rows written before it: the live run's order, for the fold.
    timeline: list[tuple[int, Fact]] = field(default_factory=list)
    clocked: bool = False  # the file has the live run's ticks (else a replay makes them)
    prompts: dict[int, SentPrompt] = field(default_factory=dict)  # --record-prompts: by rid
    t_seen: int = 0  # the latest time of any line read (a scan holds no request)
    part: int = 0  # a later part of a rotated run, read alone (0: the run from its start)
    missing: list[str] = field(default_factory=list)  # parts of a rotated run not found
    # the files of a rotated run that were cut (their writer stopped, or a part was
    # damaged): named, each as itself (``truncated`` says the run was)
    cut: list[str] = field(default_factory=list)
    window: Window | None = None  # read as a window of the run (``read_window``)
    # the columnar companions found and not used, each with why (``recording.companion``)
    notes: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[RequestRecord]:
        """Every request as an object: for small recordings and tests (a big one is read
        through ``requests``, its columns)."""
        return list(self.requests.records())

    @property
    def arms(self) -> list[str]:
        """The arms, as the header's settings name them (else as the requests do)."""
        s = self.header.get("settings") or {}
        names = [a["name"] for a in s.get("arms", []) if isinstance(a, dict) and "name" in a]
        if names:
            return names
        tb = self.requests
        used = np.unique(tb.cols["arm"]).tolist()
        return sorted(tb.vocab["arm"][i] for i in used) or ["default"]

    @property
    def last_t(self) -> int:
        ts = [self.t_end or 0, self.t_seen]
        if self.requests.n:
            ts.append(int(self.requests.cols["t_end"].max()))
        if self.ticks:
            ts.append(self.ticks[-1][0])
        if self.events:
            ts.append(self.events[-1].t)
        return max(ts)


@contextmanager
def no_gc() -> Iterator[None]:
    # Parsing makes millions of short-lived dicts and no cycles: the collector would only
    # walk the heap again and again (a fifth of the time of a big recording).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Session:
    """A scan's first item, and again where a later session was appended to the file
    (``--append``): what came before was another run. ``rec`` fills as the scan goes
    (everything but the requests, which come as ``Requests`` facts)."""

    rec: Recording


Item = Fact | Session


def read_recording(path: str) -> Recording:
    """The whole recording in memory: its requests as one table and its facts as a
    timeline (replay, HTML report, export). A report that only folds streams instead
    (``scan``)."""
    with no_gc():
        return hold(scan(path))


def read_more(rec: Recording) -> int:
    """Follow mode: add the complete lines written since the last read (a plain file is
    read from where it stopped; a gzip one, which cannot be entered midway, again from the
    start). Returns how many lines were added."""
    before = rec.lines
    if rec.offset is None:
        new = read_recording(rec.path)
        if new.lines > before:
            rec.__dict__.update(new.__dict__)
    else:
        with no_gc():
            hold(scan(rec.path, cont=rec), rec)
    return rec.lines - before


def hold(items: Iterator[Item], cont: Recording | None = None) -> Recording:
    """A scan kept whole: the requests joined into one table, the other facts placed on
    the timeline by the request rows before them."""
    rec = cont
    parts: list[RequestTable] = [cont.requests] if cont is not None else []
    rows = cont.requests.n if cont is not None else 0
    timeline: list[tuple[int, Fact]] = []
    for item in items:
        if isinstance(item, Session):
            rec, parts, rows, timeline = item.rec, [], 0, []
        elif isinstance(item, Requests):
            parts.append(item.table)
            rows += item.table.n
        else:
            timeline.append((rows, item))
    assert rec is not None  # (a scan begins with its Session or raises)
    vocab = rec.requests.vocab
    # (following, the table a replay holds must stay whole: join without freeing)
    rec.requests = RequestTable.concat(parts, vocab, free=cont is None)
    rec.timeline.extend(timeline)
    return rec


def scan(
    path: str,
    *,
    cont: Recording | None = None,
    series: bool = True,
    cut: tuple[type, ...] | None = None,
    start_ns: int = 0,
    ahead: bool = False,
) -> Iterator[Item]:
    """One pass over a recording, in the order of the file: a ``Session`` first, then
    every fact, the requests as ``Requests`` batches of at most ``BATCH`` rows (never the
    whole run in memory). A rotated run (``--record-rotate``) is read part after part as
    one run; a part named on its own is read alone.

    ``cont``: follow mode, going on from where ``cont`` stopped. ``series``: keep the
    token buckets and probe samples in ``rec.ticks``/``rec.samples`` (for the HTML
    report's charts; a day of them is large). ``cut``: the facts before which the
    request rows are handed over (default: before every fact; the report's fold takes
    them before events and ticks only, as ``fold_report`` does). ``start_ns``: only what
    a window from there needs: of a rotated run, the header, then the part in force at
    that time (its carried state applied) and the parts after it. ``ahead``: the lines
    are read (inflated, split, sorted) in a thread of their own and the batches parsed
    by Arrow on ``PARSERS`` more, while the caller's thread folds the batch before (a
    report's reading is then stages that overlap, not one; the items and their order are
    the same)."""
    st = _Scan(path, cont, series, cut)
    lines = st.run(start_ns)
    if not ahead:
        return st.parsed(lines)
    # (Arrow parses a batch in one thread at a fifth less CPU than on its pool: batches
    # parsed side by side, numbered in order, waste less of two cores than one at a time)
    pre = map_ahead(read_ahead(lines, depth=AHEAD, chunk=1), _pre_parsed, _is_batch, PARSERS)
    return st.parsed(pre)


def _part_at(path: str, t: int) -> int:
    """The part of a rotated run in force at ``t`` ns (1: the run is not rotated, or
    ``t`` is in its first part), from the ``from_ns`` in each part's header."""
    rot = rotation_of(path)
    if rot is None or rot.get("part") != 1:
        return 1
    best = 1
    for k in sorted(part_numbers(path)):
        r = rotation_of(part_path(path, k))
        if r is None or r.get("run") != rot.get("run"):
            continue
        # every request the window counts (sent at t or later) is in this part or after
        # it: the parts before hold none sent so late (older parts: a margin for lines
        # written a little after their request ended)
        sent = r.get("sent_max")
        t0 = r.get("from_ns")
        if not isinstance(sent, int) or isinstance(sent, bool):
            sent = t0 + LATE_LINE_NS if isinstance(t0, int) and not isinstance(t0, bool) else None
        if sent is not None and sent < t:
            best = k
        else:
            break
    return best


class _Foreign(Exception):
    """A file named as a later part that is not that part of this run: another run's,
    or a copy of another part (its header says which part it is and of which run)."""


class _Scan:
    """What one pass holds: the recording so far and the request lines not yet parsed."""

    def __init__(
        self, path: str, cont: Recording | None, series: bool, cut: tuple[type, ...] | None
    ) -> None:
        self.path = path
        self.rec = cont
        self.cont = cont
        self.series = series
        self.cut = cut
        self.vocab: dict[str, list[Any]] = cont.requests.vocab if cont is not None else {}
        self.keys: set[str] = set()  # the keys request lines held so far (``arrow_lines``)
        self.part = 0  # the part being read (0: a run not rotated)
        self.from_part = 1  # the first part read (a later one: its carried state applies)
        # a batch of request lines is handed on unparsed (``_Batch``) and parsed by
        # ``parsed`` (``scan(ahead=True)``: in another thread); the tallies both make,
        # under the lock
        self._lock = threading.Lock()
        self.notes: list[str] = []  # companions ignored, each with why

    def run(self, start_ns: int) -> Iterator[Item | _Batch]:
        cont, path = self.cont, self.path
        self.from_part = _part_at(path, start_ns) if start_ns > 0 and cont is None else 1
        yield from self.file(path, cont.offset or 0 if cont is not None else 0)
        rec = self.rec
        if rec is None:
            raise RecordingError(f"{path} is empty or not a tokmon recording")
        if cont is None:
            for k, part_path in self.parts_after():
                yield from self.file(part_path, 0, k)
        if rec.t_end is None:
            rec.truncated = True
        rec.notes.extend(self.notes)

    def parsed(self, items: Iterator[Item | _Batch]) -> Iterator[Item]:
        """``items`` with each batch of request lines parsed, in its place."""
        try:
            for x in items:
                if isinstance(x, _Batch):
                    yield from self._flush(x)
                else:
                    yield x
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _seen(self, rec: Recording, t: int) -> None:
        with self._lock:
            if t > rec.t_seen:
                rec.t_seen = t

    def _corrupt(self, rec: Recording, n: int) -> None:
        with self._lock:
            rec.corrupt += n

    # ------------------------------------------------------------------ parts
    def parts_after(self) -> Iterator[tuple[int, str]]:
        """The later parts of a rotated run whose first part was read, in order, as they
        are read: a run of parts that are missing is named in ``rec.missing`` (one note
        for the run), and the parts after it still read; once the run's end was read, a
        file numbered after it is named as not of the run (a stray copy), never read."""
        rec = self.rec
        rot = (rec.header.get("rotation") if rec is not None else None) or {}
        if rec is None or rot.get("part") != 1:
            return
        found = sorted(k for k in part_numbers(self.path) if k >= max(2, self.from_part))
        expect = max(2, self.from_part)
        for k in found:
            if rec.t_end is not None:
                rec.missing.append(f"{part_path(self.path, k)} (after the run's end: not of it)")
                continue
            if k > expect:
                gone = part_path(self.path, expect)
                if k - expect > 1:
                    gone += f" … {part_path(self.path, k - 1)} ({k - expect} parts)"
                rec.missing.append(gone)
            expect = k + 1
            yield k, part_path(self.path, k)

    # ------------------------------------------------------------------ one file
    def file(self, path: str, offset: int, number: int = 0) -> Iterator[Item | _Batch]:
        """The facts of one file: the recording, or part ``number`` of a rotated run
        (from its columnar companion where it has a good one: ``_indexed``)."""
        if offset == 0 and self.cont is None:
            comp, why = companion.load(path)
            if why is not None:
                self.notes.append(why)
            if comp is not None:
                yield from self._indexed(comp, path, number)
                return
        lines = Lines(path, offset)
        # request lines not yet parsed: runs of whole lines as they lie in the file, and
        # how many lines they hold
        batch: list[bytes] = []
        nb = 0
        held: list[tuple[int, Fact]] = []  # facts after them: (request lines before, fact)
        first = True  # (a part's first line: its header)
        n_lines = 0
        for region in lines.regions():
            starts, stops, req = line_bounds(region)
            n = starts.size
            n_lines += n
            # most lines are requests, parsed a batch at a time: a run of them is taken at
            # once, as the bytes it is in the file (the lines of other kinds found first,
            # by their first bytes, at once), the others one by one
            others = np.flatnonzero(~req).tolist()
            others.append(n)
            nxt = 0  # (others[nxt]: the next line that is not a request)
            j = 0
            while j < n:
                if self.rec is not None and not first and j < others[nxt]:
                    end = min(others[nxt], j + jsonl.BATCH - nb)
                    batch.append(region[int(starts[j]) : int(stops[end - 1])])
                    nb += end - j
                    j = end
                    if nb >= jsonl.BATCH:
                        yield self._batch(batch, nb, held)
                        batch, nb, held = [], 0, []
                    continue
                line = region[int(starts[j]) : int(stops[j])]
                if j == others[nxt]:
                    nxt += 1
                j += 1
                try:
                    obj = load_line(line)
                    if not isinstance(obj, dict):
                        raise ValueError
                except (ValueError, UnicodeDecodeError, _DecodeError):
                    if self.rec is None or first:
                        raise RecordingError(
                            f"{path} is not a tokmon recording (line 1 is not JSON)"
                        ) from None
                    self._corrupt(self.rec, 1)
                    continue
                k = obj.get("k")
                if first and (self.rec is None or self.cont is None):
                    first = False
                    item, stop = self._opening(obj, path, number)
                    if item is not None:
                        yield item
                    if stop:
                        return
                    continue
                first = False
                if k == "header" and self.cont is None:
                    # a later session appended to the same file (--append): the last one is read
                    _check_header(obj, path)
                    assert self.rec is not None
                    earlier = self.rec.sessions
                    self.vocab = {}
                    self.rec = Recording(path=path, header=obj, sessions=earlier + 1,
                                         requests=RequestTable.empty(self.vocab))  # fmt: skip
                    batch, nb, held = [], 0, []
                    yield Session(self.rec)
                    continue
                if k == "r":
                    batch.append(line)  # (keys in another order: parsed with its batch)
                    nb += 1
                    continue
                self._hold(obj, nb, held)
        cut = bool(lines.tail) and self.cont is None  # (following, a half line is normal)
        if self.rec is None:
            raise RecordingError(f"{path} is empty or not a tokmon recording")
        yield self._batch(batch, nb, held)
        rec = self.rec
        rec.lines += n_lines
        rec.offset = None if lines.gzip or self.part > 1 else lines.offset
        if lines.cut or cut:
            rec.truncated = True
            if self.part:  # (a rotated run: which part was cut, by its own name)
                rec.cut.append(path)

    def _indexed(
        self, comp: companion.Companion, path: str, number: int
    ) -> Iterator[Item | _Batch]:
        """The items of one file as its JSON gives them (``file``), from its companion:
        its other lines read as there, its requests in the same batches (a batch every
        ``BATCH`` request lines, a fact in the batch whose lines it follows), each
        batch's columns read from the companion where the JSON's are parsed."""
        try:
            head = load_line(comp.others[0])
        except (ValueError, UnicodeDecodeError, _DecodeError):
            head = None
        if not isinstance(head, dict):
            raise RecordingError(f"{comp.path}: damaged (its header); delete it to read the JSON")
        item, stop = self._opening(head, path, number)
        if item is not None:
            yield item
        if stop:
            return
        rec = self.rec
        assert rec is not None
        rows = comp.ident.rows
        lo = group = 0
        held: list[tuple[int, Fact]] = []
        for line, at in zip(comp.others[1:], comp.before[1:].tolist(), strict=True):
            while at >= lo + jsonl.BATCH:
                yield self._indexed_batch(comp, group, jsonl.BATCH, held)
                group, lo, held = group + 1, lo + jsonl.BATCH, []
            try:  # (a companion is a file from outside too: its lines are checked as the JSON's)
                obj = load_line(line)
            except (ValueError, UnicodeDecodeError, _DecodeError):
                obj = None
            if not isinstance(obj, dict):
                self._corrupt(rec, 1)
                continue
            self._hold(obj, at - lo, held)
        while lo + jsonl.BATCH <= rows:
            yield self._indexed_batch(comp, group, jsonl.BATCH, held)
            group, lo, held = group + 1, lo + jsonl.BATCH, []
        yield self._indexed_batch(comp, group, rows - lo, held)
        rec.lines += comp.ident.lines
        rec.offset = None if comp.ident.gzip or self.part > 1 else comp.ident.size

    def _hold(self, obj: dict[str, Any], at: int, held: list[tuple[int, Fact]]) -> None:
        """A line other than a request's, read the same from the JSON or a companion: its
        fact held in its place (``at`` request lines into the batch), a part's repeat of
        the run's state skipped (the parts before said it)."""
        if obj.get("carried") and self.part > max(1, self.from_part):
            return
        fact = self._fact(obj, obj.get("k"))
        if fact is not None:
            held.append((at, fact))
            t = getattr(fact, "t", None)
            if isinstance(t, int) and self.rec is not None:
                self._seen(self.rec, t)

    def _indexed_batch(
        self, comp: companion.Companion, group: int, n: int, held: list[tuple[int, Fact]]
    ) -> _Batch:
        assert self.rec is not None
        pre = functools.partial(comp.batch, group) if n else None
        return _Batch(b"", n, held, self.rec, self.vocab, self.keys, pre)

    def _opening(self, obj: dict[str, Any], path: str, number: int) -> tuple[Session | None, bool]:
        """A file's first line: the session it opens (None: a later part of the run), and
        whether the file is read no further (the part of another run, named as missing;
        or, for a window from a later part, the first part, read for its header only)."""
        try:
            item = self._header(obj, path, number)
        except _Foreign as e:
            assert self.rec is not None
            self.rec.missing.append(f"{path} ({e})")
            return None, True
        return item, item is not None and self.from_part > 1 and self.part == 1

    def _header(self, obj: dict[str, Any], path: str, k: int = 0) -> Session | None:
        """A file's first line: the run's header, or the header of part ``k`` (raises
        _Foreign, saying why, where it is not that part of this run)."""
        if obj.get("k") != "header":
            raise RecordingError(f"{path} is not a tokmon recording (no header line)")
        v = obj.get("schema_version")
        if not isinstance(v, int):
            raise RecordingError(f"{path}: the header has no schema_version")
        if v > SCHEMA_VERSION:
            raise RecordingError(
                f"{path} was written by a newer tokmon (schema {v}; this "
                f"tokmon {__version__} reads up to {SCHEMA_VERSION}): upgrade tokmon"
            )
        _check_header(obj, path)
        rot = obj.get("rotation")
        part = rot.get("part") if isinstance(rot, dict) else None
        if self.rec is None:
            self.part = part if isinstance(part, int) and part > 0 else 0
            self.rec = Recording(path=path, header=obj, requests=RequestTable.empty(self.vocab))
            if self.part > 1:
                # (read alone, a later part is a run of its own: its repeat of the
                # run's state is what it starts from)
                self.rec.part = self.part
                self.part = 1
            return Session(self.rec)
        first = self.rec.header.get("rotation") or {}
        if (
            not isinstance(part, int)
            or not isinstance(rot, dict)
            or rot.get("run") != first.get("run")
        ):
            raise _Foreign("the part of another run")
        if k and part != k:
            raise _Foreign(f"a copy of part {part}, not part {k}: not read")
        self.part = part
        return None

    def _fact(self, obj: dict[str, Any], k: Any) -> Fact | None:
        rec = self.rec
        assert rec is not None
        try:
            fact: Fact | None = None
            if k == "tok":
                got = [(_t(t), str(a), int(c)) for t, a, c in obj["v"]]
                if self.series:
                    rec.ticks.extend(got)
                fact = Tokens(tuple(TokenTick(t, a, c) for t, a, c in got))
            elif k == "p":
                fact = smp = Sample(_t(obj["t"]), str(obj["src"]), dict(obj["v"]))
                if self.series:
                    rec.samples.append(smp)
            elif k == "e":
                fact = Event(
                    t=_t(obj["t"]),
                    kind=str(obj["kind"]),
                    message=str(obj["msg"]),
                    data=dict(obj.get("data") or {}),
                    wall=float(obj.get("wall") or 0),
                )
                rec.events.append(fact)
            elif k == "tick":
                fact = Tick(_t(obj["t"]), bool(obj.get("final")))
                rec.clocked = True
            elif k == "st":
                fact = Status(_status(obj))
            elif k == "summary":
                rec.summary = {kk: vv for kk, vv in obj.items() if kk != "k"}
            elif k == "q":
                rec.prompts[int(obj["id"])] = _sent(obj)
            elif k == "end":
                rec.t_end = _t(obj["t"])
            elif k == "gap":
                rec.gaps.append({kk: vv for kk, vv in obj.items() if kk != "k"})
                rec.lost_lines += int(obj.get("lines") or 0)
            return fact
        except (KeyError, TypeError, ValueError, OverflowError):
            self._corrupt(rec, 1)
            return None

    def _batch(self, batch: list[bytes], n: int, held: list[tuple[int, Fact]]) -> _Batch:
        assert self.rec is not None
        return _Batch(b"\n".join(batch), n, held, self.rec, self.vocab, self.keys)

    def _flush(self, b: _Batch) -> Iterator[Item]:
        """The batch's requests as columns, handed over between the facts in the order
        of the file (a fact's place: the request *rows* before it; a corrupt line is not
        a row)."""
        rec = b.rec
        parts: list[RequestTable] = []  # (``_columns`` makes one table of a batch, or none)
        mask = _columns(b.lines, b.n, b.vocab, parts, b.pre, b.keys)
        self._corrupt(rec, int((~mask).sum()))
        tb = parts[0] if parts else None
        rows_before = np.concatenate([[0], np.cumsum(mask)])
        if tb is not None:
            self._seen(rec, int(tb.cols["t_end"].max()))
        lo = 0
        for n, fact in b.held:
            if tb is not None and (self.cut is None or isinstance(fact, self.cut)):
                rows = int(rows_before[n])
                if rows > lo:
                    yield Requests(tb.slice(lo, rows))
                    lo = rows
            yield fact
        if tb is not None and lo < tb.n:
            yield Requests(tb.slice(lo, tb.n) if lo else tb)


_UNTRIED = object()  # a batch Arrow has not parsed yet


@dataclass(frozen=True)
class _Batch:
    """Request lines not yet parsed (``n`` of them, newlines between) and the facts among
    them (each with the number of request lines before it), of one session: its
    recording and vocabulary."""

    lines: bytes
    n: int
    held: list[tuple[int, Fact]]
    rec: Recording
    vocab: dict[str, list[Any]]
    keys: set[str]
    pre: object = _UNTRIED  # Arrow's parse of it, made already (``_pre_parsed``)


def _is_batch(x: object) -> bool:
    return isinstance(x, _Batch)


def _pre_parsed(b: Item | _Batch) -> Item | _Batch:
    """A batch with Arrow's parse of it, which needs no vocabulary (any thread)."""
    assert isinstance(b, _Batch)
    if callable(b.pre):  # (a companion's columns, read here too: ``_indexed``)
        return replace(b, pre=b.pre())
    return replace(b, pre=arrow_lines.parse(b.lines, b.n, threads=False, keys=b.keys))


def _sent(obj: dict[str, Any]) -> SentPrompt:
    """A ``q`` line: what one request sent (strings only; anything else is corrupt)."""
    rid = obj["id"]
    if isinstance(rid, bool) or not isinstance(rid, int):
        raise TypeError("id")
    if "m" in obj:
        ms = obj["m"]
        ok = isinstance(ms, list) and all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m) for m in ms
        )
        if not ok:
            raise TypeError("m")
        return SentPrompt(rid, messages=tuple((m[0], m[1]) for m in ms))
    if not isinstance(obj["t"], str):
        raise TypeError("t")
    return SentPrompt(rid, text=obj["t"])


def _status(obj: dict[str, Any]) -> EngineStatus:
    """An engine's status line: numbers checked, as every field of a file is."""

    def n(key: str) -> float:
        v = obj.get(key, 0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(key)
        return float(v)

    return EngineStatus(
        t=_t(obj.get("t", 0)),
        in_flight=int(n("in_flight")),
        sent=int(n("sent")),
        paused=bool(obj.get("paused")),
        arm=str(obj.get("arm", "")),
        level=n("level"),
        mode=str(obj.get("mode", "")),
        loop_lag_ms=n("loop_lag_ms"),
        send_lag_ms=n("send_lag_ms"),
        done=bool(obj.get("done")),
        worker=int(n("worker")),
        host=str(obj.get("host", "")),
        cpu_pct=n("cpu_pct"),
    )


def _columns(
    lines: bytes,
    n: int,
    vocab: dict[str, list[Any]],
    parts: list[Any],
    pre: object = _UNTRIED,
    keys: set[str] | None = None,
) -> np.ndarray:
    """Append a batch of ``n`` request lines (newlines between them) as columns; returns
    which lines became rows (a batch with one bad line is sorted line by line; a row with
    an impossible figure is left out too). ``pre``: Arrow's parse of it, made already
    (None: Arrow refused it); ``keys``: the keys learned so far (``arrow_lines.parse``)."""
    if not n:
        return np.zeros(0, dtype=bool)
    if pre is _UNTRIED:
        pre = arrow_lines.parse(lines, n, keys=keys)
    elif callable(pre):  # (a companion's columns: ``_indexed``)
        pre = pre()
    if isinstance(pre, arrow_lines.Parsed):
        return _append(arrow_lines.numbered(pre, vocab), parts)
    batch = lines.split(b"\n")
    try:
        dicts = list(map(load_line, batch))
        return _append(RequestTable.from_lines(dicts, vocab), parts)
    except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, _DecodeError):
        pass
    good = []
    parsed = np.zeros(len(batch), dtype=bool)
    for i, line in enumerate(batch):
        try:
            d = load_line(line)
            RequestTable.from_lines([d], {})
            good.append(d)
            parsed[i] = True
        except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, _DecodeError):
            pass
    if good:
        parsed[parsed] = _append(RequestTable.from_lines(good, vocab), parts)
    return parsed


def _append(tb: RequestTable, parts: list[Any]) -> np.ndarray:
    if len(tb.vocab.get("arm", ())) > MAX_ARMS:
        raise RecordingError(f"more than {MAX_ARMS} arms: not a tokmon recording")
    ok = tb.possible(MAX_T_NS)
    if not ok.all():
        tb = tb.take(ok)
    if tb.n:
        parts.append(tb)
    return ok


# The header's fields and their JSON types: a file whose header breaks them is refused
# in one line, rather than failing deep inside a report.
_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "tokmon_version": (str,),
    "started_at": (str,),
    "wall_start": (int, float),
    "t0_ns": (int,),
    "t0_perf_ns": (int,),
    "command": (list,),
    "settings": (dict,),
    "slo": (dict,),
    "cost": (dict,),
    "target": (dict,),
    "host": (dict,),
    "gpu": (dict,),
    "servers": (dict,),
    "fold": (dict,),
    "rotation": (dict,),
}


def _check_header(h: dict[str, Any], path: str) -> None:
    def bad(what: str) -> RecordingError:
        return RecordingError(f"{path}: the header's {what} — not a tokmon recording")

    for k, types in _HEADER_TYPES.items():
        v = h.get(k)
        if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
            raise bad(f"{k!r} is {type(v).__name__}")
    for k, v in (h.get("slo") or {}).items():
        if k == "target":  # (the share that must meet them: a number, checked on reading)
            if not _is_num(v):
                raise bad("slo.target is not a share")
        elif k not in ("ttft_ms", "tpot_ms", "e2e_ms", "answer_ms") or not _is_num(v):
            raise bad(f"slo.{k} is not an SLO in ms")
    for k, v in (h.get("cost") or {}).items():
        if v is not None and not _is_num(v):
            raise bad(f"cost.{k} is not a number")
    if not all(isinstance(c, str) for c in h.get("command") or []):
        raise bad("command is not a list of words")
    rot = h.get("rotation") or {}
    if not isinstance(rot.get("part", 1), int) or isinstance(rot.get("part"), bool):
        raise bad("rotation.part is not a part number")
    s = h.get("settings") or {}
    arms = s.get("arms", [])
    if not isinstance(arms, list) or len(arms) > MAX_ARMS:
        raise bad(f"settings.arms is not a list of at most {MAX_ARMS} arms")
    if not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in arms):
        raise bad("settings.arms has an arm without a name")
    for k in ("assign", "mode"):
        if k in s and not isinstance(s[k], str):
            raise bad(f"settings.{k} is not text")
    for k in ("concurrency", "rate"):
        if k in s and s[k] is not None and not _is_num(s[k]):
            raise bad(f"settings.{k} is not a number")
    if not isinstance(s.get("mix", []), list):
        raise bad("settings.mix is not a list")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _t(v: Any) -> int:
    """A time of a recording line: an integer within the recording's span (``1e400``,
    read as infinite, is none: a ValueError, as every line that is not one)."""
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("time out of range")
    t = int(v)
    if abs(t) > MAX_T_NS:
        raise ValueError("time out of range")
    return t


def _from_ns(path: str) -> int | None:
    """When the part ``path`` began (its ``rotation.from_ns``), where it says so."""
    t0 = (rotation_of(path) or {}).get("from_ns")
    ok = isinstance(t0, int) and not isinstance(t0, bool) and 0 <= t0 <= MAX_T_NS
    return t0 if ok else None


def part_start(path: str, t: int) -> int:
    """Where the part of a rotated run in force at ``t`` ns begins (0: the first part, or
    a run not rotated): a window from there reads that part and the ones after it."""
    k = _part_at(path, t)
    return (_from_ns(part_path(path, k)) or 0) if k > 1 else 0


def last_time(path: str) -> int | None:
    """The last tick of a rotated run (where a replay of it ends), read from its last
    part's lines without parsing its requests (about a second for an hour's part)."""
    last = path
    rot = rotation_of(path)
    found = part_numbers(path) if rot is not None and rot.get("part") == 1 else set()
    if found:
        last = part_path(path, max(found))
    # (a part with no tick yet: the run went at least to its start)
    t = _from_ns(last) if last != path else None
    try:
        for line, cut in Lines(last):
            if cut or not line.startswith(b'{"k":"tick"'):
                continue
            try:
                obj = load_line(line)
            except (ValueError, UnicodeDecodeError, _DecodeError):
                continue
            v = obj.get("t") if isinstance(obj, dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_T_NS:
                t = max(t or 0, v)
    except RecordingError:
        return t
    return t
