"""A recording's columnar companion: a part's requests as columns, written once.

A day's report spent most of its reading on inflating and parsing 17 million JSON lines,
again at every report. A companion (``PART.cols.parquet``, beside the part) holds what
that reading gives, made once when the part closed (or by ``tokmon index``): the part's
request lines as the columns the reader would make of them (Parquet, zstd: a
well-kept format any tool opens, and the one tokmon's export already writes), and its
other lines (header, ticks, events, samples: a few percent) as they lie in the file,
each with the number of request lines before it. A reader then hands the fold the same
items in the same batches as the JSON gives, without parsing a request line, so a report
says the same, byte for byte, by either path.

The JSON Lines part stays the source of truth. A companion names the part it was made
of (its size and SHA-256, its line count, its run and part number): one that does not
match (the part grew, was cut, or is another run's), cannot be read, or was written by
another version of this format is ignored with one line saying why, and the JSON is
read. Only a complete part is indexed, and only one the reader takes whole (no damaged
line, no appended session): anything else reads as it always has.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tokmon.model.data.table import COLUMNS, DTYPES, NO_TIME, RequestTable
from tokmon.recording import RecordingError, arrow_lines, jsonl

try:  # (an optional extra: ``pip install 'tokmon-live[fast]'``)
    import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-not-found, unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover — recordings are read from their JSON then
    pa = None

SUFFIX = ".cols.parquet"
VERSION = 1  # of this format (a companion of another is ignored, and says so)
KEY = b"tokmon_companion"  # the Parquet key-value metadata that holds the identity
# The recorder indexes a part that holds at least this many requests: below it the JSON
# reads in about a second, and a companion would only cost a process.
MIN_REQUESTS = 100_000


def available() -> bool:
    return pa is not None


def companion_path(part: str) -> str:
    return part + SUFFIX


class NotIndexed(Exception):
    """Why a file gets no companion (one line): it reads from its JSON as before."""


@dataclass(frozen=True)
class Identity:
    """What a companion was made of: the part's bytes and what they hold."""

    size: int
    sha256: str
    lines: int
    rows: int
    gzip: bool
    run: str | None
    part: int
    batch: int


