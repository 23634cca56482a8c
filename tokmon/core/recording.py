"""Session recordings: one append-only JSON Lines file (optionally gzip), versioned.

Lines, each a JSON object with a kind ``k``:

* ``header`` — first line: ``schema_version``, tokmon version, command line, resolved
  settings (secrets removed), start time, host, CPU, memory, Python, GPU names, driver
  and NVML versions, each server's ``/v1/models`` answer and version.
* ``r`` — one finished request (short keys, see ``REQUEST_KEYS``); times ``ts``/``te``
  in integer nanoseconds since the session start, durations in ms (µs precision).
* ``tok`` — tokens that arrived, per 250 ms bucket and arm: ``v: [[t_ns, arm, n], ...]``.
* ``p`` — a probe sample: ``src`` (gpu, host, server), ``t`` and its fields ``v``.
* ``e`` — an event (arm switch, pause, marker, alert, restart …).
* ``summary`` — the run summary (the ``--summary-json`` object), at the end.
* ``end`` — the session's end time; absent when the writer was killed.

Crash safety: written through a buffer flushed at least once a second (a thread makes
sure of it when nothing is written), so a cut file loses at most the last second; a
reader takes every complete line and says that the file was cut.
"""

from __future__ import annotations

import base64
import gc
import json
import math
import os
import platform
import stat
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from tokmon import __version__
from tokmon.core.h1 import stamp_sources
from tokmon.core.records import Event, RequestRecord
from tokmon.core.table import COLUMNS, RequestTable
from tokmon.core.textsafe import dumps

SCHEMA_VERSION = 1

# RequestRecord field -> short key in a recording (the columns' table is the one list).
REQUEST_KEYS = {name: c[0] for name, c in COLUMNS.items()} | {"gaps": "g"}
TIME_FIELDS = ("t_sched", "t_end", "t_send")
# Fields left out of a line when they hold their default.
_DEFAULTS = {name: c[2] for name, c in COLUMNS.items() if c[2] is not None} | {"gaps": b""}


class RecordingError(Exception):
    """Not a recording, or one this version cannot read: one clear line."""


def environment() -> dict[str, Any]:
    """The machine, for the header (the method says: write the environment down)."""
    try:
        import psutil

        mem = psutil.virtual_memory().total / 2**30
        cores = psutil.cpu_count(logical=True)
    except Exception:
        mem, cores = None, os.cpu_count()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu": cpu,
        "cores": cores,
        "mem_gib": mem,
        "python": sys.version.split()[0],
        # Where the send and chunk times come from: the kernel's stamps, else user space.
        "stamps": stamp_sources(),
    }


