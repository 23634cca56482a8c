"""The conductor: the run's schedule — what load it asks for, step by step (a ladder's
fixed steps, or a capacity search's probes, each level chosen from what the last one
measured), and when the arms take turns (every --alternate, for --cycles).

It runs in its own thread beside the live session and acts only through the session's
surface (``Stage``): an event that begins each step (so the fold, live and replayed,
sees the same steps), the engines' commands, and the fold's figures read under the
session's lock. The decisions themselves are the model's (``tokmon.model.judge.ladder``,
``tokmon.model.judge.capacity``); this module only performs them.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from tokmon.model.data.commands import AbortInFlight, StopRun, Switch, TogglePause
from tokmon.model.data.records import BeginStep, SetLevel
from tokmon.model.judge.capacity import (
    CapacityPlan,
    CapacitySearch,
    Probe,
    judge,
    time_limit,
    wilson,
)
from tokmon.model.judge.ladder import Ladder, StepTotals, stop_reason
from tokmon.sources.stage import Stage

POLL_S = 0.25  # how often a running probe's counts are read
DRAIN_S = 60.0  # the longest an overloaded open-loop probe's backlog is waited for
ABORT_WAIT_S = 5.0  # then, for its aborted requests to be counted
RESTART_POLL_S = 0.2  # how often a managed server's restart is checked for its end


def alternate(s: Stage, every_s: float, cycles: int | None) -> None:
    """The arms take turns: a switch every ``every_s`` of measuring (a managed server's
    restart does not count), and a stop after ``cycles`` turns of every arm."""
    while not s.wait(every_s):
        if s.stopping or s.ended():
            return
        if cycles and s.segments_begun >= cycles * len(s.arm_names):
            s.event("stop", f"{cycles} cycles of every arm done")
            s.command(StopRun())
            return
        s.command(Switch())
        while s.restarting() and not s.wait(RESTART_POLL_S):
            pass


def conduct(s: Stage, plan: Ladder | CapacityPlan) -> None:
    if isinstance(plan, CapacityPlan):
        find_capacity(s, plan)
    else:
        run_ladder(s, plan)


def _arms(s: Stage) -> list[str | None]:
    """Each arm in turn where arms take turns on the run; else the run's one schedule."""
    per_arm = len(s.arm_names) > 1 and s.cfg.assign == "switch"
    return list(s.arm_names) if per_arm else [None]


def begin_step(
    s: Stage, i: int, arm: str | None, param: str, value: str, warm_s: float, label: str
) -> None:
    """Step ``i`` at ``value``: its event (what begins it in the figures), then the
    engines' command and, for a load level, the new level."""
    now = perf_counter_ns()
    with s.lock:
        if arm is not None and arm != s.fold.arm:
            s.switch_to(arm, now)
        a = arm or s.fold.arm
        s.event(
            "step",
            label + (f" · arm {a}" if arm is not None else ""),
            {"step": i, "arm": a, "value": value, "warm_s": warm_s, "param": param},
            t=now,
        )
    s.send(
        BeginStep(
            step=i,
            t=now,
            prompt_tokens=value if param == "prompt-tokens" else None,
            max_tokens=value if param == "max-tokens" else None,
            warm_s=warm_s,
        )
    )
    if param in ("concurrency", "rate"):
        s.send(SetLevel(float(value)))


def run_ladder(s: Stage, lad: Ladder) -> None:
    """Each step for every arm in turn; stop early when the server is saturated."""
    n = len(lad.values)
    for i, v in enumerate(lad.values):
        for arm in _arms(s):
            if s.stopping:
                return
            begin_step(s, i, arm, lad.param, v, lad.warmup_s,
                       f"ladder step {i + 1}/{n}: {lad.param} {v}")  # fmt: skip
            if s.wait(lad.step_s) or s.stopping:
                return
        with s.lock:
            now = perf_counter_ns() - s.t_start
            figs = [st.figures(now) for st in s.fold.ladder.steps if st.step == i]
        for f in figs:
            reason = stop_reason(lad, f)
            if reason and i + 1 < n:
                why = f"saturated at {lad.param} {v} ({f.arm}): {reason}"
                end(s, f"ladder stopped: {why}", why)
                return
    end(s, "ladder done", None)


def end(s: Stage, message: str, reason: str | None) -> None:
    """The schedule is over (its event ends the ladder in the figures): the run stops."""
    s.event("ladder", message, {"reason": reason}, t=perf_counter_ns())
    s.command(StopRun())


def _step_of(s: Stage, i: int, arm: str | None) -> StepTotals | None:
    for st in reversed(s.fold.ladder.steps):
        if st.step == i and (arm is None or st.arm == arm):
            return st
    return None


def _why(plan: CapacityPlan, st: StepTotals, n: int) -> str:
    """Which SLO a failing probe missed, by the share of its requests that met it."""
    if not n:
        return "no request ended"
    errors = st.failed
    parts = [f"{name} met by {k / n:.0%}" for name, k in sorted(st.met.items(), key=lambda x: x[1])]
    if errors:
        parts.insert(0, f"{errors} failed")
    return ", ".join(parts[:2]) if parts else f"goodput {st.good / n:.0%}"


