"""Interpretation of one streamed OpenAI-compatible event (chat or completions).

Every quirk of the OpenAI-compatible stream is handled here: role-only first chunks,
empty deltas, usage chunks with ``choices: []``, reasoning fields under either name,
tool-call deltas, error events after a 200, llama.cpp's prefill progress. What one
engine adds per request (vLLM's ``metrics``, llama.cpp's ``timings``, SGLang's
``sglext``) is read from the paths its module in ``tokmon/engines`` gives.
"""

from __future__ import annotations

import json
import json.scanner
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokmon.engines import RESPONSE_READERS
from tokmon.engines.base import SpecPath, TimingPath, dig
from tokmon.gate import MAX_DEPTH, too_deep
from tokmon.textsafe import might_hold_surrogates, valid

DONE = b"[DONE]"


@dataclass(frozen=True, slots=True)
class SpecFields:
    """Per-request speculative-decoding figures a server returned (source rank 2)."""

    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    drafts: int | None = None  # number of drafting steps, where known
    acceptance_length: float | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class ServerTiming:
    """Where the server says a request's time went (ms): waiting for a batch slot,
    scheduled → first token, and its own time per output token. None: not reported."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    itl_ms: float | None = None


@dataclass(slots=True)
class ChunkInfo:
    """What one event says. Mutable and short-lived: it never leaves the engine."""

    text_chars: int = 0  # characters of generated text (content+reasoning+tool args)
    content_chars: int = 0  # characters of *content* only (for TTFC)
    reasoning_chars: int = 0  # characters of reasoning (a reasoning model's thinking)
    tool_name: str = ""  # a tool call's function name, where this event names it
    tool_args: str = ""  # … and the piece of its arguments this event carries
    text: str = ""  # content text (kept only for output checks)
    completion_tokens: int | None = None  # cumulative usage, when present
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt, found in the server's prefix cache
    # of the completion, its thinking (usage.completion_tokens_details.reasoning_tokens)
    reasoning_tokens: int | None = None
    pred_accepted: int | None = None  # predicted outputs' tokens accepted, rejected
    pred_rejected: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False
    spec: SpecFields | None = None
    timing: ServerTiming | None = None  # vLLM per-request metrics, llama.cpp timings
    timings_predicted_n: int | None = None  # llama.cpp final chunk
    # A step whose token decodes to no text (llama.cpp still sends its chunk, with
    # "content": ""): no text for timing, but one token for the estimated count.
    empty_step: bool = False
    # ... of the thinking: a reasoning delta with no text (vLLM sends one for a token whose
    # bytes it holds back), one reasoning token all the same
    empty_reasoning: bool = False
    # A number the server sent that cannot be a count (1e30, -100, true, NaN): named here,
    # left out (tokens are then counted from the chunks), and the request is flagged.
    bad: str = ""


class ProtocolError(Exception):
    pass


# No single request produces more; larger "counts" are a server's (or an attacker's) bug.
MAX_COUNT = 10_000_000
MAX_MS = 3_600_000.0  # a server's figure for one request's time: an hour at most


class _BadNumber(ValueError):
    pass


def _count(v: Any, name: str) -> int | None:
    """A token count from a server: an integer in [0, MAX_COUNT], or None if absent."""
    if v is None:
        return None
    if type(v) is int and 0 <= v <= MAX_COUNT:
        return v
    if type(v) is float and math.isfinite(v) and v.is_integer() and 0 <= v <= MAX_COUNT:
        return int(v)
    raise _BadNumber(f"{name} = {_show(v)} is not a token count")


def _real(v: Any, name: str, hi: float = 1e6) -> float | None:
    """A finite, non-negative figure (an acceptance length), or None if absent."""
    if v is None:
        return None
    # (the range first: NaN fails it, and an int of 400 digits is no OverflowError)
    if type(v) in (int, float) and 0 <= v <= hi:
        return float(v)
    raise _BadNumber(f"{name} = {_show(v)} is not a valid figure")


def _show(v: Any) -> str:
    return repr(v)[:40]


def _text(v: Any, name: str) -> str:
    if type(v) is str:
        return v
    raise ProtocolError(f"{name}: expected text, got {type(v).__name__} {_show(v)}")


def _err_message(obj: Any) -> str:
    if isinstance(obj, dict):
        msg = obj.get("message") or obj.get("msg") or obj.get("type") or repr(obj)[:200]
        code = obj.get("code")
        return f"{msg} (code {code})" if code is not None else str(msg)
    return str(obj)[:200]


# The C scanner behind json.loads, called directly: json.loads on bytes first sniffs the
# encoding and runs two regexes, which took half of the 2.7 µs an event cost to decode.
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def _decode(payload: bytes) -> Any:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"unparseable event: {e}") from None
    if text[:1] != "{":
        text = text.strip()
    # the gate's depth rule (tokmon/gate.py), at the cost of two counts for the usual
    # event: one nested 1,200 deep was a RecursionError that lost its request's timing
    if too_deep(payload):
        raise ProtocolError(f"unparseable event: nested deeper than {MAX_DEPTH}")
    try:
        obj, end = _scan(text, 0)
    except StopIteration:
        raise ProtocolError("unparseable event: expecting a JSON value") from None
    except ValueError as e:
        raise ProtocolError(f"unparseable event: {e}") from None
    except RecursionError:  # (unreachable past the depth check: kept as the rule)
        raise ProtocolError("unparseable event: nested too deeply") from None
    if end != len(text) and not text[end:].isspace():
        raise ProtocolError(f"unparseable event: extra data at char {end}")
    if might_hold_surrogates(text):
        obj = valid(obj)  # a lone surrogate from the server: text, from here on
    return obj


def interpret(payload: bytes) -> ChunkInfo:
    """Parse one ``data:`` payload. Raises ProtocolError for unparseable JSON."""
    info = ChunkInfo()
    if payload[:1] != b"{" and payload.strip() == DONE:
        info.done = True
        return info
    obj = _decode(payload)
    if type(obj) is not dict:
        raise ProtocolError("event is not a JSON object")
    get = obj.get
    if get("error"):
        info.error = _err_message(obj["error"])
        return info
    if get("object") == "error":
        info.error = _err_message(obj)
        return info
    choices = get("choices")
    if choices and type(choices) is list:
        for ch in choices:
            if type(ch) is not dict:
                continue
            delta = ch.get("delta")
            fr = ch.get("finish_reason")
            if fr is not None and type(fr) is not str:
                fr = _text(fr, "choices[].finish_reason")
            if type(delta) is dict:
                c = delta.get("content")
                if c:
                    c = _text(c, "choices[].delta.content")
                    info.content_chars += len(c)
                    info.text += c
                elif c == "" and not fr and "role" not in delta:
                    info.empty_step = True
                if c is None or len(delta) > 1:  # reasoning, tool calls, role
                    _delta_extras(delta, info)
                    if info.empty_reasoning and not info.text_chars and not fr:
                        info.empty_step = True
            else:
                t = ch.get("text")  # completions endpoint
                if t:
                    t = _text(t, "choices[].text")
                    info.content_chars += len(t)
                    info.text += t
                elif t == "" and not fr:
                    info.empty_step = True
            if fr:
                info.finish_reason = fr
        info.text_chars += info.content_chars
    usage = get("usage")
    if isinstance(usage, dict):
        try:
            info.completion_tokens = _count(
                usage.get("completion_tokens"), "usage.completion_tokens"
            )
        except _BadNumber as e:
            info.bad = str(e)
        try:
            info.prompt_tokens = _count(usage.get("prompt_tokens"), "usage.prompt_tokens")
        except _BadNumber as e:
            info.bad = info.bad or str(e)
        cdet = usage.get("completion_tokens_details")
        if isinstance(cdet, dict):
            try:  # OpenAI, vLLM with a reasoning parser; OpenAI's predicted outputs
                where = "usage.completion_tokens_details."
                info.reasoning_tokens = _count(
                    cdet.get("reasoning_tokens"), where + "reasoning_tokens"
                )
                info.pred_accepted = _count(
                    cdet.get("accepted_prediction_tokens"), where + "accepted_prediction_tokens"
                )
                info.pred_rejected = _count(
                    cdet.get("rejected_prediction_tokens"), where + "rejected_prediction_tokens"
                )
            except _BadNumber as e:
                info.bad = info.bad or str(e)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            try:  # vLLM (--enable-prompt-tokens-details), SGLang, OpenAI
                info.cached_tokens = _count(
                    details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens"
                )
            except _BadNumber as e:
                info.bad = info.bad or str(e)
    try:
        _spec_and_timings(obj, info)
    except _BadNumber as e:
        # a speculative-decoding or timing figure that cannot be read: the request is a
        # protocol error that names the field (its timing so far is kept)
        raise ProtocolError(str(e)) from None
    return info


def _spec_and_timings(obj: dict[str, Any], info: ChunkInfo) -> None:
    """Each engine's per-request figures where its final chunk carries them (the paths in
    ``tokmon/engines``: vLLM's ``metrics``, llama.cpp's ``timings``, SGLang's ``sglext``)."""
    for e in RESPONSE_READERS:
        if e.timing is not None:
            _timing(obj, e.timing, info)
        if e.spec is not None:
            _spec_at(obj, e.spec, e.source, info)


