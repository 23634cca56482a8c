"""Minimal reference clients that only read the stream (the practical limit in Python).

python bench/ref_clients.py aiohttp|httpx|raw URL CONCURRENCY SECONDS MAX_TOKENS

``raw`` is asyncio streams over a plain socket with a hand-rolled chunked reader: the
floor of what Python spends per token, with no HTTP library at all.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def run_aiohttp(url: str, conc: int, seconds: float, max_tokens: int) -> None:
    import aiohttp

    body = {
        "model": "sim-27b",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stop = time.monotonic() + seconds
    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as s:

        async def one() -> None:
            while time.monotonic() < stop:
                async with s.post(url + "/chat/completions", json=body) as r:
                    async for line in r.content:
                        if line.startswith(b"data: ") and line[6:12] != b"[DONE]":
                            json.loads(line[6:])

        await asyncio.gather(*(one() for _ in range(conc)))


async def run_httpx(url: str, conc: int, seconds: float, max_tokens: int) -> None:
    import httpx

    body = {
        "model": "sim-27b",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stop = time.monotonic() + seconds
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=conc), timeout=60) as c:

        async def one() -> None:
            while time.monotonic() < stop:
                async with c.stream("POST", url + "/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line[6:12] != "[DONE]":
                            json.loads(line[6:])

        await asyncio.gather(*(one() for _ in range(conc)))


async def run_raw(url: str, conc: int, seconds: float, max_tokens: int) -> None:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    body = json.dumps(
        {
            "model": "sim-27b",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = (
        f"POST {u.path}/chat/completions HTTP/1.1\r\nhost: {u.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    stop = time.monotonic() + seconds

    async def one() -> None:
        r, w = await asyncio.open_connection(u.hostname, u.port)
        while time.monotonic() < stop:
            w.write(req)
            await r.readuntil(b"\r\n\r\n")  # head (the simulator always chunks)
            while True:
                size = int((await r.readuntil(b"\r\n"))[:-2], 16)
                if size == 0:
                    await r.readexactly(2)
                    break
                data = await r.readexactly(size + 2)
                for line in data.split(b"\n"):
                    if line.startswith(b"data: ") and line[6:12] != b"[DONE]":
                        json.loads(line[6:])
        w.close()

    await asyncio.gather(*(one() for _ in range(conc)))


if __name__ == "__main__":
    kind, url, conc, secs, mt = sys.argv[1:6]
    fn = {"aiohttp": run_aiohttp, "httpx": run_httpx, "raw": run_raw}[kind]
    try:
        asyncio.run(fn(url, int(conc), float(secs), int(mt)))
    except ImportError as e:
        sys.exit(f"{kind} reader: {e} — pip install -e '.[bench]'")