def record_to_line(r: RequestRecord, t0: int, chunks: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {"k": "r"}
    for name, short in REQUEST_KEYS.items():
        v = getattr(r, name)
        if v is None or (name in _DEFAULTS and v == _DEFAULTS[name]):
            continue
        if name in TIME_FIELDS:
            v = v - t0
        elif name == "gaps":
            if not chunks:
                continue
            v = base64.b64encode(v).decode()
        d[short] = v
    return d


try:  # orjson parses recordings about twice as fast; the standard library works too
    import orjson

    _loads: Any = orjson.loads
    _DecodeError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover
    _loads = json.loads
    _DecodeError = ValueError


# Bytes that could not be written (a full disk) are kept for the next try up to this
# much; beyond it they are dropped, counted, and marked in the file when writing resumes.
MAX_PENDING = 256 << 20


class Recorder:
    """Writes a recording as the run goes: lines buffered, flushed twice a second.

    A write that fails (a full disk, a lost mount) never ends the run and never loses
    data silently: the unwritten bytes are kept and tried again; the first failure is
    reported at once through ``on_error`` (an event on the dashboard, a line on stderr);
    if too much piles up it is dropped and counted (``lost_lines``), and a ``gap`` line
    says so in the file as soon as writing works again. ``lost_lines`` and ``error``
    make the run's exit code non-zero.
    """

    def __init__(self, path: str, *, secrets: tuple[str, ...] = (), chunks: bool = False) -> None:
        self.path = path
        self.secrets = tuple(s for s in secrets if s and len(s) >= 4)
        self.chunks = chunks
        self.t0 = 0
        self.lock = threading.Lock()
        self.active = False
        self.lines = 0
        self.requests = 0
        self._raw: IO[bytes] | None = None
        self._gz: Any = None
        self._buf: list[str] = []
        self._pending = b""  # encoded bytes not yet written (after a failed write)
        self._pending_lines = 0
        self._last_flush = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # the last write error, while it lasts
        self.lost_lines = 0  # lines dropped for good (more than MAX_PENDING piled up)
        self._gap_note: dict[str, Any] | None = None
        self.on_error: Any = None  # called with a message at a failure and a recovery
        self._paused_at = 0
        self.mode = "ab"  # how ``open`` opens the file: "wb" replaces it (--overwrite)

    def open(self, header: dict[str, Any], t0: int) -> None:
        """Create the file and write the header. ``self.mode`` "wb" replaces a file, "ab"
        adds a session to it (the reader reports the last session of a file)."""
        self.t0 = t0
        try:
            self._raw = open(self.path, self.mode, buffering=0)  # noqa: SIM115 — closed in close()
        except OSError as e:
            raise RecordingError(f"cannot write {self.path}: {e.strerror or e}") from None
        if self.path.endswith(".gz"):
            self._gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing
        self.active = True
        self._write(
            {
                "k": "header",
                "schema_version": SCHEMA_VERSION,
                **header,
                "t0_ns": 0,
                # The times in this file are relative to this perf_counter reading (on
                # Linux the system-wide monotonic clock): other processes' stamps compare.
                "t0_perf_ns": t0,
            }
        )
        self.flush()
        self._thread = threading.Thread(target=self._flusher, name="tokmon-recorder", daemon=True)
        self._thread.start()

    def _flusher(self) -> None:
        while not self._stop.wait(0.5):
            self.flush()

    def _write(self, obj: dict[str, Any]) -> None:
        line = dumps(obj, compact=True)  # strict JSON: a NaN from a server becomes null
        for s in self.secrets:
            if s in line:
                line = line.replace(s, "<redacted>")
        with self.lock:
            self._buf.append(line)
            self.lines += 1
        if time.monotonic() - self._last_flush > 1.0:
            self.flush()

    def flush(self) -> None:
        note = None
        with self.lock:
            if self._raw is None:
                return
            lines = self._buf
            self._buf = []
            self._last_flush = time.monotonic()
            if self._gap_note is not None and not self._pending:
                # writing works again after lines were dropped: say so in the file first
                lines.insert(0, dumps({"k": "gap", **self._gap_note}, compact=True))
                self._gap_note = None
            data = ("\n".join(lines) + "\n").encode() if lines else b""
            if self._gz is not None and data:
                data = self._gz.compress(data) + self._gz.flush(zlib.Z_SYNC_FLUSH)
            data = self._pending + data
            n_lines = self._pending_lines + len(lines)
            try:
                while data:
                    n = self._raw.write(data)
                    data = data[n or 0 :]
            except (OSError, ValueError) as e:
                self._pending, self._pending_lines = data, n_lines
                if len(data) > MAX_PENDING:
                    self._drop()
                if self.error is None:
                    self.error = str(getattr(e, "strerror", None) or e)
                    note = f"recording: cannot write {self.path}: {self.error} — holding the data"
            else:
                self._pending, self._pending_lines = b"", 0
                if self.error is not None:
                    self.error = None
                    note = f"recording: writing to {self.path} again"
        if note is not None and self.on_error is not None:
            self.on_error(note)

    def _drop(self) -> None:
        """Give up on what piled up (lock held): counted, and marked when writing resumes.
        A gzip stream cannot lose bytes midway, so a gzip recording stops here."""
        lost = self._pending_lines
        self.lost_lines += lost
        note = self._gap_note or {"lines": 0}
        note["lines"] += lost
        self._gap_note = note
        self._pending, self._pending_lines = b"", 0
        if self._gz is not None:
            self.active = False

    # ------------------------------------------------------------------ content
    def records(self, records: list[RequestRecord]) -> None:
        if not self.active:
            return
        for r in records:
            self._write(record_to_line(r, self.t0, self.chunks))
        self.requests += len(records)

    def ticks(self, ticks: dict[tuple[int, str], int]) -> None:
        if self.active and ticks:
            self._write({"k": "tok", "v": [[t - self.t0, arm, n] for (t, arm), n in ticks.items()]})

    def sample(self, src: str, t: int, values: dict[str, Any]) -> None:
        if self.active:
            self._write({"k": "p", "src": src, "t": t - self.t0, "v": values})

    def event(self, ev: Event) -> None:
        if self.active:
            self._write(
                {
                    "k": "e",
                    "t": ev.t - self.t0,
                    "kind": ev.kind,
                    "msg": ev.message,
                    "data": ev.data,
                    "wall": ev.wall,
                }
            )

    def summary(self, summary: dict[str, Any]) -> None:
        if self._raw is not None:  # written even while paused: the file's session ends
            self._write({"k": "summary", **summary})

    def end(self, t: int) -> None:
        if self._raw is not None:
            self._write({"k": "end", "t": t - self.t0})

    def toggle(self) -> str:
        """``r``: stop writing, or go on writing the same session in the same file (a
        ``gap`` line marks the part not recorded)."""
        if self.active:
            self._paused_at = time.perf_counter_ns()
            self._write({"k": "e", "t": self._paused_at - self.t0, "kind": "recording",
                         "msg": "recording paused", "data": {}, "wall": time.time()})  # fmt: skip
            self.flush()
            self.active = False
            return f"recording paused: {self.path}"
        if self._raw is None:
            return "no recording configured"
        self.active = True
        now = time.perf_counter_ns()
        self._write({"k": "gap", "from": self._paused_at - self.t0, "to": now - self.t0,
                     "why": "paused"})  # fmt: skip
        return f"recording to {self.path} again"

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.active = True  # the last lines (summary, end) are written even when paused
        self.flush()
        with self.lock:
            self.active = False
            if self._pending:
                self._drop()  # still cannot be written: counted as lost
            if self._raw is not None:
                try:
                    if self._gz is not None:
                        self._raw.write(self._gz.flush(zlib.Z_FINISH))
                    self._raw.close()
                except (OSError, ValueError):
                    pass
                self._raw = None
                self._gz = None


# ----------------------------------------------------------------------------- reading


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
    batch: list[bytes] = []
    n_lines = 0
    for line, is_cut in lines:
        if is_cut:
            if rec is not None and cont is None:
                rec.truncated = True  # (following a file, a half-written line is normal)
            break
        n_lines += 1
        if line.startswith(b'{"k":"r",') and rec is not None:
            batch.append(line)  # parsed a batch at a time: millions of these
            if len(batch) >= BATCH:
                rec.corrupt += _columns(batch, vocab, parts)
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
            vocab, parts, batch = {}, [], []
            continue
        if k == "r":
            rec.corrupt += _columns(batch, vocab, parts)  # keep the order of the file
            batch = []
            try:
                rec.corrupt += _append(RequestTable.from_lines([obj], vocab), parts)
            except (KeyError, TypeError, ValueError, OverflowError):
                rec.corrupt += 1
            continue
        try:
            if k == "tok":
                rec.ticks.extend((_t(t), str(a), int(c)) for t, a, c in obj["v"])
            elif k == "p":
                rec.samples.append((_t(obj["t"]), str(obj["src"]), dict(obj["v"])))
            elif k == "e":
                rec.events.append(
                    Event(
                        t=_t(obj["t"]),
                        kind=str(obj["kind"]),
                        message=str(obj["msg"]),
                        data=dict(obj.get("data") or {}),
                        wall=float(obj.get("wall") or 0),
                    )
                )
            elif k == "summary":
                rec.summary = {kk: vv for kk, vv in obj.items() if kk != "k"}
            elif k == "end":
                rec.t_end = _t(obj["t"])
            elif k == "gap":
                rec.gaps.append({kk: vv for kk, vv in obj.items() if kk != "k"})
                rec.lost_lines += int(obj.get("lines") or 0)
        except (KeyError, TypeError, ValueError):
            rec.corrupt += 1
    if rec is None:
        raise RecordingError(f"{path} is empty or not a tokmon recording")
    rec.corrupt += _columns(batch, vocab, parts)
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


def _columns(batch: list[bytes], vocab: dict[str, list[Any]], parts: list[Any]) -> int:
    """Append a batch of request lines as columns; returns how many were corrupt (a batch
    with one bad line is sorted line by line; a row with an impossible figure is one)."""
    if not batch:
        return 0
    try:
        dicts = list(map(_loads, batch))
        return _append(RequestTable.from_lines(dicts, vocab), parts)
    except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, _DecodeError):
        pass
    good = []
    for line in batch:
        try:
            d = _loads(line)
            RequestTable.from_lines([d], {})
            good.append(d)
        except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, _DecodeError):
            pass
    bad = len(batch) - len(good)
    if good:
        bad += _append(RequestTable.from_lines(good, vocab), parts)
    return bad


