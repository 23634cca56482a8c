"""One shutdown: SIGINT, SIGTERM and SIGHUP handled the same in every phase of a command.

A run's phases — starting a managed server, the pre-flight, the run itself, a cooldown
between repeated runs — each say how they stop (``phase``). The first signal stops the
phase in force gently (a run drains its requests in flight and writes everything; a
cooldown ends; a server that is starting is stopped) and the command then ends with
what finished written; a second stops at once. A phase that names no way to stop (a
request to a server that has not answered yet) is interrupted as Ctrl-C interrupts
Python, whatever the signal was. The exit code says which signal it was (128 + its
number: 130, 143, 129), as a shell says it.

Before, SIGTERM between two repeated runs or while a server started killed tokmon
outright: no summary, no table over runs, a 0-byte recording.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tokmon.textsafe import say

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class Shutdown:
    """The process's signal handling while a command runs (there is one: ``SHUTDOWN``)."""

    def __init__(self) -> None:
        self.code = 0  # the exit code of the first signal; 0: none yet
        self.name = ""
        self.signals = 0
        self.stopped = threading.Event()
        # the phases in force, innermost last: (what a stop does, in words; how; whether
        # the phase around it is stopped too)
        self._phases: list[tuple[str, Callable[[bool], None] | None, bool]] = []
        self._old: dict[signal.Signals, Any] = {}
        self._installed = 0

    @property
    def requested(self) -> bool:
        return self.code != 0

    def reset(self) -> None:
        """For a new command in the same process (the tests)."""
        self.code, self.name, self.signals = 0, "", 0
        self.stopped.clear()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Shutdown]:
        """The handlers in place for the block (nested blocks share them); outside the
        main thread, where Python allows none, nothing is installed."""
        main = threading.current_thread() is threading.main_thread()
        if main and not self._installed:
            self._old = {sig: signal.signal(sig, self._on_signal) for sig in SIGNAL_EXIT}
        self._installed += main
        try:
            yield self
        finally:
            self._installed -= main
            if main and not self._installed:
                for sig, h in self._old.items():
                    signal.signal(sig, h)
                self._old = {}

    @contextlib.contextmanager
    def phase(
        self, what: str, stop: Callable[[bool], None] | None, outer: bool = False
    ) -> Iterator[None]:
        """A phase of the command: a signal calls ``stop(hard)`` (hard: the second
        signal), and ``what`` says what the first one does. ``stop`` None: the phase is
        interrupted (KeyboardInterrupt). ``outer``: the phase around it is stopped too,
        after it (the dashboard closes, and the run it shows drains). A phase that begins
        after a signal stops at once."""
        with self.installed():
            self._phases.append((what, stop, outer))
            try:
                if self.requested and stop is not None:
                    stop(self.signals > 1)
                yield
            finally:
                self._phases.pop()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True where a signal came (the sleep ended early)."""
        return self.stopped.wait(seconds)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals += 1
        sig = signal.Signals(signum)
        if self.signals == 1:
            self.code = SIGNAL_EXIT.get(sig, 128 + signum)
            self.name = sig.name
        self.stopped.set()
        # the innermost phase, and those around it that it names (``outer``)
        chain = []
        for what, stop, outer in reversed(self._phases or [("", None, False)]):
            chain.append((what, stop))
            if not outer:
                break
        if chain[0][1] is None:
            raise KeyboardInterrupt(sig.name)
        if self.signals == 1:
            said = ", ".join(w for w, s in chain if s is not None)
            say(f"\ntokmon: stopping ({sig.name}) — {said} (Ctrl-C again to stop now)", err=True)
        for _w, stop in chain:
            if stop is not None:
                stop(self.signals > 1)


def run_dashboard(source: Any, theme: str | None = None, fps: float = 4.0) -> bool:
    """The dashboard until it is quit, or until a signal (SIGHUP: the SSH session or tmux
    window dropped; SIGTERM) closes it, after the phase around it has begun its stop (a
    run drains): nobody is left to press q. (Left open, a dashboard on a closed terminal
    spun a core for as long as nobody killed it.) True when it was ended by Ctrl-C."""
    from tokmon.ui.app import DashboardApp

    app = DashboardApp(source, theme=theme, fps=fps)
    with SHUTDOWN.phase("closing the dashboard", app.close_soon, outer=True):
        app.run()
    return app.interrupted > 0


SHUTDOWN = Shutdown()
