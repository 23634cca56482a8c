"""A ladder's steps as the run goes (a fixed ladder's, or a capacity search's probes):
each step's requests, tokens and peak memory, the view the dashboard draws, the
summary's ladder block, and where a speed-up stops paying across the levels both arms
ran — a reducer of the requests, token buckets, samples and step events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from tokmon.model.contract.views import LadderView
from tokmon.model.data.samples import GpuSample, ProbeSample, ServerSample
from tokmon.model.data.table import RequestTable, distinct_pairs
from tokmon.model.judge.alerts import cost_figures
from tokmon.model.judge.crossover import AtLoad, Crossover, crossover
from tokmon.model.judge.ladder import StepTotals, knee, knee_json
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.statistics.stats import (
    MIN_SAMPLES,
    Ratio,
    Slo,
    Stratum,
    ratio_ci_requests,
    ratio_ci_stratified,
)
from tokmon.model.workloads.questions import KIND_PREFIX

REPS = 2000  # bootstrap replicates of a load's speed-up (each kind's, and combined)


class Steps:
    def __init__(self) -> None:
        self.steps: list[StepTotals] = []  # in the order they ran
        self.param: str | None = None
        self.stopped: str | None = None  # why the ladder stopped early

    def begin(self, step: int, arm: str, value: str, t: int, warm_s: float, param: str) -> None:
        """A step starts at ``t``; it is measured after ``warm_s``."""
        self.param = param
        self.end(t)
        self.steps.append(StepTotals(step, arm, value, t + int(warm_s * 1e9)))

    def end(self, t: int, reason: str | None = None) -> None:
        """The running step ends at ``t`` (the ladder ended: ``reason`` it stopped early)."""
        if self.steps and self.steps[-1].t1 is None:
            self.steps[-1].t1 = t
        if reason:
            self.stopped = reason

    def current(self) -> int:
        """The running step's number (-1: none)."""
        return self.steps[-1].step if self.steps and self.steps[-1].t1 is None else -1

    def requests(self, tb: RequestTable, rows: np.ndarray, slo: Slo) -> None:
        """The counted requests ``rows`` that a step tagged."""
        if not self.steps:
            return
        c = tb.cols
        rows = rows[c["step"][rows] >= 0]
        # which met every SLO, and each SLO alone (a capacity probe says which one failed)
        met_all = slo.met(tb, rows) if slo.any else None
        met_each = slo.met_each(tb, rows)
        arm_of, step_of = c["arm"][rows], c["step"][rows]
        okm = c["outcome"][rows] == tb.code("outcome", "ok")
        for code, step in distinct_pairs(arm_of, step_of):
            arm = tb.vocab["arm"][code]
            st = next((x for x in reversed(self.steps) if x.step == step and x.arm == arm), None)
            if st is None:
                continue
            m = (arm_of == code) & (step_of == step)
            if met_all is not None:
                st.good += int(met_all[m].sum())
                for name, met in met_each.items():
                    st.met[name] = st.met.get(name, 0) + int(met[m].sum())
            ok = rows[m & okm]
            st.ok += int(ok.size)
            st.failed += int(m.sum()) - int(ok.size)
            for fig, name in ((st.ttft, "ttft_ms"), (st.tpot, "tpot_ms"),
                              (st.decode, "decode_tps"), (st.prompt, "prompt_tokens")):  # fmt: skip
                v = c[name][ok].astype(np.float64)
                fig.extend(v[~np.isnan(v)])
            dec, kinds = c["decode_tps"][ok].astype(np.float64), c["kind"][ok]
            for kc in np.unique(kinds).tolist():
                kind = tb.vocab["kind"][kc]
                v = dec[(kinds == kc) & ~np.isnan(dec)]
                if kind and v.size:
                    st.decode_kind.setdefault(kind, Quantiles(np.float64)).extend(v)

    def tokens(self, t: int, arm: str, n: int) -> None:
        for st in reversed(self.steps):
            if st.arm == arm and st.t0 <= t and (st.t1 is None or t < st.t1):
                st.tokens += n
                break

    def sample(self, t: int, r: ProbeSample) -> None:
        """GPU memory and KV cache per step (long inputs run memory out): their peak."""
        mem = r.mem_pct if isinstance(r, GpuSample) else None
        kv = r.kv_pct if isinstance(r, ServerSample) else None
        if mem is None and kv is None:
            return
        for st in reversed(self.steps):
            if not (st.t0 <= t and (st.t1 is None or t < st.t1)):
                continue
            if mem is not None:
                st.gpu_mem_max = mem if st.gpu_mem_max is None else max(st.gpu_mem_max, mem)
            if kv is not None:
                st.kv_max = kv if st.kv_max is None else max(st.kv_max, kv)
            break

    def view(self, now: int) -> LadderView | None:
        if not self.steps:
            return None
        cur = self.steps[-1]
        figs = [st.figures(now) for st in self.steps if st.t1 is not None]
        arms = list(dict.fromkeys(f.arm for f in figs))
        return LadderView(
            param=self.param,
            step=cur.step,
            value=cur.value,
            arm=cur.arm,
            running=cur.t1 is None,
            since_s=(now - cur.t0) / 1e9,
            done=tuple(figs),
            knee=tuple((a, knee([f for f in figs if f.arm == a])) for a in arms),
            stopped=self.stopped,
        )

    def running(self) -> tuple[str, int, int] | None:
        """The step under way (a capacity probe is one): its arm, requests so far and
        how many met every SLO; None between steps."""
        if not self.steps or self.steps[-1].t1 is not None:
            return None
        st = self.steps[-1]
        return st.arm, st.ok + st.failed, st.good

    def kinds(self, weights: dict[str, float] | None = None) -> list[str]:
        """The task kinds of the workload the steps met (and the mix's, from
        ``weights``), quality probes aside; [] where there is one kind or none."""
        met = {k for st in self.steps for k in st.decode_kind}
        names = sorted(k for k in met | set(weights or ()) if not k.startswith(KIND_PREFIX))
        return names if len(names) > 1 else []

    def level_ratio(
        self, x: StepTotals, y: StepTotals, weights: dict[str, float] | None = None
    ) -> Ratio | None:
        """``y``'s decode speed-up over ``x`` at one load (a ladder step, a capacity
        probe): the one method of every combined speed-up (``stats.ratio_ci_stratified``)
        — per task kind where the mix has several, combined with the mix's weights as a
        weighted geometric mean, with its coverage: the load is whole when every kind
        has ``MIN_SAMPLES`` requests in both arms *there*. A median pooled over the kinds
        is not the workload's speed-up where the arms ran the kinds in other shares
        (spec ran more code than plain: the pooled ratio said ×0.89 where code gave
        ×1.86 and free text ×0.78). Its per-kind ratios are the crossover's, so the two
        cannot contradict."""
        kinds = self.kinds(weights)
        if not kinds:
            return ratio_ci_stratified({0: Stratum(x.decode)}, {0: Stratum(y.decode)},
                                       segments=False, reps=REPS)  # fmt: skip
        sa = {i: Stratum(x.decode_kind.get(k) or Quantiles()) for i, k in enumerate(kinds)}
        sb = {i: Stratum(y.decode_kind.get(k) or Quantiles()) for i, k in enumerate(kinds)}
        w = {i: float(weights[k]) for i, k in enumerate(kinds)} if weights else None
        return ratio_ci_stratified(sa, sb, segments=False, reps=REPS, weights=w,
                                   expected=tuple(range(len(kinds))))  # fmt: skip

    def _levels(self, a: str, b: str) -> list[tuple[str, StepTotals, StepTotals]]:
        """(load, a's step, b's step) for each load both arms ran, in the order run."""
        by: dict[tuple[str, str], StepTotals] = {}
        for st in self.steps:
            by[(st.arm, st.value)] = st  # (a level probed twice: its last run)
        return [(v, by[(a, v)], by[(b, v)]) for (arm, v) in by if arm == a and (b, v) in by]

    def crossovers(
        self, a: str, b: str, weights: dict[str, float] | None = None
    ) -> tuple[Crossover, ...]:
        """``b``'s decode speed-up over ``a`` at each load both ran (ladder steps,
        capacity probes), and where it stops paying: per task kind where the mix has
        several, else over the whole — each kind's ratio at a load the very one that
        ``level_ratio`` combines."""
        param = self.param or ""
        if not self.steps or param not in ("concurrency", "rate"):
            return ()
        kinds = self.kinds(weights)
        out = []
        # over a mix of kinds, per kind only: a median over code and free text together
        # is neither's speed-up (and its interval jumps between the two)
        for kind in kinds or [""]:
            pts = []
            for v, x, y in self._levels(a, b):
                da = x.decode if not kind else x.decode_kind.get(kind, Quantiles())
                db = y.decode if not kind else y.decode_kind.get(kind, Quantiles())
                if len(da) < MIN_SAMPLES or len(db) < MIN_SAMPLES:
                    continue
                r = ratio_ci_requests(da, db, reps=REPS)
                if r is not None:
                    pts.append(AtLoad(float(v), r[0], r[1], r[2]))
            if pts:
                out.append(crossover(b, a, param, pts, kind))
        return tuple(out)

    def summary(
        self,
        t_end: int,
        price: float | None,
        gpus: int,
        split_of: Callable[[StepTotals], dict[str, Any]],
        pair: tuple[str, str] | None,
        weights: dict[str, float] | None = None,
    ) -> dict[str, Any] | None:
        """The summary's ladder block; ``split_of``: a step's time split; ``pair``: the
        A/B's arms, for the crossover; ``weights``: the mix's kinds, for the speed-up
        at each step."""
        if not self.steps:
            return None
        figs = [st.figures(t_end) for st in self.steps]
        steps = [asdict(f) for f in figs]
        if price is not None:
            for d in steps:  # what a million tokens costs at each step's throughput
                d["cost_per_million_tokens"] = cost_figures(
                    d["tokens_per_s"], gpu_hour_price=price, gpus=gpus, power_w=None
                ).cost_per_mtok
        arms = list(dict.fromkeys(f.arm for f in figs))
        for d, st in zip(steps, self.steps, strict=True):  # each step's time: the knee's cause
            d["time_split"] = split_of(st)
        out: dict[str, Any] = {
            "param": self.param,
            "steps": steps,
            "knee": {a: knee_json(knee([f for f in figs if f.arm == a])) for a in arms},
            "stopped_early": self.stopped,
        }
        if len(arms) >= 2:
            speedup = []
            by = {(st.step, st.arm): st for st in self.steps}
            kinds = self.kinds(weights)
            for step in sorted({st.step for st in self.steps}):
                a, b = by.get((step, arms[0])), by.get((step, arms[1]))
                if a is None or b is None:
                    continue
                r = self.level_ratio(a, b, weights)
                speedup.append(
                    {
                        "step": step,
                        "value": a.value,
                        "baseline": arms[0],
                        "other": arms[1],
                        "decode_ratio": None if r is None else ratio_json(r, kinds),
                    }
                )
            out["speedup"] = speedup
            out["crossover"] = (
                [c.to_json() for c in self.crossovers(*pair, weights)] if pair else []
            )
        return out


def ratio_json(r: Ratio, kinds: list[str]) -> dict[str, Any]:
    """A combined speed-up as the summary writes it: the ratio, its interval, the kinds
    it combines, and — where a kind had too few requests in an arm — that it is partial,
    with the share of the workload it holds and what it lacks."""
    return {
        "ratio": r.ratio,
        "ci95": [r.lo, r.hi],
        "kinds": kinds or None,
        "coverage": round(r.coverage, 4),
        "partial": r.partial,
        "missing": [
            {"kind": kinds[sid] if kinds else "", "n": [na, nb]} for sid, na, nb in r.missing
        ],
    }
