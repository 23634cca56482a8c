"""Counts said in words (`1 request`, `3 requests`, never `request(s)`) and seconds
said as a clock."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for one and plural (noun + "s" unless given) else."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def hms(s: float, hours: bool = False) -> str:
    """Seconds as a clock: 00:50, 1:02:03 (``hours``: always with the hours, 0:00:50;
    a time into a long run reads in hours). Whole seconds, rounded down."""
    s = max(0, int(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h or hours else f"{m:02d}:{sec:02d}"
