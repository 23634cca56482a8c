"""The live session's surface, as the conductor (``conductor.py``) and the fleet
(``fleet.py``) may use it: its lock and fold, the events it records, the commands it
takes and sends, the engines' counts. One door for both, so neither reaches past it into
the session: every name on it is public, and the session's own parts (``Intake``,
``Controls``) stay behind it."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from tokmon.model.data.commands import Command as UserCommand
from tokmon.model.data.records import Command
from tokmon.model.folding.fold import Fold
from tokmon.model.workloads.config import RunConfig
from tokmon.sources.controls import Controls
from tokmon.sources.intake import Intake
from tokmon.sources.session import Session


class Stage:
    def __init__(self, session: Session, intake: Intake, controls: Controls) -> None:
        self.session = session
        self.intake = intake
        self.controls = controls
        # what it may read: the session's own objects, never replaced while it runs
        self.lock: Any = session.lock  # (a threading.RLock: its type is not public)
        self.fold: Fold = session.fold
        self.cfg: RunConfig = session.cfg
        self.arm_names: list[str] = session.arm_names
        self.engine_errors: list[str] = session.engine_errors
        self.finished: threading.Event = session.finished  # set once the run has ended

    # what changes as it runs (and the count of segments it keeps)
    @property
    def t_start(self) -> int:
        return self.session.t_start

    @property
    def stopping(self) -> bool:
        return self.session.stopping

    @property
    def segments_begun(self) -> int:
        return self.session.segments_begun

    @segments_begun.setter
    def segments_begun(self, n: int) -> None:
        self.session.segments_begun = n

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def ended(self) -> bool:
        """The final tick is folded: no fact comes after it."""
        return self.intake.ended

    # what it may do
    def event(
        self, kind: str, message: str, data: dict[str, Any] | None = None, t: int | None = None
    ) -> None:
        self.intake.event(kind, message, data, t)

    def send(self, cmd: Command) -> None:
        self.session.send(cmd)

    def switch_to(self, arm: str, now: int) -> None:
        self.controls.switch_to(arm, now)

    def command(self, cmd: UserCommand) -> str | None:
        return self.session.command(cmd)

    # the managed servers and the engines
    def restarting(self) -> bool:
        servers = self.session.servers
        return servers is not None and servers.restarting.is_set()

    def expect_restart(self, url: str) -> None:
        """The managed server at ``url`` is about to be restarted: the probe of its
        metrics takes the counters going back for that restart, not one detected."""
        where = urlsplit(url).netloc
        for pr in self.session.probes:
            expect = getattr(pr, "expect_restart", None)
            if expect is not None and urlsplit(str(getattr(pr, "url", ""))).netloc == where:
                expect()

    def in_flight(self) -> int | None:
        return self.intake.in_flight()

    def paused_at(self, token: int) -> int | None:
        return self.intake.paused_at(token)
