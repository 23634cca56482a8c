"""Typed views the Snapshot carries to the dashboard: the probes' latest fields, the A/B
comparison, the ladder, cost. Built by the fold from its figures (and from probe fields,
which come from servers and files: every number checked), read by attribute in the UI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokmon.model.statistics.stats import MIN_SAMPLES


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


@dataclass(frozen=True, slots=True)
class ProbeView:
    """The latest probe fields the dashboard shows (None: not measured)."""

    gpu_util: float | None = None
    gpu_mem_used_gib: float | None = None
    gpu_mem_pct: float | None = None
    gpu_power_w: float | None = None
    gpu_temp_c: float | None = None
    gpu_note: str | None = None
    kv_pct: float | None = None
    queue: float | None = None
    running: float | None = None
    prefix_hit_pct: float | None = None  # the server's prefix cache, over the window
    engine: str | None = None
    server_note: str | None = None
    self_cpu_pct: float | None = None
    host_cpu_pct: float | None = None
    self_rss_mib: float | None = None
    net_rtt_ms: float | None = None  # the round trip to the active arm's server


@dataclass(frozen=True, slots=True)
class RestartView:
    """A managed server being stopped or started as the arms take turns."""

    arm: str
    phase: str  # stopping, starting
    since_s: float


@dataclass(frozen=True, slots=True)
class RatioView:
    """A ratio other/baseline with its 95% interval, and the share of the workload it
    holds (``coverage`` below 1: partial, the strata still collecting named)."""

    ratio: float
    lo: float
    hi: float
    coverage: float = 1.0
    # the strata left out, by name and how far they are ("creative 3/10", "chat@2 7/10")
    missing: tuple[str, ...] = ()

    @property
    def significant(self) -> bool:
        return self.lo > 1 or self.hi < 1

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    @classmethod
    def of(cls, d: Any) -> RatioView | None:
        if not isinstance(d, dict) or d.get("ratio") is None:
            return None
        lo, hi = d["ci95"]
        missing = tuple(
            f"{stratum_name(m)} {min(m.get('n') or [0])}/{MIN_SAMPLES}"
            for m in d.get("missing") or ()
            if isinstance(m, dict)
        )
        cov = d.get("coverage")
        return cls(
            float(d["ratio"]),
            float(lo),
            float(hi),
            float(cov) if isinstance(cov, (int, float)) else 1.0,
            missing,
        )


def stratum_name(m: dict[str, Any]) -> str:
    """A stratum by name: its kind, and its ladder step where there is one."""
    kind = str(m.get("kind") or "(no kind)")
    step = m.get("step")
    return kind if not isinstance(step, int) or step < 0 else f"{kind}@{step + 1}"


@dataclass(frozen=True, slots=True)
class KindRatio:
    """One task kind's decode speed-up, or how far it is from having one (``n``: the
    fewer requests of the two arms, ``needed`` in each)."""

    kind: str
    ratio: RatioView | None
    n: int
    needed: int

    def text(self) -> str:
        r = self.ratio
        if r is None:
            return f"{self.kind} collecting ({self.n}/{self.needed})"
        return f"{self.kind} ×{r.ratio:.2f} [{r.lo:.2f}, {r.hi:.2f}]"


@dataclass(frozen=True, slots=True)
class ComparisonView:
    """The whole-run A/B comparison (the summary's ``comparison``, typed)."""

    baseline: str
    other: str
    method: str
    decode: RatioView | None
    tpot: RatioView | None
    ttft: RatioView | None
    by_kind: tuple[KindRatio, ...] = ()

    @classmethod
    def of(cls, c: dict[str, Any]) -> ComparisonView:
        kinds = []
        for k, v in (c.get("by_kind") or {}).items():
            n = v.get("n") or [0, 0]
            kinds.append(
                KindRatio(
                    str(k),
                    RatioView.of(v.get("decode_tokens_per_s")),
                    int(min(n)) if n else 0,
                    int(v.get("needed") or MIN_SAMPLES),
                )
            )
        return cls(
            baseline=c["baseline"],
            other=c["other"],
            method=c["method"],
            decode=RatioView.of(c.get("decode_tokens_per_s")),
            tpot=RatioView.of(c.get("tpot_ms")),
            ttft=RatioView.of(c.get("ttft_ms")),
            by_kind=tuple(kinds),
        )


@dataclass(frozen=True, slots=True)
class Cost:
    """What a million output tokens cost and the energy per token, at a throughput."""

    cost_per_mtok: float | None = None
    joules_per_token: float | None = None
    tokens_per_joule: float | None = None


@dataclass(frozen=True, slots=True)
class ArmCost:
    cost: Cost
    by_kind: tuple[tuple[str, Cost], ...] = ()


@dataclass(frozen=True, slots=True)
class Price:
    """What a cost per token is based on: shown once, beside the costs."""

    per_gpu_hour: float
    gpus: int

    def text(self) -> str:
        return f"{self.per_gpu_hour:g}/GPU-h × {self.gpus} GPU" + ("s" if self.gpus > 1 else "")


@dataclass(frozen=True, slots=True)
class StepFigures:
    """One ladder step, measured (after its warm-up)."""

    step: int
    value: str
    arm: str
    duration_s: float
    tokens_per_s: float | None
    requests: int
    ok: int
    failed: int
    error_rate: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    tpot_p50: float | None
    decode_p50: float | None
    gpu_mem_max_pct: float | None
    kv_max_pct: float | None
    # the prompt tokens the server counted (p50): a prompt-tokens ladder's real x axis
    prompt_tokens_p50: float | None = None


@dataclass(frozen=True, slots=True)
class LadderView:
    param: str | None
    step: int
    value: str
    arm: str
    running: bool
    since_s: float
    done: tuple[StepFigures, ...]
    knee: tuple[tuple[str, StepFigures | None], ...]  # per arm
    stopped: str | None

    def knee_of(self, arm: str) -> StepFigures | None:
        return dict(self.knee).get(arm)
