"""Fault injection for the simulator: each off by default, settable at start and live."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

# Per-request faults, drawn once per request (mutually exclusive), with their rate.
REQUEST_FAULTS = ("http_500", "http_429", "stream_error", "drop", "malformed", "overlong", "stall")


@dataclass
class Faults:
    http_500: float = 0.0  # HTTP 500 with an OpenAI-style error body, before the stream
    http_429: float = 0.0  # HTTP 429 with Retry-After
    stream_error: float = 0.0  # an error event after a 200, mid-stream
    drop: float = 0.0  # the connection closed mid-stream
    malformed: float = 0.0  # an event that is not JSON, mid-stream
    overlong: float = 0.0  # one 5 MiB line mid-stream
    stall: float = 0.0  # a pause of stall_s seconds mid-stream
    stall_s: float = 3.0
    drift: float = 0.0  # % per hour of run time: every step cost grows by this
    kv_creep: float = 0.0  # % of the KV budget per hour, held by nobody (a leak)
    slowdown: float = 0.0  # % added to every step cost: set live, a step change
    # a step change on a known schedule: decoding (not prefill) costs ``step`` % more from
    # ``step_at`` seconds after the simulator started (the alert tests' scripted server)
    step: float = 0.0
    step_at: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Faults:
        """``http_500=0.01,stall=0.02,stall_s=2,drift=5``."""
        f = cls()
        if not text:
            return f
        vals: dict[str, Any] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            k, eq, v = part.partition("=")
            vals[k.strip()] = v.strip() if eq else None
        f.update(vals)
        return f

    def update(self, vals: dict[str, Any]) -> None:
        names = {fl.name for fl in fields(self)}
        for k, v in vals.items():
            if k not in names:
                raise ValueError(f"unknown fault {k!r} (faults: {', '.join(sorted(names))})")
            try:
                x = float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ValueError(f"fault {k}: {v!r} is not a number") from None
            if x < 0 or x != x:
                raise ValueError(f"fault {k}: must be >= 0")
            if k in REQUEST_FAULTS and x > 1:
                raise ValueError(f"fault {k}: a rate must be between 0 and 1")
            setattr(self, k, x)
        if sum(getattr(self, k) for k in REQUEST_FAULTS) > 1:
            raise ValueError("fault rates add up to more than 1")

    def draw(self, u: float) -> str | None:
        """Which fault (if any) a request with uniform draw ``u`` gets."""
        acc = 0.0
        for k in REQUEST_FAULTS:
            acc += getattr(self, k)
            if u < acc:
                return k
        return None

    def as_dict(self) -> dict[str, float]:
        return asdict(self)
