"""Whole-run figures in memory that does not grow with the run.

A soak runs for days: 24 h at 200 req/s is 17 million requests, and a monitor that kept
every one would become the thing that fails the soak. Two structures hold a run's
figures in bounded memory:

* ``Quantiles`` -- one figure's values (TTFT, TPOT, decode speed…). Exact up to
  ``EXACT`` values: every percentile is then numpy's own, as METRICS.md defines it.
  Past that, a relative-error sketch (DDSketch's log-spaced buckets: Masson, Rim & Lee,
  VLDB 2019): each value is counted in the bucket ``ceil(log_γ |x|)`` with
  γ = (1+α)/(1−α), whose representative is within α of every value it holds, so any
  percentile is within α = 0.5% (relative) of the exact order statistic -- inside the
  1% METRICS.md promises. Count, sum, min and max stay exact. Written here (≈100
  lines) rather than taken from the ``ddsketch`` package because that package adds one
  value at a time in Python (~1 µs each) and the fold adds columns in numpy.
* ``RowSample`` -- rows of several aligned columns (a request's TTFT with its queue and
  prefill…) where a figure needs them together: every row up to ``cap``; past that, the
  ``cap`` rows whose request ids hash lowest -- a uniform random sample that is the same
  whatever batches the rows came in (a replay folds as the live run did) and needs no
  random state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

ALPHA = 0.005  # the sketch's relative error: 0.5%
_LOG_GAMMA = math.log((1 + ALPHA) / (1 - ALPHA))
EXACT = 1 << 16  # values held exactly before the sketch takes over
_TINY = 1e-9  # |x| below this counts as zero (a log bucket would be far out)
_KEY_MAX = 8000  # γ^8000 ≈ 1e34: beyond any figure tokmon makes


def _keys(x: np.ndarray) -> np.ndarray:
    k = np.ceil(np.log(x) / _LOG_GAMMA)
    return np.clip(k, -_KEY_MAX, _KEY_MAX).astype(np.int64)


def _value(keys: np.ndarray) -> np.ndarray:
    """A bucket's representative: within ALPHA of every value the bucket holds."""
    return 2.0 * np.exp(keys * _LOG_GAMMA) / (1.0 + math.exp(_LOG_GAMMA))


class _Bins:
    """Counts per log bucket, dense from the lowest key seen."""

    __slots__ = ("counts", "lo")

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.lo = 0

    def add(self, keys: np.ndarray, weights: np.ndarray | None = None) -> None:
        if keys.size == 0:
            return
        kmin, kmax = int(keys.min()), int(keys.max())
        if self.counts.size == 0:
            self.lo = kmin
        lo, hi = min(self.lo, kmin), max(self.lo + self.counts.size - 1, kmax)
        if lo != self.lo or hi - lo + 1 != self.counts.size:
            grown = np.zeros(hi - lo + 1, dtype=np.int64)
            grown[self.lo - lo : self.lo - lo + self.counts.size] = self.counts
            self.counts, self.lo = grown, lo
        self.counts += np.bincount(keys - lo, weights=weights, minlength=self.counts.size).astype(
            np.int64
        )

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        nz = np.flatnonzero(self.counts)
        return nz + self.lo, self.counts[nz]