def _append(tb: RequestTable, parts: list[Any]) -> int:
    if len(tb.vocab.get("arm", ())) > MAX_ARMS:
        raise RecordingError(f"more than {MAX_ARMS} arms: not a tokmon recording")
    ok = tb.possible(MAX_T_NS)
    if not ok.all():
        tb = tb.take(ok)
    if tb.n:
        parts.append(tb)
    return int((~ok).sum())


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


def recording_summary(rec: Recording) -> dict[str, Any]:
    """The summary rebuilt from the requests, exactly as the live run computed it."""
    from tokmon.core.aggregate import Aggregator, mix_weights
    from tokmon.core.probes.server import ServerMetricsProbe
    from tokmon.core.stats import Slo

    h = rec.header
    s = h.get("settings") or {}
    arms = rec.arms
    slo = Slo(**(h.get("slo") or {}))
    agg = Aggregator(
        arms,
        slo=slo,
        assign=s.get("assign", "switch"),
        t_start=0,
        kind_weights=mix_weights(s),
    )
    for ev in rec.events:
        agg.apply(ev)  # the same fold of events as the live run and the replay
    if agg.steps:
        for t, a, n in rec.ticks:
            agg.add_ticks({(t, a): n})
        for t, _src, v in rec.samples:
            agg.note_probe(t, v)
    agg.add_table(rec.requests, np.arange(rec.requests.n))
    cost = h.get("cost") or {}
    agg.gpu_hour_price = cost.get("gpu_hour_price")
    agg.gpus = cost.get("gpus") or 1
    for t, src, v in rec.samples:
        if src == "gpu" and v.get("gpu_power_w") is not None:
            agg.add_power(t, float(v["gpu_power_w"]))
            if not cost.get("gpus") and v.get("gpu_devices"):
                agg.gpus = len(v["gpu_devices"])
    # Server counters: the deltas the live probes used, replayed per probe.
    server_spec: dict[str, dict[str, Any]] = {}
    probes: dict[str, ServerMetricsProbe] = {}
    for t, src, v in rec.samples:
        if src != "server" or "delta" not in v:
            continue
        url = str(v.get("url", ""))
        pr = probes.get(url)
        if pr is None:
            pr = probes[url] = ServerMetricsProbe(url, tuple(v.get("arms", ())))
        d = v["delta"]
        pr.deltas.append((t, float(d[0]), float(d[1]), float(d[2])))
    for arm in arms:
        for pr in probes.values():
            if arm not in pr.arms:
                continue
            if len(pr.arms) == 1 or agg.assign != "switch":
                tot = pr.totals(t0=agg.t_measure) if len(pr.arms) == 1 else None
            else:
                segs = [
                    (max(a, agg.t_measure or a), e) for _, nm, a, e in agg.segments if nm == arm
                ]
                tot = pr.totals(segments=segs)
            if tot is not None:
                server_spec[arm] = tot
    t_end = rec.t_end if rec.t_end is not None else rec.last_t
    target = (rec.summary or {}).get("target") or h.get("target") or {}
    out = agg.summary(
        t_end=t_end, started_at=h.get("started_at", ""), target=target, server_spec=server_spec
    )
    live = rec.summary or {}
    if isinstance(live.get("output_check"), dict):
        out["output_check"] = live["output_check"]  # measured live, not recomputable
    from tokmon.core.summary import alerts_from_events

    out["alerts"] = alerts_from_events(rec.events, 0)
    return out
