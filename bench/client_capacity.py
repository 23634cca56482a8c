"""Client capacity: CPU seconds per million streamed tokens, and the most tokens/s one
engine process sustains, against the simulator with zero delay on loopback.

    python bench/client_capacity.py [--seconds 20] [--concurrency 32] [--repeat 3]

Each client runs in its own process tree; its CPU (user+sys of the whole tree) and the
server's own token counter are read in steady state (after a few seconds of warm-up).
Peers that are not installed here (vllm bench serve, aiperf, guidellm) are skipped and
said to be; PEERS.md has their figures from a machine like this one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, median, server_tokens, table, tree_cpu  # noqa: E402

from tokmon.sim.model import PROFILES  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def clients(url: str, conc: int, secs: float, mt: int) -> dict[str, list[str]]:
    py = sys.executable
    c = {
        "tokmon (1 engine process)": [
            py,
            "-m",
            "tokmon",
            "run",
            "--url",
            url,
            "--headless",
            "--no-gpu",
            "--no-server-metrics",
            "-c",
            str(conc),
            "--max-tokens",
            str(mt),
            "--prompt-tokens",
            "16",
            "--duration",
            f"{secs:g}s",
            "--status-interval",
            "1h",
        ],
        "bare aiohttp reader": [
            py,
            os.path.join(HERE, "ref_clients.py"),
            "aiohttp",
            url,
            str(conc),
            f"{secs:g}",
            str(mt),
        ],
        "bare httpx reader": [
            py,
            os.path.join(HERE, "ref_clients.py"),
            "httpx",
            url,
            str(conc),
            f"{secs:g}",
            str(mt),
        ],
    }
    vllm, tok = vllm_paths()
    if vllm and tok:
        # It has no duration: enough prompts to outlast the window; stopped after it.
        c["vllm bench serve (vLLM's own client)"] = [
            vllm,
            "bench",
            "serve",
            "--backend",
            "openai-chat",
            "--base-url",
            url.removesuffix("/v1"),
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "sim-27b",
            "--tokenizer",
            tok,
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            str(mt),
            "--ignore-eos",
            "--num-prompts",
            "100000",
            "--max-concurrency",
            str(conc),
            "--request-rate",
            "inf",
        ]
    return c


def vllm_paths() -> tuple[str | None, str | None]:
    """vLLM's CLI and a tokenizer folder, where scripts/real-engines.sh has set them up."""
    cache = os.environ.get("TOKMON_ENGINE_CACHE", os.path.expanduser("~/.cache/tokmon-engines"))
    vllm = os.environ.get("TOKMON_VLLM") or os.path.join(cache, "vllm-venv/bin/vllm")
    tok = os.environ.get("TOKMON_TINY_MODEL") or os.path.join(cache, "tiny-llama")
    return (
        vllm if os.access(vllm, os.X_OK) else None,
        tok if os.path.isdir(tok) else None,
    )


# vLLM's CLI spends ~19 s of CPU starting (PEERS.md): it is measured after that.
SLOW_START = {"vllm bench serve (vLLM's own client)": 40.0}


def measure(cmd: list[str], url: str, secs: float, warm: float) -> tuple[float, float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(warm)
        tok0, cpu0, t0 = server_tokens(url), tree_cpu(p.pid), time.monotonic()
        time.sleep(secs)
        tok1, cpu1, t1 = server_tokens(url), tree_cpu(p.pid), time.monotonic()
    finally:
        try:
            p.wait(timeout=secs + 60)
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait(timeout=30)
    tok = tok1 - tok0
    return (cpu1 - cpu0) / tok * 1e6, tok / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    sim = SimProcess(SimConfig(profile=PROFILES["zero"]))
    sim.start()
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        for _ in range(a.repeat):
            for name in clients(sim.url, a.concurrency, 1, a.max_tokens):
                warm = SLOW_START.get(name, a.warmup)
                # Each client runs past the window; the window is read in steady state.
                cmd = clients(sim.url, a.concurrency, warm + a.seconds + 2, a.max_tokens)[name]
                results.setdefault(name, []).append(measure(cmd, sim.url, a.seconds, warm))
                print(name, results[name][-1], flush=True)
    finally:
        sim.stop()
    ref = median(c for c, _ in results["bare aiohttp reader"])
    rows = [["client", "CPU s / 1M tokens (median)", "range", "tokens/s", "× aiohttp"]]
    if not vllm_paths()[0]:
        rows.append(["vllm bench serve", "not set up (scripts/real-engines.sh)", "", "", ""])
    for name, rs in results.items():
        cpus = [c for c, _ in rs]
        rows.append(
            [
                name,
                f"{median(cpus):.1f}",
                f"{min(cpus):.1f}–{max(cpus):.1f}",
                f"{median(r for _, r in rs):,.0f}",
                f"{median(cpus) / ref:.2f}",
            ]
        )
    for peer, exe in (("aiperf", "aiperf"), ("guidellm", "guidellm")):
        if shutil.which(exe) is None:
            rows.append([peer, "not installed here (see PEERS.md)", "", "", ""])
    print(
        f"client capacity · {machine()} · {a.concurrency} streams × {a.max_tokens} one-token "
        f"chunks · zero-delay simulator · {a.repeat} runs of {a.seconds:g} s"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
