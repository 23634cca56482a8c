"""Every byte from outside comes in through a gate that bounds its size, its depth and
the time spent on it.

A server, a recording, a frame from an attached view or a user's file may hold anything:
300 MB where a number was expected, an object nested 100,000 deep, a million ``{``. Each
costs at most time and memory linear in a size that is capped *before* the work begins,
and each failure is one error type the callers already handle (``GateError`` is a
``ValueError``), never ``RecursionError``, ``OverflowError`` or a stall.

``loads`` is the one JSON parser for outside data: its size and depth checked first (the
depth in linear time, at C speed, without parsing), then parsed, and any lone UTF-16
surrogate made text (``textsafe.valid``). Pure: no I/O; the bounded reads of HTTP bodies
are ``tokmon/bodies.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from tokmon.textsafe import might_hold_surrogates, valid

MAX_DEPTH = 64  # no answer, event, frame or file of tokmon's nests deeper
MAX_JSON = 64 << 20  # bytes of one JSON document from outside, unless a caller says less

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_PIECE = 1 << 20


class GateError(ValueError):
    """Outside data over a bound (size, depth, time), or not what it claims to be."""


def _bytes(raw: str | bytes) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")


def depth(raw: str | bytes) -> int:
    """How deep the brackets of JSON text nest, those inside strings left out. Linear in
    the text's length at C speed (a regex and numpy), and never recursive."""
    b = _bytes(raw)
    if b.count(b"{") + b.count(b"[") == 0:
        return 0
    if b'"' in b:
        b = _STRING.sub(b'""', b)
    deepest = level = 0
    for i in range(0, len(b), _PIECE):  # a piece at a time: memory bounded by the piece
        a = np.frombuffer(b, dtype=np.uint8, count=min(_PIECE, len(b) - i), offset=i)
        step = ((a == 0x7B) | (a == 0x5B)).astype(np.int32) - ((a == 0x7D) | (a == 0x5D))
        run = np.cumsum(step)
        deepest = max(deepest, level + int(run.max()))
        level += int(run[-1])
    return deepest


def too_deep(raw: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``raw`` nests deeper than ``limit``: the brackets counted first (two
    memchr-speed passes; most text has fewer brackets than the limit and ends there)."""
    if isinstance(raw, bytes):
        if raw.count(b"{") + raw.count(b"[") <= limit:
            return False
    elif raw.count("{") + raw.count("[") <= limit:
        return False
    return depth(raw) > limit


def loads(
    raw: str | bytes,
    *,
    limit: int = MAX_JSON,
    max_depth: int = MAX_DEPTH,
    what: str = "JSON",
    parse_constant: Any = None,
) -> Any:
    """JSON from outside, checked: at most ``limit`` bytes, nested at most ``max_depth``
    deep, made valid text. Raises GateError (a ValueError) naming ``what`` and the
    bound it broke, or json's own ValueError for text that is not JSON."""
    n = len(raw)
    if n > limit:
        raise GateError(f"{what}: {n:,} bytes, over the {_size(limit)} a gate lets in")
    if too_deep(raw, max_depth):
        raise GateError(f"{what}: nested deeper than {max_depth}")
    try:
        obj = json.loads(raw, parse_constant=parse_constant, parse_int=_parse_int)
    except RecursionError:  # (the depth check makes this unreachable; kept as the rule)
        raise GateError(f"{what}: nested too deeply") from None
    return valid(obj) if might_hold_surrogates(raw) else obj


def _parse_int(s: str) -> int | float:
    """An integer of JSON text: past 20 digits (nothing tokmon reads is so large: a time
    in ns since 1970 has 19) a float, infinite past 308 digits, which every check of a
    finite number then refuses -- where ``10**400`` was an OverflowError in ``isfinite``
    and in every conversion to float."""
    return int(s) if len(s) <= 21 else float(s)


def _size(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):g} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):g} KiB"
    return f"{n} bytes"


def finite_number(v: Any) -> float | None:
    """``v`` as a finite float, or None: an int too large for a float (``10**400``) is
    None, never an OverflowError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None
