"""Where speculative decoding (or any arm) stops paying: the crossover of a speed-up
measured at several loads.

Given the decode speed-up of one arm over the other at each load (a ladder's steps, a
capacity search's probes), each with its 95% interval, in the order of the load: the
speed-up *pays* at a load while its interval lies above 1; the crossover is the first
load at which the interval includes 1 or lies below it; where it lies below, the arm
*costs* (1 − ratio) there. A speed-up that shrinks with the batch (a verify step costs
more as the batch grows) crosses where the model says it should.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AtLoad:
    level: float
    ratio: float
    lo: float
    hi: float


@dataclass(frozen=True, slots=True)
class Crossover:
    other: str
    base: str
    param: str
    points: tuple[AtLoad, ...]
    kind: str = ""  # a task kind, or "" for the whole mix

    @property
    def pays_below(self) -> float | None:
        """The load at which the speed-up first stops clearly paying (None: it pays at
        every load measured)."""
        for p in self.points:
            if p.lo <= 1.0:
                return p.level
        return None

    @property
    def last_paying(self) -> float | None:
        last = None
        for p in self.points:
            if p.lo <= 1.0:
                break
            last = p.level
        return last

    @property
    def costs(self) -> AtLoad | None:
        """The highest load where it clearly costs (interval below 1)."""
        worse = [p for p in self.points if p.hi < 1.0]
        return worse[-1] if worse else None

    def text(self) -> str:
        """``spec pays up to 8 streams; from 16 it does not (×0.97 [0.93, 1.01]); at 32 it
        costs 8% [5%, 11%]``."""
        unit = " streams" if self.param == "concurrency" else " req/s"
        who = self.other + (f" on {self.kind}" if self.kind else "")
        if not self.points:
            return f"{who}: no load measured in both arms"
        cross = self.pays_below
        if cross is None:
            top = self.points[-1]
            return (f"{who} pays at every load measured (up to {top.level:g}{unit}: "
                    f"×{top.ratio:.2f} [{top.lo:.2f}, {top.hi:.2f}])")  # fmt: skip
        at = next(p for p in self.points if p.level == cross)
        last = self.last_paying
        ci = f"(×{at.ratio:.2f} [{at.lo:.2f}, {at.hi:.2f}])"
        out = (f"{who} pays up to {last:g}{unit}; from {cross:g} it does not {ci}"
               if last is not None
               else f"{who} does not pay at {cross:g}{unit}, the least load measured {ci}")  # fmt: skip
        c = self.costs
        if c is not None:
            out += (f"; at {c.level:g}{unit} it costs {1 - c.ratio:.0%} "
                    f"[{1 - c.hi:.0%}, {1 - c.lo:.0%}]")  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "other": self.other,
            "baseline": self.base,
            "kind": self.kind or None,
            "pays_up_to": self.last_paying,
            "crossover_at": self.pays_below,
            "costs_at": None if self.costs is None else self.costs.level,
            "cost": None if self.costs is None else round(1 - self.costs.ratio, 4),
            "points": [
                [p.level, round(p.ratio, 4), round(p.lo, 4), round(p.hi, 4)] for p in self.points
            ],  # fmt: skip
            "text": self.text(),
        }


def crossover(other: str, base: str, param: str, points: list[AtLoad], kind: str = "") -> Crossover:
    return Crossover(other, base, param, tuple(sorted(points, key=lambda p: p.level)), kind)