class Quantiles:
    """One figure's values over a run: percentiles exact up to ``EXACT`` values, within
    ``ALPHA`` (relative) past that; count, sum, mean, min and max always exact.

    Adding is a copy into a buffer (the fold adds a few values a batch, thousands of
    batches): exact values are the buffer itself; past the bound, values wait in a
    staging buffer and are counted into buckets ``STAGE`` at a time."""

    STAGE = 4096

    __slots__ = (
        "_buf",
        "_n",
        "_pos",
        "_neg",
        "_zero",
        "n",
        "_total",
        "_lo",
        "_hi",
        "_exact",
        "_sorted",
    )

    def __init__(self, dtype: type = np.float32, exact: int = EXACT) -> None:
        self._buf: np.ndarray = np.empty(16, dtype=dtype)
        self._n = 0  # values in the buffer: every value while exact, else those staged
        self._exact = exact
        self._pos: _Bins | None = None  # the sketch, once past the bound
        self._neg: _Bins | None = None
        self._zero = 0
        self.n = 0
        self._total = 0.0  # of the values counted into the sketch
        self._lo = math.inf
        self._hi = -math.inf
        self._sorted: np.ndarray | None = None

    @classmethod
    def of(cls, values: np.ndarray | Sequence[float], dtype: type = np.float64) -> Quantiles:
        q = cls(dtype=dtype)
        q.extend(np.asarray(values, dtype=np.float64))
        return q

    def __len__(self) -> int:
        return self.n

    @property
    def exact(self) -> bool:
        return self._pos is None

    def extend(self, v: np.ndarray) -> None:
        m = int(v.size)
        if m == 0:
            return
        self._sorted = None
        self.n += m
        need = self._n + m
        cap = self._exact if self._pos is None else self.STAGE
        if need > cap:
            self._flush(v)
            return
        if need > self._buf.size:
            grown = np.empty(min(cap, max(need, 2 * self._buf.size)), self._buf.dtype)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n : need] = v
        self._n = need

    def _flush(self, more: np.ndarray | None = None) -> None:
        """Count the buffer (and ``more``) into the sketch: the bound is passed, or a
        figure is read."""
        held = self._buf[: self._n]
        if more is not None:
            held = np.concatenate([held, more.astype(self._buf.dtype, copy=False)])
        elif self._pos is None or not self._n:
            return  # exact: the buffer is the figure
        if self._pos is None:
            self._pos, self._neg = _Bins(), _Bins()
            self._buf = np.empty(self.STAGE, dtype=self._buf.dtype)
        self._n = 0
        x = held.astype(np.float64)
        if not x.size:
            return
        self._total += float(x.sum())
        self._lo, self._hi = min(self._lo, float(x.min())), max(self._hi, float(x.max()))
        assert self._pos is not None and self._neg is not None
        pos, neg = x > _TINY, x < -_TINY
        self._zero += int(x.size - pos.sum() - neg.sum())
        self._pos.add(_keys(x[pos]))
        self._neg.add(_keys(-x[neg]))

    def merge(self, other: Quantiles) -> None:
        """Fold ``other``'s values in (the figure over both)."""
        if other.n == 0:
            return
        if other._pos is None:
            self.extend(other._buf[: other._n])
            return
        other._flush()
        if self._pos is None:
            self._flush(np.empty(0))  # to the sketch, then add the other's buckets
        else:
            self._flush()
        assert self._pos is not None and self._neg is not None
        assert other._pos is not None and other._neg is not None
        for mine, theirs in ((self._pos, other._pos), (self._neg, other._neg)):
            k, c = theirs.items()
            mine.add(k, c.astype(np.float64))
        self._zero += other._zero
        self.n += other.n
        self._total += other._total
        self._lo, self._hi = min(self._lo, other._lo), max(self._hi, other._hi)
        self._sorted = None

    # ------------------------------------------------------------------ reading
    @property
    def lo(self) -> float:
        if self._pos is None:
            return float(self._buf[: self._n].min()) if self._n else math.inf
        self._flush()
        return self._lo

    @property
    def hi(self) -> float:
        if self._pos is None:
            return float(self._buf[: self._n].max()) if self._n else -math.inf
        self._flush()
        return self._hi

    def values(self) -> np.ndarray:
        """Every value, while the figure is exact; else the buckets' representatives,
        each repeated as often as it was counted (only for small figures: tests)."""
        if self._pos is None:
            return self._buf[: self._n]
        v, c = self._ladder()
        return np.repeat(v, c)

    def _ladder(self) -> tuple[np.ndarray, np.ndarray]:
        """The sketch's values in ascending order, and their counts."""
        self._flush()
        assert self._pos is not None and self._neg is not None
        nk, nc = self._neg.items()
        pk, pc = self._pos.items()
        v = np.concatenate([-_value(nk[::-1]), [0.0] if self._zero else [], _value(pk)])
        c = np.concatenate([nc[::-1], [self._zero] if self._zero else [], pc])
        return v, c.astype(np.int64)

    def order_stats(self, ranks: np.ndarray) -> np.ndarray:
        """The values at 0-based ``ranks`` of the sorted values (exact, or within ALPHA)."""
        if self._pos is None:
            if self._sorted is None:
                self._sorted = np.sort(self._buf[: self._n])
            return self._sorted[ranks]
        v, c = self._ladder()
        out = v[np.searchsorted(np.cumsum(c), ranks, side="right")]
        return np.clip(out, self._lo, self._hi)  # the ends are known exactly

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Percentiles (0-100) with numpy's linear interpolation between closest ranks."""
        qs = list(qs)
        if self.n == 0:
            raise ValueError("no values")
        if self._pos is None:
            return [float(x) for x in np.percentile(self._buf[: self._n].astype(np.float64), qs)]
        r = np.asarray(qs, dtype=np.float64) / 100.0 * (self.n - 1)
        lo = np.floor(r).astype(np.int64)
        hi = np.minimum(lo + 1, self.n - 1)
        a, b = self.order_stats(lo), self.order_stats(hi)
        return [float(x) for x in a + (b - a) * (r - lo)]

    def median(self) -> float | None:
        return self.quantiles([50])[0] if self.n else None

    def mean(self) -> float | None:
        if self.n == 0:
            return None
        if self._pos is None:  # as numpy sums (pairwise): the figure a short run had
            return float(self._buf[: self._n].astype(np.float64).mean())
        self._flush()
        return self._total / self.n

    def nbytes(self) -> int:
        if self._pos is None:
            return int(self._buf.nbytes)
        assert self._neg is not None
        return int(self._buf.nbytes + self._pos.counts.nbytes + self._neg.counts.nbytes)


