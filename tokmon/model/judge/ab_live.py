"""The live A/B: the first two arms compared over the whole run so far — the ratios with
their intervals (``summary.compare``), the decode speed-up's causes, whole and per task
kind, and where it stops paying along a ladder — a reducer of the fold, recomputed every
``EVERY_NS`` of the run's clock (a bootstrap: not every tick) and at the run's end.

It reads the other reducers' state when asked (the arms' totals, the alternations, the
time split, the ladder); it holds only its last result, so a replay ticking at the same
times shows the same comparison as the live run.
"""

from __future__ import annotations

from typing import Any

from tokmon.model.contract.views import ComparisonView
from tokmon.model.judge.active import Turns
from tokmon.model.judge.crossover import Crossover
from tokmon.model.judge.steps import Steps
from tokmon.model.judge.summary import compare
from tokmon.model.judge.timesplit import SpeedupCauses, TimeSplitReducer
from tokmon.model.statistics.stats import ArmTotals

EVERY_NS = 3_000_000_000  # the whole-run A/B comparison: a bootstrap, not every tick


class LiveComparison:
    """``arms``: the run's arms (baseline first); ``kind_weights``: the mix the workload
    was built with (None: the kinds as they came)."""

    def __init__(self, arms: list[str], kind_weights: dict[str, float] | None) -> None:
        self.pair = (arms[0], arms[1]) if len(arms) >= 2 else None
        self.kind_weights = kind_weights
        self.result: dict[str, Any] | None = None
        self._view: ComparisonView | None = None
        self._next = 0
        self.causes: SpeedupCauses | None = None
        self.causes_by_kind: tuple[SpeedupCauses, ...] = ()
        self.crossovers: tuple[Crossover, ...] = ()

    def due(self, now: int, force: bool) -> bool:
        """Time for the next comparison (``force``: the run's end, a seek's last tick)."""
        return self.pair is not None and (force or now >= self._next)

    def update(
        self,
        now: int,
        force: bool,
        totals: dict[str, ArmTotals],
        turns: Turns,
        split: TimeSplitReducer,
        ladder: Steps,
    ) -> None:
        """The comparison again, when it is due (``due``)."""
        if self.pair is None or not self.due(now, force):
            return
        self._next = now + EVERY_NS
        a, b = self.pair
        self.result = compare(totals[a], totals[b], turns.alternations, self.kind_weights)
        self._view = None  # made when first drawn
        self.causes = split.causes(a, b)
        self.causes_by_kind = split.causes_by_kind(a, b)
        self.crossovers = ladder.crossovers(a, b, self.kind_weights)

    def view(self) -> ComparisonView | None:
        if self.result is None:
            return None
        if self._view is None:
            self._view = ComparisonView.of(self.result)
        return self._view
