"""The resolved settings of a run: one frozen object that the engine processes receive."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tokmon.model.env.redact import redact_argv
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.questions import QualityItem
from tokmon.model.workloads.trace import Trace
from tokmon.model.workloads.workload import (
    Conversations,
    LengthDist,
    Prompt,
    PromptShape,
    SharedPrefix,
)


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    first_token_s: float = 120.0
    idle_s: float = 60.0  # longest allowed gap between two reads of a stream
    total_s: float = 900.0


@dataclass(frozen=True)
class RunConfig:
    arms: tuple[Arm, ...]
    mode: str = "concurrency"  # or "rate", or "trace" (each request at its own time)
    concurrency: int = 4
    rate: float = 1.0
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int = 1024
    duration_s: float | None = None
    requests: int | None = None
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 128))
    # how to build prompts of an exact token count on the server (measured before the run;
    # None: word-sized prompts, about one token a word)
    prompt_shape: PromptShape | None = None
    # a system prompt shared by many requests (--shared-prefix, --prefix-pool)
    shared_prefix: SharedPrefix | None = None
    # multi-turn chats, one per stream (--turns, --think-time, --followup-tokens)
    conversations: Conversations | None = None
    # a load given request by request (--trace, --replay-load): times, lengths, prompts
    trace: Trace | None = None
    # write every prompt sent into the recording (--record-prompts), to replay it verbatim
    record_prompts: bool = False
    # questions with known answers mixed into the load (--quality-probes: the share of
    # requests), each answer checked by the engine (model/judge/quality.py)
    quality_share: float = 0.0
    # a user's own questions (--quality-file), asked instead of the built-in set
    quality_items: tuple[QualityItem, ...] = ()
    max_tokens: LengthDist = field(default_factory=lambda: LengthDist("fixed", 256))
    prompts: tuple[Prompt, ...] = ()
    mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    ignore_eos: bool = False
    # --image-size: the sides of the synthetic images the image kind sends, in turn
    image_sizes: tuple[int, ...] = (512,)
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    settle_s: float = 0.0
    assign: str = "switch"  # "switch" (one arm at a time), "alternate", "random"
    alternate_s: float | None = None
    stall_ms: float = 1000.0
    timeouts: Timeouts = field(default_factory=Timeouts)
    insecure: bool = False
    workers: int = 1
    # engine workers as Ray actors (--ray ADDRESS|local): the address, the actors' options
    # (resources, placement), and what a lost worker does ("continue" or "stop")
    ray: str | None = None
    ray_options: dict[str, Any] = field(default_factory=dict)
    ray_on_loss: str = "continue"
    continuous_usage: bool = False
    drain_s: float = 30.0
    flush_s: float = 0.1
    # The first part of every request's x-request-id (engine.request_id), so a request in
    # the recording can be found in the server's own logs (vLLM and SGLang log it). Random
    # per run, drawn by the caller (cli): the model draws no randomness of the OS's.
    run_id: str = "00000000"
    # header names whose values may be shown (--show-header); every other custom header's
    # value is redacted in every output
    shown_headers: tuple[str, ...] = ()
    shown_args: tuple[str, ...] = ()  # serve= options kept although their names look secret

    @property
    def level(self) -> float:
        """The whole run's load: streams, requests/s, or a trace's speed."""
        if self.mode == "concurrency":
            return float(self.concurrency)
        return self.trace.speed if self.trace is not None else self.rate

    def redacted(self) -> dict[str, Any]:
        """The settings as a plain dict, with every secret removed (for recordings)."""
        # (a trace or a file of conversations is data, not a setting: named, not copied)
        conv = self.conversations
        d = asdict(replace(self, trace=None, conversations=conv and replace(conv, scripts=())))
        if self.trace is not None:
            d["trace"] = self.trace.describe()
        if conv is not None and conv.scripts:
            d["conversations"]["scripts"] = f"<{len(conv.scripts)} conversations>"
        d["api_key"] = "<set>" if self.api_key else None
        d["prompts"] = f"<{len(self.prompts)} prompts>" if self.prompts else None
        # (a team's own questions and answers are its data: counted, not copied)
        d["quality_items"] = (
            f"<{len(self.quality_items)} questions>" if self.quality_items else None
        )
        shown = self.shown_headers
        d["headers"] = {k: redact_header(k, v, shown) for k, v in self.headers.items()}
        for a in d["arms"]:
            a["headers"] = {k: redact_header(k, v, shown) for k, v in a["headers"].items()}
            a["serve"] = redact_argv(a["serve"], self.shown_args)
        d["prompt_tokens"] = str(self.prompt_tokens)
        d["max_tokens"] = str(self.max_tokens)
        return d


# Headers whose values say nothing secret; every other header given by the user is
# redacted unless named with --show-header (a gateway's tenant id or routing key can be
# as sensitive as a key, and its name need not say so).
PLAIN_HEADERS = ("content-type", "accept", "accept-encoding", "user-agent", "x-request-id")


def redact_header(k: str, v: str, shown: tuple[str, ...] = ()) -> str:
    low = k.lower()
    if low in PLAIN_HEADERS or low in (s.lower() for s in shown):
        return v
    return "<redacted>"
