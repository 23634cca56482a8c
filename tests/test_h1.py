"""The streaming HTTP/1.1 client (tokmon/engine/h1.py) against scripted servers on 127.0.0.1:
framing split at every byte, keep-alive and its failures, timeouts, TLS, and kernel stamps
that a blocked event loop does not move."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Callable
from time import perf_counter_ns

import pytest
from helpers import self_signed

from tokmon.engine import h1
from tokmon.engine.client import Tick, ssl_context, stream_request

Script = Callable[[int, bytes], "list[bytes | float | None]"]


def sse(*texts: str, done: bool = True, usage: int | None = None, finish: bool = True) -> bytes:
    out = b""
    for t in texts:
        ev = {"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}
        out += b"data: " + json.dumps(ev).encode() + b"\n\n"
    fin = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    if finish:
        out += b"data: " + json.dumps(fin).encode() + b"\n\n"
    if usage is not None:
        u = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": usage}}
        out += b"data: " + json.dumps(u).encode() + b"\n\n"
    if done:
        out += b"data: [DONE]\n\n"
    return out


def chunked(body: bytes, size: int = 40) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += b"%x\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Scripted:
    """An HTTP server whose n-th request (counted over all connections) gets ``script(n,
    request)``: a list of byte strings to write, floats to sleep, None to close."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.count = 0
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/v1/chat/completions"

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await r.readexactly(n)
                self.requests.append(head + body)
                i = self.count
                self.count += 1
                for step in self.script(i, head + body):
                    if step is None:
                        w.close()
                        return
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        w.write(step)
                        await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()


async def one(pool: h1.Pool, url: str, body: bytes = b"{}", **kw: object):
    target = h1.prepare(url, {"content-type": "application/json"})
    return await stream_request(
        pool,
        target,
        rid=0,
        arm="a",
        body=body,
        t_sched=perf_counter_ns(),
        ticks=Tick(),
        first_token_s=float(kw.pop("first_token_s", 10.0)),  # type: ignore[arg-type]
        total_s=float(kw.pop("total_s", 10.0)),  # type: ignore[arg-type]
        idle_s=float(kw.pop("idle_s", 10.0)),  # type: ignore[arg-type]
    )


async def test_framing_split_at_every_byte_and_keep_alive():
    resp = HEAD + chunked(sse("Hel", "lo", " wor", "ld", usage=4), size=7)

    def script(i: int, req: bytes) -> list[bytes | float | None]:
        if i == 0:  # one byte per write: every state of the parser is crossed mid-read
            out: list[bytes | float | None] = []
            for k in range(len(resp)):
                out += [resp[k : k + 1], 0.0005]
            return out
        return [resp]

    async with Scripted(script) as srv:
        pool = h1.Pool(5.0)
        # hundreds of timer wake-ups: on a loaded machine they take far longer than 0.5 ms
        r1 = await one(pool, srv.url, first_token_s=120, total_s=120)
        r2 = await one(pool, srv.url)
        pool.close()
    for r in (r1, r2):
        assert r.outcome == "ok", r.error
        assert r.output_tokens == 4 and not r.tokens_estimated
        assert r.chunks == 4 and r.finish_reason == "stop"
    assert srv.connections == 1  # the second request reused the first connection
    assert r1.connect_ms is not None and r2.connect_ms is None


async def test_content_length_close_delimited_interim_and_connection_close():
    body = sse("a", "b", usage=2)
    responses = [
        b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + chunked(body),
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.0 200 OK\r\n\r\n" + body,  # ends when the server closes
    ]

    def script(i: int, req: bytes) -> list[bytes | float | None]:
        return [responses[i]] + ([None] if i >= 2 else [])

    async with Scripted(script) as srv:
        pool = h1.Pool(5.0)
        recs = [await one(pool, srv.url) for _ in responses]
        pool.close()
    assert [r.outcome for r in recs] == ["ok"] * 4, [r.error for r in recs]
    assert all(r.output_tokens == 2 for r in recs)
    assert srv.connections == 2  # kept alive through the first two; closed after the third


async def test_stale_keep_alive_is_retried_once_on_a_new_connection():
    resp = HEAD + chunked(sse("x", usage=1))

    def script(i: int, req: bytes) -> list[bytes | float | None]:
        # The server drops the kept-alive connection as the second request arrives.
        return [None] if i == 1 else [resp]

    async with Scripted(script) as srv:
        pool = h1.Pool(5.0)
        r1 = await one(pool, srv.url)
        r2 = await one(pool, srv.url)
        pool.close()
    assert r1.outcome == r2.outcome == "ok"
    assert srv.connections == 2 and srv.count == 3


async def test_failures_are_classified():
    cases: dict[str, list[bytes | float | None]] = {
        "garbage": [b"SMTP ready\r\n\r\n"],
        "bad_chunk": [HEAD + b"zz\r\nhello\r\n"],
        "mid_stream": [HEAD + chunked(sse("a", "b", done=False, finish=False))[:-5], None],
        "no_response": [None],
        "http_429": [
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 35\r\n\r\n"
            b'{"error":{"message":"slow down"}}\r\n'
        ],
        "idle": [HEAD + chunked(sse("a"))[:30], 3.0],
        "unparseable": [HEAD + chunked(b"data: {nope\n\n")],
    }
    names = list(cases)

    def script(i: int, req: bytes) -> list[bytes | float | None]:
        return cases[names[i]]

    async with Scripted(script) as srv:
        recs = {}
        for name in names:
            pool = h1.Pool(5.0)
            recs[name] = await one(pool, srv.url, idle_s=0.3)
            pool.close()
    got = {k: (r.outcome, r.error) for k, r in recs.items()}
    assert got["garbage"][0] == "protocol" and "HTTP/1.x" in got["garbage"][1]
    assert got["bad_chunk"][0] == "protocol" and "chunk size" in got["bad_chunk"][1]
    assert got["mid_stream"] == ("stream_error", "connection closed mid-stream")
    assert got["no_response"][0] == "connect"
    assert got["http_429"] == ("http_429", "HTTP 429: slow down")
    assert got["idle"] == ("timeout", "idle timeout between chunks")
    assert got["unparseable"][0] == "protocol"
    assert recs["mid_stream"].output_tokens == 2  # what it produced is kept


