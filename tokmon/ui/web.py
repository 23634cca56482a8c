"""The dashboard in a browser (``--web HOST:PORT``), through textual-serve: the page runs
the same Textual dashboard, one process per browser tab, its keys acting on the run.

textual-serve is the Textual authors' own server for this (page, websocket, terminal
emulation in the browser); tokmon adds only an access check: off loopback, every request
must carry a one-time token (in the URL once, then a cookie).

Run as ``python -m tokmon.ui.web --listen HOST:PORT [--token T] -- COMMAND...``.
"""

from __future__ import annotations

import argparse
import hmac
import shlex
import sys
from typing import Any

COOKIE = "tokmon_token"


def make_server(command: str, host: str, port: int, token: str | None, title: str) -> Any:
    from aiohttp import web
    from textual_serve.server import Server

    class TokenServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            if token is not None:
                app.middlewares.append(check)
            return app

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), (token or "").encode()):
            return web.Response(status=403, text="tokmon: this view needs its access token\n")
        resp = await handler(request)
        if request.query.get("token") and isinstance(resp, web.Response):
            resp.set_cookie(COOKIE, given, httponly=True, samesite="Strict")
        return resp

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return TokenServer(
        command, host=host, port=port, title=title, public_url=f"http://{shown}:{port}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tokmon-web")
    ap.add_argument("--listen", required=True)
    ap.add_argument("--token", default=None)
    ap.add_argument("--title", default="tokmon")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    host, _, port = a.listen.rpartition(":")
    cmd = [x for x in a.command if x != "--"]
    server = make_server(shlex.join(cmd), host.strip("[]"), int(port), a.token, a.title)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
