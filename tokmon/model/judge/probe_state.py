"""What the probes saw: the latest sample of each source, each server's counter deltas
(speculative decoding, the prefix cache), every network round trip, and the GPU's power
over time — a reducer of typed probe samples (``model/data/samples.py``), read by the snapshot
and the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.views import ProbeView
from tokmon.model.data.samples import GpuSample, HostSample, NetSample, ProbeSample, ServerSample
from tokmon.model.judge.active import Segment
from tokmon.model.statistics.stats import ArmTotals, GrowArray

SERVER_OFF = ServerSample(note="server metrics off")
INCONSISTENT = "inconsistent: more tokens accepted than drafted"


@dataclass
class _Server:
    """What one server's /metrics samples gave: its arms and the counter deltas."""

    arms: tuple[str, ...]
    latest: ServerSample = ServerSample()
    deltas: list[tuple[int, float, float, float]] = field(default_factory=list)
    # (t, prompt tokens looked up in the prefix cache, of which hit)
    prefix: list[tuple[int, float, float]] = field(default_factory=list)


@dataclass
class _Net:
    """What one server's network probe gave: its arms and every round trip (ms)."""

    arms: tuple[str, ...]
    latest: NetSample = NetSample()
    rtt: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reading:
    """The latest sample of each probe as one arm sees it: the GPU and the host, and the
    server and network of that arm's server (an empty sample: none came)."""

    gpu: GpuSample = GpuSample()
    host: HostSample = HostSample()
    server: ServerSample = ServerSample()
    net: NetSample = NetSample()

    def view(self) -> ProbeView:
        g, h, srv = self.gpu, self.host, self.server
        return ProbeView(
            gpu_util=g.util,
            gpu_mem_used_gib=g.mem_used_gib,
            gpu_mem_pct=g.mem_pct,
            gpu_power_w=g.power_w,
            gpu_temp_c=g.temp_c,
            gpu_note=g.note,
            kv_pct=srv.kv_pct,
            queue=srv.queue,
            running=srv.running,
            prefix_hit_pct=srv.prefix_hit_pct,
            engine=srv.engine,
            server_note=srv.note,
            self_cpu_pct=h.self_cpu_pct,
            host_cpu_pct=h.host_cpu_pct,
            self_rss_mib=h.self_rss_mib,
            net_rtt_ms=self.net.rtt_ms,
        )


def _in_spans(t: int, t0: int | None, segments: list[tuple[int, int | None]] | None) -> bool:
    if t0 is not None and t < t0:
        return False
    return segments is None or any(s <= t <= (e if e is not None else t) for s, e in segments)


def prefix_hit_rate(
    prefix: list[tuple[int, float, float]],
    t0: int | None = None,
    segments: list[tuple[int, int | None]] | None = None,
) -> float | None:
    """The server's prefix-cache hit rate over a span: prompt tokens found cached over
    those looked up, from its own counters (vLLM ``prefix_cache_hits``/``_queries``)."""
    q = h = 0.0
    for t, dq, dh in prefix:
        if _in_spans(t, t0, segments):
            q, h = q + dq, h + dh
    return h / q if q > 0 else None


def spec_totals(
    deltas: list[tuple[int, float, float, float]],
    t0: int | None = None,
    segments: list[tuple[int, int | None]] | None = None,
) -> dict[str, Any] | None:
    """Acceptance over a span (or over segments) from /metrics counter deltas
    (drafts, draft tokens, accepted tokens), as docs/METRICS.md defines it."""
    dn = dd = da = 0.0
    for t, a, b, c in deltas:
        if _in_spans(t, t0, segments):
            dn, dd, da = dn + a, dd + b, da + c
    if dd <= 0:
        return None
    if da > dd:
        return {
            "acceptance_rate": None,
            "source": f"server counters ({INCONSISTENT})",
        }
    return {
        "acceptance_rate": da / dd,
        "source": "server counters",
        "acceptance_length": 1 + da / dn if dn > 0 else None,
        "draft_tokens": dd,
        "accepted_tokens": da,
        "drafts": dn,
    }


