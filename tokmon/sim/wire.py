"""What the simulator's answers look like on the wire: a streamed chunk (text, a
thought, a tool call's delta), the closing usage chunk with vLLM's per-request figures,
and which tokens are thinking. Functions of the request's state, no server in them."""

from __future__ import annotations

import json
from typing import Any

from tokmon.sim.config import SimConfig
from tokmon.sim.seq import Seq


def thinking(cfg: SimConfig, start: int) -> bool:
    """Whether the token at ``start`` is in the reasoning phase."""
    r = cfg.reasoning
    return r < 0 or start < r


def reasoning_tokens(cfg: SimConfig, s: Seq) -> int:
    r = cfg.reasoning
    if not s.chat or r == 0:
        return 0
    return s.produced if r < 0 else min(r, s.produced)


def chunk(
    s: Seq,
    text: str = "",
    role: bool = False,
    finish: str | None = None,
    think: bool = False,
    call: str = "",
    first: bool = False,
) -> bytes:
    fr = "null" if finish is None else f'"{finish}"'
    if s.chat:
        field = "reasoning_content" if think else "content"
        if call and not role:  # a tool call's delta: its name first, then its arguments
            fn: dict[str, Any] = {"arguments": text}
            tc: dict[str, Any] = {"index": 0, "function": fn}
            if first:
                tc.update(id=f"call_{s.rid:08x}", type="function")
                fn["name"] = call
            delta = json.dumps({"tool_calls": [tc]})
        else:
            delta = '{"role":"assistant","content":""}' if role else json.dumps({field: text})
        choice = f'{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{fr}}}'
        obj = "chat.completion.chunk"
    else:
        choice = f'{{"index":0,"text":{json.dumps(text)},"logprobs":null,"finish_reason":{fr}}}'
        obj = "text_completion"
    usage = ""
    if s.continuous and not role:
        usage = (
            f',"usage":{{"prompt_tokens":{s.prompt_tokens},"total_tokens":'
            f'{s.prompt_tokens + s.produced},"completion_tokens":{s.produced}}}'
        )
    return (
        f'data: {{"id":"{s.cid}","object":"{obj}","created":{s.created},'
        f'"model":"{s.model}","choices":[{choice}]{usage}}}\n\n'
    ).encode()


def usage_chunk(cfg: SimConfig, s: Seq) -> bytes:
    obj = "chat.completion.chunk" if s.chat else "text_completion"
    d: dict[str, Any] = {
        "id": s.cid,
        "object": obj,
        "created": s.created,
        "model": s.model,
        "choices": [],
        "usage": {
            "prompt_tokens": s.prompt_tokens,
            "total_tokens": s.prompt_tokens + s.produced,
            "completion_tokens": s.produced,
            "prompt_tokens_details": {"cached_tokens": s.cached},
        },
    }
    if reasoning_tokens(cfg, s):
        d["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens(cfg, s)}
    metrics: dict[str, Any] = {}
    if cfg.request_metrics:
        metrics.update(timing(s))
    if s.steps:
        # As vLLM with --per-request-spec-decode-metrics summary.
        metrics.update(
            {
                "speculative_decoding": {
                    "num_spec_steps": s.steps,
                    "num_draft_tokens": s.drafted,
                    "num_accepted_draft_tokens": s.accepted,
                    "draft_acceptance_rate": s.accepted / s.drafted if s.drafted else 0.0,
                    "mean_acceptance_length": 1 + s.accepted / s.steps,
                }
            }
        )
    if metrics:
        d["metrics"] = metrics
    return b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"


def timing(s: Seq) -> dict[str, float]:
    """vLLM's per-request timing (--enable-per-request-metrics), in ms of the wall
    clock (as its histograms): queued → scheduled, scheduled → first token, first →
    last token."""
    k = 1000.0
    gen = (s.t_last - s.t_first) * k
    out = {
        "queue_time_ms": (s.t_sched - s.t_arrival) * k,
        "time_to_first_token_ms": (s.t_first - s.t_sched) * k,
        "generation_time_ms": gen,
    }
    if s.produced > 1:
        out["mean_itl_ms"] = gen / (s.produced - 1)
    if s.t_last > s.t_sched:
        out["tokens_per_second"] = s.produced / ((s.t_last - s.t_sched) * k / 1000.0)
    return out
