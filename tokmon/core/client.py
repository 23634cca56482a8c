"""One streamed request, timed where the bytes arrive.

The timestamps are taken right after httpx hands a network read over and before it is
parsed (METRICS.md, Clocks). ``t_send`` comes from httpx's ``trace`` extension.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import httpx

from tokmon.core.chunks import ProtocolError, interpret
from tokmon.core.measure import NS_PER_MS, StreamMeter
from tokmon.core.records import RequestRecord
from tokmon.core.sse import SSEError, SSEParser
from tokmon.core.textsafe import clean_text

ERROR_BODY_LIMIT = 4096


def make_client(
    connect_s: float, idle_s: float, insecure: bool = False, max_connections: int = 1024
) -> httpx.AsyncClient:
    """An AsyncClient tuned for many long streams: HTTP/1.1, keep-alive, no pool timeout."""
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=30.0,
    )
    timeout = httpx.Timeout(connect=connect_s, read=idle_s, write=connect_s, pool=None)
    return httpx.AsyncClient(
        limits=limits,
        timeout=timeout,
        http1=True,
        http2=False,
        verify=False if insecure else _ssl_context(),
        trust_env=False,
        follow_redirects=False,
    )


_SSL: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One verifying context for every client: loading the CA store costs ~17 ms each."""
    global _SSL
    if _SSL is None:
        try:
            import certifi

            _SSL = ssl.create_default_context(cafile=certifi.where())
        except ImportError:
            _SSL = ssl.create_default_context()
    return _SSL


def classify_status(status: int) -> str:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


def error_message(body: bytes) -> str:
    """The message of an OpenAI-style error body, or its first bytes."""
    try:
        obj = json.loads(body)
    except ValueError:
        return clean_text(body[:200].decode("utf-8", "replace"))
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return clean_text(str(err.get("message") or err.get("detail") or err)[:300])
        return clean_text(str(err)[:300])
    return clean_text(str(obj)[:300])


class Tick:
    """Collects tokens per time bucket and arm (live throughput)."""

    __slots__ = ("width", "buckets")

    def __init__(self, width_ns: int = 250 * NS_PER_MS) -> None:
        self.width = width_ns
        self.buckets: dict[tuple[int, str], int] = {}

    def add(self, t: int, arm: str, n: int) -> None:
        key = (t - t % self.width, arm)
        self.buckets[key] = self.buckets.get(key, 0) + n

    def take(self) -> dict[tuple[int, str], int]:
        b, self.buckets = self.buckets, {}
        return b