def find_capacity(s: Stage, plan: CapacityPlan) -> None:
    """For each arm in turn: double until a probe fails, then bisect, each probe running
    until its goodput interval clears the target (between its minimum and maximum)."""
    i = 0
    for arm in _arms(s):
        search = CapacitySearch(plan)
        name = arm or s.arm_names[0]
        s.event("search", f"capacity search ({name}): {plan.param} at {plan.goodput:.0%} "
                 f"goodput, {plan.slo} — doubling from {plan.fmt(plan.start)} until a level "
                 f"fails, then halving the bracket; each probe up to {plan.requests_for()} requests "
                 f"({plan.scout} while doubling), as long as they take",
                 {"arm": name, "plan": _plan_json(plan)})  # fmt: skip
        while (level := search.next_level()) is not None:
            value = f"{level:g}"
            scouting = search.scouting
            with s.lock:  # how long a request takes so far: the probe's time limit
                e2e = s.fold.totals[name].e2e.median() if name in s.fold.totals else None
            limit = time_limit(plan, level, None if e2e is None else e2e / 1000.0)
            begin_step(s, i, arm, plan.param, value, plan.warm_s,
                       f"capacity probe {i + 1}: {plan.param} {value} — up to "
                       f"{plan.requests_for()} requests" + (f" (≥ {plan.scout} while doubling)"
                       if scouting else "") + f", {limit:.0f} s at most")  # fmt: skip
            t0 = perf_counter_ns() + int(plan.warm_s * 1e9)
            verdict = None
            while verdict is None:
                if s.wait(POLL_S) or s.stopping:
                    return
                with s.lock:
                    st = _step_of(s, i, arm)
                    n = 0 if st is None else st.ok + st.failed
                    good = 0 if st is None else st.good
                    elapsed = max(0.0, (perf_counter_ns() - t0) / 1e9)
                    verdict = judge(plan, n, good, elapsed, limit, scouting)
            assert st is not None or n == 0
            lo, hi = wilson(good, n) if n else (0.0, 0.0)
            probe = Probe(level, n, good, lo, hi, verdict[0], elapsed, verdict[1],
                          _why(plan, st, n) if st is not None and verdict[0] == "fail" else "")  # fmt: skip
            search.add(probe)
            s.event(
                "probe",
                f"probe {plan.fmt(level)} ({name}): {probe.verdict}"
                + (" by its point" if probe.by_point else "")
                + f", goodput {good}/{n} [{lo:.0%}, {hi:.0%}]"
                + (f" — {probe.why}" if probe.why else "")
                + (f"; {left}" if (left := search.left()) else ""),
                {"arm": name, "probe": probe.to_json()},
                t=perf_counter_ns(),
            )
            i += 1
            rate_fail = probe.verdict == "fail" and plan.param == "rate"
            if rate_fail and not drain(s, min(DRAIN_S, limit)):
                return
        s.event("capacity", f"{name}: {search.verdict_text()}",
                 {"arm": name, "result": search.to_json()}, t=perf_counter_ns())  # fmt: skip
    end(s, "capacity search done", None)


def _until_idle(s: Stage, limit_s: float) -> bool | None:
    """Wait until no request is in flight (True), the run stops (False), or ``limit_s``
    passes (None)."""
    t_end = perf_counter_ns() + int(limit_s * 1e9)
    while perf_counter_ns() < t_end:
        if s.wait(POLL_S) or s.stopping:
            return False
        with s.lock:
            if sum(st.in_flight for st in s.fold.statuses.values()) == 0:
                return True
    return None


def drain(s: Stage, limit_s: float) -> bool:
    """After an open-loop probe that failed: sending paused until the backlog it left
    has ended, so the next probe does not inherit it. A backlog still there after
    ``limit_s`` (a probe's longest: an overloaded server's queue can take minutes) is
    aborted, as a client giving up would: its requests are recorded as cancelled, the
    server frees their slots. False: the run is stopping."""
    with s.lock:
        if s.fold.paused:
            return True
    s.command(TogglePause())
    try:
        ended = _until_idle(s, limit_s)
        if ended is None:
            s.command(AbortInFlight(f"the backlog of a failed probe, after {limit_s:g} s"))
            ended = _until_idle(s, ABORT_WAIT_S)  # (its records come with the next flush)
        if ended is False:
            return False
    finally:
        if not s.stopping:
            s.command(TogglePause())  # resumed
    return True


def _plan_json(p: CapacityPlan) -> dict[str, Any]:
    return {
        "param": p.param, "goodput": p.goodput, "slo": p.slo, "start": p.start, "limit": p.limit,
        "min_s": p.min_s, "max_s": p.max_s, "warm_s": p.warm_s, "budget": p.budget,
        "scout": p.scout,
    }  # fmt: skip
