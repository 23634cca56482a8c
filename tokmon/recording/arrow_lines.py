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
equal, line for line, over the cases each could read apart.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from tokmon.model.table import COLUMNS, DTYPES, MISSING, REQUIRED, RequestTable, string_column

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


_options: Any = None


def _parse_options() -> Any:
    global _options
    if _options is None:
        fields = [
            (short, pa.string() if typ in ("s", "z") else pa.type_for_alias(_TYPES[typ]))
            for short, typ, _ in COLUMNS.values()
        ]
        fields.append(("g", pa.string()))
        _options = pj.ParseOptions(
            explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"
        )
    return _options


def read(buf: bytes, n: int, vocab: dict[str, list[Any]]) -> RequestTable | None:
    """A batch of ``n`` request lines, as they lie in a file (newlines between them), as
    columns, exactly as ``RequestTable.from_lines`` makes them from the parsed lines
    (``vocab`` shared and extended the same way); None where this reader does not apply
    or refuses the batch (the caller reads it line by line)."""
    if pa is None or not n:
        return None
    # (``u`` first: a byte found by memchr at memory speed, absent from most batches, where
    # a search for "null" walks every ``n`` of the keys: 8 ms a batch, 3 s of a day)
    if not buf.isascii() or (b"u" in buf and _NULL in buf):
        return None
    tb = _parse(buf, 1 << 20)
    if tb is None:
        # (a block holds whole lines: a line longer than a block is read with bigger ones)
        longest = max(map(len, buf.split(b"\n"))) + 1
        tb = _parse(buf, longest) if longest > 1 << 20 else None
        if tb is None:
            return None
    if tb.num_rows != n:  # (two objects on one line: the dict path refuses it)
        return None
    cols: dict[str, np.ndarray] = {}
    for name, (short, typ, default) in COLUMNS.items():
        col = tb.column(short).combine_chunks()
        if short in REQUIRED and col.null_count:
            return None  # (a line without it: the dict path sorts the lines out)
        if typ in ("s", "z"):
            cols[name] = _codes(col, name, typ, default, vocab)
            continue
        if typ in ("f", "n"):
            # (a missing value is NaN, as Arrow gives a null here: any other value that is
            # not finite was NaN or Infinity in the text, which the dict path refuses)
            v = col.to_numpy(zero_copy_only=False)
            if np.count_nonzero(~np.isfinite(v)) != col.null_count:
                return None
            cols[name] = v
            continue
        if col.null_count:
            col = pc.fill_null(col, MISSING.get(typ, default))
        cols[name] = col.to_numpy(zero_copy_only=False).astype(_TYPES[typ], copy=False)
    gaps = None
    g = tb.column("g")
    if g.null_count < len(g):
        gaps = [base64.b64decode(x) if x is not None else b"" for x in g.to_pylist()]
    return RequestTable(cols, vocab, gaps)


def _parse(buf: bytes, block: int) -> Any:
    try:
        return pj.read_json(
            io.BytesIO(buf),
            read_options=pj.ReadOptions(block_size=block),
            parse_options=_parse_options(),
        )
    except (pa.ArrowException, ValueError, TypeError):
        return None


def _codes(col: Any, name: str, typ: str, default: Any, vocab: dict[str, list[Any]]) -> Any:
    """A string column as codes into the shared vocabulary: the column's default first
    (as the dict path adds it), then values not seen before in the order of the rows
    where each first appears (Arrow's dictionary keeps that order)."""
    voc, index, fill = string_column(vocab, name, typ, default)
    enc = col.dictionary_encode()
    lut = []
    for v in enc.dictionary.to_pylist():
        if v not in index:
            index[v] = len(voc)
            voc.append(v)
        lut.append(index[v])
    lut.append(fill)  # (a row without the key: its default)
    idx = pc.fill_null(enc.indices, len(lut) - 1).to_numpy(zero_copy_only=False)
    return np.asarray(lut, dtype=np.int32)[idx]
