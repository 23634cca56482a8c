"""The dashboard in a browser (``--web HOST:PORT``), through textual-serve: the page runs
the same Textual dashboard, one process per browser tab, its keys acting on the run.

textual-serve is the Textual authors' own server for this (page, websocket, terminal
emulation in the browser); tokmon adds the access checks: every request carries a
one-time token (in the URL once, then a same-site cookie), the Host header must name
this server (no DNS rebinding), a WebSocket or any request with an Origin must come from
this server's own page (no cross-site socket), and at most ``MAX_VIEWERS`` sockets at a
time. The views are read-only unless the run was started with ``--web-control``.

Run as ``python -m tokmon.ui.web --listen HOST:PORT -- COMMAND...``, the token on stdin.
"""

from __future__ import annotations

import argparse
import hmac
import shlex
import sys
from typing import Any

from tokmon.textsafe import say

COOKIE = "tokmon_token"
MAX_VIEWERS = 4  # each browser tab is a dashboard process of its own


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers this server answers: the address it serves, and loopback's names
    where it is on loopback (a rebound DNS name is none of them)."""
    names = {host, f"[{host}]"}
    if host in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "::"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return frozenset(f"{n}:{port}" for n in names)


def make_server(
    command: str, host: str, port: int, token: str, title: str, max_viewers: int = MAX_VIEWERS
) -> Any:
    from aiohttp import web
    from textual_serve.server import Server

    hosts = allowed_hosts(host, port)
    origins = frozenset(f"http://{h}" for h in hosts)
    viewers = [0]

    class GuardedServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        # DNS rebinding: a page of another name that resolves here is not this server
        if request.host not in hosts:
            return web.Response(status=421, text="tokmon: wrong Host\n")
        socket_ = request.headers.get("Upgrade", "").lower() == "websocket"
        origin = request.headers.get("Origin")
        # cross-site: a page elsewhere may not open the socket (browsers always send
        # Origin on a WebSocket) nor post to this one
        if (origin is not None or socket_) and origin not in origins:
            return web.Response(status=403, text="tokmon: cross-site request refused\n")
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.Response(status=403, text="tokmon: this view needs its access token\n")
        if socket_:
            if viewers[0] >= max_viewers:
                return web.Response(
                    status=503, text=f"tokmon: {max_viewers} viewers already; close one\n"
                )
            viewers[0] += 1
            try:
                return await handler(request)
            finally:
                viewers[0] -= 1
        resp = await handler(request)
        if request.query.get("token") and isinstance(resp, web.Response):
            resp.set_cookie(COOKIE, given, httponly=True, samesite="Strict")
        return resp

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return GuardedServer(
        command, host=host, port=port, title=title, public_url=f"http://{shown}:{port}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tokmon-web")
    ap.add_argument("--listen", required=True)
    ap.add_argument("--title", default="tokmon")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    # the token comes on standard input: never on a command line (``ps`` shows those)
    token = sys.stdin.readline().strip()
    if not token:
        say("tokmon-web: no access token on standard input", err=True)
        return 2
    host, _, port = a.listen.rpartition(":")
    cmd = [x for x in a.command if x != "--"]
    server = make_server(shlex.join(cmd), host.strip("[]"), int(port), token, a.title)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
