"""One streamed request, timed where the bytes arrive.

Each read is stamped by the kernel as it reaches this machine (``h1``), before it is
parsed (METRICS.md, Clocks); ``t_send`` is taken when the request's last byte was handed
to the kernel.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from tokmon.engine import h1
from tokmon.engine.chunks import ProtocolError, interpret
from tokmon.engine.measure import NS_PER_MS, StreamMeter
from tokmon.engine.sse import SSEError, SSEParser
from tokmon.engine.target import Target, request_bytes
from tokmon.gate import loads
from tokmon.model.data.records import CLOCK_PREFIX, RequestRecord
from tokmon.textsafe import clean_text

ERROR_BODY_LIMIT = 4096
# The durations an impossible timeline cannot give (METRICS.md, invariants).
CLOCK_DROPS = (
    "send_lag_ms",
    "ttfb_ms",
    "ttft_ms",
    "ttfc_ms",
    "e2e_ms",
    "tpot_ms",
    "decode_tps",
    "gaps",
    "max_gap_ms",
    "dns_ms",
    "tcp_ms",
    "tls_ms",
    "answer_tps",
    "reasoning_tps",
)


def ssl_context(insecure: bool = False) -> ssl.SSLContext:
    """The TLS context of an engine's streams (``--insecure``: no certificate checks)."""
    try:
        import certifi  # comes with httpx: the same CA store as every other request

        ctx = ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def classify_status(status: int) -> str:
    """The outcome of a non-200 answer: only 5xx is a server error; a redirect, a 1xx
    that ended the exchange or a status outside HTTP's range is a protocol error."""
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "protocol"


def error_message(body: bytes) -> str:
    """The message of an OpenAI-style error body, or its first bytes."""
    try:
        obj = loads(body)
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


class StreamSink:
    """Measures one response as its bytes arrive, called from the connection's reader."""

    __slots__ = (
        "ticks",
        "arm",
        "stall_ms",
        "keep_chars",
        "tm",
        "deadline",
        "status",
        "meter",
        "parser",
        "raw",
        "ended",
        "outcome",
        "error",
    )

    def __init__(self, ticks: Tick, arm: str, stall_ms: float, keep_chars: int) -> None:
        self.ticks = ticks
        self.arm = arm
        self.stall_ms = stall_ms
        self.keep_chars = keep_chars
        self.tm: asyncio.Timeout | None = None
        self.deadline = 0.0
        self.status: int | None = None
        self.meter: StreamMeter | None = None
        self.parser = SSEParser()
        self.raw = b""
        self.ended = False  # [DONE] or an error event was read
        self.outcome = "ok"
        self.error = ""

    def on_head(self, status: int, t_send: int, t: int) -> None:
        self.status = status
        if status == 200:
            self.meter = StreamMeter(
                t_send,
                stall_ms=self.stall_ms,
                keep_text=self.keep_chars > 0,
                keep_chars=self.keep_chars,
            )

    def on_body(self, t: int, data: bytes) -> bool:
        meter = self.meter
        if meter is None:
            self.raw += data
            return len(self.raw) > ERROR_BODY_LIMIT
        for payload in self.parser.feed(data):
            info = interpret(payload)
            if info.error is not None:
                self.outcome, self.error = "stream_error", clean_text(info.error)
                self.ended = True
                return True
            if info.done:
                self.ended = True
                return True
            n = meter.on_event(t, info)
            if n:
                self.ticks.add(t, self.arm, n)
                if self.tm is not None:
                    # The first text: from now on only the total deadline applies.
                    self.tm.reschedule(self.deadline)
                    self.tm = None
        return False

    def at_end(self) -> None:
        """The body ended without [DONE]: take what is left in the parser."""
        meter = self.meter
        if meter is None or self.ended:
            return
        for payload in self.parser.flush():
            info = interpret(payload)
            if info.error is not None:
                self.outcome, self.error = "stream_error", clean_text(info.error)
            elif not info.done:
                meter.on_event(perf_counter_ns(), info)
        # A body that ended cleanly is an end even without [DONE] (llama.cpp after an
        # error, native endpoints) -- but not one that carried nothing at all.
        if self.outcome == "ok" and meter.text_chunks == 0 and meter.finish_reason is None:
            self.outcome, self.error = "protocol", "stream ended without any generated text"


