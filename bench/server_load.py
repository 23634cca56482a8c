"""Does tokmon's load change the server's own work? vLLM's CPU build (set up by
``scripts/real-engines.sh setup``) under tokmon and under a plain streaming loop that
sends the same prompts, in turns, each judged by vLLM's *own* mean TTFT and TPOT
(`vllm:time_to_first_token_seconds`, `vllm:request_time_per_output_token_seconds`
deltas over the run): a client whose requests cost the server more shows up here.

    python bench/server_load.py [--rounds 3] [--requests 48] [--variants default,no-metrics]

Variants of tokmon's run, to find what costs the server (each one change):
  default       tokmon run as a user would (probes on: /metrics scraping, host sampling)
  no-metrics    --no-server-metrics
  metrics-1s    /metrics scraped every second (--metrics-interval 1s)
The plain loop is one process, one stream, httpx, the same body as vLLM's own bench.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402

from tokmon.model.workloads.workload import WORDS  # noqa: E402
from tokmon.probes.server import flatten  # noqa: E402

CACHE = os.environ.get("TOKMON_ENGINES_CACHE", os.path.expanduser("~/.cache/tokmon-engines"))
VLLM = os.path.join(CACHE, "vllm-venv/bin/vllm")
MODEL = os.path.join(CACHE, "tiny-llama")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PIN: list[str] = []  # --pin: the server on core 1, the clients on core 0
CLIENT_PIN: list[str] = []


def start_vllm(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_HOST_IP="127.0.0.1",
               VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")  # fmt: skip
    with open(log, "wb") as f:
        p = subprocess.Popen(
            [*PIN, VLLM, "serve", MODEL, "--host", "127.0.0.1", "--port", str(port),
             "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "2048",
             "--enforce-eager"],
            stdout=f, stderr=subprocess.STDOUT, env=env, process_group=0,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600  # a cold start on 2 busy cores can take minutes
    while time.monotonic() < deadline:
        if p.poll() is not None:
            break
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return p, url
        except httpx.HTTPError:
            pass
        time.sleep(2)
    p.kill()
    sys.exit("vLLM did not start: " + log.read_text(errors="replace")[-600:])


def server_means(url: str) -> dict[str, float]:
    flat, _ = flatten(httpx.get(url + "/metrics", timeout=5).text)
    return flat


def delta_mean(a: dict[str, float], b: dict[str, float], name: str) -> float:
    s = b.get(name + "_sum", 0) - a.get(name + "_sum", 0)
    c = b.get(name + "_count", 0) - a.get(name + "_count", 0)
    return 1000 * s / c if c else float("nan")


def plain_loop(url: str, prompts: list[str], n: int, max_tokens: int) -> None:
    """One stream, one process: the body vLLM's own bench sends."""
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            body = {"model": "tiny", "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens,
                    "stream": True, "stream_options": {"include_usage": True},
                    "ignore_eos": True}  # fmt: skip
            with c.stream("POST", url + "/v1/completions", json=body) as r:
                for _ in r.iter_lines():
                    pass


def tokmon_run(url: str, pfile: Path, n: int, max_tokens: int, variant: str) -> None:
    args = [*CLIENT_PIN, sys.executable, "-m", "tokmon", "run", "--url", url + "/v1", "--headless",
            "--no-gpu", "--endpoint", "completions", "-n", str(n), "-c", "1", "--prompts",
            str(pfile), "--max-tokens", str(max_tokens), "--ignore-eos",
            "--status-interval", "1h"]  # fmt: skip
    if variant == "no-metrics":
        args.append("--no-server-metrics")
    elif variant.startswith("metrics-"):  # e.g. metrics-1s: --metrics-interval 1s
        args += ["--metrics-interval", variant.removeprefix("metrics-")]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, timeout=900)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--words", type=int, default=140, help="prompt length in words")
    ap.add_argument("--variants", default="default,no-metrics")
    ap.add_argument("--pin", action="store_true", help="server on core 1, clients on core 0")
    a = ap.parse_args()
    if a.pin:
        PIN[:] = ["taskset", "-c", "1"]
        CLIENT_PIN[:] = ["taskset", "-c", "0"]
        os.sched_setaffinity(0, {0})  # the plain loop runs in this process
    if not (os.access(VLLM, os.X_OK) and os.path.isdir(MODEL)):
        sys.exit("vLLM is not set up: scripts/real-engines.sh setup")
    rng = random.Random(1)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(a.words)) for _ in range(64)]
    tmp = Path(tempfile.mkdtemp(prefix="tokmon-server-load-"))
    pfile = tmp / "prompts.jsonl"
    pfile.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    p, url = start_vllm(tmp / "vllm.log")
    clients = ["plain loop"] + [f"tokmon {v}" for v in a.variants.split(",")]
    got: dict[str, list[tuple[float, float]]] = {c: [] for c in clients}
    try:
        plain_loop(url, prompts, 8, a.max_tokens)  # warm-up
        for rnd in range(a.rounds):
            for name in clients:
                m0 = server_means(url)
                if name == "plain loop":
                    plain_loop(url, prompts, a.requests, a.max_tokens)
                else:
                    tokmon_run(url, pfile, a.requests, a.max_tokens, name.split()[1])
                m1 = server_means(url)
                ttft = delta_mean(m0, m1, "vllm:time_to_first_token_seconds")
                tpot = delta_mean(m0, m1, "vllm:request_time_per_output_token_seconds")
                got[name].append((ttft, tpot))
                print(f"round {rnd + 1}: {name}: server TTFT {ttft:.2f} ms, TPOT {tpot:.3f} ms",
                      flush=True)  # fmt: skip
    finally:
        os.killpg(p.pid, 15)
        p.wait(30)
    base = statistics.median(t for t, _ in got["plain loop"])
    rows = [["client", "runs", "server TTFT ms: median", "range", "× plain loop",
             "server TPOT ms: median", "range"]]  # fmt: skip
    for name, rs in got.items():
        t = [x for x, _ in rs]
        q = [y for _, y in rs]
        rows.append([name, str(len(rs)), f"{statistics.median(t):.2f}",
                     f"{min(t):.2f}–{max(t):.2f}", f"{statistics.median(t) / base:.2f}",
                     f"{statistics.median(q):.3f}", f"{min(q):.3f}–{max(q):.3f}"])  # fmt: skip
    print(f"server's own figures under each client · {machine()} · vLLM CPU, tiny model, "
          f"{a.words}-word prompts, {a.requests} requests × {a.max_tokens} tokens, one stream, "
          f"{a.rounds} interleaved rounds")  # fmt: skip
    print(table(rows))


if __name__ == "__main__":
    main()
