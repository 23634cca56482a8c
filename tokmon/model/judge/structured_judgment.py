"""What structured output and tool calls give and cost (#61): a registered judgment.

Per arm, whole run, of its counted requests that ended ok:

* **valid**: the share of its guided answers that validated against their schema, and of
  its tool calls that named the tool with arguments that validated (Wilson 95%);
* **guided decoding's cost**: the ratio of medians guided / guided-free of TPOT and of
  TTFT — the same prompts with and without the schema, in turn — with its 95% bootstrap
  interval over requests; ×1.20 is a grammar that makes each token 20% slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.registry import PerArm, register
from tokmon.model.data.table import RequestTable, distinct
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.statistics.stats import MIN_SAMPLES, ratio_ci_requests, wilson
from tokmon.model.workloads.structured import GUIDED, GUIDED_FREE, TOOLS


@dataclass
class _Arm:
    checked: dict[str, list[int]] = field(default_factory=dict)  # kind -> [n, valid]
    tpot: dict[str, Quantiles] = field(default_factory=dict)  # guided, guided-free
    ttft: dict[str, Quantiles] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Cost:
    """Guided / free of one figure, with its interval (None: too few of either yet)."""

    figure: str
    ratio: float
    lo: float
    hi: float

    def text(self) -> str:
        return f"{self.figure} ×{self.ratio:.2f} [{self.lo:.2f}, {self.hi:.2f}]"


@dataclass(frozen=True, slots=True)
class StructuredView:
    """One arm's: valid shares (kind, valid, checked, lo, hi) and guided decoding's cost."""

    arm: str
    valid: tuple[tuple[str, int, int, float, float], ...]
    cost: tuple[Cost, ...]

    def lines(self) -> tuple[str, ...]:
        parts = [f"{k} {v}/{n} valid [{lo:.0%}, {hi:.0%}]" for k, v, n, lo, hi in self.valid]
        out = [f"{self.arm}: " + " · ".join(parts)] if parts else []
        if self.cost:
            out.append("  guided decoding costs (guided / the same prompts free): "
                       + ", ".join(c.text() for c in self.cost))  # fmt: skip
        return tuple(out)


@dataclass(frozen=True, slots=True)
class StructuredViews:
    arms: tuple[StructuredView, ...]

    def panel_lines(self) -> tuple[str, ...]:
        out = ["structured output and tool calls (whole run):"]
        for a in self.arms:
            out += ["  " + x for x in a.lines()]
        return tuple(out)


@register
class Structured(PerArm[_Arm]):
    name = "structured"
    state = _Arm

    def rows(self, tb: RequestTable) -> np.ndarray:
        codes = [tb.vocab["kind"].index(k) for k in (GUIDED, GUIDED_FREE, TOOLS)
                 if k in tb.vocab.get("kind", [])]  # fmt: skip
        return np.flatnonzero(np.isin(tb.cols["kind"], codes) & tb.counted_ok())

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        for kc in distinct(c["kind"][sel]):
            kind = tb.vocab["kind"][kc]
            ks = sel[c["kind"][sel] == kc]
            v = c["valid"][ks]
            v = v[~np.isnan(v)]
            if v.size:
                got = a.checked.setdefault(kind, [0, 0])
                got[0] += int(v.size)
                got[1] += int((v > 0.5).sum())
            if kind in (GUIDED, GUIDED_FREE):
                for store, col in ((a.tpot, "tpot_ms"), (a.ttft, "ttft_ms")):
                    x = c[col][ks]
                    store.setdefault(kind, Quantiles(np.float64)).extend(x[~np.isnan(x)])

    def _view(self, arm: str, a: _Arm) -> StructuredView:
        valid = []
        for kind in (GUIDED, TOOLS):
            if kind in a.checked:
                n, ok = a.checked[kind]
                lo, hi = wilson(ok, n)
                valid.append((kind, ok, n, lo, hi))
        cost = []
        for figure, store in (("TPOT", a.tpot), ("TTFT", a.ttft)):
            g, f = store.get(GUIDED), store.get(GUIDED_FREE)
            if g is not None and f is not None and len(g) >= MIN_SAMPLES and len(f) >= MIN_SAMPLES:
                r = ratio_ci_requests(f, g)
                if r is not None:
                    cost.append(Cost(figure, *r))
        return StructuredView(arm, tuple(valid), tuple(cost))

    def view(self, now: int, reads: dict[str, Any]) -> StructuredViews | None:
        views = tuple(self._view(n, a) for n, a in self.arms.items())
        views = tuple(v for v in views if v.valid or v.cost)
        return StructuredViews(views) if views else None

    def figures(self, v: StructuredViews) -> dict[str, Any]:
        figures: dict[str, Any] = {"arms": {}}
        for a in v.arms:
            figures["arms"][a.arm] = {
                "valid": {
                    k: {"valid": ok, "checked": n, "ci95": [round(lo, 4), round(hi, 4)]}
                    for k, ok, n, lo, hi in a.valid
                },  # fmt: skip
                "guided_cost": {
                    c.figure.lower(): {"ratio": c.ratio, "ci95": [c.lo, c.hi]} for c in a.cost
                },  # fmt: skip
            }
        return figures
