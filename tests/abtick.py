"""A live A/B run tick by tick, from the simulator's own timing model (seeded).

Two arms, spec off and on, take turns (``--alternate``) on a closed loop of a two-kind
mix; each request's decode speed follows ``tokmon.sim.model`` (one token a step without
a draft; with one, 1 to k+1 tokens a step, each draft token accepted with the kind's α,
and every step's cost jittered). The requests are folded as a live run folds them (the
real ``Fold``: arm events, request batches, ticks), and at every tick the dashboard's
comparison is read. The per-kind truth comes from a large run of the same model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tokmon.model.data.facts import Requests, Tick
from tokmon.model.data.records import Event, RequestRecord
from tokmon.model.data.table import RequestTable
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.sim.model import ALPHA, PROFILES

PROFILE = PROFILES["27b-h100"]
KINDS = ("code", "creative")
TOKENS = 64


def decode_speeds(
    rng: np.random.Generator, kind: str, spec: bool, n: int, streams: int, jitter: float
) -> np.ndarray:
    """Decode speeds (tokens/s after the first token) of ``n`` requests of ``TOKENS``."""
    step = PROFILE.decode_step_ms(streams, spec)
    k, alpha = PROFILE.spec_k, ALPHA[kind]
    steps = TOKENS  # enough steps for the longest request
    if spec:
        # accepted draft tokens per step: the first rejection ends it, capped at k
        acc = np.minimum(rng.geometric(1 - alpha, size=(n, steps)) - 1, k)
        per_step = acc + 1
    else:
        per_step = np.ones((n, steps), dtype=np.int64)
    cost = step * np.exp(jitter * rng.standard_normal((n, steps)) - jitter**2 / 2)
    made = np.cumsum(per_step, axis=1)
    # steps needed to reach TOKENS - 1 tokens after the first
    last = np.argmax(made >= TOKENS - 1, axis=1)
    spent = np.cumsum(cost, axis=1)[np.arange(n), last]
    return (TOKENS - 1) / (spent / 1000.0)


def truth(weights: dict[str, float], streams: int, jitter: float) -> dict[str, float]:
    """Per kind the ratio of median decode speeds spec/plain, and the weighted whole."""
    rng = np.random.default_rng(987654)
    out = {}
    for kind in KINDS:
        a = np.median(decode_speeds(rng, kind, False, 40_000, streams, jitter))
        b = np.median(decode_speeds(rng, kind, True, 40_000, streams, jitter))
        out[kind] = float(b / a)
    out["all"] = math.exp(sum(w * math.log(out[k]) for k, w in weights.items()))
    return out


@dataclass(frozen=True)
class TickView:
    t_s: float
    ratio: float | None
    lo: float | None
    hi: float | None
    partial: bool
    coverage: float | None


def run(
    seed: int,
    weights: dict[str, float],
    duration_s: float = 90.0,
    alternate_s: float = 15.0,
    streams: int = 8,
    jitter: float = 0.15,
) -> list[TickView]:
    """One seeded live run; the comparison as the dashboard had it at every tick."""
    rng = np.random.default_rng(seed)
    arms = ("plain", "spec")
    # each stream sends a request as soon as its last one ended (closed loop)
    free_at = np.zeros(streams)
    recs: list[RequestRecord] = []
    switches: list[Event] = []
    seg, arm_i = 0, 0
    next_switch = alternate_s
    kinds, probs = list(weights), np.array(list(weights.values()))
    while free_at.min() < duration_s:
        s = int(free_at.argmin())
        t0 = float(free_at[s])
        if t0 >= next_switch:  # the arm switches at its time (a new segment)
            seg += 1
            arm_i = 1 - arm_i
            switches.append(
                Event(int(next_switch * 1e9), "arm", f"arm → {arms[arm_i]}",
                      {"arm": arms[arm_i], "segment": seg})
            )  # fmt: skip
            next_switch += alternate_s
        kind = str(rng.choice(kinds, p=probs))
        dec = float(decode_speeds(rng, kind, arm_i == 1, 1, streams, jitter)[0])
        ttft = 0.05
        e2e = ttft + (TOKENS - 1) / dec
        t1 = t0 + e2e
        free_at[s] = t1
        recs.append(
            RequestRecord(
                rid=len(recs), arm=arms[arm_i], outcome="ok", t_sched=int(t0 * 1e9),
                t_end=int(t1 * 1e9), kind=kind, segment=seg, ttft_ms=ttft * 1000,
                e2e_ms=e2e * 1000, output_tokens=TOKENS, tpot_ms=1000.0 / dec,
                decode_tps=dec,
            )
        )  # fmt: skip
    recs.sort(key=lambda r: r.t_end)
    table = RequestTable.from_records(recs)
    ends = table.cols["t_end"]
    fold = Fold(
        FoldSettings(arms=arms, kind_weights=tuple(weights.items())),
        derive=True,
        vocab=table.vocab,
    )
    out: list[TickView] = []
    lo = 0
    for sec in range(1, int(duration_s) + 1):
        t = sec * 1_000_000_000
        while switches and switches[0].t <= t:
            fold.apply(switches.pop(0))
        hi = int(np.searchsorted(ends, t, side="right"))
        if hi > lo:
            fold.apply(Requests(table.slice(lo, hi)))
            lo = hi
        fold.apply(Tick(t))
        snap = fold.snapshot
        c = snap.comparison if snap is not None else None
        d = c.decode if c is not None else None
        out.append(
            TickView(
                float(sec),
                None if d is None else d.ratio,
                None if d is None else d.lo,
                None if d is None else d.hi,
                bool(d is not None and d.partial),
                None if d is None else d.coverage,
            )
        )
    return out
