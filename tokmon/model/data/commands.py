"""What a user may ask of a source, typed: the dashboard's keys, an attached view's
keys (the web page's too) and the conductor's own requests are these, never strings
with loose arguments.

A command names itself (``name``): a source lists the names it takes (``commands``),
so that the dashboard hides the keys it cannot serve. A command that came over a
socket was built from a frame (``sources/frames.py`` builds only declared
dataclasses), so each checks its own fields: a crafted frame gets a clear refusal, not
a traceback in the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import ClassVar


class CommandError(ValueError):
    pass


# a field's declared type (its annotation's text) -> what its value may be
_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str, "int": int, "float": (int, float), "bool": bool,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Command:
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            want = _TYPES.get(str(f.type).replace(" | None", ""))
            if v is None and "None" in str(f.type):
                continue
            ok = want is not None and isinstance(v, want)
            if ok and want is not bool and isinstance(v, bool):
                ok = False  # (True is an int to Python, not a number to a user)
            if ok and isinstance(v, float) and not math.isfinite(v):
                ok = False
            if not ok:
                raise CommandError(f"{self.name}: {f.name} must be {f.type}")


# ---------------------------------------------------------------------- a live run
@dataclass(frozen=True, slots=True)
class Switch(Command):
    """The next arm in turn, or ``arm`` (arms that take turns on the run)."""

    name: ClassVar[str] = "switch"
    arm: str | None = None


@dataclass(frozen=True, slots=True)
class TogglePause(Command):
    name: ClassVar[str] = "pause"


@dataclass(frozen=True, slots=True)
class ChangeLevel(Command):
    """One step more (``sign`` 1) or less (-1) load, or the load ``to``."""

    name: ClassVar[str] = "level"
    sign: int = 1
    to: float | None = None


@dataclass(frozen=True, slots=True)
class Marker(Command):
    name: ClassVar[str] = "marker"
    note: str = "marker"


@dataclass(frozen=True, slots=True)
class StopRun(Command):
    """Drain the requests in flight, then stop; ``hard`` (or a second stop): now."""

    name: ClassVar[str] = "stop"
    hard: bool = False


@dataclass(frozen=True, slots=True)
class AbortInFlight(Command):
    """The conductor's, after an overloaded open-loop probe: cancel what is in flight."""

    name: ClassVar[str] = "abort"
    why: str = "aborted"


@dataclass(frozen=True, slots=True)
class ToggleRecord(Command):
    name: ClassVar[str] = "record"


@dataclass(frozen=True, slots=True)
class Check(Command):
    """A quality pass, and the outputs of every arm compared (two arms or more)."""

    name: ClassVar[str] = "check"


# ---------------------------------------------------------------------- a replay
@dataclass(frozen=True, slots=True)
class Play(Command):
    name: ClassVar[str] = "play"


@dataclass(frozen=True, slots=True)
class Speed(Command):
    name: ClassVar[str] = "speed"
    step: int = 1


@dataclass(frozen=True, slots=True)
class Seek(Command):
    name: ClassVar[str] = "seek"
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Jump(Command):
    """To the next event (``direction`` 1) or the one before (-1)."""

    name: ClassVar[str] = "jump"
    direction: int = 1


@dataclass(frozen=True, slots=True)
class End(Command):
    name: ClassVar[str] = "end"


LIVE = frozenset(c.name for c in (Switch, TogglePause, ChangeLevel, Marker, StopRun,
                                  ToggleRecord, Check))  # fmt: skip
REPLAY = frozenset(c.name for c in (Play, Speed, Seek, Jump, End))


def checked(obj: object) -> Command:
    """A command that came from outside (a frame builds a dataclass without its
    ``__init__``): its fields checked again, else CommandError."""
    if not isinstance(obj, Command) or type(obj) is Command:
        raise CommandError("not a command")
    return replace(obj)