def fingerprint(path: str) -> tuple[int, str]:
    """A file's size and SHA-256 (hashlib releases the GIL on big buffers: a reader
    thread checks a part while the fold works)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


# ------------------------------------------------------------------------ writing
@dataclass
class _Part:
    """One pass over a part: its other lines, each with the request lines before it, and
    what its lines held."""

    others: list[bytes]
    before: list[int]
    rows: int = 0
    lines: int = 0
    gzip: bool = False


def _batches(path: str, vocab: dict[str, list[Any]], part: _Part) -> Iterator[RequestTable]:
    """The part's request lines as the reader's batches make them (every ``BATCH``
    request lines, whatever lies between), numbered into ``vocab``; its other lines into
    ``part``. Raises ``NotIndexed`` where the reader would not take the file whole."""
    batch = jsonl.BATCH
    pending: list[bytes] = []  # request lines of the batch being gathered
    n_pending = 0
    lines = jsonl.Lines(path)
    for region in lines.regions():
        starts, stops, req = jsonl.line_bounds(region)
        n = starts.size
        if not part.lines:
            req[0] = False  # (line 1 is the header, whatever it begins with)
        # runs of request lines are taken at once, as the bytes they are in the file, and
        # cut where the reader cuts its batches; the other lines one by one
        nonreq = np.flatnonzero(~req).tolist()
        nonreq.append(n)
        nxt = 0
        j = 0
        while j < n:
            if j < nonreq[nxt]:
                end = min(nonreq[nxt], j + batch - n_pending)
                pending.append(region[int(starts[j]) : int(stops[end - 1])])
                n_pending += end - j
                part.rows += end - j
                j = end
                if n_pending >= batch:
                    yield _table(b"\n".join(pending), n_pending, vocab)
                    pending, n_pending = [], 0
                continue
            line = region[int(starts[j]) : int(stops[j])]
            nxt += 1
            j += 1
            try:
                obj = jsonl.load_line(line)
            except (ValueError, UnicodeDecodeError):
                raise NotIndexed("a damaged line: it reads line by line") from None
            k = obj.get("k") if isinstance(obj, dict) else None
            if not part.others and k != "header":
                raise RecordingError(f"{path} is not a tokmon recording (no header line)")
            if part.others and k == "header":
                raise NotIndexed("sessions appended (--append): it reads as it is")
            if k == "r" or k is None:
                raise NotIndexed("a request line written otherwise: it reads line by line")
            part.others.append(line)
            part.before.append(part.rows)
        part.lines += n
    if n_pending:
        yield _table(b"\n".join(pending), n_pending, vocab)
    if lines.cut or lines.tail:
        raise NotIndexed("the file is cut (its writer did not finish it)")
    if not part.others:
        raise RecordingError(f"{path} is empty or not a tokmon recording")
    part.gzip = lines.gzip


def build(path: str) -> str:
    """Write the companion of the recording (or part) at ``path``; returns its path.
    Raises ``NotIndexed`` (why, in one line) where the file is not one the reader takes
    whole, ``RecordingError`` where it is not a recording.

    Two passes over the part, a batch in memory at a time: the first finds how each
    column can be held exactly (``_Codec``), the second writes it."""
    from tokmon.textsafe import open_private

    if pa is None:
        raise NotIndexed("companions need pyarrow: pip install 'tokmon-live[fast]'")
    size, digest = fingerprint(path)
    vocab: dict[str, list[Any]] = {}
    first = _Part([], [])
    codec = _Codec()
    for tb in _batches(path, vocab, first):
        codec.learn(tb)
    head = jsonl.load_line(first.others[0])
    rot = head.get("rotation") if isinstance(head.get("rotation"), dict) else {}
    ident = Identity(
        size=size,
        sha256=digest,
        lines=first.lines,
        rows=first.rows,
        gzip=first.gzip,
        run=rot.get("run") if isinstance(rot.get("run"), str) else None,
        part=int(rot["part"]) if isinstance(rot.get("part"), int) else 0,
        batch=jsonl.BATCH,
    )
    meta = {
        "v": VERSION,
        **ident.__dict__,
        # (every string column's, even where no row named one)
        "vocab": {n: vocab.get(n, []) for n, c in COLUMNS.items() if c[1] in ("s", "z")},
        "codec": codec.spec(),
        "others": _pack(b"\n".join(first.others)),
        "before": _pack(np.asarray(first.before, np.int64).tobytes()),
    }
    schema = codec.schema().with_metadata({KEY: orjson.dumps(meta)})
    out = companion_path(path)
    tmp = f"{out}.{os.getpid()}.tmp"
    second = _Part([], [])
    try:
        with (
            open_private(tmp, append=False) as f,
            pq.ParquetWriter(
                f,
                schema,
                compression="zstd",
                # (a flipped bit in a page is found, not read as a figure)
                write_page_checksum=True,
                use_dictionary=codec.dictionary(),
                column_encoding=codec.encodings(),
            ) as w,
        ):
            for tb in _batches(path, vocab, second):
                w.write_table(codec.encode(tb, schema), row_group_size=jsonl.BATCH)
        if (second.rows, second.lines) != (first.rows, first.lines):
            raise NotIndexed("the file changed while it was indexed")
        os.replace(tmp, out)  # (a reader sees the whole companion or none)
    except OSError as e:
        _remove(tmp)
        raise NotIndexed(f"cannot write {out}: {e.strerror or e}") from None
    except BaseException:
        _remove(tmp)
        raise
    return out


def _table(buf: bytes, n: int, vocab: dict[str, list[Any]]) -> RequestTable:
    """A batch of request lines as the reader makes it, every line a row (a line only
    one by one reading takes, or drops, leaves the file unindexed)."""
    pre = arrow_lines.parse(buf, n)
    if pre is not None:
        return arrow_lines.numbered(pre, vocab)
    try:
        return RequestTable.from_lines([jsonl.load_line(x) for x in buf.split(b"\n")], vocab)
    except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError):
        raise NotIndexed("a damaged request line: it reads line by line") from None


# A column held as its difference from a prediction made of others (integers): the send
# time from the end less the end-to-end time, the schedule from the send less the send's
# lag (each then a rounding of a microsecond, not a number of nanoseconds since the
# start), the first chunk from the first token (most often equal), the chunks from the
# tokens, the decode speed from 1000 / TPOT (a rounding apart). Each term: (column,
# sign, "same" units, an "ms" column in ns, or "inv": 1000 over the column). In the order
# they are undone.
PREDICT: dict[str, tuple[tuple[str, int, str], ...]] = {
    "t_send": (("t_end", 1, "same"), ("e2e_ms", -1, "ms")),
    "t_sched": (("t_send", 1, "same"), ("send_lag_ms", -1, "ms")),
    "ttfc_ms": (("ttft_ms", 1, "same"),),
    "chunks": (("output_tokens", 1, "same"),),
    "decode_tps": (("tpot_ms", 1, "inv"),),
}


def _predict(
    terms: list[list[Any]],
    n: int,
    ints_of: Callable[[str], np.ndarray],
    floats_of: Callable[[str], np.ndarray],
) -> np.ndarray:
    """A column's prediction (integers) from its terms: the one computation the writer
    and the reader both make, so that what one subtracts the other adds back."""
    pred = np.zeros(n, np.int64)
    for base, k, kind in terms:
        if kind == "lin":
            pred += k * ints_of(base)
            continue
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q = np.round(k / floats_of(base))
        pred += np.where(np.isfinite(q) & (np.abs(q) < _EXACT), q, 0.0).astype(np.int64)
    return pred


SCALES = (1, 1000, 1_000_000)  # a float column as integers: ms with 3 or 6 decimals
_EXACT = float(2**53)


def _scale(col: np.ndarray) -> int | None:
    """The least scale at which every value of a float column is an integer that gives
    the value back exactly (``k / scale`` is the double nearest the decimal, as the JSON
    parser made it); None: none does."""
    a = col[~np.isnan(col)]
    for s in SCALES:
        v = np.round(a * s)
        if (np.abs(v) < _EXACT).all() and (v / s == a).all():
            return s
    return None


class _Codec:
    """How each column is held, exactly: a float column whose values are decimals of a
    few places as integers (most of a request's figures are ms to the µs), a time or
    count column as an integer, some as their difference from another (``BASES``), each
    integer column delta- and bit-packed, strings as codes into the companion's
    vocabulary. A measured day's columns come to a fraction of the gzip JSON's size."""

    def __init__(self) -> None:
        # (1 until a value says more: a part with no request holds its columns as integers)
        self.scales: dict[str, int | None] = {
            n: 1 for n, col in COLUMNS.items() if col[1] in ("f", "n")
        }
        self.gaps = False

    @classmethod
    def of(cls, spec: Any) -> _Codec | None:
        """The codec a companion says it was written with (None: not one this writes)."""
        if not isinstance(spec, dict) or not isinstance(spec.get("scales"), dict):
            return None
        c = cls()
        floats = {n for n, col in COLUMNS.items() if col[1] in ("f", "n")}
        for name, s in spec["scales"].items():
            if name not in floats or not (s is None or s in SCALES):
                return None
            c.scales[name] = s
        c.gaps = spec.get("gaps") is True
        return c if c.scales.keys() == floats and spec.get("bases") == c.bases() else None

    def learn(self, tb: RequestTable) -> None:
        for name, (_short, typ, _default) in COLUMNS.items():
            if typ not in ("f", "n"):
                continue
            s = _scale(tb.cols[name])
            old = self.scales[name]
            self.scales[name] = None if s is None or old is None else max(s, old)
        self.gaps = self.gaps or tb.gaps is not None

    def spec(self) -> dict[str, Any]:
        return {"scales": self.scales, "bases": self.bases(), "gaps": self.gaps}

    def is_int(self, name: str) -> bool:
        typ = COLUMNS[name][1]
        return typ in ("i", "k", "t") or (typ in ("f", "n") and self.scales.get(name) is not None)

    def bases(self) -> dict[str, list[list[Any]]]:
        """Each predicted column's terms, as the scales allow them: [[column, factor,
        "lin" or "inv"]]."""
        out: dict[str, list[list[Any]]] = {}
        for name, terms in PREDICT.items():
            if not self.is_int(name):
                continue
            got: list[list[Any]] = []
            for base, sign, unit in terms:
                scale = self.scales.get(base) or 1
                if unit == "inv":  # (a float column, held as integers or not)
                    got.append([base, 1000.0 * (self.scales.get(name) or 1), "inv"])
                elif not self.is_int(base):
                    continue
                elif unit == "ms":  # (a float column's integers, in ns)
                    if 10**6 % scale == 0:
                        got.append([base, sign * (10**6 // scale), "lin"])
                elif COLUMNS[name][1] not in ("f", "n") or self.scales[name] == scale:
                    got.append([base, sign, "lin"])
            if got:
                out[name] = got
        return out

    def schema(self) -> Any:
        fields = []
        for name, (_short, typ, _default) in COLUMNS.items():
            if typ in ("s", "z"):
                fields.append((name, pa.int32()))
            elif typ == "b":
                fields.append((name, pa.bool_()))
            elif self.is_int(name):
                fields.append((name, pa.int64()))
            else:
                fields.append((name, pa.float64()))
        if self.gaps:
            fields.append(("g", pa.binary()))
        return pa.schema(fields)

    def dictionary(self) -> list[str]:
        return [n for n, c in COLUMNS.items() if c[1] in ("s", "z", "b")]

    def encodings(self) -> dict[str, str]:
        return {n: "DELTA_BINARY_PACKED" for n in COLUMNS if self.is_int(n)}

    def ints(self, tb: RequestTable) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """The integer columns' values (0 where none) and where there is none."""
        out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        for name, (_short, typ, _default) in COLUMNS.items():
            if not self.is_int(name):
                continue
            col = tb.cols[name]
            if typ in ("f", "n"):
                none = np.isnan(col)
                v = np.round(np.where(none, 0.0, col) * (self.scales[name] or 1)).astype(np.int64)
                out[name] = (v, none if none.any() else None)
            elif typ == "t":
                none = col == NO_TIME
                out[name] = (np.where(none, 0, col), none if none.any() else None)
            else:
                out[name] = (col.astype(np.int64), None)
        return out

    def encode(self, tb: RequestTable, schema: Any) -> Any:
        ints = self.ints(tb)
        held = {n: v for n, (v, _none) in ints.items()}
        for name, terms in self.bases().items():
            pred = _predict(terms, tb.n, lambda b: ints[b][0], lambda b: tb.cols[b])
            held[name] = ints[name][0] - pred
        arrays = []
        for fl in schema:
            name = fl.name
            if name == "g":
                arrays.append(pa.array(tb.gaps or [b""] * tb.n, pa.binary()))
            elif name in held:
                arrays.append(pa.array(held[name], pa.int64(), mask=ints[name][1]))
            else:
                arrays.append(pa.array(tb.cols[name], fl.type))
        return pa.Table.from_arrays(arrays, schema=schema)


