"""The live session's surface, as the conductor (``conductor.py``) and the fleet
(``fleet.py``) may use it: its lock and fold, the events it records, the commands it
takes and sends, the engines' counts. One door for both, so neither reaches past it into
the session: every name on it is public, and the session's own parts (``Intake``,
``Controls``) stay behind it."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from tokmon.model.commands import Command as UserCommand
from tokmon.model.config import RunConfig
from tokmon.model.fold import Fold
from tokmon.model.records import Command
from tokmon.sources.controls import Controls
from tokmon.sources.intake import Intake
from tokmon.sources.session import Session


class Stage:
    def __init__(self, session: Session, intake: Intake, controls: Controls) -> None:
        self.session = session
        self.intake = intake
        self.controls = controls

    # what it may read (and the two counts it keeps)
    @property
    def lock(self) -> Any:  # (a threading.RLock: its type is not public)
        return self.session.lock

    @property
    def fold(self) -> Fold:
        return self.session.fold

    @property
    def cfg(self) -> RunConfig:
        return self.session.cfg

    @property
    def arm_names(self) -> list[str]:
        return self.session.arm_names

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
    def engine_errors(self) -> list[str]:
        return self.session.engine_errors

    @property
    def done(self) -> bool:
        return self.session.finished.is_set()

    @property
    def finished(self) -> threading.Event:
        """Set once the run has ended (what a wait elsewhere stops on)."""
        return self.session.finished

    def wait(self, timeout: float | None = None) -> bool:
        return self.session.finished.wait(timeout)

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