async def stream_request(
    pool: h1.Pool,
    target: Target,
    *,
    rid: int,
    arm: str,
    body: bytes,
    t_sched: int,
    ticks: Tick,
    first_token_s: float,
    total_s: float,
    idle_s: float = 60.0,
    stall_ms: float = 1000.0,
    keep_chars: int = 0,
    base: dict[str, Any] | None = None,
    on_text: Callable[[str], None] | None = None,
    request_id: str = "",
    on_call: Callable[[str, str], None] | None = None,
) -> RequestRecord:
    """Send one streaming request and measure it. Never raises, except CancelledError."""
    st = {"send": 0, "headers": 0, "c0": 0, "c1": 0, "dns": 0, "tcp": 0, "tls": 0}
    fields: dict[str, Any] = dict(base) if base else {}
    sink = StreamSink(ticks, arm, stall_ms, keep_chars)
    outcome = "ok"
    error = ""
    t_start = perf_counter_ns()
    loop = asyncio.get_running_loop()
    data = request_bytes(target, body, request_id)
    conn: h1.Connection | None = None
    try:
        async with asyncio.timeout(min(first_token_s, total_s)) as tm:
            sink.tm, sink.deadline = tm, loop.time() + total_s
            for fresh in (False, True):
                conn, c0, c1 = await pool.acquire(target, fresh=fresh)
                if c0:
                    st["c0"], st["c1"] = c0, c1
                    st["dns"], st["tcp"], st["tls"] = conn.phases
                try:
                    await conn.exchange(data, sink, idle_s)
                except (h1.RemoteProtocolError, h1.ReadError) as e:
                    if c0 or conn.got_bytes or fresh or isinstance(e, h1.BadResponse):
                        raise
                    # A kept-alive connection the server had closed: once more, on a new one.
                    _release(pool, conn, st)
                    conn = None
                    continue
                break
        sink.at_end()
        outcome, error = sink.outcome, sink.error
    except TimeoutError:
        if sink.ended:
            outcome, error = sink.outcome, sink.error  # only the drain after [DONE] ran out
        else:
            meter = sink.meter
            outcome = "timeout"
            error = (
                "no first token in time"
                if meter is None or meter.t_first_text is None
                else "total timeout"
            )
    except h1.ReadTimeout:
        outcome, error = "timeout", "idle timeout between chunks"
    except h1.ConnectTimeout:
        outcome, error = "connect", "connect timeout"
    except h1.ConnectError as e:
        outcome, error = "connect", clean_text(str(e))[:200]
    except (ProtocolError, SSEError, h1.BadResponse) as e:
        outcome, error = "protocol", clean_text(str(e))[:200]
    except (h1.RemoteProtocolError, h1.ReadError) as e:
        if sink.ended:
            outcome, error = sink.outcome, sink.error
        elif sink.meter is not None and sink.meter.finish_reason is not None:
            outcome = "ok"  # closed after a finish_reason: an end
        elif sink.status is None:
            outcome, error = "connect", clean_text(str(e) or type(e).__name__)[:200]
        else:
            outcome, error = "stream_error", "connection closed mid-stream"
    except h1.HTTPError as e:
        outcome, error = "stream_error", clean_text(f"{type(e).__name__}: {e}")[:200]
    except Exception as e:  # noqa: BLE001 -- a defect costs the request its outcome only:
        # what was measured until then (its TTFT, its tokens) is kept, and the detail
        # names the defect (a RecursionError from a server's answer was once a lost record)
        outcome, error = "protocol", f"internal: {type(e).__name__}"
    finally:
        if conn is not None:
            _release(pool, conn, st)
    t_end = perf_counter_ns()
    status = sink.status
    meter = sink.meter
    if status is not None and status != 200 and outcome in ("ok", "timeout", "stream_error"):
        outcome = classify_status(status)
        error = (
            f"HTTP {status}: {error_message(sink.raw)}"
            if outcome != "protocol"
            else f"unexpected HTTP status {status} (not a stream)"
        )
    if meter is not None:
        extra = meter.untick_tokens()
        if extra > 0 and outcome == "ok":
            ticks.add(meter.t_last_text or t_end, arm, extra)
        if on_text is not None and keep_chars:
            on_text(meter.text)
        if on_call is not None and keep_chars:
            on_call(*meter.tool_call)
    fields.update(_finish(meter, t_end, outcome, st, t_sched, t_start, status, error))
    return RequestRecord(rid=rid, arm=arm, outcome=outcome, t_sched=t_sched, t_end=t_end, **fields)


def _release(pool: h1.Pool, conn: h1.Connection, st: dict[str, int]) -> None:
    st["send"], st["headers"] = conn.t_send, conn.t_head
    pool.release(conn)


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
    clock = ""
    # Every duration is kept to the microsecond: the recording then holds exactly the
    # values the live statistics used, and a report equals the live summary.
    t_send = st["send"] or None
    f["t_send"] = t_send
    if t_send is not None:
        if t_send < t_sched:
            clock = f"sent {(t_sched - t_send) / NS_PER_MS:.3f} ms before it was scheduled"
        else:
            f["send_lag_ms"] = (t_send - t_sched) / NS_PER_MS
        if st["headers"]:
            if st["headers"] < t_send:
                clock = (
                    f"response head {(t_send - st['headers']) / NS_PER_MS:.3f} ms before the send"
                )
            else:
                f["ttfb_ms"] = (st["headers"] - t_send) / NS_PER_MS
    if st["c1"] and st["c0"]:
        # a new connection: its setup, whole and in its phases (name, TCP, TLS)
        f["connect_ms"] = (st["c1"] - st["c0"]) / NS_PER_MS
        c0, dns, tcp, tls = st["c0"], st["dns"], st["tcp"], st["tls"]
        if c0 <= dns <= tcp:
            f["dns_ms"] = (dns - c0) / NS_PER_MS
            f["tcp_ms"] = (tcp - dns) / NS_PER_MS
            if tls >= tcp:
                f["tls_ms"] = (tls - tcp) / NS_PER_MS
    if meter is not None:
        m = meter.finish(t_end)
        clock = m.pop("clock", "") or clock
        suspect = m.pop("suspect", "")
        note = m.pop("note", "")
        if suspect and not error:
            # the request is kept; the server's unusable numbers are named, chunks counted
            f["error"] = f"suspect: {suspect}"
        elif note and not error and outcome == "ok":
            f["error"] = note  # what a figure lacks, and why
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
    if clock:
        # An impossible timeline: the request keeps its outcome and its tokens, its
        # durations are left out of every figure, and the detail says why (``clock:``).
        for k in CLOCK_DROPS:
            f.pop(k, None)
        f["error"] = CLOCK_PREFIX + clock + (f"; {error}" if error else "")
    for k, v in f.items():
        if isinstance(v, float):
            f[k] = round(v, 3)
    return f
