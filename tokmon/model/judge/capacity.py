"""The load a server sustains under an SLO, found by search (``--find-capacity``).

Doubling from the first level until a probe fails, then bisecting between the highest
that passed and the lowest that failed, to a resolution of one stream (concurrency) or
5% (rate). Each probe runs until its goodput — the share of its requests that met every
SLO — is clearly on one side of the target: a sequential test on the Wilson 95%
interval, checked as requests come. A probe is sized by evidence, not by the clock: it
runs at least a minimum duration (after the step's warm-up) and at most a budget of
requests (``budget``), its time limit derived from how long the requests take (at 4 s an
answer, 60 requests at one stream are four minutes; at 16 streams, fifteen seconds).
While the search is still doubling (no level has failed yet), a probe whose first
``scout`` requests all met the SLOs passes by its point: the levels that decide the
answer, where it brackets, get the full test. A probe still undecided at its budget is
judged by its point and says so. (A probe of 60 s took 9 requests of long answers and
the search could not finish in minutes.)

Pure: the live session's conductor feeds it each probe's counts and performs what it
decides; the fold rebuilds the same search from the recorded probe events, so a replay
shows the same bracket at every tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tokmon.model.statistics.stats import wilson

MIN_REQUESTS = 10  # a probe decides on no fewer


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    param: str  # "concurrency" or "rate"
    goodput: float = 0.95  # the share of requests that must meet every SLO
    slo: str = ""  # as given (ttft=500,tpot=50), for the header and the summary
    start: float = 1.0
    limit: float = 1024.0  # the search never asks for more
    min_s: float = 5.0  # a probe runs at least this long (after its warm-up)
    # and at most this long (0: as its requests' duration says, ``time_limit``): then its
    # point decides
    max_s: float = 0.0
    warm_s: float = 5.0
    budget: int = 60  # requests a probe takes at most (``requests_for``: never too few)
    scout: int = 5  # while doubling: a probe whose first this many all met passes

    def requests_for(self) -> int:
        """A probe's request budget: ``budget``, and never fewer than a clear pass at
        the target needs (every request met, the Wilson interval's low end at or above
        it: 73 at 95%), with 20 to spare for a failed one among them."""
        n = MIN_REQUESTS
        while wilson(n, n)[0] < self.goodput and n < 100_000:
            n += 1
        return max(self.budget, n + 20)

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


LIMIT_SLACK = 1.5  # a probe's time limit: its budget's expected time, with this slack
LIMIT_FLOOR_S = 30.0  # and never less than this (a first request still in flight)
LIMIT_NONE_S = 600.0  # where no request has ended yet to say how long one takes


def time_limit(plan: CapacityPlan, level: float, request_s: float | None) -> float:
    """How long a probe at ``level`` may run (after its warm-up): the time its request
    budget takes at the requests' measured duration (``request_s``, a median), with
    slack; ``max_s`` where the user set one. At a rate, the budget takes budget / rate."""
    if plan.max_s > 0:
        return plan.max_s
    if request_s is None or request_s <= 0:
        return LIMIT_NONE_S
    per_s = level / request_s if plan.param == "concurrency" else level
    n = plan.requests_for()
    return max(LIMIT_FLOOR_S, min(LIMIT_NONE_S, LIMIT_SLACK * n / max(per_s, 1e-9)))


def judge(
    plan: CapacityPlan,
    n: int,
    good: int,
    elapsed_s: float,
    limit_s: float | None = None,
    scouting: bool = False,
) -> tuple[str, bool] | None:
    """A probe's verdict once it can be given: ("pass" | "fail", by its point), or None
    while it must run on. ``limit_s``: its time limit (``time_limit``); ``scouting``:
    the search is still doubling (a probe whose first ``scout`` requests all met the
    SLOs passes by its point)."""
    if elapsed_s < plan.min_s:
        return None
    if n >= MIN_REQUESTS:
        lo, hi = wilson(good, n)
        if lo >= plan.goodput:
            return "pass", False
        if hi < plan.goodput:
            return "fail", False
    if scouting and n >= plan.scout and good == n:
        return "pass", True
    limit = plan.max_s if limit_s is None else limit_s
    if n >= plan.requests_for() or (limit > 0 and elapsed_s >= limit):
        return ("pass" if n and good / n >= plan.goodput else "fail"), True
    return None


@dataclass
class CapacitySearch:
    plan: CapacityPlan
    probes: list[Probe] = field(default_factory=list)
    done: bool = False
    stopped: str = ""  # why the search ended before it converged

    def _last(self) -> dict[float, Probe]:
        """The last probe of each level (a level confirmed is judged by its last)."""
        return {p.level: p for p in self.probes}

    @property
    def passed(self) -> float | None:
        ok = [lv for lv, p in self._last().items() if p.verdict == "pass"]
        return max(ok) if ok else None

    @property
    def scouting(self) -> bool:
        """Still doubling: no level has failed."""
        return not any(p.verdict == "fail" for p in self.probes)

    @property
    def failed(self) -> float | None:
        """The lowest failing level above the highest that passed."""
        top = self.passed
        bad = [lv for lv, p in self._last().items()
               if p.verdict == "fail" and (top is None or lv > top)]  # fmt: skip
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
            # the capacity found is the answer: where it passed only as a scout (its
            # first requests, while doubling), it is probed once more with the full test
            top = self._last()[lo]
            if top.by_point and top.n < self.plan.requests_for() and not self._confirmed(lo):
                return lo
            self.done = True
            return None
        mid = (lo + hi) / 2
        return float(math.floor(mid)) if self.plan.param == "concurrency" else mid

    def left(self) -> str:
        """What the search has left, in words, once it brackets the capacity: ``about 3
        more probes`` (bisecting to the resolution, and a confirmation of a scout's
        pass); "" while it is still doubling (how far it goes is what it measures)."""
        lo, hi = self.passed, self.failed
        if self.done or lo is None or hi is None:
            return ""
        step = self.plan.resolution(lo)
        n = max(0, math.ceil(math.log2(max((hi - lo) / step, 1.0))))
        top = self._last()[lo]
        n += int(top.by_point and top.n < self.plan.requests_for() and not self._confirmed(lo))
        return "" if n == 0 else f"about {n} more probe{'s' if n > 1 else ''}"

    def _confirmed(self, level: float) -> bool:
        return sum(1 for p in self.probes if p.level == level) > 1

    def add(self, probe: Probe) -> None:
        self.probes.append(probe)

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        cap, fail = self.passed, self.failed
        last = self._last()  # (a level probed twice: its last probe, the confirmation)
        top = last.get(cap) if cap is not None else None
        over = last.get(fail) if fail is not None else None
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
        over = self._last().get(fail) if fail is not None else None
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
    # the probe running: its requests so far and how many met every SLO ("" none)
    progress: str = ""


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

    def views(self, running: tuple[str, int, int] | None = None) -> tuple[CapacityView, ...]:
        """Each arm's search; ``running``: the probe under way (its arm, its requests so
        far, how many met every SLO), shown as its progress."""
        out = []
        for a, s in self.searches.items():
            prog = ""
            if running is not None and running[0] == a and not s.done:
                n, good = running[1], running[2]
                prog = (f"{n} of at most {s.plan.requests_for()} requests, {good} met"
                        if n else "warming up")  # fmt: skip
            out.append(CapacityView(a, s.verdict_text(), tuple(s.probes), s.done,
                                    s.plan.param, prog))  # fmt: skip
        return tuple(out)

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
