"""Per-request arithmetic: from stamped chunks to the figures of METRICS.md.

``StreamMeter`` is fed in the hot path (one call per event) and keeps only what the
definitions need; ``finish`` turns it into the fields of a RequestRecord. It is pure
(times are passed in), so it is tested on synthetic timelines.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

from tokmon.engine.chunks import ChunkInfo, ServerTiming, SpecFields

NS_PER_MS = 1_000_000
# The detail of an ok request without a TPOT although it had tokens to divide by.
NO_TPOT_ONE_READ = "no TPOT: the whole answer arrived in one read (no interval to divide)"
# The detail of an ok request whose kept text was cut (a conversation's reply, a quality
# probe's answer): what the rest of the run saw of it was its first ``keep_chars``.
CUT_PREFIX = "cut: "
KEEP_CHARS = 256 * 1024  # an answer's text kept, where it is kept at all
# The detail of an ok request of a reasoning model that never left its thinking.
NO_ANSWER_PREFIX = "no answer: "


class StreamMeter:
    __slots__ = (
        "t_send",
        "t_first_text",
        "t_first_content",
        "t_last_text",
        "t_last_event",
        "text_chunks",
        "empty_steps",
        "chunk_times",
        "cum_tokens",
        "exact_chunk_tokens",
        "usage_tokens",
        "prompt_tokens",
        "cached_tokens",
        "predicted_n",
        "finish_reason",
        "spec",
        "timing",
        "stall_ns",
        "stalls",
        "text_parts",
        "keep_text",
        "kept",
        "cut",
        "ticked",
        "bad",
        "t_last_reasoning",
        "reasoning_ticked",
        "reasoning_chunks",
        "reasoning_usage",
        "answer_lead",
        "tool_name",
        "tool_parts",
        "pred",
    )

    def __init__(
        self,
        t_send: int,
        stall_ms: float = 1000.0,
        keep_text: bool = False,
        keep_chars: int = KEEP_CHARS,
    ) -> None:
        self.t_send = t_send
        self.t_first_text: int | None = None
        self.t_first_content: int | None = None
        self.t_last_text: int | None = None
        self.t_last_event: int = t_send
        self.text_chunks = 0
        self.empty_steps = 0  # chunks of a token that decodes to no text (llama.cpp)
        self.chunk_times = array("q")
        self.cum_tokens = 0  # cumulative completion_tokens seen in per-chunk usage
        self.exact_chunk_tokens = True  # every text chunk had cumulative usage so far
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.predicted_n: int | None = None
        self.finish_reason: str | None = None
        self.spec: SpecFields | None = None
        self.timing: ServerTiming | None = None
        self.stall_ns = int(stall_ms * NS_PER_MS)
        self.stalls = 0
        self.text_parts: list[str] = []
        self.keep_text = keep_text
        # the text is kept up to ``keep_chars`` (a server may send 300 MB where a number
        # was asked); the rest is counted in ``cut`` and dropped as it arrives
        self.kept = keep_chars
        self.cut = 0
        self.ticked = 0
        self.bad: list[str] = []  # numbers from the server that could not be counts
        # a reasoning model's thinking: its last chunk, the tokens its chunks carried
        # (from the cumulative usage where the server sends it, else one a chunk), and
        # the server's own count (usage.completion_tokens_details.reasoning_tokens)
        self.t_last_reasoning: int | None = None
        self.reasoning_ticked = 0
        self.reasoning_chunks = 0
        self.reasoning_usage: int | None = None
        # the answer's tokens before its first text (the forced end of thinking, bytes
        # held back): of the answer, but before its timed span
        self.answer_lead = 0
        # a tool call's name and its arguments' pieces (kept with the text: checked)
        self.tool_name = ""
        self.tool_parts: list[str] = []
        self.pred: tuple[int | None, int | None] = (None, None)  # predicted outputs

    def on_event(self, t: int, info: ChunkInfo) -> int:
        """Account one event stamped at ``t``; returns the tokens it carried (for live ticks)."""
        self.t_last_event = t
        tokens = 0
        if info.bad and info.bad not in self.bad:
            self.bad.append(info.bad)
        if info.text_chars:
            if self.t_first_text is None:
                self.t_first_text = t
            elif t - self.t_last_text > self.stall_ns:  # type: ignore[operator]
                self.stalls += 1
            if info.content_chars and self.t_first_content is None:
                self.t_first_content = t
            self.t_last_text = t
            self.text_chunks += 1
            self.chunk_times.append(t)
            if self.keep_text and (info.tool_name or info.tool_args):
                self.tool_name = self.tool_name or info.tool_name[:200]
                if info.tool_args and self.kept > 0:
                    piece = info.tool_args[: self.kept]
                    self.tool_parts.append(piece)
                    self.kept -= len(piece)
            if self.keep_text and info.text:
                part = info.text
                if len(part) > self.kept:
                    self.cut += len(part) - self.kept
                    part = part[: self.kept]
                if part:
                    self.text_parts.append(part)
                    self.kept -= len(part)
            if info.completion_tokens is not None:
                tokens = max(info.completion_tokens - self.cum_tokens, 0)
                self.cum_tokens = info.completion_tokens
            else:
                self.exact_chunk_tokens = False
                tokens = 1
            self.ticked += tokens
            if info.reasoning_chars and not info.content_chars:
                self.t_last_reasoning = t
                self.reasoning_ticked += tokens
                self.reasoning_chunks += 1
        elif info.empty_step:
            self.empty_steps += 1
            if info.empty_reasoning:
                self.t_last_reasoning = t
                self.reasoning_chunks += 1
            elif self.reasoning_chunks and self.t_first_content is None:
                self.answer_lead += 1
        elif info.completion_tokens is not None:
            # A usage-only chunk: the final count. Tokens not yet ticked arrive "now".
            self.cum_tokens = max(self.cum_tokens, info.completion_tokens)
        if info.completion_tokens is not None:
            self.usage_tokens = info.completion_tokens
        if info.prompt_tokens is not None:
            self.prompt_tokens = info.prompt_tokens
        if info.cached_tokens is not None:
            self.cached_tokens = info.cached_tokens
        if info.reasoning_tokens is not None:
            self.reasoning_usage = info.reasoning_tokens
        if info.pred_accepted is not None or info.pred_rejected is not None:
            self.pred = (info.pred_accepted, info.pred_rejected)
        if info.finish_reason:
            self.finish_reason = info.finish_reason
        if info.spec is not None:
            self.spec = info.spec
        if info.timing is not None:
            self.timing = info.timing
        if info.timings_predicted_n is not None:
            self.predicted_n = info.timings_predicted_n
        return tokens

    def output_tokens(self) -> tuple[int, bool]:
        """(N, estimated) per METRICS.md: usage, else per-chunk deltas, else an estimate."""
        if self.usage_tokens is not None:
            return self.usage_tokens, False
        if self.predicted_n is not None:
            return self.predicted_n, False
        # one chunk per engine step, text or not (METRICS.md: a labelled estimate)
        return self.text_chunks + self.empty_steps, True

    def finish(self, t_end: int) -> dict[str, Any]:
        """The figures of this request. ``t_end`` is when the stream ended."""
        n, estimated = self.output_tokens()
        ms = NS_PER_MS
        out: dict[str, Any] = {
            "output_tokens": n,
            "tokens_estimated": estimated,
            "prompt_tokens": self.prompt_tokens,
            # (never more than the prompt: a count over it is the server's bug, left out)
            "cached_tokens": self.cached_tokens
            if self.cached_tokens is None
            or self.prompt_tokens is None
            or self.cached_tokens <= self.prompt_tokens
            else None,
            "chunks": self.text_chunks,
            "finish_reason": self.finish_reason,
            "stalls": self.stalls,
        }
        if self.bad:
            out["suspect"] = "; ".join(self.bad)[:300]
        if self.cut:
            kept = sum(map(len, self.text_parts))
            out["note"] = f"{CUT_PREFIX}kept the first {kept:,} characters of {kept + self.cut:,}"
        if self.t_first_text is not None:
            ct = self.chunk_times
            gaps = array("f", [(ct[i] - ct[i - 1]) / ms for i in range(1, len(ct))])
            # METRICS.md's invariants: nothing arrives before its request was sent, and
            # time never runs backwards. A request that breaks one is kept and flagged,
            # its durations left out of every figure -- never clamped to zero.
            if self.t_first_text < self.t_send:
                out["clock"] = (
                    f"first token {(self.t_send - self.t_first_text) / ms:.3f} ms before the send"
                )
            elif gaps and min(gaps) < 0:
                out["clock"] = f"a chunk {-min(gaps):.3f} ms before the one before it"
            if "clock" in out:
                out["e2e_ms"] = None
                return self._spec(out)
            ttft = (self.t_first_text - self.t_send) / ms
            e2e = (self.t_last_text - self.t_send) / ms  # type: ignore[operator]
            out["ttft_ms"] = ttft
            out["e2e_ms"] = e2e
            if self.t_first_content is not None:
                out["ttfc_ms"] = (self.t_first_content - self.t_send) / ms
            if n >= 2 and e2e > ttft:
                out["tpot_ms"] = (e2e - ttft) / (n - 1)
                out["decode_tps"] = (n - 1) / ((e2e - ttft) / 1000.0)
            elif n >= 2:
                out.setdefault("note", NO_TPOT_ONE_READ)
            self._reasoning(out, n)
            if gaps:
                out["max_gap_ms"] = max(gaps)
                if sys.byteorder != "little":
                    gaps.byteswap()
                out["gaps"] = gaps.tobytes()
        elif t_end < self.t_send:
            out["clock"] = f"end {(self.t_send - t_end) / ms:.3f} ms before the send"
            out["e2e_ms"] = None
        else:
            out["e2e_ms"] = (t_end - self.t_send) / ms
        return self._spec(out)

    def _reasoning(self, out: dict[str, Any], n: int) -> None:
        """A reasoning model's phases (METRICS.md, *Reasoning*): its thinking tokens (the
        server's count, else its reasoning chunks' and said so), the thinking's decode
        speed, and the answer's — or, where no answer came, that it never answered."""
        if self.reasoning_usage is None and not self.reasoning_chunks:
            return
        # A server count below the reasoning chunks its own stream carried (each at least a
        # token) is not a count (vLLM 0.32 says 0 under a thinking budget): counted instead
        counted = self.reasoning_usage is None or self.reasoning_usage < self.reasoning_chunks
        # counted: the tokens its chunks carried, at least one a chunk (an empty one's token
        # is ticked with the next chunk's, which may be the answer's)
        r = max(self.reasoning_ticked, self.reasoning_chunks) if counted else self.reasoning_usage
        r = min(int(r or 0), n)
        out["reasoning_tokens"] = r
        out["reasoning_counted"] = counted
        ms = NS_PER_MS
        t0, t1 = self.t_first_text, self.t_last_reasoning
        if r >= 2 and t0 is not None and t1 is not None and t1 > t0:
            out["reasoning_tps"] = (r - 1) / ((t1 - t0) / ms / 1000.0)
        a0, a1 = self.t_first_content, self.t_last_text
        answer = n - r - self.answer_lead  # (the tokens from its first text on)
        if a0 is None:
            # thought to its end and never answered: no answer time, and said
            out.setdefault("note", f"{NO_ANSWER_PREFIX}thought for all its {n} tokens "
                                   f"(finish {self.finish_reason or 'none'})")  # fmt: skip
        elif answer >= 2 and a1 is not None and a1 > a0:
            out["answer_tps"] = (answer - 1) / ((a1 - a0) / ms / 1000.0)

    def _spec(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.pred != (None, None):
            out["pred_accepted"], out["pred_rejected"] = self.pred
        if self.timing is not None:
            out["srv_queue_ms"] = self.timing.queue_ms
            out["srv_prefill_ms"] = self.timing.prefill_ms
            out["srv_itl_ms"] = self.timing.itl_ms
        if self.spec is not None:
            out["spec_draft_tokens"] = self.spec.draft_tokens
            out["spec_accepted_tokens"] = self.spec.accepted_tokens
            out["spec_drafts"] = self.spec.drafts
            out["spec_source"] = self.spec.source
        return out

    def untick_tokens(self) -> int:
        """Tokens the final count adds beyond what was ticked chunk by chunk."""
        n, _ = self.output_tokens()
        return n - self.ticked

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def tool_call(self) -> tuple[str, str]:
        """The tool call streamed: its name and its arguments' text."""
        return self.tool_name, "".join(self.tool_parts)
