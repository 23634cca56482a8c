"""What a live session's parts (its intake, controls and stage) may use of the session
that owns them: its shared state and its few actions, typed. A protocol, so that the
parts never import the session (``live.py`` imports them: the two would be one room).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from tokmon.model.data.commands import Command as UserCommand
from tokmon.model.data.records import Command
from tokmon.model.folding.fold import Fold
from tokmon.model.workloads.config import RunConfig


class Session(Protocol):
    lock: Any  # (a threading.RLock: its type is not public)
    fold: Fold
    cfg: RunConfig
    arm_names: list[str]
    t_start: int
    t_stop: int | None
    stopping: bool
    segments_begun: int
    engine_errors: list[str]
    finished: threading.Event  # set once the run has ended
    finished_workers: set[int]
    workers_lost: dict[int, str]
    level_step: float | None
    check_n: int
    final: dict[str, Any] | None
    on_finished: Any  # called with the summary when the run has ended
    probes: list[Any]
    engines: Any  # ``fleet.Engines``
    servers: Any  # ``fleet.Servers`` where the run has managed servers, else None
    recorder: Any  # ``recording.writer.Recorder``, or None
    prom: Any  # the --prometheus server, or None

    def send(self, cmd: Command) -> None: ...

    def command(self, cmd: UserCommand) -> str | None: ...

    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None: ...

    def summary(self) -> dict[str, Any]: ...
