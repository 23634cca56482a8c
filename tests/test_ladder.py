"""Ladders and task kinds against the simulator's own model."""

import json

import pytest
from helpers import tokmon

from tokmon.model.data.commands import End
from tokmon.sim.model import ALPHA, parse_profile
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def run_json(tmp_path, *args):
    out = tmp_path / "s.json"
    r = tokmon(
        "run",
        "--headless",
        "--no-gpu",
        "--status-interval",
        "1h",
        "--summary-json",
        str(out),
        *args,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text()), r.stdout


@pytest.mark.slow
def test_concurrency_ladder_finds_the_batch_limit(tmp_path):
    # Batch limit 8: beyond it requests queue, TTFT takes off and tokens/s stays flat.
    with SimProcess(
        SimConfig(profile=parse_profile("27b-h100", "max_batch=8"), time_scale=8)
    ) as sim:
        s, out = run_json(
            tmp_path,
            "--url",
            sim.url,
            "--record",
            str(tmp_path / "r.jsonl"),
            "--ladder",
            "concurrency=2,4,8,16,32",
            "--step-duration",
            "3s",
            "--step-warmup",
            "1s",
            "--max-tokens",
            "48",
        )
    lad = s["ladder"]
    assert [st["value"] for st in lad["steps"]] == ["2", "4", "8", "16", "32"]
    assert lad["knee"]["default"]["value"] == "8"
    tps = [st["tokens_per_s"] for st in lad["steps"]]
    assert tps[2] > 3 * tps[0] and tps[4] < 1.15 * tps[2]  # grows, then flat
    assert "knee (default): concurrency 8" in out
    # the report draws the same curve and names the same knee
    rep = tokmon(
        "report", str(tmp_path / "r.jsonl"), "--format", "html", "-o", str(tmp_path / "r.html")
    )
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert "<h2>Ladder</h2>" in html and "knee" in html
    assert "knee (default): concurrency 8" in tokmon("report", str(tmp_path / "r.jsonl")).stdout


@pytest.mark.slow
def test_prompt_ladder_ttft_follows_prefill(tmp_path):
    # prefill 5 ms + 0.05 ms per prompt token (time scale 2: half of that in wall time)
    prof = parse_profile("zero", "prefill_base_ms=5,prefill_ms_per_token=0.05,step_base_ms=2")
    with SimProcess(SimConfig(profile=prof, time_scale=2)) as sim:
        s, _ = run_json(
            tmp_path,
            "--url",
            sim.url,
            "--ladder",
            "prompt-tokens=200,2k,8k",
            "--step-duration",
            "2.5s",
            "--step-warmup",
            "0.5s",
            "-c",
            "1",
            "--max-tokens",
            "4",
        )
    st = {x["value"]: x["ttft_p50"] for x in s["ladder"]["steps"]}
    slope = (st["8k"] - st["200"]) / (8000 - 200)  # ms per prompt token, wall time
    assert slope == pytest.approx(0.05 / 2, rel=0.2)


def expected_rate(alpha, k):
    return sum(alpha**i for i in range(1, k + 1)) / k


def test_per_kind_acceptance_matches_the_simulator(tmp_path):
    with SimProcess(
        SimConfig(profile=parse_profile("zero", "step_base_ms=1"), spec=True, seed=3)
    ) as sim:
        s, out = run_json(
            tmp_path,
            "--url",
            sim.url,
            "-n",
            "160",
            "-c",
            "8",
            "--max-tokens",
            "120",
            "--mix",
            "code=1,creative=1",
        )
    bk = s["arms"]["default"]["by_kind"]
    for kind in ("code", "creative"):
        assert bk[kind]["acceptance_rate"] == pytest.approx(expected_rate(ALPHA[kind], 3), abs=0.04)
    assert "by kind" in out


