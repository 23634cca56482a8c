"""Reading a recording: every complete line, in bounded memory, a crafted file refused
in one line (the format: ``tokmon.recording``)."""

from __future__ import annotations

import gc
import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon import __version__
from tokmon.model.facts import Fact, Sample, Status, Tick, Tokens
from tokmon.model.records import EngineStatus, Event, RequestRecord, SentPrompt, TokenTick
from tokmon.model.table import RequestTable
from tokmon.recording import SCHEMA_VERSION, RecordingError
from tokmon.textsafe import loads, might_hold_surrogates

try:  # orjson parses recordings about twice as fast; the standard library works too
    import orjson

    _fast: Any = orjson.loads
    _DecodeError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover
    _fast = json.loads
    _DecodeError = ValueError


def _loads(line: bytes | str) -> Any:
    """A line of a recording. orjson refuses a lone surrogate escape (valid JSON, which
    an older tokmon wrote from a server's text): such a line is read by the standard
    parser and made valid text (``textsafe.loads``), not skipped as corrupt."""
    try:
        return _fast(line)
    except _DecodeError:
        if not might_hold_surrogates(line):
            raise
        return loads(line)


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    requests: RequestTable = field(default_factory=RequestTable.empty)
    ticks: list[tuple[int, str, int]] = field(default_factory=list)
    samples: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
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
        ts = [self.t_end or 0]
        if self.requests.n:
            ts.append(int(self.requests.cols["t_end"].max()))
        if self.ticks:
            ts.append(self.ticks[-1][0])
        if self.events:
            ts.append(self.events[-1].t)
        return max(ts)


CHUNK = 1 << 20
# Bounds on what a file may make tokmon do: recordings are shared and may be crafted.
MAX_LINE = 16 << 20  # a request line is ~300 bytes; a header with many prompts, some KiB
MAX_RATIO = 200  # a gzip recording of JSON Lines inflates 5-15×: far more is a bomb
MAX_T_NS = 366 * 86_400 * 10**9  # times in a recording: within a year of its start
MAX_ARMS = 256


class _Lines:
    """The file's lines, read in 1 MiB pieces (never the whole file in memory), gzip or
    not; a last line without its newline is reported as cut, and so is a gzip stream that
    stops short (what decompressed up to there is kept)."""

    def __init__(self, path: str, offset: int = 0) -> None:
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise RecordingError(f"{path} is not a regular file, not a recording")
            self.size = st.st_size
            self.f = open(path, "rb")  # noqa: SIM115 — closed by __iter__
            self.f.seek(offset)
        except FileNotFoundError:
            raise RecordingError(f"no such file: {path}") from None
        except IsADirectoryError:
            raise RecordingError(f"{path} is a directory, not a recording") from None
        except OSError as e:
            raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
        self.cut = False
        self.gzip = False
        self.offset = offset  # end of the last complete line (plain files)

    def _chunks(self) -> Iterator[bytes]:
        first = self.f.read(CHUNK)
        if first[:2] != b"\x1f\x8b" or self.offset:
            while first:
                yield first
                first = self.f.read(CHUNK)
            return
        self.gzip = True
        d = zlib.decompressobj(31)
        out = 0
        raw = first
        while raw:
            data = raw
            while data:  # at most CHUNK out of each call: a bomb never inflates at once
                try:
                    part = d.decompress(data, CHUNK)
                except zlib.error:
                    self.cut = True
                    return
                out += len(part)
                if out > (1 << 30) and out > MAX_RATIO * self.size:
                    raise RecordingError(
                        f"{self.f.name} inflates more than {MAX_RATIO}× its size: "
                        "not a tokmon recording"
                    )
                yield part
                data = d.unconsumed_tail
            raw = self.f.read(CHUNK)
        if not d.eof:
            self.cut = True

    def __iter__(self) -> Iterator[tuple[bytes, bool]]:
        rest = b""
        try:
            for chunk in self._chunks():
                buf = rest + chunk
                lines = buf.split(b"\n")
                rest = lines.pop()
                # an unfinished line may not grow past MAX_LINE (a line that ends within
                # the next piece is then at most MAX_LINE + CHUNK long)
                if len(rest) > MAX_LINE:
                    raise RecordingError(
                        f"{self.f.name} has a line longer than {MAX_LINE >> 20} MiB: "
                        "not a tokmon recording"
                    )
                for ln in lines:
                    self.offset += len(ln) + 1
                    yield ln, False
        finally:
            self.f.close()
        if rest.strip():
            yield rest, True


BATCH = 50_000  # request lines turned into columns at a time


@contextmanager
def _no_gc() -> Iterator[None]:
    # Parsing makes millions of short-lived dicts and no cycles: the collector would only
    # walk the heap again and again (a fifth of the time of a big recording).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_recording(path: str) -> Recording:
    with _no_gc():
        return _read(path)


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
        with _no_gc():
            _read(rec.path, rec)
    return rec.lines - before


