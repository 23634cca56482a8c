"""Each arm's cost and energy per token: one computation that the snapshot (each tick)
and the summary (at the run's end) both show, so the two never disagree.

An arm's throughput here is its whole run so far: the tokens that arrived in its own
spans over their seconds (warm-up, other arms' segments, drains, restarts and pauses left
out of both). A window would price the arm that is not running from the tail of its last
turn. The power is the mean GPU power over the same spans.
"""

from __future__ import annotations

from typing import Any

from tokmon.model.contract.views import ArmCost, Cost
from tokmon.model.judge.active import ArmTokens, Turns, seconds
from tokmon.model.judge.alerts import cost_figures, kind_cost_figures
from tokmon.model.judge.probe_state import ProbeState
from tokmon.model.statistics.stats import ArmTotals

MIN_OWN_S = 5.0  # an arm's cost is "—" before this many seconds of its own


class Costs:
    """What the cost of each arm is made of, read from the reducers that own it."""

    def __init__(
        self,
        price: float | None,
        probes: ProbeState,
        turns: Turns,
        arm_tokens: ArmTokens,
        totals: dict[str, ArmTotals],
    ) -> None:
        self.price = price
        self.probes = probes
        self.turns = turns
        self.arm_tokens = arm_tokens
        self.totals = totals

    def own_time(self, t: int, t_measure: int | None) -> dict[str, tuple[float, float]]:
        """Per arm, up to ``t``: the tokens that arrived in its own spans and their
        seconds: the whole-run tokens/s of an arm is one over the other."""
        spans = self.turns.spans(t, t_measure)
        return {a: (self.arm_tokens.within(a, sp), seconds(sp)) for a, sp in spans.items()}

    def power(self, arm: str, t_end: int, t_measure: int | None) -> float | None:
        """Mean GPU power while ``arm`` was active (after the warm-up). With two arms on
        separate servers both share what the GPU probe sees; with one arm at a time, the
        power of each arm's own segments."""
        return self.probes.mean_power(self.turns.of(arm), t_measure, t_end)

    def of(
        self, arm: str, tps: float | None, power_w: float | None
    ) -> tuple[Cost, dict[str, Cost]]:
        """An arm's cost and energy per token at ``tps``, and each task kind's."""
        c = cost_figures(tps, gpu_hour_price=self.price, gpus=self.probes.gpus, power_w=power_w)
        tot = self.totals.get(arm)
        return c, (kind_cost_figures(c, tot.kinds) if tot is not None and tot.kinds else {})

    def views(self, now: int, t_measure: int | None, arms: list[str]) -> dict[str, ArmCost]:
        """The snapshot's costs: per arm from its whole run so far; a kind's only where
        the arm ran more than one."""
        out: dict[str, ArmCost] = {}
        own = self.own_time(now, t_measure)
        for name in arms:
            toks, secs = own.get(name, (0.0, 0.0))
            tps = toks / secs if secs >= MIN_OWN_S else None
            pw = self.power(name, now, t_measure) if tps is not None else None
            c, kinds = self.of(name, tps, pw)
            tot = self.totals.get(name)
            shown = kinds if tot is not None and len(tot.kinds) > 1 else {}
            out[name] = ArmCost(c, tuple(shown.items()))
        return out

    def summarise(self, arms: dict[str, dict[str, Any]], t_end: int, t_measure: int | None) -> None:
        """The summary's arms get their power, cost and energy per token (and each kind's)
        at the whole-run throughput the summary already holds."""
        for name, a in arms.items():
            pw = self.power(name, t_end, t_measure)
            c, kc = self.of(name, a["output_tokens_per_s"], pw)
            a["mean_gpu_power_w"] = None if pw is None else round(pw, 3)
            a["cost_per_million_tokens"] = c.cost_per_mtok
            a["joules_per_token"] = c.joules_per_token
            a["tokens_per_joule"] = c.tokens_per_joule
            for k, v in (a.get("by_kind") or {}).items():
                kk = kc.get(k, Cost())
                v["cost_per_million_tokens"] = kk.cost_per_mtok
                v["joules_per_token"] = kk.joules_per_token
