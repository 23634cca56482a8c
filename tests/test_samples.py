"""Typed probe samples: every field a probe (or a file) gives is checked once, where it is
read, and a figure that cannot be is None, never shown."""

from __future__ import annotations

import json

from tokmon.model.data.facts import Sample, Tick
from tokmon.model.data.samples import (
    CounterDelta,
    GpuSample,
    HostSample,
    NetSample,
    ServerSample,
    read,
)
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.probes.gpu import aggregate
from tokmon.probes.server import ServerMetricsProbe

S = 1_000_000_000


def test_each_source_reads_as_its_own_type_and_an_unknown_one_as_none():
    assert isinstance(read("gpu", {}), GpuSample)
    assert isinstance(read("host", {}), HostSample)
    assert isinstance(read("server", {}), ServerSample)
    assert isinstance(read("net", {}), NetSample)
    assert read("later-tokmon", {"x": 1}) is None
    assert read("gpu", "not a dict") == GpuSample()  # type: ignore[arg-type]


def test_what_a_probe_writes_reads_back_whole():
    """The GPU probe's aggregate and the server probe's fields, as they are written."""
    g = read("gpu", aggregate([{"util": 50.0, "mem_used_gib": 10.0, "mem_total_gib": 40.0,
                               "power_w": 300.0, "temp_c": 61.0}, {"util": 70.0}]))  # fmt: skip
    assert g == GpuSample(util=60.0, mem_used_gib=10.0, mem_pct=25.0, power_w=300.0,
                          temp_c=61.0, devices=2)  # fmt: skip
    p = ServerMetricsProbe("http://127.0.0.1:1/metrics", arms=("spec",))
    base = {"engine": "vllm", "kv": 0.5, "waiting": 3.0, "running": 8.0, "drafts": 0.0,
            "draft_tokens": 0.0, "accepted": 0.0, "prefix_queries": 0.0, "prefix_hits": 0.0}  # fmt: skip
    p.ingest(0, base)
    later = base | {"drafts": 10.0, "draft_tokens": 40.0, "accepted": 30.0,
                    "prefix_queries": 100.0, "prefix_hits": 25.0}  # fmt: skip
    v = {**p.ident(), **p.ingest(S, later)}
    v.pop("t_ns")
    s = read("server", json.loads(json.dumps(v)))  # as a recording gives it back
    assert isinstance(s, ServerSample)
    assert s.url == "http://127.0.0.1:1/metrics" and s.arms == ("spec",) and s.engine == "vllm"
    assert (s.kv_pct, s.queue, s.running) == (50.0, 3.0, 8.0)
    assert s.acceptance_rate == 0.75 and s.acceptance_length == 4.0
    assert s.spec_source == "server counters" and s.prefix_hit_pct == 25.0
    assert s.delta == CounterDelta(10.0, 40.0, 30.0, (100.0, 25.0))


def test_figures_that_cannot_be_are_none():
    s = ServerSample.of({"spec_acceptance_rate": 1.5, "spec_acceptance_length": 0.5,
                         "kv_pct": 140.0, "queue": -1, "running": True, "prefix_hit_pct": 101,
                         "delta": [1, 2, 3, 10, 11], "split": [1, 2, 3, 4, 5, -6],
                         "engine": 7, "url": None, "arms": ["a", 3, None]})  # fmt: skip
    assert s.acceptance_rate is None and s.acceptance_length is None
    assert s.kv_pct is None and s.queue is None and s.running is None
    assert s.prefix_hit_pct is None and s.split is None and s.engine is None
    assert s.url == "" and s.arms == ("a",)
    # more hits than lookups: the counters are kept, the prefix figures dropped
    assert s.delta == CounterDelta(1.0, 2.0, 3.0, None)
    assert CounterDelta.of([1, "2", 3]) is None and CounterDelta.of([1, 2]) is None
    assert CounterDelta.of([1, float("nan"), 3]) is None
    g = GpuSample.of({"gpu_util": 250, "gpu_mem_pct": -3, "gpu_power_w": -1,
                      "gpu_mem_used_gib": "12", "gpu_note": 5, "gpu_temp_c": float("inf")})  # fmt: skip
    assert g == GpuSample()
    n = NetSample.of({"net_rtt_ms": -1, "net_connect_ms": 4e6})
    assert n.rtt_ms is None and n.connect_ms is None
    h = HostSample.of({"self_rss_mib": -1, "record_bytes": "9", "disk_free_bytes": 1e9})
    assert h == HostSample(disk_free_bytes=1e9)


def test_the_fold_shows_only_what_can_be():
    """A recording written by hand with a rate over 100%, a negative queue and a GPU at
    250%: the dashboard shows none of them, and a later good sample shows."""
    fold = Fold(FoldSettings(arms=("a",)))
    bad = {"url": "u", "arms": ["a"], "spec_acceptance_rate": 2.0, "queue": -4,
           "kv_pct": "90", "spec_acceptance_length": 3.0}  # fmt: skip
    fold.apply(Sample(S, "server", bad))
    fold.apply(Sample(S, "gpu", {"gpu_util": 250.0, "gpu_power_w": 100.0}))
    fold.apply(Tick(2 * S))
    snap = fold.snapshot
    assert snap is not None
    assert snap.window.acceptance_rate is None and snap.window.acceptance_length == 3.0
    assert snap.probes.queue is None and snap.probes.kv_pct is None
    assert snap.probes.gpu_util is None and snap.probes.gpu_power_w == 100.0
    fold.apply(Sample(3 * S, "server", bad | {"spec_acceptance_rate": 0.6, "queue": 2}))
    fold.apply(Tick(4 * S))
    snap = fold.snapshot
    assert snap is not None and snap.window.acceptance_rate == 0.6 and snap.probes.queue == 2
