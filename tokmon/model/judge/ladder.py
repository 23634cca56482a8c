"""Ladders: how speed changes with concurrency, rate, input length or output length.

A ladder runs each step for ``step_s`` (the first ``warmup_s`` of it settling, kept out
of the figures), for every arm in turn, then moves on; ``--ladder-stop`` ends it early
once the server is saturated (error rate or TTFT p95 past a limit), since going on would
measure nothing but queues.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.views import StepFigures
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.workloads.workload import LengthDist, WorkloadError, parse_count

PARAMS = ("concurrency", "rate", "prompt-tokens", "max-tokens")


class LadderError(ValueError):
    pass


@dataclass(frozen=True)
class Ladder:
    param: str
    values: tuple[str, ...]
    step_s: float
    warmup_s: float = 5.0
    stop_error_rate: float | None = None
    stop_ttft_p95_ms: float | None = None

    def level(self, i: int) -> float:
        return float(self.values[i])


def parse_ladder(
    text: str, step_s: float, warmup_s: float, stop: str | None, duration_s: float | None = None
) -> Ladder:
    """``concurrency=1,2,4,8`` / ``rate=1,2,4`` / ``prompt-tokens=128,1k,4k`` / ``max-tokens=…``."""
    param, eq, rest = text.partition("=")
    param = param.strip()
    if not eq or param not in PARAMS:
        raise LadderError(f"--ladder: expected one of {', '.join(PARAMS)}=V1,V2,…, got {text!r}")
    vals = [v.strip() for v in rest.split(",") if v.strip()]
    if not vals:
        raise LadderError("--ladder: a ladder needs at least one step")
    for v in vals:
        try:
            if param in ("concurrency", "prompt-tokens", "max-tokens"):
                n = parse_count(v) if param != "concurrency" else int(v)
                if n < 1:
                    raise ValueError
                if param != "concurrency":
                    LengthDist.parse(v)
            else:
                x = float(v)
                if not (x > 0 and math.isfinite(x)):
                    raise ValueError
        except (ValueError, WorkloadError):
            raise LadderError(f"--ladder: {param} step {v!r} is not a positive number") from None
    if step_s <= warmup_s:
        raise LadderError(
            f"--step-duration ({step_s:g} s) must be longer than the step warm-up ({warmup_s:g} s)"
        )
    if duration_s is not None and step_s > duration_s:
        raise LadderError(
            f"--step-duration ({step_s:g} s) is longer than the run ({duration_s:g} s)"
        )
    err = ttft = None
    for part in (stop or "").split(","):
        if not part.strip():
            continue
        k, eq2, v = part.partition("=")
        k = k.strip()
        try:
            if k == "errors":
                err = float(v.strip().rstrip("%")) / 100.0
            elif k == "ttft_p95":
                ttft = float(v.strip().removesuffix("ms"))
            else:
                raise ValueError
        except ValueError:
            raise LadderError(
                f"--ladder-stop: expected errors=5%,ttft_p95=2000, got {part!r}"
            ) from None
    return Ladder(param, tuple(vals), step_s, warmup_s, err, ttft)


def _figure() -> Quantiles:
    return Quantiles(np.float64)


@dataclass
class StepTotals:
    step: int
    arm: str
    value: str
    t0: int  # measuring starts (after the step's warm-up)
    t1: int | None = None
    tokens: int = 0
    ok: int = 0
    failed: int = 0
    ttft: Quantiles = field(default_factory=_figure)
    tpot: Quantiles = field(default_factory=_figure)
    decode: Quantiles = field(default_factory=_figure)
    prompt: Quantiles = field(default_factory=_figure)
    gpu_mem_max: float | None = None
    kv_max: float | None = None
    decode_kind: dict[str, Quantiles] = field(default_factory=dict)  # per task kind
    good: int = 0  # requests that met every SLO (with --slo)
    met: dict[str, int] = field(default_factory=dict)  # per SLO (ttft, tpot, e2e) alone

    def figures(self, t_end: int) -> StepFigures:
        dur = ((self.t1 or t_end) - self.t0) / 1e9
        ended = self.ok + self.failed

        def p(x: Quantiles, q: float) -> float | None:
            return round(x.quantiles([q])[0], 4) if len(x) else None

        return StepFigures(
            step=self.step,
            value=self.value,
            arm=self.arm,
            duration_s=round(dur, 3),
            tokens_per_s=self.tokens / dur if dur > 0 else None,
            requests=ended,
            ok=self.ok,
            failed=self.failed,
            error_rate=self.failed / ended if ended else None,
            ttft_p50=p(self.ttft, 50),
            ttft_p95=p(self.ttft, 95),
            tpot_p50=p(self.tpot, 50),
            decode_p50=p(self.decode, 50),
            gpu_mem_max_pct=self.gpu_mem_max,
            kv_max_pct=self.kv_max,
            prompt_tokens_p50=p(self.prompt, 50),
        )


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


KNEE_LATENCY = 2.0  # latency has taken off: TTFT p95 at least this × the lowest load's
KNEE_GAIN = 0.10  # throughput has stopped rising: less than this over the best below


def knee(steps: list[StepFigures]) -> StepFigures | None:
    """The knee, one definition for ladders and capacity searches: the highest
    throughput reached before the first load at which latency has taken off (TTFT p95 at
    least ``KNEE_LATENCY`` × the lowest load's) *and* throughput has stopped rising (less
    than ``KNEE_GAIN`` over the best of every load below it). The steps are taken in the
    order of their load (a capacity search probes out of order), and the knee is the
    load that gave the most below that point, not merely the one before it: a search
    that probed 8, 11 and 12 streams for 1,101, 949 and 960 tok/s has its knee at 8.
    None: fewer than three loads, or latency never took off while throughput stalled."""
    pts = [s for s in steps if s.tokens_per_s and s.ttft_p95 is not None]
    if all(_is_number(s.value) for s in pts):
        pts.sort(key=lambda s: float(s.value))
    if len(pts) < 3:
        return None
    base = pts[0].ttft_p95
    assert base is not None
    best = pts[0]
    for cur in pts[1:]:
        assert cur.tokens_per_s and best.tokens_per_s and cur.ttft_p95 is not None
        if (cur.ttft_p95 > KNEE_LATENCY * base
                and cur.tokens_per_s < (1 + KNEE_GAIN) * best.tokens_per_s):  # fmt: skip
            return best
        if cur.tokens_per_s > best.tokens_per_s:
            best = cur
    return None


def knee_json(f: StepFigures | None) -> dict[str, Any] | None:
    """The knee as the summary writes it."""
    if f is None:
        return None
    return {
        "step": f.step,
        "value": f.value,
        "tokens_per_s": f.tokens_per_s,
        "ttft_p95": f.ttft_p95,
    }


def stop_reason(ladder: Ladder, fig: StepFigures) -> str | None:
    if ladder.stop_error_rate is not None and (fig.error_rate or 0) > ladder.stop_error_rate:
        return f"error rate {fig.error_rate or 0:.1%} > {ladder.stop_error_rate:.1%}"
    if (
        ladder.stop_ttft_p95_ms is not None
        and fig.ttft_p95 is not None
        and fig.ttft_p95 > ladder.stop_ttft_p95_ms
    ):
        return f"TTFT p95 {fig.ttft_p95:.0f} ms > {ladder.stop_ttft_p95_ms:g} ms"
    return None
