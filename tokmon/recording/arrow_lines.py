"""Request lines read by Apache Arrow's JSON reader, when pyarrow is installed.

A day-long soak is 17 million request lines. Parsed one dict at a time (orjson, then the
columns gathered from the dicts: ``RequestTable.from_lines``) they cost ~4 µs each, most
of a report's time; Arrow's reader parses a batch straight into typed columns in C++,
without holding the GIL, at a fifth of the cost (``bench/day_recording.py``). It is used
only where it gives exactly what the dict path gives: a batch it might read differently
(text that is not ASCII, ``null``, ``NaN`` or ``Infinity``, which orjson refuses or reads
otherwise, a line that is not one object) or that it refuses (a value of another JSON
type than its column's, a key twice, a number out of range) is left to the dict path,
which sorts out the bad lines one by one. ``tests/test_arrow_lines.py`` holds the two
equal, line for line, over the cases each could read apart, however many keys Arrow was
told of.

A batch is read in two halves: ``parse`` (Arrow, any thread, told only the keys the lines
have held so far: ``docs/performance.md``, a day's report) and ``numbered`` (its strings numbered into
the recording's vocabulary, in the order of the file).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokmon.model.data.table import COLUMNS, DTYPES, MISSING, REQUIRED, RequestTable, string_column

try:  # (an optional extra: ``pip install 'tokmon-live[fast]'``)
    import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-not-found, unused-ignore]
    import pyarrow.json as pj  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover — the dict path reads every line then
    pa = None

# a number column's type as Arrow reads it: the table's own ("int64", "bool" …)
_TYPES = {typ: np.dtype(dt).name for typ, dt in DTYPES.items()}
# An explicit null is read by the dict path as NaN where a number may be missing (as
# here) but refused, or kept as a value, elsewhere, where this reader cannot tell it from
# a key left out; NaN and Infinity, which orjson refuses, are found in the float columns.
_NULL = b"null"


# every key a request line may hold, with its type ("g": the token gaps, base64)
_FIELDS: dict[str, str] = {short: typ for short, typ, _ in COLUMNS.values()} | {"g": "s"}
_options: dict[frozenset[str] | None, Any] = {}


def _parse_options(keys: frozenset[str] | None = None) -> Any:
    """The schema of every key (``keys`` None: any other is ignored) or of ``keys`` only
    (any other is inferred, for the caller to see)."""
    opts = _options.get(keys)
    if opts is None:
        names = _FIELDS if keys is None else [k for k in _FIELDS if k in keys]
        fields = [(k, _type(k)) for k in names]
        if keys is not None:
            fields.append(("k", pa.string()))  # (every line's own kind: "r")
        opts = _options[keys] = pj.ParseOptions(
            explicit_schema=pa.schema(fields),
            unexpected_field_behavior="ignore" if keys is None else "infer",
        )
    return opts


def _type(short: str) -> Any:
    typ = _FIELDS[short]
    return pa.string() if typ in ("s", "z") else pa.type_for_alias(_TYPES[typ])


@dataclass(frozen=True)
class Parsed:
    """A batch as Arrow read it, before its strings are numbered: the number columns as
    the table holds them, each string column as its distinct values (in the order of the
    rows where each first appears) and each row's index into them (one past the last:
    the row has no such key), and the token gaps. Made without the shared vocabulary, so
    batches are parsed in any thread and order; numbered in the order of the file."""

    numbers: dict[str, np.ndarray]
    strings: dict[str, tuple[list[Any], np.ndarray]]
    gaps: list[bytes] | None


def read(
    buf: bytes, n: int, vocab: dict[str, list[Any]], keys: set[str] | None = None
) -> RequestTable | None:
    """A batch of ``n`` request lines, as they lie in a file (newlines between them), as
    columns, exactly as ``RequestTable.from_lines`` makes them from the parsed lines
    (``vocab`` shared and extended the same way); None where this reader does not apply
    or refuses the batch (the caller reads it line by line)."""
    p = parse(buf, n, keys=keys)
    return None if p is None else numbered(p, vocab)


def parse(buf: bytes, n: int, threads: bool = True, keys: set[str] | None = None) -> Parsed | None:
    """``read``'s first half, which needs no vocabulary (None: refused). ``threads``:
    Arrow parses the batch's blocks on its pool; a caller that parses several batches at
    once does better without (the same work in fewer CPU seconds).

    ``keys``: the keys the recording's request lines have held so far (a set this
    learns into, shared by the batches of a scan). Arrow then reads those keys only:
    a line of a day's soak holds 18 keys of the 42 a line may hold, and the reader
    appends a null for each key a line leaves out, a third of its time. A batch where a
    line holds a key not learned yet is read again with every key (a scan's first
    batch, and the first to hold a key seen rarely), so what is read is the same."""
    if pa is None or not n:
        return None
    # (``u`` first: a byte found by memchr at memory speed, absent from most batches, where
    # a search for "null" walks every ``n`` of the keys: 8 ms a batch, 3 s of a day)
    if not buf.isascii() or (b"u" in buf and _NULL in buf):
        return None
    tb = None
    if keys is not None:
        tb = _table(buf, threads, _parse_options(frozenset(keys)))
        new = set(tb.column_names) & (_FIELDS.keys() - keys) if tb is not None else ()
        if new:
            keys.update(new)
            tb = None
    if tb is None:
        tb = _table(buf, threads, _parse_options())
        if tb is None:
            return None
        if keys is not None:
            keys.update(c for c in _FIELDS if tb.column(c).null_count < n)
    if tb.num_rows != n:  # (two objects on one line: the dict path refuses it)
        return None
    numbers: dict[str, np.ndarray] = {}
    strings: dict[str, tuple[list[Any], np.ndarray]] = {}
    have = set(tb.column_names)
    for name, (short, typ, default) in COLUMNS.items():
        col = tb.column(short).combine_chunks() if short in have else pa.nulls(n, _type(short))
        if short in REQUIRED and col.null_count:
            return None  # (a line without it: the dict path sorts the lines out)
        if typ in ("s", "z"):
            enc = col.dictionary_encode()
            values = enc.dictionary.to_pylist()
            idx = pc.fill_null(enc.indices, len(values)).to_numpy(zero_copy_only=False)
            strings[name] = (values, idx)
            continue
        if typ in ("f", "n"):
            # (a missing value is NaN, as Arrow gives a null here: any other value that is
            # not finite was NaN or Infinity in the text, which the dict path refuses)
            v = col.to_numpy(zero_copy_only=False)
            if np.count_nonzero(~np.isfinite(v)) != col.null_count:
                return None
            numbers[name] = v
            continue
        if col.null_count:
            col = pc.fill_null(col, MISSING.get(typ, default))
        numbers[name] = col.to_numpy(zero_copy_only=False).astype(_TYPES[typ], copy=False)
    gaps = None
    g = tb.column("g") if "g" in have else pa.nulls(n, pa.string())
    if g.null_count < len(g):
        gaps = [base64.b64decode(x) if x is not None else b"" for x in g.to_pylist()]
    return Parsed(numbers, strings, gaps)


def numbered(p: Parsed, vocab: dict[str, list[Any]]) -> RequestTable:
    """``read``'s second half: the string columns as codes into the shared vocabulary,
    each column's default first (as the dict path adds it), then values not seen before
    in the order of the rows where each first appears (Arrow's dictionary keeps that
    order). Batches are numbered in the order of the file."""
    cols: dict[str, np.ndarray] = {}
    for name, (_short, typ, default) in COLUMNS.items():
        if name not in p.strings:
            cols[name] = p.numbers[name]
            continue
        values, idx = p.strings[name]
        voc, index, fill = string_column(vocab, name, typ, default)
        lut = []
        for v in values:
            if v not in index:
                index[v] = len(voc)
                voc.append(v)
            lut.append(index[v])
        lut.append(fill)  # (a row without the key: its default)
        cols[name] = np.asarray(lut, dtype=np.int32)[idx]
    return RequestTable(cols, vocab, p.gaps)


def _table(buf: bytes, threads: bool, options: Any) -> Any:
    """The batch as Arrow reads it (None: refused). A block holds whole lines: a line
    longer than a block is read with bigger ones."""
    tb = _parse(buf, 1 << 20, threads, options)
    if tb is None:
        longest = max(map(len, buf.split(b"\n"))) + 1
        tb = _parse(buf, longest, threads, options) if longest > 1 << 20 else None
    return tb


def _parse(buf: bytes, block: int, threads: bool, options: Any) -> Any:
    try:
        return pj.read_json(
            io.BytesIO(buf),
            read_options=pj.ReadOptions(block_size=block, use_threads=threads),
            parse_options=options,
        )
    except (pa.ArrowException, ValueError, TypeError):
        return None
