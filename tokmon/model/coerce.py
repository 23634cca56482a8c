"""The one coercion of values that come from a file or a server's JSON (an event's data,
a recording's header, a probe's fields): a finite number or None, a string or a default.
Every reader of such values uses these, so one rule holds everywhere."""

from __future__ import annotations

import math
from typing import Any


def number(v: Any, strings: bool = True) -> float | None:
    """A finite float, or None (a bool is not a number; a numeric string is one where
    ``strings``: a header written by hand, an old file)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) if math.isfinite(v) else None
    if strings and isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def integer(v: Any) -> int:
    n = number(v)
    return int(n) if n is not None else 0


def text(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default