def _read(path: str, cont: Recording | None = None) -> Recording:
    lines = _Lines(path, cont.offset or 0 if cont is not None else 0)
    rec: Recording | None = cont
    vocab: dict[str, list[Any]] = cont.requests.vocab if cont is not None else {}
    parts: list[RequestTable] = [cont.requests] if cont is not None else []
    base = cont.requests.n if cont is not None else 0
    batch: list[bytes] = []
    # request lines so far, which of them were kept, and the other facts by that count
    req_lines = 0
    kept: list[np.ndarray] = []
    facts: list[tuple[int, Fact]] = []
    n_lines = 0
    for line, is_cut in lines:
        if is_cut:
            if rec is not None and cont is None:
                rec.truncated = True  # (following a file, a half-written line is normal)
            break
        n_lines += 1
        if line.startswith(b'{"k":"r",') and rec is not None:
            batch.append(line)  # parsed a batch at a time: millions of these
            req_lines += 1
            if len(batch) >= BATCH:
                kept.append(_columns(batch, vocab, parts))
                batch = []
            continue
        try:
            obj = _loads(line)
            if not isinstance(obj, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError, _DecodeError):
            if rec is None:
                raise RecordingError(
                    f"{path} is not a tokmon recording (line 1 is not JSON)"
                ) from None
            rec.corrupt += 1
            continue
        k = obj.get("k")
        if rec is None:
            if k != "header":
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
            rec = Recording(path=path, header=obj)
            continue
        if k == "header" and cont is None:
            # a later session appended to the same file (--append): the last one is read
            _check_header(obj, path)
            earlier = rec.sessions
            rec = Recording(path=path, header=obj, sessions=earlier + 1)
            vocab, parts, batch, kept, facts, req_lines = {}, [], [], [], [], 0
            continue
        if k == "r":
            kept.append(_columns(batch, vocab, parts))  # keep the order of the file
            batch = []
            req_lines += 1
            try:
                kept.append(_append(RequestTable.from_lines([obj], vocab), parts))
            except (KeyError, TypeError, ValueError, OverflowError):
                kept.append(np.zeros(1, dtype=bool))
            continue
        try:
            fact: Fact | None = None
            if k == "tok":
                got = [(_t(t), str(a), int(c)) for t, a, c in obj["v"]]
                rec.ticks.extend(got)
                fact = Tokens(tuple(TokenTick(t, a, c) for t, a, c in got))
            elif k == "p":
                smp = (_t(obj["t"]), str(obj["src"]), dict(obj["v"]))
                rec.samples.append(smp)
                fact = Sample(*smp)
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
            if fact is not None:
                facts.append((req_lines, fact))
        except (KeyError, TypeError, ValueError):
            rec.corrupt += 1
    if rec is None:
        raise RecordingError(f"{path} is empty or not a tokmon recording")
    kept.append(_columns(batch, vocab, parts))
    mask = np.concatenate(kept) if kept else np.zeros(0, dtype=bool)
    rec.corrupt += int((~mask).sum())
    # a fact's place: the request *rows* before it (a corrupt line is not a row)
    rows_before = np.concatenate([[0], np.cumsum(mask)])
    rec.timeline.extend((base + int(rows_before[n]), f) for n, f in facts)
    # (following, the table a replay holds must stay whole: join without freeing)
    rec.requests = (
        RequestTable.concat(parts, vocab, free=cont is None) if parts else RequestTable.empty(vocab)
    )
    rec.lines += n_lines
    rec.offset = None if lines.gzip else lines.offset
    if lines.cut:
        rec.truncated = True
    if rec.t_end is None:
        rec.truncated = True
    return rec


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


def _columns(batch: list[bytes], vocab: dict[str, list[Any]], parts: list[Any]) -> np.ndarray:
    """Append a batch of request lines as columns; returns which lines became rows (a
    batch with one bad line is sorted line by line; a row with an impossible figure is
    left out too)."""
    if not batch:
        return np.zeros(0, dtype=bool)
    try:
        dicts = list(map(_loads, batch))
        return _append(RequestTable.from_lines(dicts, vocab), parts)
    except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, _DecodeError):
        pass
    good = []
    parsed = np.zeros(len(batch), dtype=bool)
    for i, line in enumerate(batch):
        try:
            d = _loads(line)
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
}


def _check_header(h: dict[str, Any], path: str) -> None:
    def bad(what: str) -> RecordingError:
        return RecordingError(f"{path}: the header's {what} — not a tokmon recording")

    for k, types in _HEADER_TYPES.items():
        v = h.get(k)
        if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
            raise bad(f"{k!r} is {type(v).__name__}")
    for k, v in (h.get("slo") or {}).items():
        if k not in ("ttft_ms", "tpot_ms", "e2e_ms") or not _is_num(v):
            raise bad(f"slo.{k} is not an SLO in ms")
    for k, v in (h.get("cost") or {}).items():
        if v is not None and not _is_num(v):
            raise bad(f"cost.{k} is not a number")
    if not all(isinstance(c, str) for c in h.get("command") or []):
        raise bad("command is not a list of words")
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
    """A time of a recording line: an integer within the recording's span."""
    t = int(v)
    if abs(t) > MAX_T_NS:
        raise ValueError("time out of range")
    return t
