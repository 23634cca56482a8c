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
import os
import platform
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


class Recorder:
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
        self._last_flush = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._header: dict[str, Any] | None = None

    def open(self, header: dict[str, Any], t0: int) -> None:
        """Create the file and write the header (``r`` in the dashboard calls this too)."""
        self.t0 = t0
        try:
            self._raw = open(self.path, "ab")  # noqa: SIM115 — closed in close()
        except OSError as e:
            raise RecordingError(f"cannot write {self.path}: {e.strerror or e}") from None
        if self.path.endswith(".gz"):
            self._gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing
        self._header = header
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
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)
        for s in self.secrets:
            if s in line:
                line = line.replace(s, "<redacted>")
        with self.lock:
            self._buf.append(line)
            self.lines += 1
        if time.monotonic() - self._last_flush > 1.0:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if self._raw is None:
                return
            data = ("\n".join(self._buf) + "\n").encode() if self._buf else b""
            self._buf.clear()
            self._last_flush = time.monotonic()
            try:
                if self._gz is not None:
                    data = self._gz.compress(data) + self._gz.flush(zlib.Z_SYNC_FLUSH)
                if data:
                    self._raw.write(data)
                    self._raw.flush()
            except (OSError, ValueError):
                pass  # a full disk must not end the run; the reader sees where it stopped

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
        if self.active:
            self._write({"k": "summary", **summary})

    def end(self, t: int) -> None:
        if self.active:
            self._write({"k": "end", "t": t - self.t0})

    def toggle(self) -> str:
        if self.active:
            self.close()
            return f"recording stopped: {self.path}"
        if self._header is None:
            return "no recording configured"
        self._stop.clear()
        self.open(self._header, self.t0)
        return f"recording to {self.path}"

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.flush()
        with self.lock:
            self.active = False
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


class _Lines:
    """The file's lines, read in 1 MiB pieces (never the whole file in memory), gzip or
    not; a last line without its newline is reported as cut, and so is a gzip stream that
    stops short (what decompressed up to there is kept)."""

    def __init__(self, path: str, offset: int = 0) -> None:
        try:
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
        raw = first
        while raw:
            try:
                yield d.decompress(raw)
            except zlib.error:
                self.cut = True
                return
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
            rec = Recording(path=path, header=obj)
            continue
        if k == "r":
            rec.corrupt += _columns(batch, vocab, parts)  # keep the order of the file
            batch = []
            try:
                parts.append(RequestTable.from_lines([obj], vocab))
            except (KeyError, TypeError, ValueError, OverflowError):
                rec.corrupt += 1
            continue
        try:
            if k == "tok":
                rec.ticks.extend((int(t), str(a), int(c)) for t, a, c in obj["v"])
            elif k == "p":
                rec.samples.append((int(obj["t"]), str(obj["src"]), dict(obj["v"])))
            elif k == "e":
                rec.events.append(
                    Event(
                        t=int(obj["t"]),
                        kind=str(obj["kind"]),
                        message=str(obj["msg"]),
                        data=dict(obj.get("data") or {}),
                        wall=float(obj.get("wall") or 0),
                    )
                )
            elif k == "summary":
                rec.summary = {kk: vv for kk, vv in obj.items() if kk != "k"}
            elif k == "end":
                rec.t_end = int(obj["t"])
            elif k == "header":
                rec.corrupt += 1
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
    with one bad line is sorted line by line)."""
    if not batch:
        return 0
    try:
        dicts = list(map(_loads, batch))
        parts.append(RequestTable.from_lines(dicts, vocab))
        return 0
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
    if good:
        parts.append(RequestTable.from_lines(good, vocab))
    return len(batch) - len(good)


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
        arm = ev.data.get("arm")
        if ev.kind == "arm" and isinstance(arm, str) and arm in arms:
            agg.switch(arm, ev.t)
        elif ev.kind == "step" and isinstance(arm, str):
            agg.begin_step(
                int(str(ev.data.get("step", 0))),
                arm,
                str(ev.data.get("value")),
                ev.t,
                float(str(ev.data.get("warm_s", 0))),
                str(ev.data.get("param")),
            )
        elif ev.kind == "ladder":
            reason = ev.data.get("reason")
            agg.end_ladder(ev.t, reason if isinstance(reason, str) else None)
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
