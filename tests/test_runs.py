"""Does it reproduce: figures over repeated runs (the run is the unit of replication),
and two groups of runs compared over runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers import tokmon

from tokmon.model.judge.runs import group_ratio, spread
from tokmon.sim.model import PROFILES
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_a_spread_over_runs_and_its_verdict():
    s = spread("decode p50", [100.0, 101.0, 99.0, 100.5, 99.5])
    assert s is not None and abs(s.mean - 100.0) < 1e-9 and s.reproduces
    assert s.lo < 100 < s.hi and s.verdict().startswith("decode p50 reproduces within ±")
    s = spread("decode p50", [100.0, 114.0, 100.0])
    assert s is not None and not s.reproduces and "varies by 13% between runs" in s.verdict()


def test_group_ratio_holds_a_known_ratio_in_most_seeded_draws():
    """Runs with a 3% run-to-run wobble, two groups ×1.3 apart: the Welch interval over
    3 + 3 runs holds 1.3 in about 95% of draws, and excludes 1 (the groups differ)."""
    rng = np.random.default_rng(7)
    held = differs = 0
    for _ in range(400):
        a = list(100 * np.exp(rng.normal(0, 0.03, 3)))
        b = list(130 * np.exp(rng.normal(0, 0.03, 3)))
        r = group_ratio("x", a, b)
        assert r is not None
        held += r.lo <= 1.3 <= r.hi
        differs += r.differs
    assert 0.90 <= held / 400 <= 0.99 and differs / 400 > 0.95


@pytest.mark.slow
def test_report_over_three_and_three_recordings(tmp_path):
    """Two simulator configurations whose decode speeds are ×1.3 apart, each run three
    times with a seeded 3% run-to-run wobble: the groups' interval over runs holds 1.3; two groups of the same one hold 1;
    the runs of one configuration reproduce."""
    fast = dataclasses.replace(PROFILES["27b-h100"], step_base_ms=(24 + 0.12) / 1.3 - 0.12)
    paths: dict[str, list[str]] = {"base": [], "fast": []}
    for name, prof in (("base", PROFILES["27b-h100"]), ("fast", fast)):
        for i in range(3):
            cfg = SimConfig(profile=prof, seed=10 * i + len(name), time_scale=4, wobble=0.03)
            with SimProcess(cfg) as sim:
                rec = tmp_path / f"{name}{i}.jsonl"
                r = tokmon("run", "--url", sim.url, "-c", "1", "-d", "2s", "--max-tokens", "32",
                           "--ignore-eos", "--headless", "--record", str(rec), "--no-gpu",
                           "--status-interval", "1h")  # fmt: skip
                assert r.returncode == 0, r.stderr
                paths[name].append(str(rec))
    r = tokmon("report", *paths["base"], "--compare", *paths["fast"], "-F", "json")
    assert r.returncode == 0, r.stderr
    dec = json.loads(r.stdout)["arms"]["default"]["decode_p50"]
    assert dec["ci95"][0] <= 1.3 <= dec["ci95"][1] and dec["differs"], dec
    r = tokmon("report", *paths["base"][:2], "--compare", *paths["base"][1:], "-F", "json")
    same = json.loads(r.stdout)["arms"]["default"]["decode_p50"]
    assert same["ci95"][0] <= 1.0 <= same["ci95"][1], same
    r = tokmon("report", *paths["base"])
    assert r.returncode == 0 and "decode p50 (tok/s) " in r.stdout, r.stdout
    assert "reproduces within ±" in r.stdout or "between runs: check the environment" in r.stdout
    r = tokmon("report", *paths["base"], "-F", "json")
    cv = json.loads(r.stdout)["arms"]["default"]["figures"]["decode_p50"]["cv"]
    assert 0.003 < cv < 0.12, cv  # the 3% wobble, seen through 3 runs
    r = tokmon("report", paths["base"][0], "--compare", *paths["fast"])
    assert r.returncode == 2 and "at least 2 runs on each side" in r.stderr


@pytest.mark.slow
def test_repeat_five_runs_with_a_seeded_wobble(tmp_path):
    """--repeat 5 over a managed simulator whose seed is the run's number ({run}), with a
    5% run-to-run wobble: five recordings, the between-run CV of decode p50 near the CV
    of the five factors the simulator drew (and σ = 5% inside the CV's χ² interval), and
    the server option that changed between runs named."""
    import math
    import random

    w = 0.05
    factors = [math.exp(random.Random(i).gauss(0.0, w) - w * w / 2) for i in range(1, 6)]
    speeds = np.array([1 / f for f in factors])  # decode speed goes as 1 / cost
    true_cv = float(speeds.std(ddof=1) / speeds.mean())
    rec, out = tmp_path / "r.jsonl", tmp_path / "s.json"
    r = tokmon("run", "--arm", f"a:serve=tokmon sim --port {{port}} --seed {{run}} --wobble {w} "
               "--time-scale 4", "-c", "1", "-d", "2s", "--max-tokens", "32", "--ignore-eos",
               "--repeat", "5", "--headless", "--record", str(rec), "--summary-json", str(out),
               "--no-gpu", "--status-interval", "1h", timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.glob("r-*.jsonl")) == [
        f"r-{i}.jsonl" for i in range(1, 6)
    ]
    data = json.loads(out.read_text())
    arm = data["arms"]["a"]
    cv = arm["figures"]["decode_p50"]["cv"]
    assert abs(cv - true_cv) <= 0.4 * true_cv + 0.01, (cv, true_cv)
    # σ's 95% interval from a sample CV over 5 runs (χ² with 4 degrees of freedom)
    assert cv * math.sqrt(4 / 11.143) <= w <= cv * math.sqrt(4 / 0.4844), cv
    assert arm["environment_changed"] == ["command --seed: 1 / 2 / 3 / 4 / 5"], arm
    assert "5 runs: r-1.jsonl · r-2.jsonl" in r.stdout and "command --seed: 1 / 2" in r.stdout
    # the same table from the files, later
    r2 = tokmon("report", *(str(tmp_path / f"r-{i}.jsonl") for i in range(1, 6)), "-F", "json")
    assert json.loads(r2.stdout)["arms"]["a"]["figures"]["decode_p50"]["cv"] == cv


def test_bad_repeat_options_are_one_line():
    url = ["run", "--url", "http://127.0.0.1:9/v1", "--headless"]
    for args, says in ((["--between", "restart"], "--between says what happens between runs"),
                       (["--repeat", "3"], "each run must end by itself"),
                       (["--repeat", "3", "-d", "1s", "--between", "restart"],
                        "there are none (use cooldown=DURATION"),
                       (["--repeat", "3", "-d", "1s", "--between", "nap"],
                        "--between: expected restart or cooldown=DURATION"),
                       (["--repeat", "0", "-d", "1s"], "--repeat")):  # fmt: skip
        r = tokmon(*url, *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_reproduces_is_judged_against_the_runs_own_noise():
    """``--repeat 3`` of 8 requests a run said ``decode p50 varies by 11% between runs:
    check the environment`` — a spread that 8 requests' own sampling explains. Each
    run's median now comes with its own 95% interval, and the runs disagree only beyond
    it (Cochran's Q at 95%)."""
    from tokmon.model.judge.runs import between_runs
    from tokmon.model.statistics.sketch import Quantiles
    from tokmon.model.statistics.stats import median_ci, pct_summary

    rng = np.random.default_rng(5)

    def run(n: int, center: float) -> dict:
        v = center * np.exp(rng.normal(0, 0.15, n))  # requests vary ±15%
        ci = list(median_ci(Quantiles.of(v)))
        return {"arms": {"a": {"decode_tokens_per_s": pct_summary(v),
                               "p50_ci95": {"decode_tokens_per_s": ci}}}}  # fmt: skip

    few = [run(8, c) for c in (100.0, 111.0, 100.0)]  # 8 requests a run: wide intervals
    f = between_runs(few)["arms"]["a"]["figures"]["decode_p50"]
    assert f["span_pct"] > 5 and f["beyond_noise"] is False and f["reproduces"]
    assert "within their own noise" in f["verdict"] and "check the environment" not in f["verdict"]
    many = [run(4000, c) for c in (100.0, 111.0, 100.0)]  # tight: 11% is a real change
    f = between_runs(many)["arms"]["a"]["figures"]["decode_p50"]
    assert f["beyond_noise"] is True and not f["reproduces"]
    assert (
        "beyond each run's own interval" in f["verdict"] and "check the environment" in f["verdict"]
    )
