"""Addresses tokmon listens on (``--prometheus``, ``--web``): checked before anything
starts."""

from __future__ import annotations

from tokmon.cli.parser import UsageError


def can_listen(host: str, port: int) -> bool:
    """Whether a server could listen on HOST:PORT now (checked before the run starts:
    a port in use is one line, not an error after the pre-flight)."""
    import socket

    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def parse_listen(name: str, text: str | None, allow_remote: bool) -> tuple[str, int] | None:
    """HOST:PORT (or :PORT, on loopback) to listen on; loopback unless allowed."""
    if not text:
        return None
    host, colon, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{name}: expected HOST:PORT (e.g. 127.0.0.1:9464), got {text!r}")
    from tokmon.model.env.environment import is_loopback

    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"{name}: {host} is not a loopback address: anyone who can reach it would see the "
            f"run; add {name}-allow-remote if that is what you want"
        )
    return host, int(port)