class ProbeState:
    """The probes' samples, folded. ``gpus``: the GPUs a price covers (None: as many as
    the GPU probe sees)."""

    def __init__(self, arms: list[str], gpus: int | None, server_metrics: bool) -> None:
        self.arms = arms
        self.server_metrics = server_metrics
        self.gpu, self.host = GpuSample(), HostSample()
        self.servers: dict[str, _Server] = {}  # per URL
        self.net: dict[str, _Net] = {}
        # (t, GPU watts) of every sample: energy per token (16 bytes a sample)
        self.power_t, self.power_w = GrowArray(64, np.int64), GrowArray(64, np.float64)
        self._gpus_set = gpus is not None
        self.gpus = gpus or 1

    def sample(self, t: int, r: ProbeSample) -> tuple[str, ...] | None:
        """Fold one sample in; a server's sample returns the arms that server serves."""
        match r:
            case ServerSample():
                srv = self.servers.get(r.url)
                if srv is None:
                    srv = self.servers[r.url] = _Server(r.arms)
                srv.latest = r
                if r.delta is not None:
                    d = r.delta
                    srv.deltas.append((t, d.drafts, d.draft_tokens, d.accepted))
                    if d.prefix is not None:
                        srv.prefix.append((t, *d.prefix))
                return srv.arms or tuple(self.arms)
            case NetSample():
                net = self.net.get(r.url)
                if net is None:
                    net = self.net[r.url] = _Net(r.arms)
                net.latest = r
                if r.rtt_ms is not None:
                    net.rtt.append(r.rtt_ms)
                if r.connect_ms is not None:
                    net.connect.append(r.connect_ms)
            case GpuSample():
                self.gpu = r
                if r.power_w is not None:
                    self.power_t.append(t)
                    self.power_w.append(r.power_w)
                if not self._gpus_set and r.devices:
                    self.gpus = r.devices
            case HostSample():
                self.host = r
        return None

    def reading(self, arm: str) -> Reading:
        """The latest samples; the server's and the network's are those of ``arm``'s
        server."""
        srv = None
        for s in self.servers.values():
            if arm in s.arms or (srv is None and not s.arms):
                srv = s.latest
        if srv is None:
            srv = ServerSample() if self.server_metrics else SERVER_OFF
        net = next((n.latest for n in self.net.values() if arm in n.arms or not n.arms), None)
        return Reading(self.gpu, self.host, srv, net or NetSample())

    def rtt_ms(self, arm: str) -> float | None:
        """The network round trip (p50 of the run's samples) to ``arm``'s server."""
        for n in self.net.values():
            if (arm in n.arms or not n.arms) and n.rtt:
                return float(np.median(n.rtt))
        return None

    def network_summary(self, totals: dict[str, ArmTotals]) -> dict[str, Any]:
        """Per server: the round trips sampled during the run and the share of TTFT that
        the network alone explains (round trip p50 / TTFT p50 of the arms there)."""
        out: dict[str, Any] = {}
        for url, n in self.net.items():
            if not n.rtt and not n.connect:
                continue
            rtt = np.asarray(n.rtt, dtype=np.float64)
            d: dict[str, Any] = {
                "arms": list(n.arms),
                "samples": int(rtt.size),
                "rtt_ms": None
                if not rtt.size
                else {
                    "p50": float(np.median(rtt)),
                    "min": float(rtt.min()),
                    "max": float(rtt.max()),
                },
                "connect_ms_p50": float(np.median(n.connect)) if n.connect else None,
            }
            shares = {}
            for arm in n.arms or tuple(self.arms):
                tot = totals.get(arm)
                p50 = tot.ttft.median() if tot is not None else None
                if rtt.size and p50 is not None and p50 > 0:
                    shares[arm] = min(1.0, float(np.median(rtt)) / p50)
            d["ttft_share"] = shares
            out[url] = d
        return out

    def mean_power(self, segs: list[Segment], t_measure: int | None, t_end: int) -> float | None:
        """Mean GPU power over ``segs`` (after the warm-up). Asked every tick: O(samples)
        in numpy, not samples × segments in Python (a day has 86,400 of one and 5,760 of
        the other)."""
        t0 = t_measure if t_measure is not None else 0
        if not segs or not len(self.power_t):
            return None
        t, w = self.power_t.values, self.power_w.values
        starts = np.array([sg.t0 for sg in segs], dtype=np.int64)
        ends = np.array([sg.t1 if sg.t1 is not None else t_end for sg in segs], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        j = np.searchsorted(starts, t, side="right") - 1  # the last span begun by t
        inside = (j >= 0) & (t >= t0) & (t < ends[np.maximum(j, 0)])
        return float(w[inside].mean()) if inside.any() else None

    def server_spec(
        self, segments: list[Segment], t_measure: int | None, concurrent: bool
    ) -> dict[str, dict[str, Any]]:
        """Acceptance per arm from its server's counters over the measured part of the run."""
        out: dict[str, dict[str, Any]] = {}
        for arm in self.arms:
            for srv in self.servers.values():
                if arm not in srv.arms:
                    continue
                if len(srv.arms) == 1:
                    tot = spec_totals(srv.deltas, t0=t_measure)
                    hits = prefix_hit_rate(srv.prefix, t0=t_measure)
                elif concurrent:
                    # two arms at once on one server: counters cannot tell them apart
                    tot = hits = None
                else:
                    tm = t_measure
                    segs = [(max(sg.t0, tm or sg.t0), sg.t1) for sg in segments if sg.arm == arm]
                    tot = spec_totals(srv.deltas, segments=segs)
                    hits = prefix_hit_rate(srv.prefix, segments=segs)
                if tot is not None or hits is not None:
                    out[arm] = (tot or {}) | {"prefix_cache_hit_rate": hits}
        return out
