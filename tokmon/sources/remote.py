"""A running session seen from another process: ``tokmon view --attach SOCKET`` draws the
same dashboard (in another terminal, or in a browser through ``--web``), and its keys
act on the run.

The session serves its snapshots on a Unix socket in a directory only its user can
enter (0700), and a view attaches only to such a socket (``check_socket``). The frames
are JSON (``tokmon.sources.frames``): data only, decoded into the model's own typed
Snapshot, so a crafted frame cannot name anything to run. Each frame is a 4-byte length
and the JSON; the server sends a snapshot when it changed (at most 4 a second) and
answers each command with its notice.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

from tokmon.model.data.commands import Command, CommandError, StopRun, checked
from tokmon.model.folding.snapshot import Snapshot
from tokmon.sources import frames

_LEN = struct.Struct("!I")
MAX_FRAME = 64 << 20


def _send(sock: socket.socket, obj: Any) -> None:
    data = frames.encode(obj)
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    head = _exact(sock, _LEN.size)
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ConnectionError("frame too large")
    return frames.decode(_exact(sock, n))


def check_socket(path: str) -> None:
    """A view attaches only to a socket of this user's, in a folder only this user can
    enter (what ``ViewServer`` makes): raises ConnectionError with one line."""
    st_dir = os.stat(os.path.dirname(path) or ".")
    st = os.lstat(path)
    uid = os.getuid()
    if st.st_uid != uid or st_dir.st_uid != uid:
        raise ConnectionError(f"{path} is not this user's socket")
    if st_dir.st_mode & 0o077:
        raise ConnectionError(f"{os.path.dirname(path)} is open to other users")
    if not stat.S_ISSOCK(st.st_mode):
        raise ConnectionError(f"{path} is not a socket")


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed")
        buf += part
    return buf


class ViewServer:
    """Serves a session's snapshots and takes its commands, for attached views."""

    def __init__(self, source: Any, interval: float = 0.25, control: bool = True) -> None:
        self.source = source
        # a view that may not act on the run (--web without --web-control): told so,
        # and every command it sends refused here, at the run, not trusted to the view
        self.control = control
        self.interval = interval
        self.dir = tempfile.mkdtemp(prefix="tokmon-view-")
        os.chmod(self.dir, 0o700)
        self.path = str(Path(self.dir) / "session.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self._stop = threading.Event()
        threading.Thread(target=self._accept, name="tokmon-view", daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        lock = threading.Lock()

        def push() -> None:
            last = None
            while not self._stop.wait(self.interval):
                snap = self.source.snapshot()
                if snap is not None and snap is not last:
                    last = snap
                    try:
                        with lock:
                            _send(conn, ("snap", snap))
                    except OSError:
                        return

        try:
            with lock:
                _send(conn, ("hello", frozenset(self.source.commands if self.control else ())))
            threading.Thread(target=push, daemon=True).start()
            while not self._stop.is_set():
                msg = _recv(conn)
                if isinstance(msg, tuple) and len(msg) == 3 and msg[0] == "cmd":
                    _, cid, raw = msg
                    if not self.control:
                        with lock:
                            _send(conn, ("notice", cid, "read-only view (--web-control)"))
                        continue
                    try:
                        cmd = checked(raw)  # (a frame's fields are the view's word)
                        if cmd.name not in self.source.commands:
                            notice = f"not available here: {cmd.name}"
                        else:
                            notice = self.source.command(cmd)
                    except CommandError as e:
                        notice = f"command refused: {e}"
                    except Exception as e:  # a view's command never breaks the run
                        notice = f"{getattr(raw, 'name', 'command')} failed: {type(e).__name__}"
                    with lock:
                        _send(conn, ("notice", cid, notice))
        except (OSError, ConnectionError, frames.FrameError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


class RemoteSource:
    """The Source an attached view draws from: the latest snapshot the session sent."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        check_socket(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        kind, cmds = _recv(self.sock)
        self.sock.settimeout(None)
        self._commands: frozenset[str] = cmds if kind == "hello" else frozenset()
        self._snap: Snapshot | None = None
        self._replies: dict[int, str | None] = {}
        self._cv = threading.Condition()
        self._next = 0
        self.lost = False
        self._wlock = threading.Lock()
        threading.Thread(target=self._read, name="tokmon-attach", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                msg = _recv(self.sock)
                if msg[0] == "snap":
                    self._snap = msg[1]
                elif msg[0] == "notice":
                    with self._cv:
                        self._replies[msg[1]] = msg[2]
                        self._cv.notify_all()
        except (OSError, ConnectionError, frames.FrameError, EOFError):
            self.lost = True
            with self._cv:
                self._cv.notify_all()

    def snapshot(self) -> Snapshot | None:
        return self._snap

    @property
    def commands(self) -> frozenset[str]:
        # q in a view detaches it (the run goes on): "stop" stays with the run's own UI
        return frozenset() if self.lost else self._commands - {StopRun.name}

    def command(self, cmd: Command) -> str | None:
        if self.lost:
            return "the run is gone"
        with self._cv:
            cid = self._next
            self._next += 1
        try:
            with self._wlock:
                _send(self.sock, ("cmd", cid, cmd))
        except OSError:
            return "the run is gone"
        with self._cv:
            self._cv.wait_for(lambda: cid in self._replies or self.lost, timeout=5.0)
            return self._replies.pop(cid, None)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
