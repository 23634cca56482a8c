"""vLLM's CPU build as managed arms (serve=): plain and n-gram speculative decoding on the
same port in turns, as on a one-GPU machine. Marked real_engine: run by
``scripts/real-engines.sh test`` (skipped where vLLM is not set up)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import tokmon

pytestmark = pytest.mark.real_engine

VLLM = os.environ.get("TOKMON_VLLM", "")
MODEL = os.environ.get("TOKMON_TINY_MODEL", "")
LOOPING = "the of the of the of the of the of"  # a greedy random model loops: n-gram drafts hit


def test_vllm_plain_and_ngram_take_turns_on_one_port(tmp_path):
    if not (VLLM and os.path.exists(VLLM) and MODEL and os.path.exists(MODEL)):
        pytest.skip("vLLM is not set up (run scripts/real-engines.sh setup)")
    base = (
        f"{VLLM} serve {MODEL} --host 127.0.0.1 --port {{port}} --served-model-name tiny "
        "--dtype float32 --max-model-len 2048 --enforce-eager"
    )
    spec = (
        base
        + """ --speculative-config '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'"""
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"prompt": LOOPING + f" {i}", "kind": "code"}) for i in range(8))
        + "\n"
    )
    summ, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    env = {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    p = tokmon(
        "run", "--arm", f"plain:serve={base}", "--arm", f"spec:serve={spec}",
        "--alternate", "8s", "--cycles", "2", "-c", "2", "--max-tokens", "48",
        "--ignore-eos", "--temperature", "0", "--prompts", str(prompts),
        "--endpoint", "completions", "--headless", "--no-gpu", "--status-interval", "1h",
        "--record", str(rec), "--summary-json", str(summ), env=env, timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(summ.read_text())
    ms = s["managed_servers"]
    print("time to ready (s):", {a: m["ready_s"] for a, m in ms.items()})
    assert ms["plain"]["starts"] == 2 and ms["spec"]["starts"] == 2
    assert all(0 < r < 600 for m in ms.values() for r in m["ready_s"])
    assert ms["spec"]["env"]["config"]["spec"] is True
    assert ms["spec"]["env"]["config"]["spec_tokens"] == 3
    assert ms["plain"]["env"]["config"]["spec"] is False
    a = s["arms"]
    assert a["plain"]["requests"]["failed"] == 0 and a["spec"]["requests"]["failed"] == 0
    # acceptance from vLLM's own counters, over the spec turns only (they restart at 0)
    assert a["spec"]["acceptance_source"] == "server counters"
    assert 0 < a["spec"]["acceptance_rate"] <= 1
    assert a["plain"].get("acceptance_rate") is None
    print("speed-up:", s["comparison"]["decode_tokens_per_s"])
