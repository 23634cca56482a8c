"""Servers tokmon starts itself: one GPU holds one instance, so the arms take turns.

A managed server runs its own command (no shell), in its own process group, its output
in a log file beside the recording. tokmon waits for it to be ready (``/health``, then
``/v1/models``), warms it, measures, and stops it (SIGTERM to the group, SIGKILL after a
timeout) before the next arm's server starts on the same port, once the port is free and
the GPU memory is back where it was.

No server outlives tokmon: a watchdog process holds one end of a pipe whose other end
only tokmon holds; when tokmon ends, however it ends (``kill -9`` included), the pipe
closes and the watchdog stops every server group it was told of.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tokmon.bodies import fetch
from tokmon.gate import loads
from tokmon.model.env.redact import redact_argv
from tokmon.model.workloads.arms import PORT, Arm
from tokmon.textsafe import open_private


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): a server that
    double-forks to leave its group is reparented here, not to init, so it can still be
    found and stopped. False where the system has no such thing."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def own_descendants() -> set[int]:
    import psutil

    try:
        return {c.pid for c in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def port_holders(port: int) -> list[int]:
    """The processes listening on a loopback TCP port (those this user may see)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted(
        {
            c.pid
            for c in conns
            if c.pid is not None
            and c.laddr
            and c.laddr.port == port
            and c.status == psutil.CONN_LISTEN
        }
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on the port and it can be bound again (as servers bind: with
    SO_REUSEADDR, so the old connections' TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ServerFailed(Exception):
    """A managed server exited, or was not ready in time: the message has its log's tail."""


_WATCHDOG = r"""
import os, signal, sys, time
groups = set()
for line in sys.stdin:
    w = line.split()
    if len(w) == 2 and w[0] in ("+", "-"):
        (groups.add if w[0] == "+" else groups.discard)(int(w[1]))
for sig in (signal.SIGTERM, signal.SIGKILL):
    for g in groups:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    if sig == signal.SIGTERM and groups:
        time.sleep(float(sys.argv[1]))
"""


class Watchdog:
    """Stops every server group it was told of when tokmon's end of its pipe closes."""

    def __init__(self, grace_s: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(grace_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # not in tokmon's group: a Ctrl-C does not reach it
        )
        self.lock = threading.Lock()

    def tell(self, sign: str, pgid: int) -> None:
        with self.lock, contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{sign} {pgid}\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2)


@dataclass(frozen=True)
class Started:
    """A server that became ready before the run: how long it took, and its model."""

    arm: str
    ready_s: float
    model: str


class ManagedServer:
    """One arm's server command, started and stopped as the arms take turns."""

    def __init__(self, arm: Arm, port: int, log_path: Path, watchdog: Watchdog) -> None:
        self.arm = arm
        self.port = port
        self.argv = [a.replace(PORT, str(port)) for a in arm.serve]
        self.log_path = log_path
        self.watchdog = watchdog
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # what a stop found still holding the port: (pid, killed) of each process
        self.strays: list[tuple[int, bool]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        if not port_free(self.port):
            # never a server on a port someone else holds: its answers would be theirs
            who = ", ".join(map(str, port_holders(self.port))) or "another process"
            raise ServerFailed(f"port {self.port} is held by {who}; arm {self.arm.name}'s "
                               "server was not started on it")  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open_private(self.log_path, append=True)  # (the child holds it)
        log.write(f"\n--- tokmon: starting {' '.join(redact_argv(self.argv))}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=0,  # its own group, to stop it whole
            )
        except OSError as e:
            raise ServerFailed(f"cannot start {self.argv[0]!r}: {e.strerror or e}") from None
        finally:
            log.close()
        self.watchdog.tell("+", self.proc.pid)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 12) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 16384))
                lines: deque[str] = deque(
                    (ln.decode("utf-8", "replace").rstrip() for ln in f), maxlen=n
                )
        except OSError:
            return ""
        return "\n".join(x for x in lines if x)

    def wait_ready(
        self,
        timeout_s: float,
        headers: dict[str, str],
        on_wait: Callable[[float], None] | None = None,
        stop: threading.Event | None = None,
    ) -> str:
        """Until ``/health`` and then ``/v1/models`` answer 200: the first model's id."""
        t0 = time.monotonic()
        root = f"http://127.0.0.1:{self.port}"
        with httpx.Client(timeout=2.0, trust_env=False) as c:
            while True:
                waited = time.monotonic() - t0
                if not self.alive():
                    code = self.proc.returncode if self.proc is not None else None
                    raise ServerFailed(
                        f"the server of arm {self.arm.name} exited (code {code}) before it "
                        f"was ready; its log ends:\n{self.log_tail()}"
                    )
                if waited > timeout_s:
                    raise ServerFailed(
                        f"the server of arm {self.arm.name} was not ready after "
                        f"{timeout_s:g} s; its log ends:\n{self.log_tail()}"
                    )
                if stop is not None and stop.is_set():
                    raise ServerFailed("stopped while waiting for the server")
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    h = fetch(c, "GET", root + "/health", headers=headers)
                    if h.status_code in (200, 404):  # 404: a server without /health
                        m = fetch(c, "GET", root + "/v1/models", headers=headers)
                        if m.status_code == 200:
                            data = loads(m.content).get("data") or [{}]
                            return str(data[0].get("id") or "")
                if on_wait is not None:
                    on_wait(waited)
                time.sleep(0.25)

    def stop(self, timeout_s: float = 30.0) -> float:
        """SIGTERM to the group, SIGKILL after ``timeout_s``; then until the port is free.
        Seconds it took."""
        t0 = time.monotonic()
        p = self.proc
        if p is None:
            return 0.0
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        # the group may hold children the leader did not wait for
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        self.watchdog.tell("-", p.pid)
        self.proc = None
        deadline = time.monotonic() + 5
        while not port_free(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not port_free(self.port):
            # a server that daemonised (forked, setsid, forked again) left its group
            # and is still listening: tokmon is its subreaper, so it is ours to stop
            for pid in port_holders(self.port):
                mine = pid in own_descendants()
                if mine:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                self.strays.append((pid, mine))
            deadline = time.monotonic() + 5
            while not port_free(self.port) and time.monotonic() < deadline:
                time.sleep(0.1)
        return time.monotonic() - t0


def warm(url: str, model: str, headers: dict[str, str], n: int, endpoint: str) -> int:
    """``n`` short requests to a server that just became ready (its first requests
    compile, allocate, fill caches): how many answered. Not measured."""
    ok = 0
    path = "/chat/completions" if endpoint != "completions" else "/completions"
    with httpx.Client(timeout=120.0, trust_env=False) as c:
        for i in range(n):
            body: dict[str, Any] = {"model": model, "max_tokens": 8, "temperature": 0}
            text = f"warm-up {i}: say something short"
            if endpoint == "completions":
                body["prompt"] = text
            else:
                body["messages"] = [{"role": "user", "content": text}]
            with contextlib.suppress(httpx.HTTPError, ValueError):
                ok += fetch(c, "POST", url + path, json=body, headers=headers).status_code == 200
    return ok


def gpu_memory_settled(
    read_used: Callable[[], float | None], baseline: float | None, timeout_s: float
) -> bool:
    """Until the GPU memory in use is back near what it was before the first server
    started (a stopped server's memory is freed after its process ends)."""
    if baseline is None:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        used = read_used()
        if used is None or used <= baseline * 1.05 + 0.5:  # GiB
            return True
        time.sleep(0.5)
    return False


class Managed:
    """The managed servers of a run and how to treat them (one port: one GPU holds one
    instance; the arms take turns on it)."""

    def __init__(
        self,
        arms: list[Arm],
        log_dir: Path,
        headers: dict[str, str],
        *,
        ready_timeout_s: float = 600.0,
        stop_timeout_s: float = 30.0,
        drain_s: float = 60.0,
        warmup_n: int = 4,
        on_failure: str = "stop",
        endpoint: str = "chat",
        gpu_used: Callable[[], float | None] | None = None,
        survey: Callable[[str], Any] | None = None,
        shown_args: tuple[str, ...] = (),
    ) -> None:
        self.shown_args = shown_args
        become_subreaper()
        self.watchdog = Watchdog()
        self.port = free_port()
        self.servers = {
            a.name: ManagedServer(
                a, self.port, log_dir / f"tokmon-server-{a.name}.log", self.watchdog
            )
            for a in arms
            if a.serve
        }
        self.headers = headers
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.drain_s = drain_s
        self.warmup_n = warmup_n
        self.on_failure = on_failure
        self.endpoint = endpoint
        self.gpu_used = gpu_used
        self.gpu_baseline = gpu_used() if gpu_used is not None else None
        self.survey = survey
        self.started: list[Started] = []  # before the run
        self._envs: dict[str, Any] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start_first(self, arm: str, on_wait: Callable[[float], None] | None = None) -> str:
        """The first arm's server, before the run (its model resolves the pre-flight)."""
        srv = self.servers[arm]
        t0 = time.monotonic()
        try:
            srv.start()
            model = srv.wait_ready(self.ready_timeout_s, self.headers, on_wait)
        except ServerFailed:
            srv.stop(self.stop_timeout_s)
            raise
        ready = time.monotonic() - t0
        self.warm(srv.url, srv.arm.model or model, arm)
        self.started.append(Started(arm, ready, model))
        return srv.arm.model or model

    def warm(self, url: str, model: str, arm: str) -> int:
        return warm(
            url, model, self.headers, self.warmup_n, self.servers[arm].arm.endpoint or self.endpoint
        )

    def command_of(self, arm: str) -> list[str]:
        return redact_argv(self.servers[arm].argv, self.shown_args)

    def environment(self, arm: str, url: str) -> dict[str, Any] | None:
        """The server's environment record, once per arm (its first start)."""
        if self.survey is None:
            return None
        if arm not in self._envs:
            try:
                self._envs[arm] = self.survey(url).to_json(raw=False)
            except Exception:  # a record that cannot be made is left out, never fatal
                self._envs[arm] = None
        return self._envs[arm]

    def gpu_settled(self) -> bool:
        if self.gpu_used is None:
            return True
        return gpu_memory_settled(self.gpu_used, self.gpu_baseline, 60.0)

    def close(self) -> None:
        """Stop every server still running; then the watchdog (which stops any left)."""
        for srv in self.servers.values():
            if srv.proc is not None:
                srv.stop(self.stop_timeout_s)
        self.watchdog.close()

    def strays(self) -> list[str]:
        """What the stops found still holding the port, one line each (an error of the
        run: its exit code is not 0)."""
        return [
            stray_line(name, pid, srv.port, mine)
            for name, srv in self.servers.items()
            for pid, mine in srv.strays
        ]


def stray_line(arm: str, pid: int, port: int, mine: bool) -> str:
    """A process a server's stop left listening: the event's and the exit's one line."""
    return f"arm {arm}'s server left process {pid} listening on port {port}" + (
        " (stopped by tokmon)" if mine else " (not tokmon's: it still holds the port)"
    )
