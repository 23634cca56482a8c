"""The live session's surface, as the conductor (``conductor.py``) and the fleet
(``fleet.py``) may use it: its lock and fold, the events it records, the commands it
takes and sends. One protocol for both, so neither reaches past it into the session:
every name on it is public."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from tokmon.model.commands import Command as UserCommand
from tokmon.model.config import RunConfig
from tokmon.model.fold import Fold
from tokmon.model.records import Command


class Stage(Protocol):
    lock: Any  # (a threading.RLock: its type is not public)
    fold: Fold
    cfg: RunConfig
    arm_names: list[str]
    t_start: int
    stopping: bool
    segments_begun: int
    engine_errors: list[str]

    @property
    def done(self) -> bool: ...

    @property
    def finished(self) -> threading.Event: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None: ...

    def send(self, cmd: Command) -> None: ...

    def switch_to(self, arm: str, now: int) -> None: ...

    def command(self, cmd: UserCommand) -> str | None: ...

    def ended(self) -> bool: ...

    def restarting(self) -> bool: ...

    def expect_restart(self, url: str) -> None: ...

    def in_flight(self) -> int | None: ...

    def paused_at(self, token: int) -> int | None: ...