async def test_body_left_open_after_done_is_drained_then_closed(monkeypatch):
    monkeypatch.setattr(h1, "DRAIN_S", 0.2)
    resp = HEAD + chunked(sse("a", "b", usage=2))[:-5]  # no terminator: the body stays open

    async with Scripted(lambda i, r: [resp, 30.0]) as srv:
        pool = h1.Pool(5.0)
        t0 = time.monotonic()
        r = await one(pool, srv.url)
        took = time.monotonic() - t0
        assert not pool.idle.get(h1.prepare(srv.url, {}).key)  # not reused
        pool.close()
    assert r.outcome == "ok" and r.output_tokens == 2
    assert 0.15 < took < 2.0


async def test_large_request_body_is_sent_whole():
    big = b'{"x":"' + b"y" * (16 << 20) + b'"}'
    async with Scripted(lambda i, r: [HEAD + chunked(sse("ok", usage=1))]) as srv:
        pool = h1.Pool(5.0)
        r = await one(pool, srv.url, body=big)
        pool.close()
    assert r.outcome == "ok"
    assert srv.requests[0].endswith(big)


async def test_connect_refused_and_bad_targets():
    pool = h1.Pool(2.0)
    r = await one(pool, "http://127.0.0.1:9/v1/chat/completions")
    assert r.outcome == "connect" and r.error
    for url in ("ftp://x/v1", "http:///v1", "not a url"):
        with pytest.raises(ValueError):
            h1.prepare(url, {})
    with pytest.raises(ValueError, match="one line"):
        h1.prepare("http://127.0.0.1:1/v1", {"x-a": "b\r\nx-evil: 1"})


async def test_kernel_stamp_is_not_moved_by_a_blocked_loop():
    """A chunk that arrives while the event loop is busy is stamped when it arrived.

    The server is a thread of its own (a blocked client loop does not hold it up) and
    stamps each write before and after it: on loopback the kernel stamps the arrival
    inside the write call, so each read's stamp lies between the two, however late the
    client got round to it.
    """
    import socket
    import threading

    body = sse("a", "b", "c", usage=3)
    parts = body.split(b"\n\n")[:-1]
    windows: list[tuple[int, int]] = []
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def server() -> None:
        conn, _ = lsock.accept()
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            conn.sendall(HEAD)
            for p in parts:
                time.sleep(0.15)  # > the 80 ms the client's loop is held after each read
                before = perf_counter_ns()
                conn.sendall(chunked(p + b"\n\n")[:-5])
                windows.append((before, perf_counter_ns()))
            time.sleep(0.05)
            conn.sendall(b"0\r\n\r\n")
            with contextlib.suppress(OSError):
                conn.recv(1)

    th = threading.Thread(target=server, daemon=True)
    th.start()
    target = h1.prepare(f"http://127.0.0.1:{port}/v1/chat/completions", {})

    class Sink:
        def __init__(self) -> None:
            self.stamps: list[int] = []

        def on_head(self, status: int, t_send: int, t: int) -> None:
            pass

        def on_body(self, t: int, data: bytes) -> bool:
            self.stamps.append(t)
            time.sleep(0.08)  # the loop is blocked right after the bytes arrive
            return False

    pool = h1.Pool(2.0)
    conn, _, _ = await pool.acquire(target)
    sink = Sink()
    await conn.exchange(h1.request_bytes(target, b"{}"), sink, 5.0)
    pool.release(conn)
    pool.close()
    th.join(5)
    lsock.close()
    if not conn.rx_kernel:
        pytest.skip("no kernel receive timestamps on this platform")
    assert len(sink.stamps) == len(windows)
    for t, (before, after) in zip(sink.stamps, windows, strict=True):
        # 1 ms for the wall-to-monotonic offset's own error
        assert before - 1_000_000 <= t <= after + 1_000_000, (t - before, after - before)


def _cert(tmp_path):
    key, crt = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    return ctx, crt


async def test_tls_stream_and_certificate_checks(tmp_path):
    server_ctx, crt = _cert(tmp_path)
    resp = HEAD + chunked(sse("se", "cure", usage=2), size=5)
    async with Scripted(lambda i, r: [resp], tls=server_ctx) as srv:
        trusting = ssl.create_default_context(cafile=str(crt))
        pool = h1.Pool(5.0, trusting)
        r1 = await one(pool, srv.url)
        r2 = await one(pool, srv.url)
        pool.close()
        insecure = h1.Pool(5.0, ssl_context(insecure=True))
        r3 = await one(insecure, srv.url)
        insecure.close()
        strict = h1.Pool(5.0, ssl_context())
        r4 = await one(strict, srv.url)
        strict.close()
    assert r1.outcome == r2.outcome == r3.outcome == "ok", (r1.error, r2.error, r3.error)
    assert r1.output_tokens == 2 and srv.connections == 2  # r2 reused r1; r4 never got in
    assert r4.outcome == "connect" and "certificate" in r4.error.lower()
