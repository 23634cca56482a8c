"""``tokmon run --repeat N``: the same load N times, each a run of its own, then the
figures over runs (the unit of replication is the run: ``model/judge/runs.py``).

Each run is whole: it starts its own managed servers (``serve=`` arms), warms up, and
writes its own files — ``--record r.jsonl`` becomes ``r-1.jsonl`` … ``r-N.jsonl`` (each
one an ordinary recording, so ``tokmon report r-*.jsonl`` gives the same table later) and
``--summary-json s.json`` becomes ``s-1.json`` … with ``s.json`` holding the table over
runs. Every run sends the same prompts (one seed for all, printed). ``{run}`` in a serve
command is the run's number, for a server option that should differ by run (a seed).
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from pathlib import Path
from typing import Any

from tokmon.cli.options import RunOptions
from tokmon.cli.parser import RunFailed, UsageError
from tokmon.cli.plan import dur
from tokmon.cli.run import build_run, run_session
from tokmon.cli.shutdown import SHUTDOWN
from tokmon.engine.preflight import PreflightError
from tokmon.model.statistics.words import count
from tokmon.textsafe import dumps, say, write_text

RUN = "{run}"  # in a serve command: the run's number (1…N)


def cooldown_of(text: str | None, managed: bool) -> float:
    """``--between``: ``restart``, ``cooldown=30s``, or both; the seconds to wait between
    runs. Every run starts its own servers, so ``restart`` only says so, and is refused
    where no arm has one."""
    cool = 0.0
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        if part == "restart":
            if not managed:
                raise UsageError("--between restart restarts the servers of serve= arms; "
                                 "there are none (use cooldown=DURATION to wait between runs)")  # fmt: skip
        elif part.startswith("cooldown="):
            cool = dur("--between cooldown", part.partition("=")[2]) or 0.0
        else:
            raise UsageError(f"--between: expected restart or cooldown=DURATION, got {part!r}")
    return cool


def numbered(path: str | None, i: int) -> str | None:
    """``r.jsonl.gz`` → ``r-3.jsonl.gz``: the run's number before the first suffix."""
    if not path:
        return None
    p = Path(path)
    stem, dot, suffix = p.name.partition(".")
    return str(p.with_name(f"{stem}-{i}{dot}{suffix}"))


def _ends_by_itself(o: RunOptions) -> bool:
    return any((o.duration, o.requests, o.quality, o.ladder, o.cycles, o.trace,
                o.find_capacity))  # fmt: skip


def run_repeated(args: RunOptions, file_arms: list[Any]) -> int:
    from tokmon.model.judge.runs import between_runs, not_whole
    from tokmon.report.runs_text import runs_text

    n = args.repeat or 1
    managed = any("serve=" in a for a in args.arm) or any(a.serve for a in file_arms)
    cooldown = cooldown_of(args.between, managed)
    if not (args.headless or not sys.stdout.isatty()):
        raise UsageError("--repeat runs headless (the dashboard watches one run): add --headless")
    if not _ends_by_itself(args):
        raise UsageError("--repeat: each run must end by itself: give --duration or --requests")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    say(f"tokmon: {n} runs of the same load (seed {seed})"
        + (f", {cooldown:g} s apart" if cooldown else "")
        + (", each starting its own servers" if managed else ""), err=True, flush=True)  # fmt: skip
    summaries: list[dict[str, Any]] = []
    names: list[str] = []
    codes: list[int] = []
    left_out: list[str] = []  # runs cut short or ended by a failure: not compared
    failed = ""
    for i in range(1, n + 1):
        a = dataclasses.replace(
            args,
            seed=seed,
            record=numbered(args.record, i),
            summary_json=numbered(args.summary_json, i),
            arm=tuple(x.replace(RUN, str(i)) for x in args.arm),
        )
        arms = [dataclasses.replace(x, serve=tuple(w.replace(RUN, str(i)) for w in x.serve))
                for x in file_arms]  # fmt: skip
        say(f"tokmon: run {i} of {n}", err=True, flush=True)
        name = Path(a.record).name if a.record else f"run {i}"
        got: list[dict[str, Any]] = []
        try:
            code = run_session(build_run(a, arms), on_summary=got.append)
        except KeyboardInterrupt:  # stopped before the run began (a server starting)
            code = SHUTDOWN.code or 130
        except (RunFailed, PreflightError, UsageError) as e:
            # a run that cannot start ends the repeat: the runs done are still reported
            failed, code = f"run {i} of {n}: {e}", 1
        codes.append(code)
        broken = not_whole(got[0]) if got else ""
        if got and code == 0 and not broken:
            summaries.append(got[0])
            names.append(name)
        elif got or code:
            why = (f"stopped by {SHUTDOWN.name}" if SHUTDOWN.requested
                   else "it did not start" if failed else broken or "it ended with an error")  # fmt: skip
            left_out.append(f"{name} ({why})")
        if SHUTDOWN.requested or failed:
            say(f"tokmon: stopped at run {i} of {n}" + (f": {failed}" if failed else ""),
                err=True)  # fmt: skip
            break
        if i < n and cooldown:
            with SHUTDOWN.phase("ending the cooldown", lambda hard: None):
                # (said once its phase is in force: a signal right after the words, before
                # the phase began, was a KeyboardInterrupt and no table over runs)
                say(f"tokmon: cooling down for {cooldown:g} s", err=True, flush=True)
                if SHUTDOWN.wait(cooldown):
                    say(f"tokmon: stopped after run {i} of {n}, in the cooldown", err=True)
                    break
    if len(summaries) >= 2:
        data = between_runs(summaries)
        data["seed"] = seed
        data["files"] = names
        data["left_out"] = left_out
        say("")
        say(runs_text(data, names).rstrip("\n"), fit=True)
        if args.summary_json:
            try:
                write_text(args.summary_json, dumps(data, indent=2) + "\n")
            except OSError as e:
                say(f"tokmon: cannot write {args.summary_json}: {e.strerror or e}", err=True)
                return 1
    else:
        say(
            f"tokmon: {count(len(summaries), 'run')} finished whole: nothing to compare over runs"
            + (f" (left out: {'; '.join(left_out)})" if left_out else ""),
            err=True,
        )
    if SHUTDOWN.requested:
        return SHUTDOWN.code
    return max(codes) if any(codes) else 0
