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
from tokmon.model.records import Event, RequestRecord
from tokmon.model.table import RequestTable
from tokmon.recording import SCHEMA_VERSION, RecordingError

try:  # orjson parses recordings about twice as fast; the standard library works too
    import orjson

    _loads: Any = orjson.loads
    _DecodeError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover
    _loads = json.loads
    _DecodeError = ValueError


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
    from tokmon.model.fold import Aggregator, mix_weights
    from tokmon.model.stats import Slo
    from tokmon.probes.server import ServerMetricsProbe

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
    from tokmon.model.summary import alerts_from_events

    out["alerts"] = alerts_from_events(rec.events, 0)
    return out