def _first(o: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` present (a 0 under the first name is a 0, not absent)."""
    return next((o[k] for k in keys if o.get(k) is not None), None)


def _timing(obj: dict[str, Any], tp: TimingPath, info: ChunkInfo) -> None:
    """A server's own timing of the request: a figure that cannot be one is flagged and
    gives no part of the split; a bad count of its tokens is flagged alone."""
    o = dig(obj, tp.at)
    if not isinstance(o, dict):
        return
    where = ".".join(tp.at) + "."
    n = None
    if tp.decode_count:
        try:
            n = info.timings_predicted_n = _count(o.get(tp.decode_count), where + tp.decode_count)
        except _BadNumber as e:
            info.bad = info.bad or str(e)  # a count: flagged, the chunks are counted
    try:
        q, p, itl = (
            _real(o.get(k), where + k, MAX_MS) if k else None
            for k in (tp.queue, tp.prefill, tp.itl)
        )
        total = None
        if tp.decode_total:  # the time over the generated tokens: per token over their count
            total = _real(o.get(tp.decode_total), where + tp.decode_total, MAX_MS)
            itl = total / n if total is not None and n else None
        if total is not None or any(x is not None for x in (q, p, itl)):
            info.timing = ServerTiming(q, p, itl)
    except _BadNumber as e:
        info.bad = info.bad or str(e)  # flagged; no part of the split from it
    if tp.cached and o.get(tp.cached) is not None:  # prompt tokens reused from its cache
        try:
            info.cached_tokens = _count(o.get(tp.cached), where + tp.cached)
        except _BadNumber as e:
            info.bad = info.bad or str(e)


def _spec_at(obj: dict[str, Any], sp: SpecPath, source: str, info: ChunkInfo) -> None:
    o = dig(obj, sp.at)
    if not isinstance(o, dict) or (sp.when and sp.when not in o):
        return
    info.spec = _spec(
        _first(o, sp.draft),
        _first(o, sp.accepted),
        _first(o, sp.steps),
        _first(o, sp.length),
        source,
        ".".join(sp.at),
    )


def _spec(
    draft: Any, accepted: Any, steps: Any, length: Any, source: str, where: str
) -> SpecFields:
    d = _count(draft, f"{where} draft tokens")
    a = _count(accepted, f"{where} accepted tokens")
    if d is not None and a is not None and a > d:
        # more accepted than drafted is impossible: never an acceptance over 100%
        raise _BadNumber(f"{where}: {a} accepted of {d} drafted tokens")
    return SpecFields(
        draft_tokens=d,
        accepted_tokens=a,
        drafts=_count(steps, f"{where} steps"),
        acceptance_length=_real(length, f"{where} acceptance length", hi=1e4),
        source=source,
    )


def _delta_extras(delta: dict[str, Any], info: ChunkInfo) -> None:
    """Reasoning text (under either name) and tool-call pieces of a chat delta."""
    for key in ("reasoning", "reasoning_content"):
        r = delta.get(key)
        if r:
            n = len(_text(r, f"choices[].delta.{key}"))
            info.text_chars += n
            info.reasoning_chars += n
        elif r == "":
            info.empty_reasoning = True
    tc = delta.get("tool_calls")
    if tc:
        # A tool-call delta is generated text even when its argument piece is empty.
        n = 0
        for call in tc if isinstance(tc, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                for k in ("arguments", "name"):
                    v = fn.get(k)
                    if v:
                        v = _text(v, f"choices[].delta.tool_calls[].function.{k}")
                        n += len(v)
                        if k == "name":
                            info.tool_name = v
                        else:
                            info.tool_args += v
        info.text_chars += max(n, 1)
