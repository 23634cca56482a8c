"""The load a server sustains under an SLO, found by search (``--find-capacity``).

Doubling from the first level until a probe fails, then bisecting between the highest
that passed and the lowest that failed, to a resolution of one stream (concurrency) or
5% (rate). Each probe runs until its goodput — the share of its requests that met every
SLO — is clearly on one side of the target: a sequential test on the Wilson 95%
interval, checked as requests come, between a minimum and a maximum duration (after the
step's warm-up). Easy probes are short, close ones long; a probe still undecided at its
maximum is judged by its point and says so.

Pure: the live session's conductor feeds it each probe's counts and performs what it
decides; the fold rebuilds the same search from the recorded probe events, so a replay
shows the same bracket at every tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tokmon.model.stats import wilson

MIN_REQUESTS = 10  # a probe decides on no fewer


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    param: str  # "concurrency" or "rate"
    goodput: float = 0.95  # the share of requests that must meet every SLO
    slo: str = ""  # as given (ttft=500,tpot=50), for the header and the summary
    start: float = 1.0
    limit: float = 1024.0  # the search never asks for more
    min_s: float = 5.0  # a probe runs at least this long (after its warm-up)
    max_s: float = 60.0  # and at most this long: then its point decides
    warm_s: float = 5.0

    def resolution(self, lo: float) -> float:
        """How close the bracket must get: one stream, or 5% of the rate."""
        return 1.0 if self.param == "concurrency" else max(0.05 * lo, 0.01)

    def fmt(self, level: float) -> str:
        if self.param == "concurrency":
            return f"{level:g} stream{'s' if level != 1 else ''}"
        return f"{level:.3g} req/s"


@dataclass(frozen=True, slots=True)
class Probe:
    """One level tried: its requests, how many met every SLO, the goodput's interval,
    and the verdict (``pass``/``fail``; ``by_point`` when its maximum duration ran out
    before the interval cleared the target)."""

    level: float
    n: int
    good: int
    lo: float
    hi: float
    verdict: str
    duration_s: float
    by_point: bool = False
    why: str = ""  # a failure's cause: which SLO, met by what share

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "requests": self.n,
            "met_slo": self.good,
            "goodput": self.good / self.n if self.n else None,
            "ci95": [round(self.lo, 4), round(self.hi, 4)],
            "verdict": self.verdict,
            "by_point": self.by_point,
            "duration_s": round(self.duration_s, 3),
            "why": self.why or None,
        }

    @classmethod
    def of(cls, d: dict[str, Any]) -> Probe:
        ci = d.get("ci95") or [0.0, 0.0]
        return cls(
            level=float(d["level"]),
            n=int(d.get("requests") or 0),
            good=int(d.get("met_slo") or 0),
            lo=float(ci[0]),
            hi=float(ci[1]),
            verdict=str(d.get("verdict")),
            duration_s=float(d.get("duration_s") or 0.0),
            by_point=bool(d.get("by_point")),
            why=str(d.get("why") or ""),
        )


def judge(plan: CapacityPlan, n: int, good: int, elapsed_s: float) -> tuple[str, bool] | None:
    """A probe's verdict once it can be given: ("pass" | "fail", by its point), or None
    while it must run on."""
    if elapsed_s < plan.min_s:
        return None
    if n >= MIN_REQUESTS:
        lo, hi = wilson(good, n)
        if lo >= plan.goodput:
            return "pass", False
        if hi < plan.goodput:
            return "fail", False
    if elapsed_s >= plan.max_s:
        return ("pass" if n and good / n >= plan.goodput else "fail"), True
    return None


@dataclass
class CapacitySearch:
    plan: CapacityPlan
    probes: list[Probe] = field(default_factory=list)
    done: bool = False
    stopped: str = ""  # why the search ended before it converged

    @property
    def passed(self) -> float | None:
        ok = [p.level for p in self.probes if p.verdict == "pass"]
        return max(ok) if ok else None

    @property
    def failed(self) -> float | None:
        """The lowest failing level above the highest that passed."""
        top = self.passed
        bad = [
            p.level for p in self.probes if p.verdict == "fail" and (top is None or p.level > top)
        ]
        return min(bad) if bad else None

    def next_level(self) -> float | None:
        """The next level to try, or None when the search is over."""
        if self.done:
            return None
        if not self.probes:
            return self.plan.start
        lo, hi = self.passed, self.failed
        step = self.plan.resolution(lo or self.plan.start)
        if hi is None:  # not failed yet: double
            nxt = (lo or self.plan.start) * 2
            if nxt > self.plan.limit:
                self.done, self.stopped = True, f"passed at the limit {self.plan.fmt(lo or 0)}"
                return None
            return nxt
        if lo is None:  # failed at the first level: below it (concurrency stops at 1)
            nxt = hi / 2
            if self.plan.param == "concurrency" and nxt < 1:
                self.done, self.stopped = True, "fails at 1 stream"
                return None
            if self.plan.param == "rate" and nxt < 0.01:
                self.done, self.stopped = True, "fails at the lowest rate"
                return None
            return math.floor(nxt) if self.plan.param == "concurrency" else nxt
        if hi - lo <= step:
            self.done = True
            return None
        mid = (lo + hi) / 2
        return float(math.floor(mid)) if self.plan.param == "concurrency" else mid

    def add(self, probe: Probe) -> None:
        self.probes.append(probe)

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        cap, fail = self.passed, self.failed
        top = next((x for x in self.probes if x.level == cap), None)
        over = next((x for x in self.probes if x.level == fail), None)
        return {
            "param": p.param,
            "slo": p.slo,
            "goodput_target": p.goodput,
            "capacity": cap,
            "fails_at": fail,
            "done": self.done,
            "stopped": self.stopped or None,
            "probes": [x.to_json() for x in self.probes],
            "probe_seconds": round(sum(x.duration_s for x in self.probes), 3),
            "at_capacity": top.to_json() if top else None,
            "why_next_fails": over.why if over else None,
        }

    def verdict_text(self) -> str:
        """``capacity 11 streams (12 fails: ttft met by 38%) at 95% goodput``."""
        p = self.plan
        cap, fail = self.passed, self.failed
        head = f"at {p.goodput:.0%} goodput" + (f", {p.slo}" if p.slo else "")
        if cap is None and fail is None:
            return f"searching: {head}"
        over = next((x for x in self.probes if x.level == fail), None)
        why = f": {over.why}" if over is not None and over.why else ""
        if cap is None:
            return f"capacity below {p.fmt(fail or 0)} ({p.fmt(fail or 0)} fails{why}) {head}"
        state = "" if self.done else "so far "
        tail = f" ({p.fmt(fail)} fails{why})" if fail is not None else ""
        return f"capacity {state}{p.fmt(cap)}{tail} {head}"


def plan_of(d: dict[str, Any]) -> CapacityPlan:
    """A plan as its event recorded it (unknown keys ignored, missing ones defaulted)."""
    names = set(CapacityPlan.__dataclass_fields__)
    return CapacityPlan(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class CapacityView:
    """One arm's search as the dashboard shows it: the verdict so far and each probe."""

    arm: str
    text: str
    probes: tuple[Probe, ...]
    done: bool
    param: str


