"""Bodies of answers that are not measured streams, read up to a cap.

Every request tokmon makes through httpx (the pre-flight's ``/models``, a prompt-length
probe, ``/tokenize``, the output check, a managed server's readiness, DCGM) reads its
answer through ``fetch``: a server that answers 300 MB where a count was expected costs
at most ``limit`` bytes of memory, then the read stops and says so. (The measured
streams read through the engine's own client, whose SSE parser caps an event, and whose
meter keeps at most the text a check needs.)
"""

from __future__ import annotations

from typing import Any

import httpx

from tokmon.gate import GateError

BODY_LIMIT = 8 << 20  # a non-streamed answer: /models, a probe's one-token answer, …


class BodyTooLarge(GateError):
    """An answer over its cap: the read stopped there."""


def fetch(
    client: httpx.Client, method: str, url: str, *, limit: int = BODY_LIMIT, **kw: Any
) -> httpx.Response:
    """``client.request(method, url, **kw)`` with its body read up to ``limit`` bytes.
    Raises BodyTooLarge (a ValueError) past it, and httpx's errors as they are."""
    with client.stream(method, url, **kw) as r:
        body = bytearray()
        for part in r.iter_bytes():
            body += part
            if len(body) > limit:
                raise BodyTooLarge(
                    f"{method} {url} answered over {limit >> 20} MiB: the read stopped there"
                )
        return httpx.Response(
            r.status_code, headers=r.headers, content=bytes(body), request=r.request
        )
