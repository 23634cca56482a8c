"""Reasoning models: what a user waits for is the answer, not the first token of thought.

A registered judgment (``model/contract/registry.py``). Of each arm's counted requests that
ended ok and thought (a reasoning model behind vLLM's ``--reasoning-parser``, SGLang's,
DeepSeek's API: ``delta.reasoning_content`` or ``delta.reasoning``), whole run:

* **the answer's wait** (time to the first answer token, TTFA): the first chunk of
  *content* after the thinking, from the send — the request's ``ttfc_ms``;
* **thinking time**: TTFA − TTFT (the first token of any text, thought included);
* **reasoning tokens** (the server's ``usage.completion_tokens_details.
  reasoning_tokens``, else its reasoning chunks' tokens — said which) and answer tokens
  (the rest of the completion);
* **decode speed per phase**: the thinking's (R − 1) / (last reasoning chunk − TTFT) and
  the answer's (A − 1) / (E2E − TTFA);
* **never answered**: a request that thought to its end (its limit) and sent no content
  has no answer time: counted as such, never given one.

With two arms, each phase's speed-up (ratio of medians, 95% bootstrap interval over
requests): "spec decoding speeds thinking ×2.3, answers ×1.1".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.registry import Block, PerArm, register
from tokmon.model.data.table import RequestTable
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.statistics.stats import MIN_SAMPLES, ratio_ci_requests


@dataclass
class _Arm:
    ttfa: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    think: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    tokens: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    answer_tokens: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    think_tps: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    answer_tps: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    thought: int = 0  # counted ok requests that thought
    no_answer: int = 0  # … and never answered
    counted: int = 0  # … whose reasoning tokens were counted from chunks, not the server's


@dataclass(frozen=True, slots=True)
class ArmReasoning:
    """One arm's reasoning figures, whole run (medians; None where none)."""

    arm: str
    thought: int
    no_answer: int
    ttfa_p50: float | None
    ttft_p50_gap: float | None  # thinking time p50 (TTFA − TTFT)
    tokens_p50: float | None
    think_tps_p50: float | None
    answer_tps_p50: float | None
    source: str  # "server" (usage) or "chunks" (counted) or "both"

    def text(self) -> str:
        if not self.thought:
            return f"{self.arm}: no request thought"
        wait = "—" if self.ttfa_p50 is None else f"{self.ttfa_p50:.0f} ms"
        parts = [f"{self.arm}: the answer's wait p50 {wait}"]
        if self.ttft_p50_gap is not None:
            parts.append(f"thinking p50 {self.ttft_p50_gap:.0f} ms")
        if self.tokens_p50 is not None:
            parts.append(f"{self.tokens_p50:.0f} reasoning tokens p50 ({self.source})")
        speeds = [f"{name} {v:.1f} tok/s" for name, v in (("thinking", self.think_tps_p50),
                                                          ("answer", self.answer_tps_p50))
                  if v is not None]  # fmt: skip
        if speeds:
            parts.append("decode " + ", ".join(speeds))
        parts.append(f"{self.no_answer} of {self.thought} never answered")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class ReasoningView:
    """Every arm's, and the second arm's speed-up per phase over the first."""

    arms: tuple[ArmReasoning, ...]
    speedup: str = ""  # "spec over plain: thinking ×2.30 [2.1, 2.5], answers ×1.10 [..]"

    def of(self, arm: str) -> ArmReasoning | None:
        return next((a for a in self.arms if a.arm == arm), None)

    def panel_lines(self) -> tuple[str, ...]:
        out = ["reasoning (whole run): " + self.arms[0].text()] if self.arms else []
        out += ["  " + a.text() for a in self.arms[1:]]
        return (*out, *((f"  {self.speedup}",) if self.speedup else ()))


def _p50(q: Quantiles) -> float | None:
    m = q.median()
    return None if m is None else round(m, 3)


