"""A probe's sample as typed, checked fields: ``GpuSample``, ``HostSample``,
``ServerSample``, ``NetSample``, made from the plain JSON fields a probe sends and a
recording gives back (``Sample.values``), at the one place they are read (``read``).

Why here and not in the probes: a recording is plain JSON written by anyone, so the
fields must be checked where they are read, whoever wrote them; a probe's fields stay
plain so that the file holds what was measured. Every number passes ``coerce.number``
(finite or None) and every figure that cannot be (a rate over 100%, a negative count)
is None here, so no reader needs a check of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokmon.model.data.coerce import number, text

# a count no server can have (a queue, a batch): above it the field is taken as garbage
_COUNT_MAX = 1e6
# a round trip longer than an hour is not one
_RTT_MAX_MS = 3.6e6


def _num(v: Any) -> float | None:
    """A finite number from a probe's JSON (a string is not one: a probe writes numbers)."""
    return number(v, strings=False)


def _within(v: Any, lo: float, hi: float) -> float | None:
    x = _num(v)
    return x if x is not None and lo <= x <= hi else None


def _at_least(v: Any, lo: float) -> float | None:
    x = _num(v)
    return x if x is not None and x >= lo else None


def _opt_text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _arms(v: Any) -> tuple[str, ...]:
    return tuple(a for a in v if isinstance(a, str)) if isinstance(v, list) else ()


@dataclass(frozen=True, slots=True)
class GpuSample:
    """The GPUs a run watches, over the selected devices (means of rates, sums of
    amounts), from NVML or a DCGM exporter."""

    util: float | None = None  # %
    mem_used_gib: float | None = None
    mem_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    note: str | None = None  # why a field is missing ("no GPU", "GPU lost")
    devices: int = 0

    @classmethod
    def of(cls, v: dict[str, Any]) -> GpuSample:
        dev = v.get("gpu_devices")
        return cls(
            util=_within(v.get("gpu_util"), 0, 100),
            mem_used_gib=_at_least(v.get("gpu_mem_used_gib"), 0),
            mem_pct=_within(v.get("gpu_mem_pct"), 0, 100),
            power_w=_at_least(v.get("gpu_power_w"), 0),
            temp_c=_num(v.get("gpu_temp_c")),
            note=_opt_text(v.get("gpu_note")),
            devices=len(dev) if isinstance(dev, list) else 0,
        )


@dataclass(frozen=True, slots=True)
class HostSample:
    """The client's host and tokmon's own processes (CPU % of one core, memory), and the
    recording's size and the disk it is written to."""

    host_cpu_pct: float | None = None
    self_cpu_pct: float | None = None
    self_rss_mib: float | None = None
    record_bytes: float | None = None
    disk_free_bytes: float | None = None

    @classmethod
    def of(cls, v: dict[str, Any]) -> HostSample:
        return cls(
            host_cpu_pct=_at_least(v.get("host_cpu_pct"), 0),
            self_cpu_pct=_at_least(v.get("self_cpu_pct"), 0),
            self_rss_mib=_at_least(v.get("self_rss_mib"), 0),
            record_bytes=_at_least(v.get("record_bytes"), 0),
            disk_free_bytes=_at_least(v.get("disk_free_bytes"), 0),
        )


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """What a server's counters added since its last scrape: speculative decoding's
    drafts, draft tokens and accepted tokens, and the prefix cache's looked-up and hit
    prompt tokens (None: the server has no prefix counters)."""

    drafts: float
    draft_tokens: float
    accepted: float
    prefix: tuple[float, float] | None = None  # (looked up, of which hit)

    @classmethod
    def of(cls, d: Any) -> CounterDelta | None:
        if not isinstance(d, list) or len(d) not in (3, 5):
            return None
        x = [_num(a) for a in d]
        if any(a is None for a in x):
            return None
        f = [float(a) for a in x if a is not None]
        # (never a hit rate over 100%: hits within the lookups, and some looked up)
        prefix = (f[3], f[4]) if len(f) == 5 and f[3] > 0 and 0 <= f[4] <= f[3] else None
        return cls(f[0], f[1], f[2], prefix)


@dataclass(frozen=True, slots=True)
class ServerSample:
    """One scrape of a server's /metrics as neutral fields, for the arms it serves."""

    url: str = ""
    arms: tuple[str, ...] = ()
    engine: str | None = None
    note: str | None = None  # why there are no figures ("no server metrics")
    kv_pct: float | None = None
    queue: float | None = None
    running: float | None = None
    prefix_hit_pct: float | None = None  # over the probe's window
    acceptance_rate: float | None = None  # over the probe's window, 0..1
    acceptance_length: float | None = None  # tokens per step, ≥ 1
    spec_source: str | None = None  # server counters, server gauges
    delta: CounterDelta | None = None
    # the seconds and counts the queue, prefill and per-token histograms added since the
    # last scrape (six figures, none negative): the time split's server side
    split: tuple[float, ...] | None = None

    @classmethod
    def of(cls, v: dict[str, Any]) -> ServerSample:
        split = v.get("split")
        hist = None
        if isinstance(split, list) and len(split) == 6:
            xs = [_num(a) for a in split]
            if all(a is not None and a >= 0 for a in xs):
                hist = tuple(float(a) for a in xs if a is not None)
        return cls(
            url=text(v.get("url")),
            arms=_arms(v.get("arms")),
            engine=_opt_text(v.get("engine")),
            note=_opt_text(v.get("server_note")),
            kv_pct=_within(v.get("kv_pct"), 0, 100),
            queue=_within(v.get("queue"), 0, _COUNT_MAX),
            running=_within(v.get("running"), 0, _COUNT_MAX),
            prefix_hit_pct=_within(v.get("prefix_hit_pct"), 0, 100),
            acceptance_rate=_within(v.get("spec_acceptance_rate"), 0, 1),
            acceptance_length=_at_least(v.get("spec_acceptance_length"), 1),
            spec_source=_opt_text(v.get("spec_source")),
            delta=CounterDelta.of(v.get("delta")),
            split=hist,
        )


@dataclass(frozen=True, slots=True)
class NetSample:
    """The round trip to one server (the least of a few tiny GETs) and a TCP connect."""

    url: str = ""
    arms: tuple[str, ...] = ()
    rtt_ms: float | None = None
    connect_ms: float | None = None

    @classmethod
    def of(cls, v: dict[str, Any]) -> NetSample:
        rtt, conn = _num(v.get("net_rtt_ms")), _num(v.get("net_connect_ms"))
        return cls(
            url=text(v.get("url")),
            arms=_arms(v.get("arms")),
            rtt_ms=rtt if rtt is not None and 0 <= rtt < _RTT_MAX_MS else None,
            connect_ms=conn if conn is not None and 0 <= conn < _RTT_MAX_MS else None,
        )


ProbeSample = GpuSample | HostSample | ServerSample | NetSample

_KINDS: dict[str, type[GpuSample] | type[HostSample] | type[ServerSample] | type[NetSample]] = {
    "gpu": GpuSample,
    "host": HostSample,
    "server": ServerSample,
    "net": NetSample,
}


def read(src: str, values: dict[str, Any]) -> ProbeSample | None:
    """The typed sample of a probe's fields (None: a source this version does not know,
    such as one a later tokmon wrote)."""
    kind = _KINDS.get(src)
    return None if kind is None else kind.of(values if isinstance(values, dict) else {})
