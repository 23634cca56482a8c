"""The reducer contract: a judgment of the run as one registered class.

A judgment declares what it takes (the facts it is fed), which other judgments' views it
reads (an ordered list, checked acyclic when the fold is made), and gives a frozen view
for the Snapshot and a block for the summary. The fold feeds every registered judgment,
in the order of their reads, and places what they give under their names: a new
judgment is one class and one ``@register``, never new fields on the fold, the snapshot
or the summary (``Snapshot.judgments``, ``summary[name]``), and the text report and the
dashboard show its lines wherever it gives them. A view is a frozen dataclass: the
frames of an attached view carry it (``sources/frames.py`` reads the registered types).

The arrive/count split of the fold holds here too: ``requests`` is called once a
stretch of requests is counted (a report counts a stretch at once, a live run each
batch), so a judgment's figures may not depend on how requests are batched.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from tokmon.model.data.records import EngineStatus, Event
from tokmon.model.data.table import RequestTable

# an event a judgment raises: (kind, message, data), as the fold records it (a live run's
# alerts, warnings and verdicts; a replay reads them back instead of raising them again)
Raised = tuple[str, str, dict[str, Any]]


@dataclass(frozen=True)
class Context:
    """What a judgment knows of the run when it is made: the fold's settings (typed as
    ``Any`` here: the fold imports this module) and its arms."""

    settings: Any
    arms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Block:
    """A judgment's part of the summary: its figures (JSON) and its lines of text (the
    closing text and every text report show them under its title)."""

    title: str
    figures: dict[str, Any]
    lines: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self.figures, "title": self.title, "lines": list(self.lines)}


class Judgment:
    """A registered reducer. Subclasses set ``name`` (its key), ``reads`` (the judgments
    whose views it reads, by name) and override what they take; every method not
    overridden takes nothing and gives nothing."""

    name: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    # intake: the facts
    def requests(self, tb: RequestTable) -> None:
        """A stretch of requests, counted (every row, warm-up and failures included)."""

    def event(self, ev: Event) -> None:
        """An event (an arm switch, a ladder step, a marker, an alert …)."""

    def sample(self, t: int, reading: Any) -> None:
        """A probe's reading, typed (``model/data/samples.py``: GpuSample, HostSample, …)."""

    def status(self, st: EngineStatus) -> None:
        """An engine's own status."""

    # what it raises: events a live run records (a replay and a report read them back
    # from the recording instead, never raising them twice)
    def derive(self, now: int) -> list[Raised]:
        """The events it raises at the tick at ``now``: (kind, message, data) each, folded
        after the tick's snapshot (a replay draws the tick as the live run did), in the
        judgments' order."""
        return []

    # projections
    def view(self, now: int, reads: dict[str, Any]) -> Any:
        """A frozen view for the snapshot at ``now`` (None: nothing to show yet);
        ``reads``: the views of the judgments it reads, by name."""
        return None

    def block(self, t_end: int, reads: dict[str, Any]) -> Block | None:
        """Its part of the summary at the run's end (None: nothing to say)."""
        return None


S = TypeVar("S")