class CapacityReducer:
    """The searches of a run, rebuilt from their events (``search``, ``probe``,
    ``capacity``) — the same live and in a replay."""

    def __init__(self) -> None:
        self.searches: dict[str, CapacitySearch] = {}

    def event(self, kind: str, arm: str, data: dict[str, Any]) -> None:
        if kind == "search" and isinstance(data.get("plan"), dict):
            try:
                self.searches[arm] = CapacitySearch(plan_of(data["plan"]))
            except (TypeError, ValueError):
                return
        s = self.searches.get(arm)
        if s is None:
            return
        if kind == "probe" and isinstance(data.get("probe"), dict):
            try:
                s.add(Probe.of(data["probe"]))
            except (KeyError, TypeError, ValueError):
                return
        elif kind == "capacity":
            got = data.get("result")
            r: dict[str, Any] = got if isinstance(got, dict) else {}
            s.done = bool(r.get("done", True))
            s.stopped = str(r.get("stopped") or "")

    def views(self) -> tuple[CapacityView, ...]:
        return tuple(
            CapacityView(a, s.verdict_text(), tuple(s.probes), s.done, s.plan.param)
            for a, s in self.searches.items()
        )

    def to_json(self) -> dict[str, Any]:
        return {a: s.to_json() for a, s in self.searches.items()}


def capacity_summary(searches: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Each arm's search with what it serves at its capacity (the probe's throughput,
    cost per Mtok and TTFT p95, from its step), and with two arms the ratio of their
    capacities, bracketed by what each search left open (capacity to fails_at)."""
    for arm, r in searches.items():
        cap = r.get("capacity")
        at = [st for st in steps if st.get("arm") == arm and cap is not None
              and _level(st.get("value")) == cap]  # fmt: skip
        if at:
            st = at[-1]
            r["serves"] = {k: st.get(k) for k in
                           ("tokens_per_s", "cost_per_million_tokens", "ttft_p95", "tpot_p50")}  # fmt: skip
    arms = list(searches)
    if len(arms) == 2:
        a, b = (searches[x] for x in arms)
        ca, cb, fa, fb = a.get("capacity"), b.get("capacity"), a.get("fails_at"), b.get("fails_at")
        if ca and cb:
            searches[arms[1]]["ratio_to"] = {
                "baseline": arms[0],
                "ratio": round(cb / ca, 4),
                # the true capacities lie in [capacity, fails_at): the ratio in between
                "bracket": [round(cb / fa, 4) if fa else None, round(fb / ca, 4) if fb else None],
            }
    return searches


def _level(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
