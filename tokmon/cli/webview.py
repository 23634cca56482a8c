"""``--web HOST:PORT``: the dashboard in a browser, beside the terminal's.

A live run serves its snapshots to attached views (``tokmon view --attach``); the web
server (textual-serve, in its own process group) starts one such view per browser tab.
A replay's page runs its own replay of the file. No web process outlives tokmon: it is
stopped at the end, and a watchdog stops it if tokmon is killed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from tokmon.cli.parser import UsageError
from tokmon.textsafe import say


@dataclass
class WebView:
    proc: subprocess.Popen[bytes]
    watchdog: Any
    view: Any  # the ViewServer of a live run, or None
    url: str

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.watchdog.tell("-", self.proc.pid)
        self.watchdog.close()
        if self.view is not None:
            self.view.close()


def start_web(
    listen: tuple[str, int],
    page_command: list[str],
    source: Any = None,
    title: str = "tokmon",
    control: bool = False,
) -> WebView:
    """Serve ``page_command`` (a live run: an attached view of ``source``, read-only
    unless ``control``) on ``listen``."""
    from tokmon.sources.managed import Watchdog, free_port, port_free

    host, port = listen
    if port == 0:
        port = free_port()
    elif not port_free(port):
        raise UsageError(f"--web: port {port} is in use")
    view = None
    if source is not None:
        from tokmon.sources.remote import ViewServer

        view = ViewServer(source, control=control)
        page_command = [*page_command, "--attach", view.path]
    # every page needs the token, loopback too (another user of this machine can reach
    # loopback); it goes to the server on a pipe, never on its command line
    token = secrets.token_urlsafe(18)
    cmd = [sys.executable, "-m", "tokmon.ui.web", "--listen", f"{host}:{port}", "--title", title]
    proc = subprocess.Popen(
        [*cmd, "--", *page_command],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,  # stopped whole, with the views it started
    )
    assert proc.stdin is not None
    proc.stdin.write(token.encode() + b"\n")
    proc.stdin.close()
    watchdog = Watchdog(grace_s=3.0)
    watchdog.tell("+", proc.pid)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/?token={token}"
    say(f"tokmon: the dashboard in a browser: {url}", err=True, flush=True)
    say(
        "tokmon: (the token is shown once; anyone with this URL sees the run"
        + (" and acts on it" if control else "; read-only: --web-control lets pages act")
        + ")",
        err=True,
    )
    return WebView(proc, watchdog, view, url)