@pytest.mark.slow
def test_ladder_under_two_arms_reports_speedup_per_step(tmp_path):
    prof = parse_profile("zero", "step_base_ms=10")
    with (
        SimProcess(SimConfig(profile=prof, seed=1)) as plain,
        SimProcess(SimConfig(profile=prof, spec=True, seed=2)) as spec,
    ):
        s, out = run_json(
            tmp_path,
            "--arm",
            f"plain:url={plain.url}",
            "--arm",
            f"spec:url={spec.url}",
            "--ladder",
            "concurrency=1,4",
            "--step-duration",
            "4s",
            "--step-warmup",
            "0.5s",
            "--max-tokens",
            "16",
            "--mix",
            "code=1",
        )
    lad = s["ladder"]
    assert [(x["value"], x["arm"]) for x in lad["steps"]] == [
        ("1", "plain"),
        ("1", "spec"),
        ("4", "plain"),
        ("4", "spec"),
    ]
    for sp in lad["speedup"]:
        assert sp["decode_ratio"]["ratio"] > 1.5  # code: speculation pays at both steps
    assert "speed-up spec/plain at concurrency 4" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--ladder", "concurrency="], "at least one step"),
        (["--ladder", "depth=1,2"], "--ladder"),
        (["--ladder", "concurrency=1,0"], "positive"),
        (
            ["--ladder", "concurrency=1,2", "--step-duration", "1m", "--duration", "30s"],
            "longer than the run",
        ),
        (["--ladder", "rate=1,2", "--concurrency", "4"], "exclude"),
        (["--ladder", "concurrency=1,2", "--ladder-stop", "latency=5"], "--ladder-stop"),
    ],
)
def test_bad_ladders(args, needle):
    r = tokmon("run", "--url", "http://127.0.0.1:9/v1", *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_replay_of_a_ladder_shows_what_the_live_run_showed(make_sim, tmp_path):
    """Events fold through one place (Fold.apply) live, in a replay and in a
    report: the replay rebuilds the ladder table step by step, with the same figures as
    the live summary, and ends at the last step's load, not the first's."""
    from tokmon.sources.replay import ReplaySource

    sim = make_sim(schedule=(5.0, 2.0, 1))
    rec = tmp_path / "r.jsonl"
    s, _ = run_json(tmp_path, "--url", sim.url, "--record", str(rec), "--ladder",
                    "concurrency=1,3", "--step-duration", "2s", "--step-warmup", "0.5s",
                    "--max-tokens", "8")  # fmt: skip
    live = s["ladder"]
    src = ReplaySource(str(rec), speed=1.0)
    src.start()
    try:
        src.command(End())
        snap = src.snapshot()
        assert snap is not None and snap.ladder is not None
        done = snap.ladder.done
        assert [f.value for f in done] == [st["value"] for st in live["steps"]] == ["1", "3"]
        for f, st in zip(done, live["steps"], strict=True):
            for key in ("requests", "ok", "tokens_per_s", "ttft_p50", "ttft_p95", "decode_p50"):
                assert getattr(f, key) == st[key], (key, getattr(f, key), st[key])
        assert snap.level == 3.0  # the last step's streams
        assert src.summary()["ladder"] == live
    finally:
        src.close()


@pytest.mark.slow
def test_a_two_arm_ladder_over_a_mix_agrees_with_its_kinds(tmp_path):
    """#58: a two-arm ladder over a code/creative mix (the arms draw the kinds at random,
    so their shares differ at each step): at every step the combined speed-up lies
    between its kinds' own (the crossover's), within 10% of their mix-weighted geometric
    mean, and the finished ladder is whole (the requests sent before its first step are
    no stratum)."""
    import math

    prof = parse_profile("zero", "step_base_ms=10")
    with (
        SimProcess(SimConfig(profile=prof, seed=1)) as plain,
        SimProcess(SimConfig(profile=prof, spec=True, seed=2)) as spec,
    ):
        s, out = run_json(tmp_path, "--arm", f"plain:url={plain.url}", "--arm",
                          f"spec:url={spec.url}", "--ladder", "concurrency=2,8",
                          "--step-duration", "6s", "--step-warmup", "1s", "--max-tokens",
                          "24", "--mix", "code=1,creative=1")  # fmt: skip
    lad = s["ladder"]
    cross = {c["kind"]: {p[0]: p[1] for p in c["points"]} for c in lad["crossover"]}
    assert set(cross) == {"code", "creative"}, lad["crossover"]
    for sp in lad["speedup"]:
        r, load = sp["decode_ratio"], float(sp["value"])
        assert r is not None and not r["partial"], sp
        code, creative = cross["code"][load], cross["creative"][load]
        assert min(code, creative) <= r["ratio"] <= max(code, creative), (sp, code, creative)
        geo = math.sqrt(code * creative)
        assert abs(r["ratio"] / geo - 1) < 0.10, (r["ratio"], geo)
    dec = s["comparison"]["decode_tokens_per_s"]
    assert not dec["partial"], dec
    assert "over code and creative (by kind, mix-weighted)" in out
