"""Writing a recording as the run goes (the format: ``tokmon.recording``)."""

from __future__ import annotations

import os
import platform
import secrets as secrets_module
import sys
import threading
import time
import zlib
from dataclasses import asdict
from typing import IO, Any

from tokmon.model.data.facts import Fact, Requests, Sample, Status, Tick, Tokens
from tokmon.model.data.records import Event, RequestRecord, SentPrompt
from tokmon.model.data.table import record_to_line
from tokmon.recording import SCHEMA_VERSION, RecordingError, companion
from tokmon.recording.parts import CARRIED, part_path
from tokmon.stamps import stamp_sources
from tokmon.textsafe import dumps, open_private


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

    def __init__(
        self,
        path: str,
        *,
        secrets: tuple[str, ...] = (),
        chunks: bool = False,
        rotate_s: float | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.path = path
        # --record-rotate / --record-max-size: a new part at the first tick past either
        self.rotate_ns = int(rotate_s * 1e9) if rotate_s else None
        self.max_bytes = max_bytes or None
        self.part = 1  # the part being written (``parts.part_path``)
        self._part_t0 = 0  # when the part began (ns since the start)
        self._part_bytes = 0  # bytes written to it
        self._header: dict[str, Any] = {}
        self._state: dict[str, dict[str, Any]] = {}  # the last event of each CARRIED kind
        self._sent_max = 0  # the latest t_sched of the request lines written (rotating)
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
        # a finished part of this many requests or more gets its columnar companion, made
        # by a process of its own (``recording.companion``; 0: never)
        self.index_from = companion.MIN_REQUESTS
        self._part_requests = 0
        self.indexers: list[Any] = []  # the processes writing companions

    def open(self, header: dict[str, Any], t0: int) -> None:
        """Create the file and write the header. ``self.mode`` "wb" replaces a file, "ab"
        adds a session to it (the reader reports the last session of a file)."""
        self.t0 = t0
        _drop_companion(self.path)  # (the file is written again: its columns are stale)
        try:
            # ("wb": --overwrite, the user's word that the file may go)
            self._raw = open_private(self.path, append=self.mode == "ab", replace_any=True)
        except OSError as e:
            raise RecordingError(f"cannot write {self.path}: {e.strerror or e}") from None
        if self.path.endswith(".gz"):
            self._gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip framing
        self.active = True
        self._header = {
            "k": "header",
            "schema_version": SCHEMA_VERSION,
            **header,
            "t0_ns": 0,
            # The times in this file are relative to this perf_counter reading (on
            # Linux the system-wide monotonic clock): other processes' stamps compare.
            "t0_perf_ns": t0,
        }
        if self.rotating:
            run = secrets_module.token_hex(8)  # (which parts belong together)
            self._header["rotation"] = {"part": 1, "run": run, "from_ns": 0}
        self._write(self._header)
        self.flush()
        self._thread = threading.Thread(target=self._flusher, name="tokmon-recorder", daemon=True)
        self._thread.start()

    @property
    def rotating(self) -> bool:
        return self.rotate_ns is not None or self.max_bytes is not None

    def _rotate_due(self, t: int) -> bool:
        if self.rotate_ns is not None and t - self._part_t0 >= self.rotate_ns:
            return True
        return self.max_bytes is not None and self._part_bytes >= self.max_bytes

    def _rotate(self, t: int) -> None:
        """Go on in the next part: this one is finished (a whole gzip stream), the next
        begins with the header and the run's state, so that it reads alone."""
        self.flush()  # what is buffered goes to the part it belongs to
        if self._pending:
            return  # (a write is failing: the data held belongs to this part; next tick)
        nxt = part_path(self.path, self.part + 1)
        _drop_companion(nxt)
        try:
            raw = open_private(nxt, append=False, replace_any=True)
        except OSError as e:
            if self.on_error is not None:  # (the run goes on in the part it has)
                self.on_error(f"recording: cannot begin {nxt}: {e.strerror or e}")
            self._part_t0 = t  # (tried again a period later, not at every tick)
            return
        # sent_max: the last request sent of those in the parts before (a report from a
        # later time need not read them: ``report --from``)
        rot = {**self._header["rotation"], "part": self.part + 1, "from_ns": t,
               "sent_max": self._sent_max}  # fmt: skip
        first = [self._line({**self._header, "rotation": rot})] + [
            self._line({**line, "carried": True})
            for line in sorted(self._state.values(), key=lambda d: d["t"])
        ]
        with self.lock:
            old, gz = self._raw, self._gz
            try:
                if old is not None:
                    if gz is not None:
                        old.write(gz.flush(zlib.Z_FINISH))
                    old.close()
            except (OSError, ValueError):
                pass
            self._raw = raw
            self._gz = zlib.compressobj(6, zlib.DEFLATED, 31) if gz is not None else None
            self._index(part_path(self.path, self.part))
            self.part += 1
            self._part_t0 = t
            self._part_bytes = 0
            # the header first, even before a line another thread wrote since the flush
            self._buf[:0] = first
            self.lines += len(first)

    def _flusher(self) -> None:
        while not self._stop.wait(0.5):
            self.flush()

    def _line(self, obj: dict[str, Any]) -> str:
        line = dumps(obj, compact=True)  # strict JSON: a NaN from a server becomes null
        for s in self.secrets:
            if s in line:
                line = line.replace(s, "<redacted>")
        return line

    def _write(self, obj: dict[str, Any]) -> None:
        line = self._line(obj)
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
                    self._part_bytes += n or 0
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
        """Finished requests (their times on the monotonic clock)."""
        self.request_lines([record_to_line(r, self.t0, self.chunks) for r in records])

    def request_lines(self, lines: list[dict[str, Any]]) -> None:
        """Finished requests as their lines (times since the start, ``record_to_line``)."""
        if not self.active:
            return
        for d in lines:
            self._write(d)
        self.requests += len(lines)
        self._part_requests += len(lines)
        if self.rotating and lines:
            ts = [d["ts"] for d in lines if isinstance(d.get("ts"), int)]
            self._sent_max = max([self._sent_max, *ts])

    def prompts(self, sent: list[SentPrompt]) -> None:
        """What requests sent (``--record-prompts``): a ``q`` line each."""
        if not self.active:
            return
        for p in sent:
            if p.messages:
                self._write({"k": "q", "id": p.rid, "m": [list(m) for m in p.messages]})
            else:
                self._write({"k": "q", "id": p.rid, "t": p.text})

    def fact(self, f: Fact) -> None:
        """Any other fact of the run (``tokmon.model.data.facts``), its time since the start."""
        if not self.active:
            return
        if isinstance(f, Event):
            line = {"k": "e", "t": f.t, "kind": f.kind, "msg": f.message, "data": f.data,
                    "wall": f.wall}  # fmt: skip
            self._write(line)
            if f.kind in CARRIED and self.rotating:
                self._state[f.kind] = line
        elif isinstance(f, Tokens):
            self._write({"k": "tok", "v": [[b.t, b.arm, b.tokens] for b in f.buckets]})
        elif isinstance(f, Sample):
            self._write({"k": "p", "src": f.src, "t": f.t, "v": f.values})
        elif isinstance(f, Status):
            self._write({"k": "st", **asdict(f.status)})
        elif isinstance(f, Tick):
            self._write(
                {"k": "tick", "t": f.t, "final": True} if f.final else {"k": "tick", "t": f.t}
            )
            if self.rotating and not f.final and self._rotate_due(f.t):
                self._rotate(f.t)
        elif isinstance(f, Requests):
            raise TypeError("requests are written as their lines (request_lines)")

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
                self._index(part_path(self.path, self.part))

    def _index(self, path: str) -> None:
        """A part is finished (lock held): its companion is made off this process, where
        it is long enough to be worth one."""
        n, self._part_requests = self._part_requests, 0
        if self.index_from and n >= self.index_from and not self.lost_lines:
            proc = companion.spawn(path)
            if proc is not None:
                self.indexers.append(proc)


def _drop_companion(path: str) -> None:
    try:
        os.unlink(companion.companion_path(path))
    except OSError:
        pass
