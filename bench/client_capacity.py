"""Client capacity: CPU seconds per million streamed tokens, and the most tokens/s one
engine process sustains, against the simulator with zero delay on loopback.

    pip install -e '.[bench]'      # aiohttp, for the reference reader
    python bench/client_capacity.py [--seconds 15] [--concurrency 32] [--repeat 5]

Each client runs in its own process tree; its CPU (user+sys of the whole tree) and the
server's own token counter are read in steady state (after a few seconds of warm-up).
The clients take turns within each round, so a machine that slows down slows them all;
the table gives each client's median and range over the rounds, and its ratio to the
bare aiohttp reader *of the same round* (median and range): a ratio whose range
includes 1.00 is "within noise", and the table says so. ``vllm bench serve`` runs where
``scripts/real-engines.sh setup`` has installed vLLM (else it is named as skipped);
AIPerf and GuideLLM do not install here (the project's docs give their figures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

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
        # the same, serving its metrics for Prometheus (the issue's < 2% per token)
        "tokmon with --prometheus": [],
        "bare aiohttp reader": [
            py,
            os.path.join(HERE, "ref_clients.py"),
            "aiohttp",
            url,
            str(conc),
            f"{secs:g}",
            str(mt),
        ],
        "raw socket reader (no HTTP library)": [
            py,
            os.path.join(HERE, "ref_clients.py"),
            "raw",
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
    c["tokmon with --prometheus"] = c["tokmon (1 engine process)"] + [
        "--prometheus",
        "127.0.0.1:0",
    ]
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
    # the same variable and default as scripts/real-engines.sh
    cache = os.environ.get("TOKMON_ENGINES_CACHE", os.path.expanduser("~/.cache/tokmon-engines"))
    vllm = os.environ.get("TOKMON_VLLM") or os.path.join(cache, "vllm-venv/bin/vllm")
    tok = os.environ.get("TOKMON_TINY_MODEL") or os.path.join(cache, "tiny-llama")
    return (
        vllm if os.access(vllm, os.X_OK) else None,
        tok if os.path.isdir(tok) else None,
    )


# vLLM's CLI spends ~19 s of CPU starting (PEERS.md): it is measured after that.
SLOW_START = {"vllm bench serve (vLLM's own client)": 40.0}


class ClientFailed(Exception):
    pass


def measure(
    cmd: list[str], url: str, secs: float, warm: float, extra_cpu: Any = None
) -> tuple[float, float]:
    """CPU seconds per million tokens of the client's process tree (plus ``extra_cpu()``:
    processes outside it, e.g. a Ray actor), and the server's tokens/s."""

    def cpu(pid: int) -> float:
        return tree_cpu(pid) + (extra_cpu() if extra_cpu is not None else 0.0)

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            time.sleep(warm)
            tok0, cpu0, t0 = server_tokens(url), cpu(p.pid), time.monotonic()
            time.sleep(secs)
            tok1, cpu1, t1 = server_tokens(url), cpu(p.pid), time.monotonic()
        finally:
            try:
                p.wait(timeout=secs + 60)
            except subprocess.TimeoutExpired:
                p.terminate()
                p.wait(timeout=30)
        tok = tok1 - tok0
        if tok <= 0 or p.returncode not in (0, -15):
            err.seek(0)
            tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["?"]
            raise ClientFailed(f"exit {p.returncode}, {tok:.0f} tokens: {tail[0][:200]}")
    return (cpu1 - cpu0) / tok * 1e6, tok / (t1 - t0)


REF = "bare aiohttp reader"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--only", default="", help="comma-separated parts of client names to run (and aiohttp)"
    )
    a = ap.parse_args()
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    sim = SimProcess(SimConfig(profile=PROFILES["zero"]))
    sim.start()
    results: dict[str, list[tuple[float, float] | None]] = {}
    failed: dict[str, str] = {}
    try:
        for rnd in range(a.repeat):
            for name in clients(sim.url, a.concurrency, 1, a.max_tokens):
                if only and name != REF and not any(x in name for x in only):
                    continue
                warm = SLOW_START.get(name, a.warmup)
                # Each client runs past the window; the window is read in steady state.
                cmd = clients(sim.url, a.concurrency, warm + a.seconds + 2, a.max_tokens)[name]
                try:
                    res: tuple[float, float] | None = measure(cmd, sim.url, a.seconds, warm)
                except ClientFailed as e:
                    res, failed[name] = None, str(e)
                results.setdefault(name, []).append(res)
                print(f"round {rnd + 1}: {name}: {res or failed[name]}", flush=True)
    finally:
        sim.stop()
    ref = results.get(REF, [])
    rows = [
        [
            "client",
            "runs",
            "CPU s / 1M tokens: median",
            "range",
            "tokens/s",
            "× aiohttp: median",
            "range",
        ]
    ]
    if not vllm_paths()[0]:
        rows.append(
            ["vllm bench serve", "", "not set up: scripts/real-engines.sh setup", "", "", "", ""]
        )
    for name, rs in results.items():
        ok = [r for r in rs if r is not None]
        if not ok:
            rows.append([name, "0", f"failed: {failed.get(name, '?')}", "", "", "", ""])
            continue
        cpus = [c for c, _ in ok]
        # ratio to the reference of the same round: the rounds' drift cancels
        ratios = [r[0] / q[0] for r, q in zip(rs, ref, strict=False) if r and q]
        rows.append(
            [
                name,
                str(len(ok)),
                f"{median(cpus):.1f}",
                f"{min(cpus):.1f}–{max(cpus):.1f}",
                f"{median(r for _, r in ok):,.0f}",
                f"{median(ratios):.2f}" if ratios else "—",
                (
                    f"{min(ratios):.2f}–{max(ratios):.2f}"
                    + (" (within noise)" if min(ratios) <= 1 <= max(ratios) and name != REF else "")
                )
                if ratios
                else "",
            ]
        )
    for peer, exe in (("aiperf", "aiperf"), ("guidellm", "guidellm")):
        if shutil.which(exe) is None:
            rows.append([peer, "", "not installed here (see the README)", "", "", "", ""])
    print(
        f"client capacity · {machine()} · {a.concurrency} streams × {a.max_tokens} one-token "
        f"chunks · zero-delay simulator · {a.repeat} interleaved rounds of {a.seconds:g} s"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
