"""The simulator's timing model. Every figure it produces follows these formulas.

Continuous batching, as vLLM and SGLang do it:

* Requests wait in a FIFO queue and are admitted while the batch has fewer than
  ``max_batch`` sequences and the KV cache has room for the request's prompt plus its
  ``max_tokens`` (a budget of ``kv_tokens`` tokens); otherwise they wait.
* The engine runs one iteration at a time. An iteration that admits new requests also
  prefills them: it costs ``prefill_base_ms + prefill_ms_per_token × prompt tokens``
  more, and yields each new request's first token.
* A decode iteration costs ``step_base_ms + step_per_seq_ms × running`` (decoding is
  memory-bandwidth bound: reading the weights is the base, each sequence's KV cache
  adds a little). Every running sequence gets one token per iteration.
* Speculative decoding: the draft proposes ``spec_k`` tokens at ``draft_ms_per_token``
  each; the target verifies them in one iteration that costs
  ``step_per_seq_ms × (k + 1)`` per sequence instead of ``step_per_seq_ms``. Each draft
  token is accepted with probability α (stopping at the first rejection), and the
  target adds one bonus token: 1 to k+1 tokens per step, all in one chunk. The
  expected tokens per step are ``(1 − α^(k+1)) / (1 − α)``. α depends on the kind of
  prompt (code and structured text high, free creative text low).
* Jitter: each iteration's cost is multiplied by exp(σZ − σ²/2) (mean 1), σ = ``jitter``.
* Drift: every cost is multiplied by ``1 + drift_pct_per_hour/100 × hours of run``.
* ``time_scale`` divides every duration (a soak runs faster than real time).

The default profile (``27b-h100``) is a ~27B model on one data-centre GPU: a single
stream decodes at 1000 / (24 + 0.12) ≈ 41 tokens/s; with speculative decoding on code
(α = 0.82, k = 4) at 3.5 tokens per 29.5 ms step ≈ 117 tokens/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    step_base_ms: float
    step_per_seq_ms: float
    prefill_base_ms: float
    prefill_ms_per_token: float
    max_batch: int
    kv_tokens: int
    spec_k: int = 4
    draft_ms_per_token: float = 1.2
    jitter: float = 0.0  # lognormal σ of each iteration's cost (mean kept): real GPUs are noisy

    def decode_step_ms(self, running: int, spec: bool) -> float:
        if spec:
            return (
                self.step_base_ms
                + self.step_per_seq_ms * running * (self.spec_k + 1)
                + self.draft_ms_per_token * self.spec_k
            )
        return self.step_base_ms + self.step_per_seq_ms * running

    def prefill_ms(self, prompt_tokens: int) -> float:
        return self.prefill_base_ms + self.prefill_ms_per_token * prompt_tokens

    def single_stream_tps(self, spec: bool = False, alpha: float = 0.0) -> float:
        """Steady single-stream decode speed in tokens/s from the formulas above."""
        step = self.decode_step_ms(1, spec)
        return 1000.0 * (expected_tokens_per_step(alpha, self.spec_k) if spec else 1.0) / step


def expected_tokens_per_step(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "27b-h100",
            "~27B dense model, one H100/H200-class GPU",
            24.0,
            0.12,
            8.0,
            0.05,
            64,
            200_000,
        ),
        Profile("8b-l40s", "~8B model, one L40S-class GPU", 11.0, 0.08, 5.0, 0.03, 128, 400_000),
        Profile(
            "70b-4gpu",
            "~70B model, tensor-parallel on four GPUs",
            32.0,
            0.2,
            15.0,
            0.09,
            128,
            600_000,
            spec_k=5,
            draft_ms_per_token=1.5,
        ),
        Profile(
            "small-cpu",
            "a tiny model on a CPU (like REAL-ENGINES.md)",
            8.0,
            1.2,
            2.0,
            0.02,
            16,
            16_000,
            spec_k=3,
            draft_ms_per_token=0.3,
        ),
        Profile(
            "zero",
            "no artificial delay: measures the client, not a model",
            0.0,
            0.0,
            0.0,
            0.0,
            100_000,
            1 << 60,
            spec_k=3,
            draft_ms_per_token=0.0,
        ),
    )
}

# Acceptance probability per task kind (see tokmon.model.workloads.workload.KINDS).
ALPHA = {"code": 0.82, "structured": 0.78, "summarize": 0.6, "chat": 0.5, "creative": 0.3}

_KIND_PATTERNS = (
    ("code", re.compile(r"\b(python|function|def |class |code|bug|compile)\b", re.I)),
    ("structured", re.compile(r"\b(json|table|extract|csv|yaml|fields)\b", re.I)),
    ("summarize", re.compile(r"\b(summari[sz]e|summary|tl;dr)\b", re.I)),
    ("creative", re.compile(r"\b(story|poem|imagine|creative|lyrics)\b", re.I)),
)


def classify_prompt(text: str) -> str:
    """The task kind the simulator infers from a prompt (its first 200 characters)."""
    head = text[:200]
    for kind, pat in _KIND_PATTERNS:
        if pat.search(head):
            return kind
    return "chat"


def parse_profile(name: str, overrides: str = "") -> Profile:
    """A named profile, optionally with ``field=value,...`` overrides."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (profiles: {', '.join(PROFILES)})")
    p = PROFILES[name]
    if not overrides:
        return p
    names = {f.name: f.type for f in fields(Profile)}
    kw: dict[str, float | int] = {}
    for part in overrides.split(","):
        k, eq, v = part.partition("=")
        k = k.strip()
        if not eq or k not in names or k in ("name", "description"):
            raise ValueError(f"bad profile override {part!r}")
        try:
            kw[k] = int(v) if k in ("max_batch", "kv_tokens", "spec_k") else float(v)
        except ValueError:
            raise ValueError(f"bad profile override {part!r}: not a number") from None
        if kw[k] < 0:
            raise ValueError(f"bad profile override {part!r}: must be >= 0")
    return replace(p, **kw)  # type: ignore[arg-type]