def row_keys(ids: np.ndarray) -> np.ndarray:
    """A request id's sampling key: the top half of splitmix64 of it (uniform, and the
    same in every run that folds the same requests)."""
    z = ids.astype(np.int64).view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(32)).astype(np.uint32)


class RowSample:
    """Rows of aligned columns: all of them up to ``cap``, then the ``cap`` whose keys
    are lowest (kept in the order they came)."""

    __slots__ = ("names", "cap", "seen", "_keys", "_cols", "_n", "_top")

    def __init__(self, names: Sequence[str], cap: int, dtype: type = np.float32) -> None:
        self.names = tuple(names)
        self.cap = cap
        self.seen = 0
        self._n = 0
        # the highest key held once the sample was full: a row above it can never be
        # among the lowest, so it is turned away before it costs a copy or a trim (past
        # a few times ``cap`` rows, most are)
        self._top: int | None = None
        self._keys = np.empty(16, dtype=np.uint32)
        self._cols: dict[str, np.ndarray] = {n: np.empty(16, dtype=dtype) for n in self.names}

    def add(self, keys: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        m = int(keys.size)
        if m == 0:
            return
        self.seen += m
        if self._top is not None:
            fit = keys <= self._top
            if not fit.all():
                keys, cols = keys[fit], {n: cols[n][fit] for n in self.names}
                m = int(keys.size)
                if m == 0:
                    return
        if m > self.cap:  # a batch larger than the sample: its own lowest first
            keep = np.sort(np.argpartition(keys, self.cap - 1)[: self.cap])
            keys, cols = keys[keep], {n: v[keep] for n, v in cols.items()}
            m = self.cap
        room = self.cap + max(self.cap // 4, 64)  # rows held between trims
        need = self._n + m
        if need > room:
            self._trim()
            need = self._n + m
        if need > self._keys.size:
            size = max(need, min(room, 2 * self._keys.size))
            self._keys = _grown(self._keys, size, self._n)
            self._cols = {n: _grown(v, size, self._n) for n, v in self._cols.items()}
        self._keys[self._n : need] = keys
        for n in self.names:
            self._cols[n][self._n : need] = cols[n]
        self._n = need

    def _trim(self) -> None:
        if self._n <= self.cap:
            return
        keep = np.sort(np.argpartition(self._keys[: self._n], self.cap - 1)[: self.cap])
        k = keep.size
        self._keys[:k] = self._keys[keep]
        for v in self._cols.values():
            v[:k] = v[keep]
        self._n = k
        self._top = int(self._keys[:k].max())

    def shrink(self, cap: int) -> None:
        """Keep fewer rows from now on (the lowest keys of those held)."""
        if cap > self.cap:
            self._top = None  # (more rows may enter again: the bound no longer holds)
        self.cap = max(1, cap)
        self.compact()

    def compact(self) -> None:
        """Hold no more memory than the rows kept (a sample no longer added to)."""
        self._trim()
        if self._keys.size > self._n:
            self._keys = self._keys[: self._n].copy()
            self._cols = {n: v[: self._n].copy() for n, v in self._cols.items()}

    def __len__(self) -> int:
        return min(self._n, self.cap)

    def col(self, name: str) -> np.ndarray:
        self._trim()
        return self._cols[name][: self._n]

    def keys(self) -> np.ndarray:
        """The kept rows' keys (aligned with ``col``)."""
        self._trim()
        return self._keys[: self._n]

    @property
    def sampled(self) -> bool:
        """True once rows were left out: figures from it are a sample's."""
        return self.seen > self.cap


def _grown(a: np.ndarray, size: int, n: int) -> np.ndarray:
    b = np.empty(size, dtype=a.dtype)
    b[:n] = a[:n]
    return b