@register
class Reasoning(PerArm[_Arm]):
    name = "reasoning"
    state = _Arm

    def rows(self, tb: RequestTable) -> np.ndarray:
        return np.flatnonzero(~np.isnan(tb.cols["reasoning_tokens"]) & tb.counted_ok())

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        rt = c["reasoning_tokens"]
        ttfa, ttft = c["ttfc_ms"][sel], c["ttft_ms"][sel]
        answered = ~np.isnan(ttfa)
        a.thought += int(sel.size)
        a.no_answer += int((~answered).sum())
        a.counted += int(c["reasoning_counted"][sel].sum())
        a.ttfa.extend(ttfa[answered])
        gap = ttfa - ttft
        a.think.extend(gap[answered & ~np.isnan(gap)])
        a.tokens.extend(rt[sel])
        ans = (c["output_tokens"][sel] - rt[sel])[answered]
        a.answer_tokens.extend(ans.astype(np.float64))
        for q, col in ((a.think_tps, "reasoning_tps"), (a.answer_tps, "answer_tps")):
            v = c[col][sel]
            q.extend(v[~np.isnan(v)])

    def _arm_view(self, name: str, a: _Arm) -> ArmReasoning:
        source = "chunks" if a.counted == a.thought else "server" if not a.counted else "both"
        return ArmReasoning(name, a.thought, a.no_answer, _p50(a.ttfa), _p50(a.think),
                            _p50(a.tokens), _p50(a.think_tps), _p50(a.answer_tps),
                            "counted from its chunks" if source == "chunks" else
                            "the server's count" if source == "server" else "both")  # fmt: skip

    def _speedup(self) -> tuple[str, dict[str, Any]]:
        arms = [a for a in self.ctx.arms if a in self.arms]
        if len(arms) < 2:
            return "", {}
        base, other = self.arms[arms[0]], self.arms[arms[1]]
        figs: dict[str, Any] = {}
        words = []
        for key, name, qa, qb in (("thinking", "thinking", base.think_tps, other.think_tps),
                                  ("answer", "answers", base.answer_tps, other.answer_tps)):  # fmt: skip
            if len(qa) < MIN_SAMPLES or len(qb) < MIN_SAMPLES:
                continue
            r = ratio_ci_requests(qa, qb)
            if r is None:
                continue
            figs[key] = {"ratio": r[0], "ci95": [r[1], r[2]]}
            words.append(f"{name} ×{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]")
        if not words:
            return "", {}
        figs.update(baseline=arms[0], other=arms[1])
        return f"{arms[1]} over {arms[0]}, decode speed: " + ", ".join(words), figs

    def view(self, now: int, reads: dict[str, Any]) -> ReasoningView | None:
        if not self.arms:
            return None
        arms = tuple(self._arm_view(n, a) for n, a in self.arms.items())
        return ReasoningView(arms, self._speedup()[0])

    def block(self, t_end: int, reads: dict[str, Any]) -> Block | None:
        if not self.arms:
            return None
        figures: dict[str, Any] = {"arms": {}}
        for n, a in self.arms.items():
            v = self._arm_view(n, a)
            figures["arms"][n] = {
                "requests": a.thought,
                "never_answered": a.no_answer,
                "ttfa_ms_p50": v.ttfa_p50,
                "thinking_ms_p50": v.ttft_p50_gap,
                "reasoning_tokens_p50": v.tokens_p50,
                "answer_tokens_p50": _p50(a.answer_tokens),
                "reasoning_tokens_source": v.source,
                "thinking_decode_tokens_per_s_p50": v.think_tps_p50,
                "answer_decode_tokens_per_s_p50": v.answer_tps_p50,
            }
        words, sp = self._speedup()
        if sp:
            figures["speedup"] = sp
        lines = ["reasoning (whole run, counted ok requests that thought):"]
        lines += ["  " + self._arm_view(n, a).text() for n, a in self.arms.items()]
        if words:
            lines.append("  " + words)
        return Block("reasoning", figures, tuple(lines))