async def stream_request(
    client: httpx.AsyncClient,
    *,
    rid: int,
    arm: str,
    url: str,
    body: bytes,
    headers: dict[str, str],
    t_sched: int,
    ticks: Tick,
    first_token_s: float,
    total_s: float,
    stall_ms: float = 1000.0,
    keep_text: bool = False,
    base: dict[str, Any] | None = None,
    on_text: Callable[[str], None] | None = None,
) -> RequestRecord:
    """Send one streaming request and measure it. Never raises, except CancelledError."""
    st = {"send": 0, "headers": 0, "c0": 0, "c1": 0}

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == "http11.send_request_body.complete":
            st["send"] = perf_counter_ns()
        elif name == "http11.receive_response_headers.complete":
            st["headers"] = perf_counter_ns()
        elif name == "connection.connect_tcp.started":
            st["c0"] = perf_counter_ns()
        elif name == "connection.connect_tcp.complete":
            st["c1"] = perf_counter_ns()

    fields: dict[str, Any] = dict(base) if base else {}
    outcome = "ok"
    error = ""
    status: int | None = None
    meter: StreamMeter | None = None
    finished = False
    t_start = perf_counter_ns()
    loop = asyncio.get_running_loop()
    deadline_total = loop.time() + total_s
    try:
        async with asyncio.timeout(min(first_token_s, total_s)) as tm:
            async with client.stream(
                "POST", url, content=body, headers=headers, extensions={"trace": trace}
            ) as resp:
                status = resp.status_code
                t_send = st["send"] or t_start
                if status != 200:
                    raw = b""
                    async for part in resp.aiter_raw():
                        raw += part
                        if len(raw) > ERROR_BODY_LIMIT:
                            break
                    outcome = classify_status(status)
                    error = f"HTTP {status}: {error_message(raw)}"
                else:
                    meter = StreamMeter(t_send, stall_ms=stall_ms, keep_text=keep_text)
                    parser = SSEParser()
                    got_text = False
                    async for raw in resp.aiter_bytes():
                        if finished:
                            # Read the body to its end (the chunked terminator follows [DONE]),
                            # so the connection is kept alive for the next request.
                            continue
                        t = perf_counter_ns()
                        for payload in parser.feed(raw):
                            info = interpret(payload)
                            if info.error is not None:
                                outcome, error = "stream_error", clean_text(info.error)
                                finished = True
                                break
                            if info.done:
                                finished = True
                                break
                            n = meter.on_event(t, info)
                            if n:
                                ticks.add(t, arm, n)
                                if not got_text:
                                    got_text = True
                                    tm.reschedule(deadline_total)
                        if finished:
                            # A server that keeps the stream open after [DONE] gets 2 s.
                            tm.reschedule(min(deadline_total, loop.time() + 2.0))
                    if not finished:
                        for payload in parser.flush():
                            info = interpret(payload)
                            if info.error is not None:
                                outcome, error = "stream_error", clean_text(info.error)
                            elif not info.done:
                                meter.on_event(perf_counter_ns(), info)
                        # A body that ended cleanly is an end even without [DONE]
                        # (llama.cpp after an error, native endpoints).
                        if (
                            outcome == "ok"
                            and meter.text_chunks == 0
                            and meter.finish_reason is None
                        ):
                            outcome, error = "protocol", "stream ended without any generated text"
    except TimeoutError:
        if finished:
            pass  # the stream had ended; only the drain after [DONE] ran out of time
        else:
            outcome = "timeout"
            error = (
                "no first token in time"
                if meter is None or meter.t_first_text is None
                else "total timeout"
            )
    except httpx.ReadTimeout:
        outcome, error = "timeout", "idle timeout between chunks"
    except httpx.TimeoutException as e:
        if isinstance(e, httpx.ConnectTimeout):
            outcome, error = "connect", "connect timeout"
        else:
            outcome, error = "timeout", type(e).__name__
    except (httpx.ConnectError, ssl.SSLError) as e:
        outcome, error = "connect", clean_text(str(e) or type(e).__name__)[:200]
    except (ProtocolError, SSEError) as e:
        outcome, error = "protocol", clean_text(str(e))[:200]
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        if meter is not None and meter.finish_reason is not None:
            outcome = "ok"  # closed after a finish_reason: an end
        elif meter is None and status is None:
            outcome, error = "connect", clean_text(str(e) or type(e).__name__)[:200]
        else:
            outcome, error = "stream_error", "connection closed mid-stream"
    except httpx.HTTPError as e:
        outcome, error = "stream_error", clean_text(f"{type(e).__name__}: {e}")[:200]
    t_end = perf_counter_ns()
    if meter is not None:
        extra = meter.untick_tokens()
        if extra > 0 and outcome == "ok":
            ticks.add(meter.t_last_text or t_end, arm, extra)
        if on_text is not None and keep_text:
            on_text(meter.text)
    fields.update(_finish(meter, t_end, outcome, st, t_sched, t_start, status, error))
    return RequestRecord(rid=rid, arm=arm, outcome=outcome, t_sched=t_sched, t_end=t_end, **fields)


def _finish(
    meter: StreamMeter | None,
    t_end: int,
    outcome: str,
    st: dict[str, int],
    t_sched: int,
    t_start: int,
    status: int | None,
    error: str,
) -> dict[str, Any]:
    f: dict[str, Any] = {"http_status": status, "error": error}
    # Every duration is kept to the microsecond: the recording then holds exactly the
    # values the live statistics used, and a report equals the live summary.
    t_send = st["send"] or None
    f["t_send"] = t_send
    if t_send is not None:
        f["send_lag_ms"] = (t_send - t_sched) / NS_PER_MS
        if st["headers"]:
            f["ttfb_ms"] = (st["headers"] - t_send) / NS_PER_MS
    if st["c1"] and st["c0"]:
        f["connect_ms"] = (st["c1"] - st["c0"]) / NS_PER_MS
    if meter is not None:
        m = meter.finish(t_end)
        if outcome != "ok":
            # Figures of a failed request are not latencies; keep only what it produced.
            m = {
                k: v
                for k, v in m.items()
                if k
                in (
                    "output_tokens",
                    "tokens_estimated",
                    "chunks",
                    "prompt_tokens",
                    "stalls",
                    "ttft_ms",
                    "max_gap_ms",
                )
            }
        f.update(m)
    for k, v in f.items():
        if isinstance(v, float):
            f[k] = round(v, 3)
    return f
