from pathlib import Path

import pytest
from fake_nvml import make

from tokmon.model.data.facts import Sample
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.probes.base import Sampler
from tokmon.probes.gpu import DcgmProbe, NvmlProbe, dcgm_devices
from tokmon.probes.server import ServerMetricsProbe, metrics_url_for, neutral

DATA = Path(__file__).parent / "data" / "metrics"


def fixture(name):
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    "name,engine,expect",
    [
        (
            "vllm_v1.txt",
            "vllm",
            {
                "running": 7,
                "waiting": 3,
                "kv": 0.42,
                "drafts": 100,
                "draft_tokens": 300,
                "accepted": 210,
                "gen_tokens": 5000,
                "preemptions": 2,
            },
        ),
        ("vllm_v0_old_cache.txt", "vllm", {"kv": 0.25, "acc_rate_gauge": 0.66, "gen_tokens": 123}),
        ("sglang.txt", "sglang", {"running": 5, "waiting": 1, "kv": 0.3, "acc_len_gauge": 2.8}),
        (
            "llamacpp.txt",
            "llama.cpp",
            {"running": 1, "drafts": 40, "draft_tokens": 400, "accepted": 100, "gen_tokens": 512},
        ),
        ("tgi.txt", "tgi", {"running": 12, "waiting": 4, "skipped_sum": 30, "skipped_count": 20}),
        ("trtllm.txt", "tensorrt-llm", {"kv": 0.5, "draft_tokens": 1000, "accepted": 700}),
        ("lmdeploy.txt", "lmdeploy", {"kv": 0.2, "drafts": 50, "accepted": 120}),
    ],
)
def test_engine_mapping(name, engine, expect):
    n = neutral(fixture(name))
    assert n["engine"] == engine
    for k, v in expect.items():
        assert n[k] == pytest.approx(v), k


def test_created_samples_are_not_counters():
    n = neutral(fixture("vllm_v0_old_cache.txt"))
    assert n["gen_tokens"] == 123  # not 123 + 1.7e9


def test_per_position_family():
    n = neutral(fixture("vllm_v1.txt"))
    assert n["per_pos"] == {0: 90, 1: 70, 2: 50}


