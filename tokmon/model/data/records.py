"""Frozen facts that cross process and thread boundaries.

All times are nanoseconds on the system-wide monotonic clock (``time.perf_counter_ns``),
so records from engine processes and samples from probe threads share one axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OUTCOMES = (
    "ok",
    "connect",
    "timeout",
    "http_4xx",
    "http_429",
    "http_5xx",
    "stream_error",
    "protocol",
    "cancelled",
)
FAILURES = OUTCOMES[1:]
# The detail of an ok request whose timeline was impossible (a token before its send, a
# chunk before the one before it): kept and counted, left out of every duration figure.
CLOCK_PREFIX = "clock: "


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished request, measured per METRICS.md."""

    rid: int
    arm: str
    outcome: str
    t_sched: int
    t_end: int
    kind: str = ""
    segment: int = 0
    step: int = -1  # ladder step (-1: no ladder)
    t_send: int | None = None
    send_lag_ms: float | None = None
    connect_ms: float | None = None
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    ttfc_ms: float | None = None
    e2e_ms: float | None = None
    output_tokens: int = 0
    tokens_estimated: bool = False
    prompt_tokens: int | None = None
    prompt_tokens_asked: int | None = None  # what a synthetic prompt was built to have
    max_tokens_asked: int | None = None  # the max_tokens sent
    cached_tokens: int | None = None  # of the prompt, from the server's prefix cache
    turn: int = 0  # its place in a multi-turn conversation (1, 2, …; 0: not one)
    chunks: int = 0
    tpot_ms: float | None = None
    decode_tps: float | None = None
    max_gap_ms: float | None = None
    stalls: int = 0
    gaps: bytes = b""  # chunk gaps in ms, float32 little-endian (compact, immutable)
    finish_reason: str | None = None
    http_status: int | None = None
    error: str = ""
    warmup: bool = False
    settle: bool = False
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_drafts: int | None = None
    spec_source: str = ""
    worker: int = 0
    # the server's own account of the request (vLLM per-request metrics, llama.cpp
    # timings): waiting for a batch slot, scheduled → first token, its time per token
    srv_queue_ms: float | None = None
    quality: float | None = None  # a quality probe's answer: 1 correct, 0 not (None: no probe)
    srv_prefill_ms: float | None = None
    srv_itl_ms: float | None = None
    # a reasoning model's thinking (METRICS.md, *Reasoning*): its tokens (the server's
    # count, else its reasoning chunks' — ``reasoning_counted``), the decode speed of the
    # thinking and of the answer; its time to the first answer token is ``ttfc_ms``
    reasoning_tokens: int | None = None
    reasoning_counted: bool = False
    reasoning_tps: float | None = None
    answer_tps: float | None = None
    # a structured answer or a tool call checked (model/workloads/structured.py): 1 valid, 0 not
    valid: float | None = None
    image_px: int | None = None  # the image kind: the side of the image sent, in pixels
    # a new connection's setup in its phases (connect_ms is the whole): None where the
    # request went on a kept-alive connection
    dns_ms: float | None = None
    tcp_ms: float | None = None
    tls_ms: float | None = None
    # OpenAI's predicted outputs: usage.completion_tokens_details.{accepted,rejected}_…
    pred_accepted: int | None = None
    pred_rejected: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def counted(self) -> bool:
        """In summaries: not warm-up, not in a settle period after an arm switch."""
        return not self.warmup and not self.settle


@dataclass(frozen=True, slots=True)
class TokenTick:
    """Tokens that arrived in one time bucket for one arm (live throughput)."""

    t: int  # bucket start, ns
    arm: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened: an arm switch, a pause, a marker, an alert, a restart."""

    t: int
    kind: str
    message: str
    data: dict[str, object] = field(default_factory=dict)
    wall: float = 0.0  # time.time() when it happened, for the calendar


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """The engine's own view, sent with every batch."""

    t: int
    in_flight: int
    sent: int
    paused: bool
    arm: str
    level: float
    mode: str  # "concurrency" or "rate"
    loop_lag_ms: float
    send_lag_ms: float  # p50 of the batch
    done: bool = False
    worker: int = 0
    host: str = ""  # where the engine runs (Ray workers: each on its node)
    cpu_pct: float = 0.0  # the engine process's CPU since its last status (100: one core)
    # the last Pause it obeyed and when (perf ns): nothing is sent since, while paused
    pause_token: int = 0
    paused_t: int = 0


# --------------------------------------------------------------------------- the engine's pipes
# What crosses between the parent and an engine process: frozen and typed, never tuples
# read by position.


@dataclass(frozen=True, slots=True)
class EngineBatch:
    """Engine → parent, every ``flush_s``: finished requests, token buckets, events."""

    worker: int
    records: list[RequestRecord]
    ticks: dict[tuple[int, str], int]
    events: list[Event]
    status: EngineStatus
    prompts: list[SentPrompt] = field(default_factory=list)  # with --record-prompts
    # the load's input failed as it was read (a streamed trace's bad line): one line
    # that names it; the engine's share stops there, its requests in flight finish
    fault: str = ""


@dataclass(frozen=True, slots=True)
class SentPrompt:
    """What request ``rid`` sent (``--record-prompts``): its messages or its text, so a
    later run can send the very same load (``--replay-load``)."""

    rid: int
    messages: tuple[tuple[str, str], ...] = ()
    text: str = ""


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """Engine → parent: the engine is dying; why, in one line."""

    worker: int
    why: str
    lost: bool = False  # a Ray worker lost (its node or process gone), not a bug


@dataclass(frozen=True, slots=True)
class SwitchArm:
    """Parent → engine: new requests go to ``arm``, tagged with ``segment``."""

    arm: str
    segment: int
    t: int
    model: str = ""  # a managed server's model, known once it is ready


@dataclass(frozen=True, slots=True)
class BeginStep:
    """Parent → engine: a ladder step; its first requests settle for ``warm_s``."""

    step: int
    t: int
    prompt_tokens: str | None = None
    max_tokens: str | None = None
    warm_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Pause:
    """Parent → engine: stop (or resume) sending. ``token`` names a pause the parent waits
    for: each engine reports the last it obeyed, so a drain never trusts a status that was
    sent before the pause arrived."""

    paused: bool
    token: int = 0


@dataclass(frozen=True, slots=True)
class SetLevel:
    """Parent → engine: the whole run's streams (or req/s); each engine takes its share."""

    level: float


@dataclass(frozen=True, slots=True)
class Stop:
    hard: bool = False  # True: cancel in-flight requests; False: let them finish


@dataclass(frozen=True, slots=True)
class Abort:
    """Parent → engines: cancel the open-loop requests in flight (the backlog an
    overloaded capacity probe left, already judged), and go on."""

    why: str


@dataclass(frozen=True, slots=True)
class QualityPass:
    """Parent → engines: the next ``n`` requests of each of ``arms`` (all engines
    together) are quality probes (`o` on the dashboard): an arm not in force now is
    asked when its turn comes, so every arm gets its ``n``."""

    n: int
    arms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StartTrace:
    """Parent → engines: the trace's time 0, on the monotonic clock all processes share,
    sent once every engine is up (so that the workers' shares keep one schedule)."""

    t: int


Command = SwitchArm | BeginStep | Pause | SetLevel | Stop | StartTrace | Abort | QualityPass
