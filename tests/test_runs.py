"""Does it reproduce: figures over repeated runs (the run is the unit of replication),
and two groups of runs compared over runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers import tokmon

from tokmon.model.runs import group_ratio, spread
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
