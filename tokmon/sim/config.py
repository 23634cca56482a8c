"""What a simulated server is: its timing profile, speculative decoding, faults, limits
and the extras a test asks of it (``tokmon sim``'s options, as one dataclass).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokmon.sim.faults import Faults
from tokmon.sim.model import PROFILES, Profile


@dataclass
class SimConfig:
    profile: Profile = field(default_factory=lambda: PROFILES["27b-h100"])
    spec: bool = False
    seed: int | None = None
    model_name: str = "sim-27b"
    time_scale: float = 1.0
    faults: Faults = field(default_factory=Faults)
    # A fixed per-request schedule (ttft_ms, gap_ms, tokens_per_chunk) instead of the
    # batching model: a server with a known token schedule, for timing-fidelity tests.
    schedule: tuple[float, float, int] | None = None
    alter_outputs: float = 0.0  # share of greedy outputs changed (an arm that alters text)
    # the answer model: quality probes (model/workloads/questions.py) are answered right, except at
    # this rate per task (a "quantised" arm: {"arith": 0.1})
    wrong: dict[str, float] = field(default_factory=dict)
    # Like vLLM's --api-key: /v1/* needs "Authorization: Bearer KEY"; /health, /version
    # and /metrics stay open (as they do on vLLM).
    api_key: str | None = None
    # Added to every answer before its first byte: a network round trip to a remote
    # server (the streams' chunk gaps are unchanged, as over a real link).
    net_delay_s: float = 0.0
    # POST /tokenize, as vLLM, SGLang and llama.cpp have it (off: a server without one)
    tokenize: bool = True
    # the tokenizer's rule: 0 the word rule (sim/tokenizer.py), N every N bytes a token
    token_bytes: int = 0
    # The API server's own time before a request reaches the engine's queue (HTTP,
    # tokenisation, the chat template): what a client sees as TTFT and the server's
    # queue and prefill figures do not hold.
    front_ms: float = 0.0
    # As vLLM's --enable-per-request-metrics: the final usage chunk carries ``metrics``
    # with queue_time_ms, time_to_first_token_ms (from scheduling), generation_time_ms,
    # mean_itl_ms and tokens_per_second.
    request_metrics: bool = False
    # Schedule mode: the first part of the schedule's TTFT is reported as waiting in the
    # queue (the rest as prefill): a server whose split is known to the millisecond.
    schedule_queue_ms: float = 0.0
    # Schedule mode: a server that holds N streams: above N in flight, each TTFT is the
    # schedule's × (in flight / N)² (a capacity known in advance, for the search's tests)
    schedule_capacity: int = 0
    # A run-to-run wobble: every cost of this server multiplied by one lognormal factor
    # of σ = wobble, drawn once at start from the seed (a second run of the "same"
    # server is not the same: what --repeat measures)
    wobble: float = 0.0
    # A reasoning model (vLLM with --reasoning-parser): the first N tokens of every chat
    # answer are its thinking, sent as ``delta.reasoning_content`` and counted in
    # ``usage.completion_tokens_details.reasoning_tokens``; -1: it never leaves its
    # thinking (a model that thinks to its limit)
    reasoning: int = 0
    # Guided decoding's cost: every token of a request under a JSON schema costs this many
    # ms more (schedule mode: added to its gap), as a grammar's mask costs a real server
    guided_ms: float = 0.0
    # Images (an ``image_url`` part): each counts ceil(w / 28) × ceil(h / 28) prompt tokens
    # (a vision model's 28-pixel patches); in schedule mode each adds this many ms to TTFT
    image_ms_per_token: float = 0.0
    # A server (or a proxy before it) that closes every connection after its answer
    # ("connection: close"): each request opens a new one, its setup before the send
    close_connections: bool = False
