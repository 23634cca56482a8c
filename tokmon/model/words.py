"""Counts said in words: `1 request`, `3 requests`, never `request(s)`."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for one and plural (noun + "s" unless given) else."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
