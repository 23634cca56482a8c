"""Requests as columns: how a recording holds a million requests in memory.

A ``RequestRecord`` object costs ~700 bytes and microseconds to build; a recording of a
long soak holds millions. ``RequestTable`` keeps one numpy array per field (strings as
codes into a small vocabulary, missing numbers as NaN) at ~200 bytes a request, builds
from parsed JSON lines a column at a time, and gives back the exact ``RequestRecord`` of
any row when one is needed (the live window of a replay, a CSV row).
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tokmon.model.data.records import RequestRecord

NAN = math.nan
NO_TIME = np.iinfo(np.int64).min  # t_send of a request never sent

# field -> (short key in a recording, column type, default when the key is absent)
#   i: int64, k: a small int (int32), b: bool, f: float64 (NaN: none), n: int or none (float64, NaN: none),
#   s: string (codes), z: string or none, t: time in ns or none (int64, NO_TIME: none)
COLUMNS: dict[str, tuple[str, str, Any]] = {
    "rid": ("id", "i", None),
    "arm": ("arm", "s", None),
    "outcome": ("o", "s", None),
    "t_sched": ("ts", "i", None),
    "t_end": ("te", "i", None),
    "kind": ("kind", "s", ""),
    "segment": ("seg", "k", 0),
    "step": ("stp", "k", -1),
    "t_send": ("tsd", "t", None),
    "send_lag_ms": ("lag", "f", None),
    "connect_ms": ("con", "f", None),
    "ttfb_ms": ("ttfb", "f", None),
    "ttft_ms": ("ttft", "f", None),
    "ttfc_ms": ("ttfc", "f", None),
    "e2e_ms": ("e2e", "f", None),
    "output_tokens": ("n", "k", 0),
    "tokens_estimated": ("est", "b", False),
    "prompt_tokens": ("pt", "n", None),
    "prompt_tokens_asked": ("pta", "n", None),
    "max_tokens_asked": ("mta", "n", None),
    "cached_tokens": ("ct", "n", None),
    "turn": ("tn", "k", 0),
    "chunks": ("ch", "k", 0),
    "tpot_ms": ("tpot", "f", None),
    "decode_tps": ("dec", "f", None),
    "max_gap_ms": ("mg", "f", None),
    "stalls": ("st", "k", 0),
    "finish_reason": ("fr", "z", None),
    "http_status": ("hs", "n", None),
    "error": ("err", "s", ""),
    "warmup": ("w", "b", False),
    "settle": ("s", "b", False),
    "spec_draft_tokens": ("sd", "n", None),
    "spec_accepted_tokens": ("sa", "n", None),
    "spec_drafts": ("sn", "n", None),
    "spec_source": ("ss", "s", ""),
    "worker": ("wk", "k", 0),
    "srv_queue_ms": ("sq", "f", None),
    "srv_prefill_ms": ("sp", "f", None),
    "srv_itl_ms": ("si", "f", None),
    "quality": ("q", "n", None),
    "reasoning_tokens": ("rt", "n", None),
    "reasoning_counted": ("rtc", "b", False),
    "reasoning_tps": ("rtps", "f", None),
    "answer_tps": ("atps", "f", None),
    "valid": ("vl", "n", None),
    "image_px": ("img", "n", None),
    "dns_ms": ("dns", "f", None),
    "tcp_ms": ("tcp", "f", None),
    "tls_ms": ("tls", "f", None),
    "pred_accepted": ("pra", "n", None),
    "pred_rejected": ("prr", "n", None),
}
# RequestRecord field -> short key in a recording (the columns' table is the one list).
REQUEST_KEYS = {name: c[0] for name, c in COLUMNS.items()} | {"gaps": "g"}
TIME_FIELDS = ("t_sched", "t_end", "t_send")
# Fields left out of a line when they hold their default.
_DEFAULTS = {name: c[2] for name, c in COLUMNS.items() if c[2] is not None} | {"gaps": b""}
REQUIRED = ("id", "arm", "o", "ts", "te")
_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
DTYPES = {  # a number column's type (``COLUMNS``) as the table holds it
    "i": np.int64,
    "k": np.int32,
    "b": np.bool_,
    "f": np.float64,
    "n": np.float64,
    "t": np.int64,
}

# what a number column holds where a line leaves its key out (else the column's default)
MISSING: dict[str, Any] = {"f": NAN, "n": NAN, "t": NO_TIME}


def distinct(a: np.ndarray) -> list[int]:
    """The distinct values of an integer column, sorted: a second's batch is most often
    of one arm and one segment, found without sorting it."""
    if a.size == 0:
        return []
    lo, hi = int(a.min()), int(a.max())
    return [lo] if lo == hi else np.unique(a).tolist()


def distinct_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """The distinct pairs ``(a[i], b[i])`` of two integer columns, sorted: the groups a
    batch's rows fall in (arm × regime, arm × step), found by one ``np.unique`` of a
    combined key, not a Python set of every row."""
    if a.size == 0:
        return []
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    a0, b0 = int(a64.min()), int(b64.min())
    span = int(b64.max()) - b0 + 1
    keys = np.unique((a64 - a0) * span + (b64 - b0)).tolist()
    return [(k // span + a0, k % span + b0) for k in keys]


def string_column(
    vocab: dict[str, list[Any]], name: str, typ: str, default: Any
) -> tuple[list[Any], dict[Any, int], int]:
    """A string column's vocabulary (shared by the tables of one recording), its index,
    and the code of a row without the key: its default, added first where new (-1: the
    column is required). Both readers of request lines start a column here."""
    voc = vocab.setdefault(name, [] if typ == "s" else [None])
    index = {v: i for i, v in enumerate(voc)}
    fill = -1
    if default is not None or typ == "z":
        fill = index.setdefault(default, len(voc))
        if fill == len(voc):
            voc.append(default)
    return voc, index, fill


def _codes(
    parts: list[tuple[np.ndarray | None, Sequence[Any]]],
    index: dict[Any, int],
    voc: list[Any],
    short: str,
    fill: int,
) -> list[tuple[np.ndarray | None, list[int]]]:
    """A string column's groups of values as codes into ``voc``; a value not seen before
    (rare) is added in the order of the rows where it first appears, whatever group its
    line fell in, so the codes do not depend on how the lines were grouped (the columnar
    reader, ``recording/arrow_lines.py``, numbers them the same way). In a column that
    holds no null (``fill``: its default's code; -1: it is required), a null is its
    default, as a key left out is (Arrow reads both as null), or refused where required
    (a request line with ``"arm": null`` reached the figures as an arm named None)."""
    if None not in index:
        if fill >= 0:
            index = {**index, None: fill}
        elif any(None in p for _w, p in parts):
            raise TypeError(f"{short}: null where a string is required")
    coded = [(w, [index.get(v, -1) for v in p]) for w, p in parts]
    new: list[tuple[int, Any]] = []
    for (w, p), (_, codes) in zip(parts, coded, strict=True):
        for i, c in enumerate(codes):
            if c < 0:
                v = p[i]
                if not (isinstance(v, str) or v is None):
                    raise TypeError(f"{short}: not a string")
                new.append((i if w is None else int(w[i]), v))
    if not new:
        return coded
    for _, v in sorted(new, key=operator.itemgetter(0)):
        if v not in index:
            index[v] = len(voc)
            voc.append(v)
    return [(w, [c if c >= 0 else index[v] for c, v in zip(codes, p, strict=True)])
            for (w, p), (_, codes) in zip(parts, coded, strict=True)]  # fmt: skip


class RequestTable:
    """Columns of requests, in the order they were recorded."""

    def __init__(self, cols: dict[str, np.ndarray], vocab: dict[str, list[Any]], gaps: Any):
        self.cols = cols
        self.vocab = vocab  # string column -> its values; a column holds indexes into it
        self.gaps: list[bytes] | None = gaps  # per row, only when chunk gaps were recorded
        self.n = int(cols["rid"].size)
        # the table this one is rows of (``slice``; None: itself), from row ``_at``:
        # adjacent slices of one table are joined again as a slice of it, not copied
        # (``concat``). Never the table itself: a cycle outlives its table where the
        # collector is off (a report folds with it off)
        self._root: RequestTable | None = None
        self._at = 0

    def __len__(self) -> int:
        return self.n

    def code(self, field: str, value: Any) -> int:
        """The code of ``value`` in a string column (-1 when no row has it)."""
        try:
            return self.vocab[field].index(value)
        except ValueError:
            return -1

    def record(self, i: int) -> RequestRecord:
        """Row ``i`` as the exact ``RequestRecord`` that was recorded."""
        return self.records_at(np.array([i]))[0]

    def records(self, idx: Sequence[int] | np.ndarray | None = None) -> Iterator[RequestRecord]:
        """Rows as records, many at a time (a column slice to Python values in one call)."""
        rows = np.arange(self.n) if idx is None else np.asarray(idx, dtype=np.int64)
        for lo in range(0, rows.size, 4096):
            yield from self.records_at(rows[lo : lo + 4096])

    def values(self, name: str, rows: np.ndarray | None = None) -> list[Any]:
        """A column (or some of its rows) as the Python values a record holds: strings,
        ints, floats, None where a figure is missing."""
        typ = COLUMNS[name][1]
        col = self.cols[name]
        v = (col if rows is None else col[rows]).tolist()
        if typ in ("s", "z"):
            voc = self.vocab[name]
            return [voc[x] for x in v]
        if typ == "t":
            return [None if x == NO_TIME else x for x in v]
        if typ == "f":
            return [None if x != x else x for x in v]
        if typ == "n":
            return [None if x != x else int(x) for x in v]
        return v

    def records_at(self, rows: np.ndarray) -> list[RequestRecord]:
        cols = {name: self.values(name, rows) for name in COLUMNS}
        if self.gaps is not None:
            g = self.gaps
            cols["gaps"] = [g[i] or b"" for i in rows.tolist()]
        else:
            cols["gaps"] = [b""] * rows.size
        # positionally, in the dataclass's order: keywords would cost four times as much
        return list(itertools.starmap(RequestRecord, zip(*(cols[f] for f in _FIELDS), strict=True)))

    @classmethod
    def from_lines(cls, dicts: list[dict[str, Any]], vocab: dict[str, list[Any]]) -> RequestTable:
        """Columns from parsed request lines (``vocab`` is shared and extended, so tables
        built batch by batch can be joined). Raises ValueError/TypeError/KeyError on a
        line that is not a request; the caller then sorts the lines one by one."""
        n = len(dicts)
        # Lines of one run mostly have the same keys in the same order (a field at its
        # default is left out): take each such group's values with one itemgetter in C.
        ids: dict[tuple[str, ...], int] = {}
        gid = np.array([ids.setdefault(k, len(ids)) for k in map(tuple, dicts)], dtype=np.int32)
        values: dict[str, list[tuple[np.ndarray | None, tuple[Any, ...]]]] = {}
        for keys, g in ids.items():
            if any(r not in keys for r in REQUIRED):
                raise KeyError("a request line without " + ", ".join(REQUIRED))
            getter = operator.itemgetter(*keys)
            if len(ids) == 1:
                where, rows = None, dicts
            else:
                where = np.flatnonzero(gid == g)
                rows = [dicts[i] for i in where]
            got = (
                list(zip(*map(getter, rows), strict=True))
                if len(keys) > 1
                else [tuple(map(getter, rows))]
            )
            for k, v in zip(keys, got, strict=True):
                values.setdefault(k, []).append((where, v))
        cols: dict[str, np.ndarray] = {}
        for name, (short, typ, default) in COLUMNS.items():
            fill: Any
            if typ in ("s", "z"):
                voc, index, fill = string_column(vocab, name, typ, default)
                dtype: Any = np.int32
            else:
                dtype = DTYPES[typ]
                fill = MISSING.get(typ, default)
                fill = 0 if fill is None else fill  # required: every row has it
            parts: list[tuple[np.ndarray | None, Sequence[Any]]] = list(values.get(short, []))
            if typ in ("s", "z"):
                parts = list(_codes(parts, index, voc, short, fill))
            if len(parts) == 1 and parts[0][0] is None:
                # numpy refuses None and text where a number belongs: a bad line raises
                cols[name] = np.array(parts[0][1], dtype=dtype)
                continue
            col = np.full(n, fill, dtype=dtype)
            for w, part in parts:
                col[w] = np.array(part, dtype=dtype)
            cols[name] = col
        gaps = None
        if any("g" in d for d in dicts):
            import base64

            gaps = [base64.b64decode(d["g"]) if "g" in d else b"" for d in dicts]
        return cls(cols, vocab, gaps)

    def take(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` is true."""
        cols = {k: v[mask] for k, v in self.cols.items()}
        gaps = None if self.gaps is None else [g for g, m in zip(self.gaps, mask, strict=True) if m]
        return RequestTable(cols, self.vocab, gaps)

    def slice(self, lo: int, hi: int) -> RequestTable:
        """Rows ``lo`` to ``hi`` as views of these columns (no copy: a replay's batches)."""
        cols = {k: v[lo:hi] for k, v in self.cols.items()}
        out = RequestTable(cols, self.vocab, None if self.gaps is None else self.gaps[lo:hi])
        out._root, out._at = self.base, self._at + lo
        return out

    @property
    def base(self) -> RequestTable:
        """The table this one is rows of (itself, where it is no slice)."""
        return self if self._root is None else self._root

    def counted(self) -> np.ndarray:
        """The rows every whole-run figure is made of: not warm-up, not settling (the one
        place this rule is written)."""
        return ~self.cols["warmup"] & ~self.cols["settle"]

    def by_arm(self, rows: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        """``rows`` split by arm: (the arm's name, its rows), in the order the arms were
        first met (a judgment keeps its state per arm)."""
        arms = self.cols["arm"][rows]
        for code in distinct(arms):
            yield self.vocab["arm"][code], rows[arms == code]

    def counted_ok(self) -> np.ndarray:
        """Counted rows that ended ok: what a speed or a latency is made of."""
        return self.counted() & (self.cols["outcome"] == self.code("outcome", "ok"))

    def possible(self, max_t: int) -> np.ndarray:
        """Rows whose figures could have been measured: times within ``max_t`` of the
        start, end not before schedule, no negative or infinite duration or count. A
        recording is a file anyone can write; a replay must never show the impossible."""
        c = self.cols
        ok = (np.abs(c["t_sched"]) <= max_t) & (np.abs(c["t_end"]) <= max_t)
        ok &= c["t_end"] >= c["t_sched"]
        for name, (_short, typ, _d) in COLUMNS.items():
            if typ in ("f", "n"):
                v = c[name]
                ok &= np.isnan(v) | ((v >= 0) & (v < 1e12))
            elif typ == "k" and name not in ("step",):
                ok &= c[name] >= 0
        return ok

    @classmethod
    def concat(
        cls, parts: list[RequestTable], vocab: dict[str, list[Any]], free: bool = True
    ) -> RequestTable:
        if not parts:
            return cls.empty(vocab)
        parts = _rejoined(parts)
        if len(parts) == 1:
            return parts[0]
        cols = {}
        for k in COLUMNS:  # a column at a time, freeing the parts': memory peaks low
            cols[k] = np.concatenate([p.cols[k] for p in parts])
            if free:
                for p in parts:
                    del p.cols[k]
        gaps = None
        if any(p.gaps is not None for p in parts):
            gaps = []
            for p in parts:
                gaps += p.gaps if p.gaps is not None else [b""] * p.n
        return cls(cols, vocab, gaps)

    @classmethod
    def empty(cls, vocab: dict[str, list[Any]] | None = None) -> RequestTable:
        vocab = vocab if vocab is not None else {}
        cols: dict[str, np.ndarray] = {
            k: np.empty(0, dtype=np.int32 if t in ("s", "z") else DTYPES[t])
            for k, (_s, t, _d) in COLUMNS.items()
        }
        for k, (_s, t, _d) in COLUMNS.items():
            if t in ("s", "z"):
                vocab.setdefault(k, [] if t == "s" else [None])
        return cls(cols, vocab, None)

    @classmethod
    def from_records(cls, records: list[RequestRecord]) -> RequestTable:
        """For tests and small tables: through the same path a recording takes."""
        return cls.from_lines([record_to_line(r, 0, True) for r in records], {})


def _rejoined(parts: list[RequestTable]) -> list[RequestTable]:
    """``parts`` with each run of adjacent slices of one table made one slice of it (a
    report's stretch: a second's batches, cut from one batch of the file)."""
    out: list[RequestTable] = []
    i = 0
    while i < len(parts):
        first = p = parts[i]
        j = i + 1
        while j < len(parts) and parts[j].base is p.base and parts[j]._at == p._at + p.n:
            p = parts[j]
            j += 1
        out.append(first if j == i + 1 else first.base.slice(first._at, p._at + p.n))
        i = j
    return out


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