def scaled(text, k):
    """The same exposition with every spec counter multiplied by k."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode") and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            line = f"{name} {float(v) * k}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_counter_deltas_reset_and_totals():
    p = ServerMetricsProbe("http://x/metrics", arms=("a",), window_s=100)
    events = []
    p.on_event = lambda kind, msg, data: events.append(kind)
    base = fixture("vllm_v1.txt")
    fold = Fold(FoldSettings(arms=("a",)))  # the run's totals come from the samples
    fold.apply(Sample(1_000_000_000, "server", p.ingest(1_000_000_000, neutral(base))))
    out = p.ingest(2_000_000_000, neutral(scaled(base, 2)))
    fold.apply(Sample(2_000_000_000, "server", out))
    # deltas: drafts 100, draft tokens 300, accepted 210
    assert out["spec_acceptance_rate"] == pytest.approx(0.7)
    assert out["spec_acceptance_length"] == pytest.approx(3.1)
    assert out["spec_per_pos"][0] == pytest.approx(0.9)
    assert out["kv_pct"] == pytest.approx(42)
    out = p.ingest(3_000_000_000, neutral(scaled(base, 0.1)))  # counters went down: restart
    fold.apply(Sample(3_000_000_000, "server", out))
    assert "restart" in events
    assert "spec_acceptance_rate" not in out  # that window has no value
    fold.apply(Sample(4_000_000_000, "server", p.ingest(4_000_000_000, neutral(scaled(base, 0.2)))))
    tot = fold.server_spec()["a"]
    # 100/300/210 before the restart + 10/30/21 after it; never the negative delta
    assert tot["draft_tokens"] == pytest.approx(330)
    assert tot["acceptance_rate"] == pytest.approx(231 / 330)


def test_gauges_when_no_counters():
    p = ServerMetricsProbe("http://x/metrics")
    out = p.ingest(1, neutral(fixture("sglang.txt")))
    assert out["spec_acceptance_rate"] == 0.61 and out["spec_source"] == "server gauges"


def test_tgi_histogram_acceptance_length():
    p = ServerMetricsProbe("http://x/metrics")
    t = fixture("tgi.txt")
    p.ingest(1, neutral(t))
    out = p.ingest(2, neutral(t.replace("_sum 30", "_sum 60").replace("_count 20", "_count 40")))
    assert out["spec_acceptance_length"] == pytest.approx(2.5)


def test_metrics_url():
    assert metrics_url_for("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url_for("http://h:8000/v1/") == "http://h:8000/metrics"


def test_unavailable_metrics_reported_once():
    p = ServerMetricsProbe("http://127.0.0.1:9/metrics")
    ev = []
    p.on_event = lambda kind, msg, data: ev.append(msg)
    for _ in range(3):
        assert p.sample() == {"server_note": "no server metrics"}
    assert len(ev) == 1


def test_sim_metrics_are_real_vllm_shape(make_sim):
    import httpx

    sim = make_sim(spec=True, schedule=(1.0, 1.0, 1))
    with httpx.Client() as c:
        c.post(
            sim.url + "/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        )
        n = neutral(c.get(sim.url.replace("/v1", "/metrics")).text)
    assert n["engine"] == "vllm" and n["gen_tokens"] == 5


# ----------------------------------------------------------------------------- NVML


def test_nvml_fake_fields_and_server_process():
    nv = make(n=2)
    p = NvmlProbe(gpus=[0, 1], server_pid=4242, nvml=nv)
    out = p.sample()
    assert out["gpu_util"] == 85 and out["gpu_power_w"] == 700
    assert out["gpu_mem_used_gib"] == pytest.approx(81)
    assert out["gpu_mem_pct"] == pytest.approx(100 * 81 / 282)
    assert out["gpu_server_mem_gib"] == pytest.approx(60)
    assert p.info["driver"] == "580.65.06" and p.info["gpus"][0].startswith("NVIDIA")
    p.sample()
    assert nv.state["init"] == 1  # lazily, once
    p.close()
    assert nv.state["shutdown"] == 1


def test_nvml_not_supported_fields_are_na():
    p = NvmlProbe(nvml=make(n=1, unsupported=("power", "temp", "procs")))
    out = p.sample()
    assert "gpu_power_w" not in out and "gpu_temp_c" not in out and out["gpu_util"] == 90


def test_nvml_gpu_lost_and_no_library():
    out = NvmlProbe(nvml=make(n=2, lost={1})).sample()
    assert out["gpu_util"] == 90  # the other GPU still reports
    assert NvmlProbe(nvml=make(no_library=True)).sample()["gpu_note"].startswith("no GPU")
    assert "no GPU" in NvmlProbe(gpus=[5], nvml=make(n=2)).sample()["gpu_note"]


def test_real_pynvml_on_this_host_never_crashes():
    out = NvmlProbe().sample()  # the real module: no GPU here means a note, not an error
    assert "gpu_note" in out or "gpu_util" in out


def test_dcgm_mapping():
    devs = dcgm_devices(fixture("dcgm.txt"))
    assert [d["index"] for d in devs] == [0, 1]
    assert devs[0]["mem_used_gib"] == 70 and devs[0]["mem_total_gib"] == 80
    assert devs[0]["power_w"] == 450.5 and devs[1]["util"] == 50
    assert dcgm_devices(fixture("dcgm.txt"), gpus=[1])[0]["index"] == 1


def test_dcgm_probe_unreachable():
    assert "gpu_note" in DcgmProbe("http://127.0.0.1:9/metrics").sample()


# ----------------------------------------------------------------------------- schedule


class FakeClock:
    def __init__(self):
        self.t = 0.0


def test_sampler_schedule_does_not_drift_over_1000_ticks():
    """Each tick is planned from the start, not from the end of the last one."""
    clock = FakeClock()
    times = []

    class Slow(Sampler):
        def sample(self):
            times.append(clock.t)
            clock.t += 0.003  # each sample takes 3 ms of a 10 ms period
            return {}

    s = Slow(0.01, clock=lambda: clock.t)

    def wait(timeout):
        clock.t += timeout
        if len(times) >= 1000:
            s._stop.set()
        return s._stop.is_set()

    s._stop.wait = wait  # type: ignore[method-assign]
    s._loop()
    assert len(times) == 1001  # 1,000 on schedule, and one last sample at the stop
    assert times[999] == pytest.approx(999 * 0.01, abs=1e-6)
    assert s.missed == 0
