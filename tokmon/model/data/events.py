"""What an event of the run means to the figures, typed: read once from its kind and its
data, each field checked here (a recording's events are untrusted: a step without an arm,
a level that is not a number, are no meaning at all), so that the fold acts on fields and
never on string keys.

An ``Event`` stays what is recorded and listed (its kind, message and data as they were
said); ``meaning`` is what the fold does with it. Kinds without a meaning here (a marker,
an alert, an error burst …) change no figure: they are only logged and shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokmon.model.data.coerce import integer, number
from tokmon.model.data.records import Event

LEVEL_PARAMS = ("concurrency", "rate")  # a ladder over these sets the load's level


@dataclass(frozen=True, slots=True)
class ArmSwitch:
    """``arm``: another arm takes its turn."""

    arm: str


@dataclass(frozen=True, slots=True)
class StepBegins:
    """``step``: a ladder step (or a capacity probe) begins, on ``arm`` at ``value``."""

    step: int
    arm: str
    value: str
    warm_s: float
    param: str
    level: float | None  # the load's new level, where the ladder is over one


@dataclass(frozen=True, slots=True)
class LadderEnds:
    """``ladder``: the ladder is over (``reason``: why it stopped early, if it did)."""

    reason: str | None


@dataclass(frozen=True, slots=True)
class SearchNews:
    """``search``, ``probe``, ``capacity``: a capacity search's plan, a probe, its end."""

    kind: str
    arm: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LevelSet:
    """``level``: the user set the load's level."""

    level: float


@dataclass(frozen=True, slots=True)
class Pause:
    """``pause``: the load paused, or resumed."""

    paused: bool


@dataclass(frozen=True, slots=True)
class ServerNews:
    """``server``: a managed server started, restarts or stopped (``model/judge/managed.py``
    reads the event itself)."""

    event: Event


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """``check``: the arms' greedy outputs compared."""

    result: dict[str, Any]


Meaning = (
    ArmSwitch | StepBegins | LadderEnds | SearchNews | LevelSet | Pause | ServerNews | OutputCheck
)


def meaning(ev: Event) -> Meaning | None:
    """What ``ev`` changes in the figures; None where it changes nothing (or its data
    does not say what it would change)."""
    d, kind = ev.data, ev.kind
    arm = d.get("arm")
    if kind == "arm":
        return ArmSwitch(arm) if isinstance(arm, str) else None
    if kind == "step":
        if not isinstance(arm, str):
            return None
        param = str(d.get("param"))
        level = number(d.get("value")) if param in LEVEL_PARAMS else None
        return StepBegins(integer(d.get("step")), arm, str(d.get("value")),
                          number(d.get("warm_s")) or 0.0, param, level)  # fmt: skip
    if kind in ("search", "probe", "capacity"):
        return SearchNews(kind, arm, d) if isinstance(arm, str) else None
    if kind == "ladder":
        reason = d.get("reason")
        return LadderEnds(reason if isinstance(reason, str) else None)
    if kind == "level":
        level = number(d.get("level"))
        return None if level is None else LevelSet(level)
    if kind == "pause":
        return Pause(ev.message.startswith("paused"))
    if kind == "server":
        return ServerNews(ev)
    if kind == "check":
        result = d.get("result")
        return OutputCheck(result) if isinstance(result, dict) else None
    return None
