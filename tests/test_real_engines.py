"""Against real engines (vLLM CPU build, tiny local model), each check against the engine's
own figures. Run by scripts/real-engines.sh (after the fast suite in .ci/run); skipped,
with the reason, where an engine could not be installed or started."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import time

import httpx
import pytest
from helpers import tokmon

from tokmon.core.probes.server import flatten

pytestmark = pytest.mark.real_engine

VLLM = os.environ.get("TOKMON_VLLM", "")
MODEL = os.environ.get("TOKMON_TINY_MODEL", "")
LOOPING = "the of the of the of the of the of"  # a greedy random model loops: n-gram drafts hit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_vllm(tmp_path_factory, *extra: str):
    if not (VLLM and os.path.exists(VLLM) and MODEL and os.path.exists(MODEL)):
        pytest.skip("vLLM is not set up (run scripts/real-engines.sh setup)")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = dict(
        os.environ,
        VLLM_TARGET_DEVICE="cpu",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
    )
    with open(log, "wb") as f:
        p = subprocess.Popen(
            [
                VLLM,
                "serve",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--served-model-name",
                "tiny",
                "--dtype",
                "float32",
                "--max-model-len",
                "2048",
                "--enforce-eager",
                *extra,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if p.poll() is not None:
            break
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                # the first request to an n-gram instance compiles: warm it up
                httpx.post(
                    url + "/v1/completions",
                    json={"model": "tiny", "prompt": LOOPING, "max_tokens": 8},
                    timeout=120,
                )
                return p, url
        except httpx.HTTPError:
            pass
        time.sleep(2)
    p.kill()
    pytest.skip("vLLM did not start: " + log.read_text(errors="replace")[-600:])


def stop(p) -> None:
    try:
        os.killpg(p.pid, 15)
        p.wait(30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(p.pid, 9)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    p, url = start_vllm(tmp_path_factory)
    yield url
    stop(p)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    p, url = start_vllm(
        tmp_path_factory,
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}',
        "--per-request-spec-decode-metrics",
        "summary",
    )
    yield url
    stop(p)


def metrics(url: str) -> dict[str, float]:
    flat, _ = flatten(httpx.get(url + "/metrics", timeout=5).text)
    return flat


def run(tmp_path, url, *extra):
    out = tmp_path / "s.json"
    rec = tmp_path / "r.jsonl"
    r = tokmon(
        "run",
        "--url",
        url + "/v1",
        "--headless",
        "--no-gpu",
        "--status-interval",
        "1h",
        "--summary-json",
        str(out),
        "--record",
        str(rec),
        *extra,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    from tokmon.core.recording import read_recording

    return json.loads(out.read_text()), read_recording(str(rec))


def test_plain_tokens_and_ttft_agree_with_the_server(plain, tmp_path):
    m0 = metrics(plain)
    s, rec = run(tmp_path, plain, "-n", "24", "-c", "4", "--max-tokens", "48", "--ignore-eos")
    m1 = metrics(plain)
    a = s["arms"]["default"]
    assert a["requests"]["ok"] == 24 and a["requests"]["failed"] == 0
    # tokmon's count is the server's usage, request by request
    assert all(r.output_tokens == 48 and not r.tokens_estimated for r in rec.records)
    assert m1["vllm:generation_tokens_total"] - m0.get("vllm:generation_tokens_total", 0) == 24 * 48
    k = "vllm:time_to_first_token_seconds"
    server_ttft = (
        (m1[k + "_sum"] - m0.get(k + "_sum", 0))
        / (m1[k + "_count"] - m0.get(k + "_count", 0))
        * 1000
    )
    ttft = statistics.mean(r.ttft_ms for r in rec.records)
    lag = statistics.mean(r.send_lag_ms or 0 for r in rec.records)
    # the client sees the first token a little after the server logged it, never before
    assert -2.0 <= ttft - server_ttft <= 10.0 + lag, (ttft, server_ttft)


def test_spec_acceptance_equals_the_counters(spec, tmp_path):
    m0 = metrics(spec)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"prompt": LOOPING + f" {i}", "kind": "code"}) for i in range(8))
        + "\n"
    )
    s, rec = run(
        tmp_path,
        spec,
        "-n",
        "24",
        "-c",
        "4",
        "--max-tokens",
        "64",
        "--ignore-eos",
        "--temperature",
        "0",
        "--prompts",
        str(prompts),
    )
    m1 = metrics(spec)
    d = {
        k: m1[f"vllm:spec_decode_num_{k}_total"] - m0.get(f"vllm:spec_decode_num_{k}_total", 0)
        for k in ("drafts", "draft_tokens", "accepted_tokens")
    }
    a = s["arms"]["default"]
    assert a["acceptance_source"] == "server counters"
    assert a["acceptance_rate"] == pytest.approx(d["accepted_tokens"] / d["draft_tokens"], rel=0.01)
    assert a["acceptance_length"] == pytest.approx(1 + d["accepted_tokens"] / d["drafts"], rel=0.01)
    # the per-request figures (metrics.speculative_decoding) are parsed too
    assert all(r.spec_source == "response:vllm" and r.spec_drafts for r in rec.records)
    assert sum(r.spec_accepted_tokens for r in rec.records) == d["accepted_tokens"]
