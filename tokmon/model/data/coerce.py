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


def json_value(v: Any, where: str) -> Any:
    """``v`` (a TOML value) where JSON is meant (a request body): strings, finite
    numbers, booleans, lists and tables only. Raises ValueError naming ``where`` and the
    first value JSON cannot hold (a TOML date or time, inf, nan) -- one line, not a
    traceback when the body is sent."""
    stack = [(v, where)]
    while stack:
        x, at = stack.pop()
        if isinstance(x, dict):
            stack.extend((y, f"{at}.{k}") for k, y in x.items())
        elif isinstance(x, list):
            stack.extend((y, f"{at}[{i}]") for i, y in enumerate(x))
        elif isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"{at}: {x} is not a JSON number")
        elif x is not None and not isinstance(x, (str, int, float, bool)):
            raise ValueError(f"{at}: a TOML {type(x).__name__} is not a JSON value")
    return v