def _pack(b: bytes) -> str:
    return base64.b64encode(zlib.compress(b, 6)).decode("ascii")


class _TooBig(ValueError):
    """A companion's packed bytes inflate past what its part could hold."""


def _unpack(s: Any, limit: int) -> bytes:
    """Packed bytes, inflated to at most ``limit`` (a crafted companion is no bomb)."""
    if not isinstance(s, str):
        raise ValueError("not packed")
    d = zlib.decompressobj()
    out = d.decompress(base64.b64decode(s, validate=True), limit)
    if d.unconsumed_tail or not d.eof:
        raise _TooBig("its lines inflate past their bound")
    return out


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class Companion:
    """A companion found good for its part: its other lines (each with the request
    lines before it) and its batches of requests, read one at a time."""

    path: str
    ident: Identity
    others: list[bytes]
    before: np.ndarray
    vocab: dict[str, list[Any]]
    file: Any  # the open ParquetFile
    codec: _Codec
    lock: threading.Lock

    def batch(self, i: int) -> arrow_lines.Parsed:
        """Row group ``i``: as Arrow's parse of those request lines would be. A group
        that cannot be read ends the read in one line (what came before was handed on:
        the companion was good enough to start from, and is not any more)."""
        try:
            return self._batch(i)
        except (pa.ArrowException, OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise RecordingError(
                f"{self.path}: damaged ({type(e).__name__}); delete it, or write it again "
                "with `tokmon index`"
            ) from None

    def _batch(self, i: int) -> arrow_lines.Parsed:
        with self.lock:  # (one ParquetFile is not read by two threads at once)
            tb = self.file.read_row_group(i)
        codec = self.codec
        ints: dict[str, np.ndarray] = {}
        nones: dict[str, np.ndarray] = {}
        for name in COLUMNS:
            if codec.is_int(name):
                col = tb.column(name)
                if col.null_count:
                    nones[name] = col.is_null().to_numpy(zero_copy_only=False)
                    col = pc.fill_null(col, 0)
                ints[name] = col.to_numpy().astype(np.int64)
        n = tb.num_rows

        def floats_of(name: str) -> np.ndarray:
            if name not in ints:
                return tb.column(name).to_numpy(zero_copy_only=False)
            v = ints[name] / float(codec.scales[name] or 1)
            if name in nones:
                v[nones[name]] = np.nan
            return v

        for name, terms in codec.bases().items():  # (in the order they are undone)
            ints[name] = ints[name] + _predict(terms, n, ints.__getitem__, floats_of)
            if name in nones:  # (a value that is not there is 0 as a term, as written)
                ints[name][nones[name]] = 0
        numbers: dict[str, np.ndarray] = {}
        strings: dict[str, tuple[list[Any], np.ndarray]] = {}
        for name, (_short, typ, _default) in COLUMNS.items():
            if typ in ("s", "z"):
                strings[name] = self._strings(name, tb.column(name).to_numpy())
            elif name not in ints:
                numbers[name] = tb.column(name).to_numpy(zero_copy_only=False)
            elif typ in ("f", "n"):
                numbers[name] = floats_of(name)
            elif typ == "t":
                v = ints[name]
                if name in nones:
                    v[nones[name]] = NO_TIME
                numbers[name] = v
            else:
                numbers[name] = ints[name].astype(DTYPES[typ])
        gaps = tb.column("g").to_pylist() if codec.gaps else None
        return arrow_lines.Parsed(numbers, strings, gaps)

    def _strings(self, name: str, codes: np.ndarray) -> tuple[list[Any], np.ndarray]:
        """A string column of a batch as Arrow's dictionary of its lines has it: the
        values in the order of the rows where each first appears, each row's index."""
        voc = self.vocab[name]
        if codes.size and (codes.min() < 0 or codes.max() >= len(voc)):
            raise RecordingError(f"{self.path}: damaged (a code out of range); delete it")
        used, first = np.unique(codes, return_index=True)
        order = used[np.argsort(first, kind="stable")]
        remap = np.zeros(max(len(voc), 1), np.int64)
        remap[order] = np.arange(order.size)
        return [voc[c] for c in order.tolist()], remap[codes]


def load(path: str) -> tuple[Companion | None, str | None]:
    """The companion of the part at ``path``: (the companion, None) where it is good for
    the part as it is now, (None, why) where one is there but ignored, (None, None)
    where there is none."""
    cpath = companion_path(path)
    if pa is None or not os.path.exists(cpath):
        return None, None
    try:
        # A companion is a file from outside too: what it may make tokmon read and hold
        # is bounded by its part (a legitimate one is a third of it; its inflated lines
        # and columns no more than the part's lines inflate to: ``jsonl.MAX_RATIO``)
        part_size = os.stat(path).st_size
        if os.stat(cpath).st_size > 4 * part_size + (1 << 20):
            return None, f"{cpath}: damaged (larger than its part could make); the JSON is read"
        bound = jsonl.MAX_RATIO * part_size + (1 << 20)
        f = pq.ParquetFile(cpath, page_checksum_verification=True)
        md = f.metadata
        held = sum(
            md.row_group(i).column(j).total_uncompressed_size
            for i in range(md.num_row_groups)
            for j in range(md.num_columns)
        )
        if held > bound + md.num_rows * 8 * len(COLUMNS):
            return (
                None,
                f"{cpath}: damaged (its columns inflate past their bound); the JSON is read",
            )
        raw = (f.schema_arrow.metadata or {}).get(KEY)
        meta = orjson.loads(raw) if raw is not None else None
        if not isinstance(meta, dict):
            return None, f"{cpath}: not a tokmon companion; the JSON is read"
        if meta.get("v") != VERSION or meta.get("batch") != jsonl.BATCH:
            return None, f"{cpath}: of another version of the format; the JSON is read"
        ident = Identity(**{k: meta[k] for k in Identity.__dataclass_fields__})
        st = os.stat(path)
        if st.st_size != ident.size:
            return None, f"{cpath}: stale (its part changed since it was written); the JSON is read"
        head = _run_of(path)
        if head != (ident.run, ident.part):
            return None, f"{cpath}: of another run or part; the JSON is read"
        if fingerprint(path)[1] != ident.sha256:
            return None, f"{cpath}: its part's digest differs; the JSON is read"
        others = _unpack(meta["others"], bound).split(b"\n")
        before = np.frombuffer(_unpack(meta["before"], 8 * (ident.lines + 1)), np.int64)
        vocab = meta["vocab"]
        groups = [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)]
        codec = _Codec.of(meta.get("codec"))
        ok = (
            codec is not None
            and isinstance(vocab, dict)
            and all(isinstance(vocab.get(n), list) for n, c in COLUMNS.items() if c[1] in "sz")
            and all(x is None or isinstance(x, str) for v in vocab.values() for x in v)
            and f.schema_arrow.remove_metadata().equals(codec.schema())
            and len(others) == before.size
            and sum(groups) == ident.rows
            and all(g == ident.batch for g in groups[:-1])
            and (not before.size or (np.diff(before) >= 0).all() and before[-1] <= ident.rows)
        )
        if not ok or codec is None:
            return None, f"{cpath}: damaged (its parts do not agree); the JSON is read"
        return Companion(cpath, ident, others, before, vocab, f, codec, threading.Lock()), None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        zlib.error,
        orjson.JSONDecodeError,
        pa.ArrowException,
    ) as e:
        why = str(e) if isinstance(e, _TooBig) else getattr(e, "strerror", None) or "cannot be read"
        return None, f"{cpath}: damaged ({why}); the JSON is read"


def _run_of(path: str) -> tuple[str | None, int]:
    rot = jsonl.rotation_of(path) or {}
    run = rot.get("run")
    part = rot.get("part")
    return (run if isinstance(run, str) else None, part if isinstance(part, int) else 0)


# ------------------------------------------------------------------------ the recorder's
def spawn(path: str) -> Any:
    """Index a finished part in a process of its own, at low priority: off the engine's
    and the dashboard's paths, and on after the run ends (the companion appears whole,
    renamed into place). Returns the process (None: pyarrow is not installed)."""
    import subprocess

    if pa is None:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", "from tokmon.recording.companion import main; main()", path],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def main() -> None:
    """``python -c 'from tokmon.recording.companion import main; main()' PART``: what
    ``spawn`` runs (quietly: a part that cannot be indexed reads from its JSON)."""
    try:
        os.nice(10)
    except OSError:
        pass
    try:
        build(sys.argv[1])
    except (NotIndexed, RecordingError, OSError):
        sys.exit(1)
