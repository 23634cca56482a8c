"""The facts a run is made of, as the fold takes them.

A live session, a replay and a report all hand ``Fold.apply`` these, in the order they
happened, and a recording stores exactly them (one line each), so a replay is the live
run again. Times are nanoseconds since the run's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokmon.model.data.records import EngineStatus, Event, TokenTick
from tokmon.model.data.table import RequestTable


@dataclass(frozen=True, slots=True)
class Requests:
    """Requests that finished, as a column batch (rows of the fold's vocabulary)."""

    table: RequestTable


@dataclass(frozen=True, slots=True)
class Tokens:
    """Tokens that arrived, per 250 ms bucket and arm (live throughput)."""

    buckets: tuple[TokenTick, ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """A probe's reading: ``src`` is gpu, host or server; ``values`` its neutral fields
    (plain JSON values: what a recording gives back)."""

    t: int
    src: str
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Status:
    """An engine's own view (requests sent, in flight, loop and send lag)."""

    status: EngineStatus


@dataclass(frozen=True, slots=True)
class Tick:
    """The clock: window figures, a history point and a snapshot (about once a second).
    ``final``: the run has ended."""

    t: int
    final: bool = False


Fact = Requests | Tokens | Sample | Status | Tick | Event


def time_of(fact: Fact) -> int | None:
    """When a fact happened (token buckets: the latest bucket's start; a batch of
    requests or an engine's status: no one time, None)."""
    if isinstance(fact, Tokens):
        return max((b.t for b in fact.buckets), default=None)
    t = getattr(fact, "t", None)
    return t if isinstance(t, int) else None
