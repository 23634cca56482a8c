"""A recording's file as lines: read in bounded pieces (gzip or not, never the whole
file in memory), each line parsed as JSON, the request lines found by their first bytes.
What the reader and the columnar companion's writer both read a file with."""

from __future__ import annotations

import json
import os
import stat
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from tokmon.gate import loads
from tokmon.recording import RecordingError
from tokmon.textsafe import might_hold_surrogates

try:  # orjson parses recordings about twice as fast; the standard library works too
    import orjson

    _fast: Any = orjson.loads
    DecodeError: Any = orjson.JSONDecodeError
except ImportError:  # pragma: no cover
    _fast = json.loads
    DecodeError = ValueError


_inflate: Any = zlib
_INFLATE_ERRORS: tuple[Any, ...] = (zlib.error,)
try:  # (the fast extra) ISA-L inflates gzip twice as fast as zlib, with zlib's interface
    from isal import isal_zlib  # type: ignore[import-not-found, unused-ignore]

    _inflate, _INFLATE_ERRORS = isal_zlib, (zlib.error, isal_zlib.error)
except ImportError:  # pragma: no cover — zlib inflates the same bytes
    pass


def load_line(line: bytes | str) -> Any:
    """A line of a recording. orjson refuses a lone surrogate escape (valid JSON, which
    an older tokmon wrote from a server's text): such a line is read by the standard
    parser and made valid text (``textsafe.loads``), not skipped as corrupt."""
    try:
        return _fast(line)
    except DecodeError:
        if not might_hold_surrogates(line):
            raise
        return loads(line)


CHUNK = 1 << 20
# Bounds on what a file may make tokmon do: recordings are shared and may be crafted.
MAX_LINE = 16 << 20  # a request line is ~300 bytes; a header with many prompts, some KiB
MAX_RATIO = 200  # a gzip recording of JSON Lines inflates 5-15×: far more is a bomb
MAX_T_NS = 366 * 86_400 * 10**9  # times in a recording: within a year of its start
MAX_ARMS = 256


class Lines:
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
        d = _inflate.decompressobj(31)
        out = 0
        raw = first
        while raw:
            data = raw
            while data:  # at most CHUNK out of each call: a bomb never inflates at once
                try:
                    part = d.decompress(data, CHUNK)
                except _INFLATE_ERRORS:
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

    def regions(self) -> Iterator[bytes]:
        """The complete lines, a piece of the file at a time, each piece as the bytes of
        its lines (newlines between them, not after the last); then ``tail`` holds a last
        line cut short (b"" when there is none)."""
        rest = b""
        self.tail = b""
        try:
            for chunk in self._chunks():
                buf = rest + chunk
                cut = buf.rfind(b"\n")
                rest = buf[cut + 1 :]
                # an unfinished line may not grow past MAX_LINE (a line that ends within
                # the next piece is then at most MAX_LINE + CHUNK long)
                if len(rest) > MAX_LINE:
                    raise RecordingError(
                        f"{self.f.name} has a line longer than {MAX_LINE >> 20} MiB: "
                        "not a tokmon recording"
                    )
                if cut >= 0:
                    self.offset += cut + 1
                    yield buf[:cut]
        finally:
            self.f.close()
        if rest.strip():
            self.tail = rest

    def blocks(self) -> Iterator[list[bytes]]:
        """The complete lines, a piece of the file at a time (``regions``, split)."""
        for region in self.regions():
            yield region.split(b"\n")

    def __iter__(self) -> Iterator[tuple[bytes, bool]]:
        for lines in self.blocks():
            for ln in lines:
                yield ln, False
        if self.tail:
            yield self.tail, True


BATCH = 50_000  # request lines turned into columns at a time
AHEAD = 2  # batches of lines read ahead of their parsing (``scan(ahead=True)``), ~15 MB each
PARSERS = 2  # threads that parse batches side by side (``scan(ahead=True)``)
_REQUEST = b'{"k":"r",'  # how a request line begins (as the writer writes it)
_REQ = np.frombuffer(_REQUEST, dtype=np.uint8)


def line_bounds(region: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each line of ``region`` starts and stops, and which begin as a request line
    does (``_REQUEST``): found for the whole region at once, not line by line."""
    a = np.frombuffer(region, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    starts = np.empty(nl.size + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    stops = np.empty_like(starts)
    stops[:-1] = nl
    stops[-1] = a.size
    req = (stops - starts) >= _REQ.size
    if a.size:
        at = np.minimum(starts[:, None] + np.arange(_REQ.size), a.size - 1)
        req &= (a[at] == _REQ).all(axis=1)
    return starts, stops, req


def header_of(path: str) -> dict[str, Any] | None:
    """A recording's header line (None where it cannot be read as one)."""
    head = _first_line(path)
    return head if head is not None and head.get("k") == "header" else None


def _first_line(path: str) -> dict[str, Any] | None:
    """A file's first line as JSON (None where it cannot be read as such)."""
    try:
        for line, cut in Lines(path):
            obj = load_line(line) if not cut else None
            return obj if isinstance(obj, dict) else None
    except (RecordingError, ValueError, UnicodeDecodeError, DecodeError):
        return None
    return None


def rotation_of(path: str) -> dict[str, Any] | None:
    """A file's ``rotation`` (its part of a rotated run), from its first line."""
    head = _first_line(path)
    rot = head.get("rotation") if head is not None else None
    return rot if isinstance(rot, dict) else None
