"""The kernel's timestamps of a socket's sends and reads (``SO_TIMESTAMPING``): how to
ask for them, how to read them off a message's ancillary data, and which this machine
gives (``stamp_sources``, written in every recording's header). The engine's client
stamps with them; the recording only asks where the stamps come from, without the client.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
from typing import Any

_LINUX = sys.platform.startswith("linux")
# Linux's numbers (the same on every architecture that runs tokmon); Python's socket
# module names none of them.
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if _LINUX else None)
SO_TIMESTAMPING: int | None = getattr(socket, "SO_TIMESTAMPING", 37 if _LINUX else None)
MSG_ERRQUEUE = 0x2000
_TS_TX_SOFTWARE, _TS_RX_SOFTWARE, _TS_SOFTWARE = 1 << 1, 1 << 3, 1 << 4
_TS_OPT_ID, _TS_OPT_TSONLY = 1 << 7, 1 << 11
TS_FLAGS = _TS_TX_SOFTWARE | _TS_RX_SOFTWARE | _TS_SOFTWARE | _TS_OPT_ID | _TS_OPT_TSONLY
_RECVERR = ((socket.IPPROTO_IP, 11), (getattr(socket, "IPPROTO_IPV6", 41), 25))  # IP(V6)_RECVERR
_SO_EE_ORIGIN_TIMESTAMPING = 4
_TIMESPEC = struct.Struct("@qq")
_EXT_ERR = struct.Struct("@IBBBBII")  # struct sock_extended_err
ANC_SIZE = 256
_RX_KINDS = frozenset(k for k in (SO_TIMESTAMPNS, SO_TIMESTAMPING) if k is not None)
# A kernel stamp older than this (or later than now) is not trusted: the wall clock
# stepped between the stamp and the read. The read time is used instead.
STAMP_WINDOW_NS = 30_000_000_000


def send_stamp(anc: list[tuple[int, int, Any]]) -> tuple[int | None, int | None]:
    """A send stamp off the socket's error queue: (its wall time in ns, the id of the byte
    it stamps), each None where the message does not hold it."""
    wall = ident = None
    for level, kind, raw in anc:
        if kind == SO_TIMESTAMPING and level == socket.SOL_SOCKET and len(raw) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            wall = sec * 1_000_000_000 + nsec
        elif (level, kind) in _RECVERR and len(raw) >= _EXT_ERR.size:
            _, origin, _, _, _, _, data = _EXT_ERR.unpack_from(raw)
            if origin == _SO_EE_ORIGIN_TIMESTAMPING:
                ident = data
    return wall, ident


def read_stamp(anc: list[tuple[int, int, Any]]) -> int | None:
    """When a read's bytes reached this machine (wall time, ns), where the kernel says."""
    wall = None
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind in _RX_KINDS and len(raw) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            wall = sec * 1_000_000_000 + nsec
    return wall


def enable_stamps(sock: socket.socket) -> tuple[bool, bool]:
    """Ask the kernel to stamp this socket's sends and reads: (sends, reads) stamped.
    On TCP it must be established (``OPT_ID`` counts bytes from this moment)."""
    if SO_TIMESTAMPING is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TS_FLAGS)
            return True, True
    if SO_TIMESTAMPNS is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            return False, True
    return False, False


def stamp_sources() -> dict[str, str]:
    """Where this machine's send and chunk stamps come from (tried on a loopback pair)."""
    tx = rx = False
    with contextlib.suppress(OSError), socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with socket.create_connection(srv.getsockname()) as c:
            srv.accept()[0].close()
            tx, rx = enable_stamps(c)
    return {
        "send": "kernel (SO_TIMESTAMPING, software TX)" if tx else "before the send call",
        "chunks": (
            "kernel (SO_TIMESTAMPING, software RX)"
            if tx
            else "kernel (SO_TIMESTAMPNS)"
            if rx
            else "when read"
        ),
    }
