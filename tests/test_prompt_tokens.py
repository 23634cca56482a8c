"""Exact input lengths, as the server counts them: the simulator's tokenizer and its
/tokenize, the calibration before a run, and a run's requested vs. counted prompt tokens
(end to end, against real loopback servers)."""

import json

import httpx
import numpy as np
import pytest
from helpers import tokmon

from tokmon.engine.calibrate import calibrate
from tokmon.model.arms import Arm
from tokmon.model.config import RunConfig
from tokmon.model.workload import HEAD_WORDS, synthetic_prompt
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.sim.tokenizer import count_prompt, count_text


@pytest.fixture(scope="module")
def sim():
    with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=2)) as s:
        yield s


@pytest.fixture(scope="module")
def sim_without_tokenize():
    with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=3, tokenize=False)) as s:
        yield s


def test_the_simulators_tokens_are_not_words():
    assert count_text("the") == 1 and count_text("latency") == 2  # six characters a token
    assert count_text("a, b.") == 4
    assert count_prompt(["hello"], chat=False) == 2  # BOS
    assert count_prompt(["hello", "there"], chat=True) == 1 + 2 + 8 + 3  # roles, generation


def test_tokenize_answers_in_vllms_and_llamacpps_forms(sim):
    root = sim.url.removesuffix("/v1")
    r = httpx.post(root + "/tokenize", json={"model": "sim-27b", "prompt": "the latency"})
    assert r.status_code == 200 and r.json()["count"] == 1 + 1 + 2
    msgs = [{"role": "user", "content": "the latency"}]
    r = httpx.post(root + "/tokenize", json={"model": "sim-27b", "messages": msgs})
    assert r.json()["count"] == count_prompt(["the latency"], chat=True)
    r = httpx.post(root + "/tokenize", json={"content": "the latency"})
    assert len(r.json()["tokens"]) == 3  # llama.cpp's form: no BOS unless asked


def cfg_for(url: str, endpoint: str = "chat") -> RunConfig:
    return RunConfig(arms=(Arm("a", url=url, model="sim-27b", endpoint=endpoint),))


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_calibration_with_the_servers_tokenizer_is_exact(sim, endpoint):
    cfg = cfg_for(sim.url, endpoint)
    shape = calibrate(cfg, cfg.arms[0], ("code", "chat"))
    assert shape.exact and shape.source == "tokenize"
    assert "latency" not in shape.units and "the" in shape.units  # one token each, only
    rng = np.random.default_rng(0)
    for n in (128, 1000, 4096, 30000):
        for kind in ("code", "chat"):
            p = synthetic_prompt(kind, n, rng, shape)
            texts = [p.text]
            assert count_prompt(texts, chat=endpoint == "chat") == n, (n, kind)


def test_without_a_tokenizer_the_length_is_near_and_says_so(sim_without_tokenize):
    cfg = cfg_for(sim_without_tokenize.url)
    shape = calibrate(cfg, cfg.arms[0], ("chat",))
    assert not shape.exact and shape.source == "usage" and shape.per_word > 1.0
    rng = np.random.default_rng(1)
    offs = [
        count_prompt([synthetic_prompt("chat", 2000, rng, shape).text], chat=True) / 2000 - 1
        for _ in range(20)
    ]
    assert max(abs(o) for o in offs) < 0.08  # measured: within ±4%


def test_no_two_prompts_share_a_prefix_by_accident():
    rng = np.random.default_rng(2)
    heads = {
        " ".join(synthetic_prompt("code", 512, rng).text.split()[: 1 + HEAD_WORDS])
        for _ in range(500)
    }
    assert len(heads) == 500  # each request's first words are its own


def run_summary(url: str, tmp_path, *extra: str) -> dict:
    out = tmp_path / "s.json"
    r = tokmon("run", "--url", url, "--headless", "--max-tokens", "4", "-c", "4",
               "--summary-json", str(out), "--status-interval", "1h", *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "asked,endpoint", [("128", "chat"), ("1k", "completions"), ("4k", "chat"), ("100:3000", "chat")]
)
def test_a_run_sends_the_prompt_tokens_asked(sim, tmp_path, asked, endpoint):
    s = run_summary(sim.url, tmp_path, "-n", "24", "--prompt-tokens", asked,
                    "--endpoint", endpoint, "--mix", "code=1,chat=1,creative=1")  # fmt: skip
    pt = s["arms"]["default"]["prompt_tokens"]
    assert pt["exact_share"] == 1.0 and pt["off_tokens"] == {"p50": 0.0, "min": 0, "max": 0}
    if ":" not in asked:
        assert pt["min"] == pt["max"] == {"128": 128, "1k": 1000, "4k": 4000}[asked]


def test_without_a_tokenizer_the_summary_shows_how_far_off(sim_without_tokenize, tmp_path):
    s = run_summary(sim_without_tokenize.url, tmp_path, "-n", "12", "--prompt-tokens", "2k")
    pt = s["arms"]["default"]["prompt_tokens"]
    assert pt["asked_p50"] == 2000 and abs(pt["p50"] / 2000 - 1) < 0.08
    assert pt["exact_share"] < 1.0


def test_approx_prompt_tokens_skips_the_measurement(sim, tmp_path):
    s = run_summary(sim.url, tmp_path, "-n", "8", "--prompt-tokens", "1k", "--approx-prompt-tokens")
    pt = s["arms"]["default"]["prompt_tokens"]
    assert pt["asked_p50"] == 1000 and pt["p50"] != 1000  # words are not the server's tokens
