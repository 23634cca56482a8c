"""One request inside the simulated engine: what it asked, where it stands, its clock."""

from __future__ import annotations

import asyncio
import random
from typing import Any


class Seq:
    """One request inside the simulated engine."""

    __slots__ = (
        "rid",
        "request_id",
        "proto",
        "chat",
        "model",
        "created",
        "max_tokens",
        "prompt_tokens",
        "cached",
        "kind",
        "alpha",
        "spec",
        "include_usage",
        "continuous",
        "stream",
        "produced",
        "t_arrival",
        "t_received",
        "t_sched",
        "t_first",
        "t_last",
        "fault",
        "fault_at",
        "rng",
        "parts",
        "done",
        "stall_until",
        "kv_need",
        "cid",
        "role_sent",
        "steps",
        "drafted",
        "accepted",
        "future",
        "acc_rng",
        "script",
        "shape",
        "tool",
        "image_tokens",
    )
    rid: int
    proto: Any  # the connection it came on (``server.HttpProtocol``: it imports this)
    chat: bool
    model: str
    created: int
    max_tokens: int
    prompt_tokens: int
    kind: str
    alpha: float
    spec: bool
    include_usage: bool
    continuous: bool
    stream: bool
    t_arrival: float  # reached the engine's queue
    t_received: float  # reached the API server (its front end starts)
    fault: str | None
    fault_at: int
    rng: random.Random  # the text: greedy output depends on the prompt only
    acc_rng: random.Random  # acceptance draws: apart, so speculation never changes the text
    script: list[str]  # the first tokens, as said (a quality probe's answer); [] none
    shape: str  # an answer under a JSON schema, or a tool call's arguments, as JSON ("" none)
    tool: str  # the tool called ("" none)
    image_tokens: int  # of its prompt tokens, its images'
    kv_need: int
    cid: str

    def __init__(self) -> None:
        self.request_id = ""
        self.cached = 0
        self.produced = 0
        self.t_sched = 0.0  # admitted to the batch (vLLM: scheduled)
        self.t_first = 0.0
        self.t_last = 0.0
        self.parts: list[str] = []
        self.done = False
        self.stall_until = 0.0
        self.role_sent = False
        self.steps = 0
        self.drafted = 0
        self.accepted = 0
        self.future: asyncio.Future[Any] | None = None
