"""The user's commands to a live session (keys on the dashboard, the web view's buttons,
``tokmon ctl``): each typed command told to the engines and folded in as its event.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

from tokmon.model.data.commands import (
    AbortInFlight,
    ChangeLevel,
    Check,
    Marker,
    StopRun,
    Switch,
    TogglePause,
    ToggleRecord,
)
from tokmon.model.data.commands import Command as UserCommand
from tokmon.model.data.records import Abort, Pause, QualityPass, SetLevel, Stop, SwitchArm
from tokmon.model.workloads.questions import QUALITY_PASS
from tokmon.model.workloads.workload import load_text
from tokmon.sources.session import Session


class Controls:
    def __init__(self, s: Session) -> None:
        self.s = s
        self.checking = False  # an output check is running

    def command(self, cmd: UserCommand) -> str | None:
        s = self.s
        with s.lock:
            now = perf_counter_ns()
            match cmd:
                case Switch():
                    return self._switch(cmd.arm, now)
                case TogglePause():
                    paused = not s.fold.paused  # the event below sets it (the fold)
                    s.send(Pause(paused))
                    s.event("pause", "paused sending" if paused else "resumed sending")
                    return "paused" if paused else "resumed"
                case ChangeLevel():
                    return self._change_level(cmd)
                case Marker():
                    note = cmd.note or "marker"
                    s.event("marker", note)
                    return f"marker: {note}"
                case StopRun():
                    hard = cmd.hard or s.stopping  # a second stop does not wait any longer
                    s.stopping = True
                    s.send(Stop(hard))
                    s.event(
                        "stop", "stopping now" if hard else "stopping: draining in-flight requests"
                    )
                    return "stopping"
                case AbortInFlight():
                    s.send(Abort(cmd.why))
                    s.event("abort", f"in-flight requests aborted: {cmd.why}")
                    return "aborted"
                case ToggleRecord():
                    if s.recorder is None:
                        return "start tokmon with --record FILE to record"
                    if s.recorder.active:  # (the event is the file's last line until resumed)
                        s.event("recording", "recording paused")
                        return str(s.recorder.toggle())
                    out = s.recorder.toggle()
                    s.event("recording", "recording resumed")
                    return str(out)
                case Check():
                    said = [self.quality_pass()]
                    if len(s.arm_names) > 1:  # (one arm: nothing to compare outputs with)
                        said.append(self.output_check())
                    return " · ".join(said)
        return None

    def switch_to(self, arm: str, now: int) -> None:
        """Tell the engines, then fold the switch in through its event."""
        seg = self.s.fold.turns.next_segment()
        self.s.send(SwitchArm(arm, seg, now))
        self.s.event("arm", f"arm → {arm}", {"arm": arm, "segment": seg}, t=now)

    def _switch(self, target: str | None, now: int) -> str | None:
        s = self.s
        names = s.arm_names
        if len(names) < 2 or s.cfg.assign != "switch":
            return (
                "only one arm: nothing to switch"
                if len(names) < 2
                else f"arms are assigned per request ({s.cfg.assign})"
            )
        cur = s.fold.arm
        i = names.index(cur)
        turns = [names[(i + k) % len(names)] for k in range(1, len(names) + 1)]
        skipped = set() if s.servers is None else s.servers.skipped
        new = target if target in names else next((a for a in turns if a not in skipped), cur)
        if new == cur:
            return None
        if s.servers is not None and s.servers.serves(cur, new):
            return s.servers.begin_restart(cur, new)
        self.switch_to(new, now)
        s.segments_begun += 1
        return f"arm → {new}"

    def _change_level(self, cmd: ChangeLevel) -> str:
        s = self.s
        if s.cfg.mode == "trace":
            return "the trace sets the load (--trace-speed)"
        if cmd.to is not None:
            new_level = float(cmd.to)
        else:
            step = s.level_step or (
                max(1.0, round(s.fold.level * 0.25))
                if s.cfg.mode == "concurrency"
                else max(0.1, s.fold.level * 0.25)
            )
            new_level = s.fold.level + cmd.sign * step
        if s.cfg.mode == "concurrency":
            new_level = float(min(max(1, round(new_level)), s.cfg.max_concurrency))
        else:
            new_level = max(0.01, round(new_level, 3))
        s.send(SetLevel(new_level))
        s.event("level", f"load → {load_text(s.cfg.mode, new_level)}", {"level": new_level})
        return f"load → {load_text(s.cfg.mode, s.fold.level)}"

    def quality_pass(self) -> str:
        """`o`: the next QUALITY_PASS requests of every arm ask questions with known
        answers (in the engine, as part of the load: their speed counts too). Where the
        arms take turns, the arm in force is asked now and each other one when its turn
        comes (the pass once asked only the arm in force)."""
        s = self.s
        arms = tuple(s.arm_names)
        n = QUALITY_PASS
        s.send(QualityPass(n, arms))
        later = [a for a in arms if a != s.fold.arm] if s.cfg.assign == "switch" else []
        when = f"; {', '.join(later)} when its turn comes" if later else ""
        s.event("quality", f"quality pass: the next {n} requests of each arm ask "
                f"questions with known answers ({', '.join(arms)}{when})",
                {"n": n * len(arms), "arms": list(arms)})  # fmt: skip
        return f"quality pass: {n} questions" + (" of each arm" if len(arms) > 1 else "")

    def output_check(self) -> str:
        """Greedy outputs of every arm compared, in a thread (never in the engine)."""
        s = self.s
        if len(s.arm_names) < 2:
            return "output check needs two arms"
        if self.checking:
            return "output check already running"
        self.checking = True
        n = s.check_n or 10

        def run() -> None:
            from tokmon.engine.outputcheck import check_outputs
            from tokmon.model.judge.summary import describe_output_check

            try:
                hdr = dict(s.cfg.headers)
                if s.cfg.api_key:
                    hdr["authorization"] = f"Bearer {s.cfg.api_key}"
                res = check_outputs(list(s.cfg.arms), n, headers=hdr, insecure=s.cfg.insecure)
                s.event("check", "output check: " + describe_output_check(res), {"result": res})
            except Exception as e:  # reported, never fatal
                s.event("check", f"output check failed: {type(e).__name__}: {e}")
            finally:
                self.checking = False

        threading.Thread(target=run, name="tokmon-outputcheck", daemon=True).start()
        s.event("check", f"output check started: {n} greedy prompts per arm")
        return f"output check: {n} prompts per arm"