class PerArm(Judgment, Generic[S]):
    """A judgment kept per arm, as most are: ``state`` makes an arm's state when its first
    request comes, ``rows`` picks the requests it takes of a counted stretch (by default
    those that ended ok: what a speed or a latency is made of), ``add`` takes one arm's.
    Its block is its view's ``lines()`` (or ``panel_lines()``) under ``figures(view)``."""

    state: ClassVar[type]  # an arm's state: made with no argument

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.arms: dict[str, S] = {}

    def rows(self, tb: RequestTable) -> np.ndarray:
        return np.flatnonzero(tb.counted_ok())

    def add(self, a: S, tb: RequestTable, rows: np.ndarray) -> None:
        """One arm's rows of the stretch."""

    def requests(self, tb: RequestTable) -> None:
        rows = self.rows(tb)
        if rows.size == 0:
            return
        for name, sel in tb.by_arm(rows):
            a = self.arms.get(name)
            if a is None:
                a = self.state()
                # (in the run's order of arms, whatever order their requests came in: a
                # replay counts a stretch at once, a live run a batch at a time)
                order = {n: i for i, n in enumerate(self.ctx.arms)}
                self.arms = dict(
                    sorted({**self.arms, name: a}.items(), key=lambda kv: (
                        order.get(kv[0], len(order)), kv[0]))
                )  # fmt: skip
            self.add(a, tb, sel)

    def figures(self, view: Any) -> dict[str, Any]:
        """The summary's figures of the view at the run's end."""
        return {}

    def block(self, t_end: int, reads: dict[str, Any]) -> Block | None:
        v = self.view(t_end, reads)
        if v is None:
            return None
        lines = getattr(v, "lines", None) or v.panel_lines
        return Block(self.name, self.figures(v), tuple(lines()))


REGISTRY: dict[str, type[Judgment]] = {}
_TYPES: dict[str, type] | None = None  # view_types(), made again when the registry changes


def register(cls: type[Judgment]) -> type[Judgment]:
    """``@register``: the judgment is made by every fold from now on."""
    global _TYPES
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a judgment needs a name")
    REGISTRY[cls.name] = cls
    _TYPES = None
    return cls


def unregister(name: str) -> None:
    global _TYPES
    REGISTRY.pop(name, None)
    _TYPES = None


def ordered(classes: Iterable[type[Judgment]]) -> list[type[Judgment]]:
    """The judgments in an order where each comes after those it reads (by name, the
    order of registration kept where it can be). Raises ValueError on a cycle or a read
    of a judgment that is not registered."""
    by = {c.name: c for c in classes}
    out: list[type[Judgment]] = []
    state: dict[str, int] = {}  # 1: visiting, 2: done

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ValueError(f"judgments read each other in a cycle: {' → '.join(path + (name,))}")
        cls = by.get(name)
        if cls is None:
            raise ValueError(f"{path[-1]} reads {name}, which is not registered")
        state[name] = 1
        for r in cls.reads:
            visit(r, path + (name,))
        state[name] = 2
        out.append(cls)

    for name in by:
        visit(name, ())
    return out


def view_types() -> dict[str, type]:
    """The frozen view and block types the registered judgments give, by the name a frame
    tags them with (``module.Class``): what an attached view may decode."""
    global _TYPES
    if _TYPES is not None:
        return _TYPES
    out: dict[str, type] = {}
    for cls in REGISTRY.values():
        for name, obj in vars(sys.modules[cls.__module__]).items():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == cls.__module__ and not name.startswith("_")):  # fmt: skip
                out[f"{cls.__module__.rsplit('.', 1)[-1]}.{name}"] = obj
    _TYPES = out
    return out


class Judgments:
    """The registered judgments of one fold, fed and projected in order."""

    def __init__(self, ctx: Context, classes: Iterable[type[Judgment]] | None = None) -> None:
        self.items = [c(ctx) for c in ordered(REGISTRY.values() if classes is None else classes)]

    def feed(self, call: Callable[[Judgment], None]) -> None:
        for j in self.items:
            call(j)

    def derive(self, now: int) -> list[Raised]:
        return [raised for j in self.items for raised in j.derive(now)]

    def views(self, now: int) -> dict[str, Any]:
        got: dict[str, Any] = {}
        for j in self.items:
            v = j.view(now, {r: got.get(r) for r in j.reads})
            if v is not None:
                got[j.name] = v
        return got

    def blocks(self, t_end: int) -> dict[str, Block]:
        views = self.views(t_end)
        out: dict[str, Block] = {}
        for j in self.items:
            b = j.block(t_end, {r: views.get(r) for r in j.reads})
            if b is not None:
                out[j.name] = b
        return out
