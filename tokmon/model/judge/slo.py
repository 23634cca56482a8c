"""The SLO verdict in words: which share of the counted requests met every SLO, how sure
that share is (a Wilson 95% interval), and whether it meets the target — one figure,
said the same way on the dashboard, in the closing text, in every report and in a
scenario's headline:

    TTFT ≤ 100 ms and TPOT ≤ 50 ms: 97.8% of 1,204 requests [97.0, 98.5] — meets the 95% target

A share *meets* the target when it is at or above it, and says so *clearly* where its
whole interval is; it *misses* it below; where the interval holds the target, the verdict
says that more requests would tell (the share itself decides ``--fail-on-slo``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokmon.model.statistics.stats import Slo, wilson


def slo_terms(slo: Slo) -> str:
    """``TTFT ≤ 100 ms and TPOT ≤ 50 ms``: what a request must meet."""
    parts = [f"{name} ≤ {v:g} ms" for name, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms),
                                                    ("E2E", slo.e2e_ms), ("the answer's wait",
                                                                          slo.answer_ms))
             if v is not None]  # fmt: skip
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """One arm's (or the whole run's: ``arm`` "") share of requests that met every SLO."""

    arm: str
    terms: str  # TTFT ≤ 100 ms and TPOT ≤ 50 ms
    met: int
    counted: int
    lo: float
    hi: float
    target: float

    @property
    def share(self) -> float | None:
        return self.met / self.counted if self.counted else None

    @property
    def verdict(self) -> str:
        s = self.share
        if s is None:
            return "no request counted yet"
        if self.lo >= self.target:
            return f"meets the {self.target:.0%} target"
        if self.hi < self.target:
            return f"misses the {self.target:.0%} target"
        word = "meets" if s >= self.target else "misses"
        return f"{word} the {self.target:.0%} target, within its interval: more requests would tell"

    @property
    def meets(self) -> bool | None:
        s = self.share
        return None if s is None else s >= self.target

    def text(self, terms: bool = True) -> str:
        head = f"{self.terms}: " if terms else ""
        s = self.share
        if s is None:
            return head + "no request counted yet"
        noun = "request" if self.counted == 1 else "requests"
        return (f"{head}{_pct(s)} of {self.counted:,} {noun} "
                f"[{_pct(self.lo)}, {_pct(self.hi)}] — {self.verdict}")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "terms": self.terms,
            "met": self.met,
            "counted": self.counted,
            "fraction": self.share,
            "ci95": [round(self.lo, 4), round(self.hi, 4)],
            "target": self.target,
            "meets": self.meets,
            "verdict": self.verdict,
            "text": self.text(),
        }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def slo_verdict(arm: str, met: int, counted: int, slo: Slo) -> SloVerdict:
    lo, hi = wilson(met, counted)
    return SloVerdict(arm, slo_terms(slo), met, counted, lo, hi, slo.target)
