"""Stability alerts and cost: synthetic soaks, the simulator's drift, a fake NVML's power."""

import numpy as np
import pytest
from fake_nvml import make

from tokmon.model.contract.history import Point
from tokmon.model.contract.views import Cost
from tokmon.model.judge.alerts import AlertEngine, cost_figures
from tokmon.model.statistics.trend import sen_slope


def soak(values, seconds, engine=None, **extra):
    eng = engine or AlertEngine()
    fired = []
    for i in range(seconds):
        kw = {k: (v(i) if callable(v) else v) for k, v in extra.items()}
        fired += [(i, m, d) for _, m, d in eng.add(Point(t=float(i), tok_s=values(i), **kw))]
    return eng, fired


@pytest.mark.slow
def test_flat_soak_raises_no_alert():
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 30, 3 * 3600)
    eng, fired = soak(
        lambda i: 1000 + noise[i], 3 * 3600, tpot_p50=lambda i: 25 + noise[i] / 100, queue=2.0
    )
    assert fired == []  # false alarms: 0 in a 3-hour flat soak (2 checks a minute)
    assert not eng.trends["tok_s"].significant or abs(eng.trends["tok_s"].pct_per_hour) < 1


def test_drift_alert_and_interval():
    rng = np.random.default_rng(2)
    noise = rng.normal(0, 20, 3600)
    # tokens/s falling 10% per hour (of its median)
    eng, fired = soak(lambda i: 1000 * (1 - 0.10 * i / 3600) + noise[i], 3600)
    tr = eng.trends["tok_s"]
    truth = -10 / 0.95  # slope relative to the run's median (950)
    assert tr.lo <= truth <= tr.hi
    drift = [m for _, m, d in fired if d["alert"] == "drift"]
    assert len(drift) == 1 and "tokens/s" in drift[0]


def test_saturation_when_queue_grows_and_throughput_is_flat():
    rng = np.random.default_rng(4)
    noise = rng.normal(0, 10, 600)
    eng, fired = soak(
        lambda i: 1000 + noise[i], 600, queue=lambda i: 0.0 if i < 300 else (i - 300) / 5
    )
    sat = [i for i, m, d in fired if d["alert"] == "saturation"]
    assert len(sat) == 1 and sat[0] > 300


def test_sen_slope():
    x = np.arange(50.0)
    s, lo, hi = sen_slope(x, 3 * x + 1)
    assert s == 3 and lo == 3 and hi == 3


def test_cost_arithmetic():
    c = cost_figures(1000.0, gpu_hour_price=2.5, gpus=1, power_w=700.0)
    assert c.cost_per_mtok == pytest.approx(2.5 / 3600 / 1000 * 1e6)  # 0.694
    assert c.joules_per_token == pytest.approx(0.7)
    assert c.tokens_per_joule == pytest.approx(1000 / 700)
    c = cost_figures(500.0, gpu_hour_price=2.0, gpus=4, power_w=None)
    assert c.cost_per_mtok == pytest.approx(8.0 / 3600 / 500 * 1e6)
    assert c.joules_per_token is None
    assert cost_figures(None, gpu_hour_price=2.0, gpus=1, power_w=100).cost_per_mtok is None


def test_energy_and_cost_from_fake_nvml(make_sim):
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.probes.gpu import NvmlProbe
    from tokmon.sources.live import LiveSession

    sim = make_sim(schedule=(5.0, 2.0, 1))
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=4,
        duration_s=4.0,
        max_tokens=LengthDist("fixed", 30),
    )
    probe = NvmlProbe(0.1, nvml=make(n=2, power_mw=350_000))  # 2 × 350 W
    s = LiveSession(cfg, target=sim.url, model="sim-27b", probes=[probe], gpu_hour_price=3.0)
    s.start()
    assert s.wait(30)
    s.close()
    a = s.summary()["arms"]["a"]
    tps = a["output_tokens_per_s"]
    assert a["mean_gpu_power_w"] == pytest.approx(700)
    assert a["joules_per_token"] == pytest.approx(700 / tps)
    assert a["cost_per_million_tokens"] == pytest.approx(3.0 * 2 / 3600 / tps * 1e6)  # 2 GPUs seen


