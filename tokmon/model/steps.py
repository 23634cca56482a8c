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

from tokmon.model.alerts import cost_figures
from tokmon.model.crossover import AtLoad, Crossover, crossover
from tokmon.model.ladder import StepTotals, knee, knee_json
from tokmon.model.quality import KIND_PREFIX
from tokmon.model.samples import GpuSample, ProbeSample, ServerSample
from tokmon.model.sketch import Quantiles
from tokmon.model.stats import MIN_SAMPLES, Slo, ratio_ci_requests
from tokmon.model.table import RequestTable, distinct_pairs
from tokmon.model.views import LadderView


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

    def crossovers(self, a: str, b: str) -> tuple[Crossover, ...]:
        """``b``'s decode speed-up over ``a`` at each load both ran (ladder steps,
        capacity probes), and where it stops paying: per task kind where the mix has
        several, else over the whole."""
        param = self.param or ""
        if not self.steps or param not in ("concurrency", "rate"):
            return ()
        by: dict[tuple[str, str], StepTotals] = {}
        for st in self.steps:
            by[(st.arm, st.value)] = st  # (a level probed twice: its last run)
        levels = [v for (arm, v) in by if arm == a and (b, v) in by]
        kinds = sorted({k for st in self.steps for k in st.decode_kind
                        if not k.startswith(KIND_PREFIX)})  # fmt: skip
        out = []
        # over a mix of kinds, per kind only: a median over code and free text together
        # is neither's speed-up (and its interval jumps between the two)
        for kind in kinds if len(kinds) > 1 else [""]:
            pts = []
            for v in levels:
                x, y = by[(a, v)], by[(b, v)]
                da = x.decode if not kind else x.decode_kind.get(kind, Quantiles())
                db = y.decode if not kind else y.decode_kind.get(kind, Quantiles())
                if len(da) < MIN_SAMPLES or len(db) < MIN_SAMPLES:
                    continue
                r = ratio_ci_requests(da, db)
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
    ) -> dict[str, Any] | None:
        """The summary's ladder block; ``split_of``: a step's time split; ``pair``: the
        A/B's arms, for the crossover."""
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
            for step in sorted({st.step for st in self.steps}):
                a, b = by.get((step, arms[0])), by.get((step, arms[1]))
                if a is None or b is None:
                    continue
                r = ratio_ci_requests(a.decode, b.decode)
                speedup.append(
                    {
                        "step": step,
                        "value": a.value,
                        "baseline": arms[0],
                        "other": arms[1],
                        "decode_ratio": None
                        if r is None
                        else {"ratio": r[0], "ci95": [r[1], r[2]]},
                    }
                )
            out["speedup"] = speedup
            out["crossover"] = [c.to_json() for c in self.crossovers(*pair)] if pair else []
        return out
