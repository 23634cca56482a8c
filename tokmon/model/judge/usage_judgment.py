"""What the server's usage says of each request (#61): a registered judgment.

Per arm, whole run, of its counted requests that ended ok:

* **the prefix cache**: each request's hit rate (cached / prompt tokens, where the
  server counts cached tokens), the TTFT of hits (some of the prompt cached) and of
  misses (none), and what a hit saves: (TTFT p50 of misses − of hits) per 1,000 cached
  tokens (p50 of the hits');
* **predicted outputs** (OpenAI's ``accepted_prediction_tokens`` and
  ``rejected_prediction_tokens``): their sums, where a server gives them;
* **output length, asked against got**: the share of requests that stopped before the
  ``max_tokens`` they asked for, and the p50 of got / asked — an arm that stops earlier
  decodes other answers, and its decode speed is compared with that said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.registry import PerArm, register
from tokmon.model.data.table import RequestTable
from tokmon.model.statistics.sketch import Quantiles

EARLY_NOTABLE = 0.10  # an arm whose early-stopping share differs from another's by this


def _q() -> Quantiles:
    return Quantiles(np.float64)


@dataclass
class _Arm:
    hit_rate: Quantiles = field(default_factory=_q)
    ttft_hit: Quantiles = field(default_factory=_q)
    ttft_miss: Quantiles = field(default_factory=_q)
    cached_hit: Quantiles = field(default_factory=_q)
    pred: list[int] = field(default_factory=lambda: [0, 0, 0])  # requests, accepted, rejected
    asked: int = 0  # requests with a max_tokens asked
    early: int = 0  # … that got fewer tokens
    got_share: Quantiles = field(default_factory=_q)


@dataclass(frozen=True, slots=True)
class ArmUsage:
    arm: str
    cache_requests: int
    hit_rate_p50: float | None
    hits: int
    saving_per_1k_ms: float | None  # what a cache hit saves, per 1,000 cached tokens
    ttft_hit_p50: float | None
    ttft_miss_p50: float | None
    pred: tuple[int, int, int]
    asked: int
    early: int
    got_share_p50: float | None

    def text(self, full: bool = True) -> str:
        """The arm's line: every figure (``full``, the report), or only what says
        something (the dashboard: a cache that never hit and no early stop are left out)."""
        parts = []
        cache_said = self.saving_per_1k_ms is not None or (self.hit_rate_p50 or 0) > 0
        if self.cache_requests and (full or cache_said):
            p = "—" if self.hit_rate_p50 is None else f"{self.hit_rate_p50:.0%}"
            s = f"prefix cache: hit rate p50 {p} of {self.cache_requests} requests"
            if self.saving_per_1k_ms is not None:
                s += (f", a hit saves {self.saving_per_1k_ms:.1f} ms of TTFT per 1,000 cached "
                      f"tokens (misses {self.ttft_miss_p50:.0f} ms, hits {self.ttft_hit_p50:.0f} ms)")  # fmt: skip
            parts.append(s)
        if self.pred[0]:
            parts.append(f"predicted outputs: {self.pred[1]} tokens accepted, {self.pred[2]} "
                         f"rejected over {self.pred[0]} requests")  # fmt: skip
        if self.asked and (full or self.early):
            g = "—" if self.got_share_p50 is None else f"{self.got_share_p50:.0%}"
            parts.append(f"{self.early / self.asked:.0%} stopped before their max_tokens "
                         f"(got p50 {g} of asked)")  # fmt: skip
        return f"{self.arm}: " + " · ".join(parts) if parts else ""


@dataclass(frozen=True, slots=True)
class UsageView:
    arms: tuple[ArmUsage, ...]
    warning: str = ""  # arms that stopped early in other shares: their decode compares …

    def panel_lines(self) -> tuple[str, ...]:
        return self.lines(full=False)

    def lines(self, full: bool = True) -> tuple[str, ...]:
        lines = [a.text(full) for a in self.arms if a.text(full)]
        if not lines:
            return ()
        return ("usage (whole run, the server's counts):", *("  " + x for x in lines),
                *((f"  {self.warning}",) if self.warning else ()))  # fmt: skip


@register
class Usage(PerArm[_Arm]):
    name = "usage"
    state = _Arm

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        ct, pt, ttft = c["cached_tokens"][sel], c["prompt_tokens"][sel], c["ttft_ms"][sel]
        known = ~np.isnan(ct) & ~np.isnan(pt) & (pt > 0)
        a.hit_rate.extend((ct / np.where(pt > 0, pt, 1))[known])
        hit, miss = known & (ct > 0) & ~np.isnan(ttft), known & (ct == 0) & ~np.isnan(ttft)
        a.ttft_hit.extend(ttft[hit])
        a.ttft_miss.extend(ttft[miss])
        a.cached_hit.extend(ct[hit])
        pa, pr = c["pred_accepted"][sel], c["pred_rejected"][sel]
        has = ~np.isnan(pa) | ~np.isnan(pr)
        if has.any():
            a.pred[0] += int(has.sum())
            a.pred[1] += int(np.nansum(pa[has]))
            a.pred[2] += int(np.nansum(pr[has]))
        mt, n = c["max_tokens_asked"][sel], c["output_tokens"][sel].astype(np.float64)
        asked = ~np.isnan(mt) & (mt > 0)
        a.asked += int(asked.sum())
        a.early += int((asked & (n < mt)).sum())
        a.got_share.extend((n / np.where(asked, mt, 1))[asked])

    def _arm(self, name: str, a: _Arm) -> ArmUsage:
        hit, miss, cached = a.ttft_hit.median(), a.ttft_miss.median(), a.cached_hit.median()
        saving = None
        if hit is not None and miss is not None and cached:
            saving = (miss - hit) / cached * 1000.0
        return ArmUsage(name, len(a.hit_rate), a.hit_rate.median(), len(a.ttft_hit), saving,
                        hit, miss, (a.pred[0], a.pred[1], a.pred[2]), a.asked, a.early,
                        a.got_share.median())  # fmt: skip

    def view(self, now: int, reads: dict[str, Any]) -> UsageView | None:
        arms = tuple(self._arm(n, a) for n, a in self.arms.items())
        if not any(a.text() for a in arms):
            return None
        shares = [(a.arm, a.early / a.asked) for a in arms if a.asked]
        warning = ""
        if (
            len(shares) >= 2
            and max(s for _, s in shares) - min(s for _, s in shares) >= EARLY_NOTABLE
        ):
            warning = ("the arms stopped before max_tokens in other shares ("
                       + ", ".join(f"{n} {s:.0%}" for n, s in shares)
                       + "): their decode speeds are of answers of other lengths")  # fmt: skip
        return UsageView(arms, warning)

    def figures(self, v: UsageView) -> dict[str, Any]:
        figures: dict[str, Any] = {"arms": {}}
        for a in v.arms:
            figures["arms"][a.arm] = {
                "cache_requests": a.cache_requests,
                "hit_rate_p50": a.hit_rate_p50,
                "cache_hits": a.hits,
                "ttft_ms_p50_hit": a.ttft_hit_p50,
                "ttft_ms_p50_miss": a.ttft_miss_p50,
                "hit_saves_ms_per_1k_cached_tokens": a.saving_per_1k_ms,
                "predicted_outputs": {
                    "requests": a.pred[0],
                    "accepted": a.pred[1],
                    "rejected": a.pred[2],
                },  # fmt: skip
                "max_tokens_asked": a.asked,
                "stopped_early": a.early,
                "got_of_asked_p50": a.got_share_p50,
            }
        if v.warning:
            figures["warning"] = v.warning
        return figures