@pytest.mark.slow
def test_sim_drift_detected_in_compressed_time(make_sim):
    """The simulator's 2%/h drift at 720× time: TPOT grows 0.4% per wall second."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sim.faults import Faults
    from tokmon.sim.model import parse_profile
    from tokmon.sources.live import LiveSession

    # A 3.6 s model step at 720× is 5 ms of wall time.
    sim = make_sim(
        profile=parse_profile("zero", "step_base_ms=3600"),
        time_scale=720.0,
        faults=Faults(drift=2.0),
    )
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=2,
        duration_s=40.0,
        max_tokens=LengthDist("fixed", 12),
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b", window_s=2.0)
    s.alerts.min_span_s = 20.0
    s.alerts.every_s = 2.0
    s.start()
    assert s.wait(90)
    s.close()
    tr = s.alerts.trends["tpot_p50"]
    # TPOT(t) = T0 (1 + 0.004 t); relative to its median (t ≈ 22 s): ≈ 1,320 %/h
    truth = 0.004 * 3600 * 100 / (1 + 0.004 * 22)
    assert tr.lo <= truth <= tr.hi or tr.pct_per_hour == pytest.approx(truth, rel=0.2)
    assert any(e.kind == "alert" and "TPOT" in e.message for e in s.fold.events)


def _sim_session(sim, cfg, *, window_s=2.0, **kw):
    """A session on the simulator with its /metrics probed and the alert spans shortened
    to fit a test (the detectors are the ones a real run uses)."""
    from tokmon.probes.server import ServerMetricsProbe
    from tokmon.sources.live import LiveSession

    probe = ServerMetricsProbe(
        sim.url.replace("/v1", "/metrics"), ("a",), interval=0.5, window_s=window_s
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b", window_s=window_s, probes=[probe], **kw)
    s.alerts.min_span_s = 10.0
    s.alerts.every_s = 1.0
    s.alerts.saturation_span_s = 16.0
    return s


@pytest.mark.slow
def test_saturation_flagged_only_past_the_simulators_capacity(make_sim):
    """Open-loop load below, then above, what a 4-sequence batch can serve."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sim.model import parse_profile

    # 20 tokens at 10 ms a step, 4 at a time: capacity ≈ 4 / 0.205 s ≈ 19 requests/s.
    prof = parse_profile(
        "27b-h100",
        "max_batch=4,step_base_ms=10,step_per_seq_ms=0,prefill_base_ms=5,"
        "prefill_ms_per_token=0,jitter=0.05",
    )
    sim = make_sim(profile=prof, seed=3)
    fired = {}
    for rate, secs in ((8.0, 16.0), (40.0, 22.0)):
        cfg = RunConfig(
            arms=(Arm("a", url=sim.url, model="sim-27b"),),
            mode="rate",
            rate=rate,
            duration_s=secs,
            max_tokens=LengthDist("fixed", 20),
            prompt_tokens=LengthDist("fixed", 16),
            ignore_eos=True,
            seed=1,
            drain_s=1.0,  # the saturated run ends with a long queue: do not wait it out
        )
        s = _sim_session(sim, cfg)
        s.start()
        assert s.wait(60)
        s.close()
        fired[rate] = [a for a in s.alerts.alerts if a["alert"] == "saturation"]
        if rate == 8.0:
            # a flat run below capacity: no alert of any kind (drift, change point, …)
            assert s.alerts.alerts == []
    assert fired[8.0] == []
    assert len(fired[40.0]) == 1 and fired[40.0][0]["signal"] == "queue"


def test_cost_per_kind_splits_the_arms_cost_by_stream_time():
    from types import SimpleNamespace as K

    from tokmon.model.judge.alerts import kind_cost_figures

    arm = Cost(cost_per_mtok=2.0, joules_per_token=0.5)
    # code: 1,000 tokens in 10 s of streams; chat: 1,000 tokens in 30 s
    kc = kind_cost_figures(
        arm,
        {
            "code": K(stream_s=10.0, output_tokens=1000),
            "chat": K(stream_s=30.0, output_tokens=1000),
        },
    )
    assert kc["code"].cost_per_mtok == pytest.approx(2.0 * 0.25 / 0.5)  # 1.0
    assert kc["chat"].cost_per_mtok == pytest.approx(2.0 * 0.75 / 0.5)  # 3.0
    assert kc["chat"].joules_per_token == pytest.approx(0.75)
    # the kinds' costs add up to the arm's: nothing is priced twice or left out
    assert 1000 * kc["code"].cost_per_mtok + 1000 * kc["chat"].cost_per_mtok == pytest.approx(
        2000 * 2.0
    )


@pytest.mark.slow
def test_cost_per_kind_live_and_in_summary(make_sim):
    """With speculative decoding, code (α 0.82) costs less per token than creative (α 0.3)."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sources.live import LiveSession

    sim = make_sim(spec=True, seed=5, time_scale=4.0)
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=6,
        duration_s=8.0,
        max_tokens=LengthDist("fixed", 40),
        ignore_eos=True,
        mix=(("code", 0.5), ("creative", 0.5)),
        seed=2,
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b", gpu_hour_price=2.5)
    s.start()
    assert s.wait(40)
    snap = s.snapshot()
    live = dict(snap.costs["a"].by_kind)
    s.close()
    from tokmon.model.contract.views import Price
    from tokmon.ui.app import DashboardApp, fit_blocks

    assert snap.price == Price(2.5, 1)
    shown = fit_blocks(DashboardApp(s)._compare_blocks(snap), 100).plain
    assert shown.count("2.5/GPU-h") == 1 and "cost at 2.5/GPU-h × 1 GPU (whole run)" in shown
    a = s.summary()["arms"]["a"]
    bk = a["by_kind"]
    assert bk["code"]["cost_per_million_tokens"] < 0.75 * bk["creative"]["cost_per_million_tokens"]
    total = sum(v["cost_per_million_tokens"] * v["output_tokens"] for v in bk.values())
    assert total == pytest.approx(a["cost_per_million_tokens"] * a["output_tokens"], rel=1e-6)
    assert live["code"].cost_per_mtok < live["creative"].cost_per_mtok
    from tokmon.report.summary_text import summary_table

    assert "/Mtok" in summary_table(s.summary())


def test_a_10_per_cent_an_hour_drift_is_inside_its_interval_after_20_minutes():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        noise = rng.normal(0, 20, 1200)
        eng, _ = soak(lambda i, n=noise: 1000 * (1 - 0.10 * i / 3600) + n[i], 1200)
        tr = eng.trends["tok_s"]
        truth = -10 / (1 - 0.10 * 600 / 3600)  # relative to the median (at 10 minutes)
        assert tr.lo <= truth <= tr.hi, (seed, tr)
