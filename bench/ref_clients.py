"""Minimal reference clients that only read the stream (the practical limit in Python).

python bench/ref_clients.py aiohttp|httpx URL CONCURRENCY SECONDS MAX_TOKENS
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


if __name__ == "__main__":
    kind, url, conc, secs, mt = sys.argv[1:6]
    fn = run_aiohttp if kind == "aiohttp" else run_httpx
    asyncio.run(fn(url, int(conc), float(secs), int(mt)))
