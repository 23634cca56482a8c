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

from tokmon.probes.server import flatten

pytestmark = pytest.mark.real_engine

VLLM = os.environ.get("TOKMON_VLLM", "")
MODEL = os.environ.get("TOKMON_TINY_MODEL", "")
# the same words with <think> and </think> tokens (make_tiny_model.py --think)
THINK_MODEL = os.environ.get("TOKMON_TINY_THINK", "")
LLAMA_PY = os.environ.get("TOKMON_LLAMA_PYTHON", "")
GGUF = os.environ.get("TOKMON_TINY_GGUF", "")
LOOPING = "the of the of the of the of the of"  # a greedy random model loops: n-gram drafts hit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_vllm(tmp_path_factory, *extra: str, model: str = MODEL):
    if not (VLLM and os.path.exists(VLLM) and model and os.path.exists(model)):
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
                model,
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
                # each request's queue, prefill and generation times on its final chunk
                # (where tokmon splits TTFT and TPOT)
                "--enable-per-request-metrics",
                *extra,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            # Its own process group (to stop it whole) but not its own session: the
            # kernel shares the CPU fairly between sessions (autogroup), and the CPU
            # engine's busy polling in a session of its own starves the clients, which
            # then read each stream late, in one burst.
            process_group=0,
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
    # (a tool parser: vLLM 0.32 refuses tool_choice "required" without one — HTTP 400 — and
    # the pythonic parser needs no markup tokens, which the tiny model has none of)
    p, url = start_vllm(
        tmp_path_factory, "--enable-auto-tool-choice", "--tool-call-parser", "pythonic"
    )
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


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory):
    """vLLM with DeepSeek-R1's reasoning parser over the tiny model with think tokens."""
    p, url = start_vllm(tmp_path_factory, "--reasoning-parser", "deepseek_r1", model=THINK_MODEL)
    yield url
    stop(p)


def metrics(url: str) -> dict[str, float]:
    flat, _ = flatten(httpx.get(url + "/metrics", timeout=5).text)
    return flat


def run(tmp_path, url, *extra, name="r"):
    out = tmp_path / f"{name}.json"
    rec = tmp_path / f"{name}.jsonl"
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
    from tokmon.recording.reader import read_recording

    return json.loads(out.read_text()), read_recording(str(rec))


def test_plain_tokens_and_ttft_agree_with_the_server(plain, tmp_path):
    m0 = metrics(plain)
    # (word-sized prompts: the few one-token requests that measure the prompt's length
    # before a run would show in the server's counters beside the run's)
    s, rec = run(tmp_path, plain, "-n", "24", "-c", "4", "--max-tokens", "48", "--ignore-eos",
                 "--approx-prompt-tokens")  # fmt: skip
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
    # The client sees the first token after the engine logged it, never before. How long
    # after is the server's own delivery: its API process detokenizes and writes while the
    # engine (pinned to one core) polls; on 2 cores shared with the client that measured
    # 8-21 ms here, the same with tokmon's previous httpx client. vllm_bench_serve below
    # holds both clients to the server within a few ms under a lighter load.
    assert -2.0 <= ttft - server_ttft <= 25.0 + lag, (ttft, server_ttft)


def _prompts(tmp_path, text: str):
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"prompt": text}) + "\n")
    return p


def bench_serve(url: str, prompts, n: int, c: int, out_len: int, out_dir) -> dict:
    r = subprocess.run(
        [
            VLLM,
            "bench",
            "serve",
            "--backend",
            "openai",
            "--base-url",
            url,
            "--endpoint",
            "/v1/completions",
            "--model",
            "tiny",
            "--tokenizer",
            MODEL,
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(prompts),
            "--custom-output-len",
            str(out_len),
            "--num-prompts",
            str(n),
            "--max-concurrency",
            str(c),
            "--ignore-eos",
            "--seed",
            "1",
            "--save-result",
            "--result-dir",
            str(out_dir),
            "--result-filename",
            "b.json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((out_dir / "b.json").read_text())


def server_mean_ms(m0: dict[str, float], m1: dict[str, float], name: str) -> float:
    """The mean of one of vLLM's own histograms over the requests between two scrapes."""
    k = f"vllm:{name}_seconds"
    return (
        (m1[k + "_sum"] - m0.get(k + "_sum", 0))
        / (m1[k + "_count"] - m0.get(k + "_count", 0))
        * 1e3
    )


def test_vllm_bench_serve_agrees(plain, tmp_path):
    """The peer that ships with vLLM, on the same load and the same prompts, three rounds of
    each, the order alternating (a shared machine drifts, and the server itself ran up to 40%
    slower in one tool's run than in the other's of the same round). Each tool's mean TPOT
    equals the server's own figure for the same run within 5%, and its mean TTFT the
    server's within a few ms. Between the tools, what each adds to the server's own figure
    agrees: the TPOT ratio to the server within 5%, and the TTFT as the peer counts it (from
    before the request is sent: tokmon's TTFT + send lag) over the server's within 3 ms. The
    tools' raw figures are printed, not compared: they differ by what the server did. One
    stream at a time, so that neither client's CPU changes much how fast the server runs."""
    import random

    rng = random.Random(1)
    words = LOOPING.split() + ["and", "to", "in", "is", "that", "for", "it", "with", "was"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(24))}) + "\n"
            for _ in range(64)
        )
    )
    n, c, out_len = 48, 1, 64
    # per run: (TTFT as the peer counts it, over the server's; TPOT / the server's)
    theirs: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []

    def tokmon_run(i: int) -> None:
        m0 = metrics(plain)
        s, rec = run(tmp_path, plain, "--endpoint", "completions", "-n", str(n), "-c", str(c),
                     "--prompts", str(prompts), "--max-tokens", str(out_len), "--ignore-eos",
                     # like the peer, no /metrics scraping during the run
                     "--no-server-metrics", name=f"tokmon{i}")  # fmt: skip
        srv = [server_mean_ms(m0, metrics(plain), k) for k in TIMES]
        a = s["arms"]["default"]
        assert a["requests"]["ok"] == n
        # The peer starts its TTFT clock before it builds and sends the request; tokmon's
        # starts when the request has been sent (METRICS.md), and its send lag is the
        # time before that: TTFT + send lag is the peer's figure.
        from_sched = statistics.fmean(
            r.ttft_ms + (r.send_lag_ms or 0.0) for r in rec.records if r.ok
        )
        tpot = a["tpot_ms"]["mean"]
        print(f"run {i} tokmon: TTFT+lag/TPOT means {from_sched:.2f}/{tpot:.3f} ms "
              f"(server {srv[0]:.2f}/{srv[1]:.3f})")  # fmt: skip
        assert tpot == pytest.approx(srv[1], rel=0.05)
        assert -1.0 <= a["ttft_ms"]["mean"] - srv[0] <= 6.0
        ours.append((from_sched - srv[0], tpot / srv[1]))

    def peer_run(i: int) -> None:
        m0 = metrics(plain)
        b = bench_serve(plain, prompts, n, c, out_len, tmp_path / f"bench{i}")
        srv = [server_mean_ms(m0, metrics(plain), k) for k in TIMES]
        print(f"run {i} vllm bench serve: TTFT/TPOT means {b['mean_ttft_ms']:.2f}/"
              f"{b['mean_tpot_ms']:.3f} ms (server {srv[0]:.2f}/{srv[1]:.3f})")  # fmt: skip
        assert b["mean_tpot_ms"] == pytest.approx(srv[1], rel=0.05)
        assert -1.0 <= b["mean_ttft_ms"] - srv[0] <= 6.0
        theirs.append((b["mean_ttft_ms"] - srv[0], b["mean_tpot_ms"] / srv[1]))

    for i in range(3):
        for go in (tokmon_run, peer_run) if i % 2 == 0 else (peer_run, tokmon_run):
            go(i)
    t_ttft, t_tpot = (statistics.median(x) for x in zip(*theirs, strict=True))
    o_ttft, o_tpot = (statistics.median(x) for x in zip(*ours, strict=True))
    print(f"over the server's own, medians: TTFT +{o_ttft:.2f} ms (peer +{t_ttft:.2f}), "
          f"TPOT x{o_tpot:.3f} (peer x{t_tpot:.3f})")  # fmt: skip
    assert abs(o_ttft - t_ttft) <= 3.0
    assert o_tpot == pytest.approx(t_tpot, rel=0.05)


TIMES = ("time_to_first_token", "request_time_per_output_token")


def test_tokmons_load_costs_the_server_no_more_than_a_plain_loop(plain, tmp_path):
    """The same prompts, one stream, in turns: vLLM's own mean TTFT under tokmon's default
    request (and its default /metrics scraping) is within 10% of that under a plain
    streaming loop sending vLLM's own bench's body; five rounds, medians compared."""
    import random

    from tokmon.model.workloads.workload import WORDS

    rng = random.Random(3)
    words = WORDS
    texts = [" ".join(rng.choice(words) for _ in range(140)) for _ in range(16)]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))

    def loop(n: int) -> None:
        with httpx.Client(timeout=120) as c:
            for i in range(n):
                body = {"model": "tiny", "prompt": texts[i % len(texts)], "max_tokens": 32,
                        "stream": True, "stream_options": {"include_usage": True},
                        "ignore_eos": True}  # fmt: skip
                with c.stream("POST", plain + "/v1/completions", json=body) as r:
                    for _ in r.iter_lines():
                        pass

    def tokmon(i: int) -> None:
        run(tmp_path, plain, "--endpoint", "completions", "-n", "32", "-c", "1", "--prompts",
            str(prompts), "--max-tokens", "32", "--ignore-eos", name=f"load{i}")  # fmt: skip

    loop(16)  # warm
    ours, theirs = [], []
    # Five rounds, the order alternating (ABBA...), so a slow stretch of the shared machine
    # or a server still warming falls on both sides; one round of the plain loop once read
    # 11.3 ms against 6.7-7.5 in the others.
    for i in range(5):
        for who in ("loop", "tokmon") if i % 2 == 0 else ("tokmon", "loop"):
            m0 = metrics(plain)
            loop(32) if who == "loop" else tokmon(i)
            mean = server_mean_ms(m0, metrics(plain), "time_to_first_token")
            (theirs if who == "loop" else ours).append(mean)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"server TTFT under tokmon {ours} vs a plain loop {theirs}: ×{ratio:.3f}")
    # The claim is one-sided (no more than 10% above); the floor only catches a run that
    # did less work than the loop (shorter prompts, fewer requests).
    assert 0.8 <= ratio <= 1.1, (ours, theirs)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    if not (LLAMA_PY and os.path.exists(LLAMA_PY) and GGUF and os.path.exists(GGUF)):
        pytest.skip("llama-cpp-python is not set up (run scripts/real-engines.sh setup)")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "wb") as f:
        p = subprocess.Popen(
            [
                LLAMA_PY,
                "-m",
                "llama_cpp.server",
                "--model",
                GGUF,
                "--model_alias",
                "tiny",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "2048",
                "--interrupt_requests",
                "False",
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            # its own process group (to stop it whole) but not its own session: the kernel
            # shares the CPU fairly between sessions (autogroup), so a server in a session
            # of its own would get half the machine whatever its nice level
            process_group=0,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                yield url
                stop(p)
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    p.kill()
    pytest.skip("llama.cpp did not start: " + log.read_text(errors="replace")[-600:])


def test_llama_cpp_without_usage_or_metrics(llama, tmp_path):
    """One token per chunk, no usage in the stream, no /metrics: tokmon counts chunks, says
    the count is estimated, reports the missing metrics once and goes on."""
    prompt = "write a short story about the house of light"
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 32,
        "temperature": 0,
    }
    usage = httpx.post(llama + "/v1/chat/completions", json=body, timeout=120).json()["usage"]
    s, rec = run(
        tmp_path,
        llama,
        "-n",
        "8",
        "-c",
        "2",
        "--max-tokens",
        "32",
        "--temperature",
        "0",
        "--prompts",
        str(_prompts(tmp_path, prompt)),
    )
    a = s["arms"]["default"]
    assert a["requests"]["ok"] == 8 and a["requests"]["failed"] == 0
    assert a["tokens_estimated"] is True
    # the same request, not streamed, at temperature 0: the server's own count
    assert all(r.tokens_estimated for r in rec.records)
    assert [r.output_tokens for r in rec.records] == [usage["completion_tokens"]] * 8
    # one token per chunk: some tokens decode to no text and come as "content": ""
    assert all(r.chunks <= r.output_tokens for r in rec.records)
    notes = [e for e in rec.events if "no server metrics" in e.message]
    assert len(notes) == 1


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


def test_ab_speedup_is_the_one_the_servers_have(plain, spec, tmp_path):
    """tokmon's A/B speed-up against the servers' own figures for the very same requests.

    The truth is each server's mean TPOT (its request_time_per_output_token histogram)
    between scrapes taken just before and after tokmon's run: a client loop before and
    after the run measures other moments of a shared machine: it once saw ×2.02–2.12
    around a run that tokmon measured at ×1.76 [1.64, 1.98]."""
    urls = {"plain": plain, "spec": spec}
    m0 = {arm: metrics(u) for arm, u in urls.items()}
    s, rec = run(
        tmp_path,
        plain,
        "--arm",
        f"plain:url={plain}/v1",
        "--arm",
        f"spec:url={spec}/v1",
        "--assign",
        "alternate",
        "-c",
        "1",
        "-n",
        "24",
        "--max-tokens",
        "64",
        "--ignore-eos",
        "--temperature",
        "0",
        "--prompts",
        str(_prompts(tmp_path, LOOPING)),
    )
    m1 = {arm: metrics(u) for arm, u in urls.items()}
    k = "vllm:request_time_per_output_token_seconds_count"
    # the run's 12 requests per arm and nothing else reached each server
    assert {arm: m1[arm][k] - m0[arm].get(k, 0) for arm in urls} == {"plain": 12, "spec": 12}
    srv = {arm: server_mean_ms(m0[arm], m1[arm], "request_time_per_output_token") for arm in urls}
    arms = s["arms"]
    assert arms["plain"]["requests"]["ok"] == 12 and arms["spec"]["requests"]["ok"] == 12
    ours = {arm: arms[arm]["tpot_ms"]["mean"] for arm in urls}
    truth = srv["plain"] / srv["spec"]
    got = s["comparison"]["decode_tokens_per_s"]
    print(f"speed-up: tokmon ×{got['ratio']:.3f} {got['ci95']}, servers ×{truth:.3f}; "
          f"TPOT means tokmon {ours}, servers {srv}")  # fmt: skip
    assert truth > 1.3  # the n-gram drafts hit on a looping model: there is a speed-up to find
    # each arm's mean TPOT is its server's for the same requests (as with one server, above)
    for arm in urls:
        assert ours[arm] == pytest.approx(srv[arm], rel=0.05)
    # tokmon's figure is a ratio of medians of decode speed, the servers' one of mean TPOTs:
    # the same requests, so within 10% of each other
    assert truth * 0.9 <= got["ratio"] <= truth * 1.1
    # the speed-up as its causes (tokens per verify step × the speed of a step, both from
    # the servers' per-request figures) reproduces the measured ratio within 5%
    why = s["comparison"]["causes"]
    print(f"causes: {why}")
    assert why["step_source"] == "server" and why["tokens_per_step"][0] == 1.0
    assert why["tokens_per_step"][1] > 1.5
    assert why["predicted_ratio"] == pytest.approx(got["ratio"], rel=0.05)


def test_vllm_ttft_split_adds_up_request_by_request(plain, tmp_path):
    """With --enable-per-request-metrics: every request's queue and prefill from vLLM,
    the network sampled, and the rest (the API server: HTTP, tokenisation, the chat
    template, detokenisation) never below zero; the split is per request."""
    s, rec = run(tmp_path, plain, "-c", "2", "-n", "20", "--max-tokens", "32", "--ignore-eos",
                 "--net-interval", "0.5s")  # fmt: skip
    rs = [r for r in rec.records if r.outcome == "ok"]
    assert len(rs) == 20
    assert all(r.srv_queue_ms is not None and r.srv_prefill_ms is not None for r in rs)
    assert all(r.srv_itl_ms is not None for r in rs)
    t = s["arms"]["default"]["time_split"]["ttft_ms"]
    print(f"TTFT split: {t}")
    assert t["source"] == "per-request" and t["n"] == 20 and t["mismatched"] == 0
    net = t["network"]
    assert net is not None
    rest = [r.ttft_ms - net - r.srv_queue_ms - r.srv_prefill_ms for r in rs]
    assert min(rest) >= -1.0, rest  # never negative (a mismatch would be flagged)
    assert t["front"] is not None and t["front"] >= 0
    p = s["arms"]["default"]["time_split"]["tpot_ms"]
    pairs = [(r.tpot_ms, r.srv_itl_ms) for r in rs]
    assert p["source"] == "per-request" and (p["server_step"] or 0) > 0, (p, pairs)


def test_vllm_environment_as_the_server_reports_it(plain, spec):
    """``tokmon env`` against vLLM with and without n-gram speculation: the cache
    configuration from its info gauge, the context from /v1/models, speculation and its
    token count from its counters, the version; /metrics and the API open (no --api-key)."""
    got = {}
    for name, url in (("plain", plain), ("spec", spec)):
        p = tokmon("env", url + "/v1", "-F", "json")
        assert p.returncode == 0, p.stderr
        got[name] = json.loads(p.stdout)
    for d in got.values():
        cfg = d["config"]
        assert d["engine"] == "vllm" and d["version"]
        assert cfg["max_model_len"] == 2048 and cfg["prefix_caching"] is True
        assert isinstance(cfg["block_size"], int) and cfg["kv_cache_dtype"]
        assert d["security"]["api_open"] is True and d["security"]["metrics_open"] is True
        assert d["network"]["rtt_ms"] is not None and d["network"]["loopback"]
    assert got["plain"]["config"]["spec"] is False
    assert (got["spec"]["config"]["spec"], got["spec"]["config"]["spec_tokens"]) == (True, 3)


def test_llama_cpp_python_environment_says_what_it_does_not_know(llama):
    """llama-cpp-python has no /props, /metrics or /version: the record says so (engine
    unknown, fields not reported) and still times the way to it."""
    p = tokmon("env", llama + "/v1", "-F", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["engine"] is None and d["sources"] == ["/v1/models"]
    assert d["network"]["rtt_ms"] is not None and d["network"]["rtt_path"] == "/v1/models"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_vllm_gets_the_prompt_tokens_asked(plain, tmp_path, endpoint):
    """`--prompt-tokens N` is N in vLLM's own usage.prompt_tokens (template included), at
    128, 1k and near the model's limit (2048), measured with vLLM's /tokenize first."""
    for asked in ("128", "1k", "2000"):
        s, rec = run(tmp_path, plain, "--endpoint", endpoint, "-n", "6", "-c", "2",
                     "--prompt-tokens", asked, "--max-tokens", "8", "--ignore-eos",
                     "--mix", "code=1,chat=1,creative=1", name=f"pt{endpoint}{asked}")  # fmt: skip
        pt = s["arms"]["default"]["prompt_tokens"]
        want = {"128": 128, "1k": 1000, "2000": 2000}[asked]
        print(endpoint, asked, pt)
        assert pt["asked_p50"] == want
        assert pt["min"] >= want - max(4, want // 100) and pt["max"] <= want + max(4, want // 100)


def test_llama_cpp_gets_near_the_prompt_tokens_asked(llama, tmp_path):
    """llama-cpp-python streams no usage, but answers it unstreamed and has its own
    /extras/tokenize: the calibration uses both, and a prompt built for 512 tokens is
    512 in its usage (or, where its tokenizer and its requests disagree, within 5%)."""
    import numpy as np

    from tokmon.engine.calibrate import calibrate, prompt_tokens
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import synthetic_prompt

    cfg = RunConfig(arms=(Arm("a", url=llama + "/v1", model="tiny"),), temperature=0.0)
    shape = calibrate(cfg, cfg.arms[0], ("chat",))
    rng = np.random.default_rng(4)
    got = [prompt_tokens(httpx.Client(timeout=120), cfg, cfg.arms[0],
                         synthetic_prompt("chat", 512, rng, shape)) for _ in range(3)]  # fmt: skip
    print(shape.source, shape.per_word, got)
    assert all(abs(n / 512 - 1) <= 0.05 for n in got)
    if shape.exact:
        assert got == [512] * 3


def test_vllm_prefix_cache_hits_what_the_workload_shares(plain, tmp_path):
    """One shared 512-token system prompt in prompts of 1,000 tokens: vLLM's own
    prefix_cache_hits/queries counters give about 512/1000 (whole blocks of the shared
    part; the first request of the run misses); with no shared prefix, about none."""
    s, _ = run(tmp_path, plain, "-n", "24", "-c", "2", "--prompt-tokens", "1k",
               "--shared-prefix", "512", "--max-tokens", "4", "--ignore-eos",
               "--metrics-interval", "0.5s", name="prefix")  # fmt: skip
    a = s["arms"]["default"]
    print(a["prompt_tokens"], a.get("prefix_cache_hit_rate"))
    assert a["prompt_tokens"]["exact_share"] == 1.0
    assert 0.42 <= a["prefix_cache_hit_rate"] <= 0.56
    s, _ = run(tmp_path, plain, "-n", "24", "-c", "2", "--prompt-tokens", "1k",
               "--max-tokens", "4", "--ignore-eos", "--metrics-interval", "0.5s",
               name="noprefix")  # fmt: skip
    assert s["arms"]["default"]["prefix_cache_hit_rate"] < 0.05


def test_vllm_answers_the_quality_probes_end_to_end(plain, tmp_path):
    """The built-in questions against a tiny model with random weights: every one asked,
    answered and read (each task), none counted correct (accuracy 0, its Wilson interval
    [0, 24%] over 12), no crash; the answers are only ever read."""
    from tokmon.model.workloads.questions import TASKS

    s, rec = run(tmp_path, plain, "--quality", "12", "-c", "4", name="quality")
    q = s["quality"]["arms"]["default"]
    print(q)
    assert q["n"] == 12 and q["correct"] == 0 and set(q["by_task"]) == set(TASKS)
    assert q["ci95"][0] == 0.0 and 0.2 < q["ci95"][1] < 0.3
    assert all(r.quality == 0.0 for r in rec.records if r.outcome == "ok")


def test_vllm_multi_turn_history_grows_turn_by_turn(plain, tmp_path):
    """Three-turn chats, one at a time: vLLM counts each later turn's prompt as the last
    one plus the reply it generated plus the new user message (its chat template
    included), and finds the history in its prefix cache."""
    s, rec = run(tmp_path, plain, "-c", "1", "-n", "6", "--turns", "3", "--prompt-tokens",
                 "200", "--max-tokens", "16", "--ignore-eos", "--followup-tokens", "20",
                 "--metrics-interval", "0.5s", name="turns")  # fmt: skip
    rs = sorted(rec.records, key=lambda r: r.t_sched)
    assert [r.turn for r in rs] == [1, 2, 3] * 2
    for a, b in zip(rs, rs[1:], strict=False):
        if b.turn == a.turn + 1:
            assert b.prompt_tokens >= a.prompt_tokens + a.output_tokens + 20
    a = s["arms"]["default"]
    print(a["by_turn"], a.get("prefix_cache_hit_rate"))
    assert a["by_turn"]["1"]["prompt_tokens_p50"] == 200
    assert a["prefix_cache_hit_rate"] > 0.3


def test_vllm_replays_a_mooncake_trace_on_schedule(plain, tmp_path):
    """200 requests of a Mooncake-format trace (Poisson at 5/s; three families of shared
    128-token blocks, then blocks of each request's own): each sent at the trace's time,
    vLLM counting exactly the input_length asked, and its own prefix-cache counters
    finding what the trace shares (the shared blocks and the head before them)."""
    import numpy as np

    rng = np.random.default_rng(21)
    rows, t = [], 0.0
    for i in range(200):
        t += float(rng.exponential(200.0))
        ids = [[1, 2], [1, 3], [4]][int(rng.integers(0, 3))]
        ids = ids + [5000 + 10 * i + k for k in range(int(rng.integers(1, 3)))]
        rows.append({"timestamp": round(t), "input_length": (len(ids) - 1) * 128
                     + int(rng.integers(60, 120)), "output_length": 4, "hash_ids": ids})  # fmt: skip
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s, rec = run(tmp_path, plain, "--trace", str(path), "--trace-block", "128", "--ignore-eos",
                 "--metrics-interval", "0.5s", name="trace")  # fmt: skip
    rs = sorted(rec.records, key=lambda r: (r.t_sched, r.rid))
    assert len(rs) == 200 and all(r.outcome == "ok" for r in rs)
    assert [(r.t_sched - rs[0].t_sched) // 1000 for r in rs] == [
        (row["timestamp"] - rows[0]["timestamp"]) * 1000 for row in rows
    ]
    assert [r.prompt_tokens for r in rs] == [row["input_length"] for row in rows]
    lag = np.array([r.send_lag_ms for r in rs])
    assert lag.min() >= 0
    # what the trace shares: request j's first k blocks appeared before; vLLM's CPU build
    # caches whole blocks of 128 tokens, so of the shared head (about 20 tokens) and k
    # blocks after it, 128·k count (measured: 57.49% for 57.49% built)
    shared = 0
    for j, row in enumerate(rows):
        k = max(
            (next((n for n, (x, y) in enumerate(zip(row["hash_ids"], o["hash_ids"],
                                                     strict=False)) if x != y), 0)
             for o in rows[:j]), default=0)  # fmt: skip
        shared += 128 * k
    want = shared / sum(r["input_length"] for r in rows)
    a = s["arms"]["default"]
    print(f"send lag p50 {np.percentile(lag, 50):.2f} p99 {np.percentile(lag, 99):.2f} ms; "
          f"prefix hit {a['prefix_cache_hit_rate']:.3f} (built for {want:.3f})")  # fmt: skip
    assert abs(a["prefix_cache_hit_rate"] - want) <= 0.02


def test_the_models_own_tokenizer_file_gives_vllms_count(plain, tmp_path):
    """`--tokenizer` with the model's tokenizer.json (for servers with no /tokenize; here
    used instead of vLLM's): prompts built with it are exactly what vLLM counts."""
    s, _ = run(tmp_path, plain, "-n", "6", "-c", "2", "--prompt-tokens", "1k", "--max-tokens",
               "4", "--tokenizer", MODEL, "--mix", "code=1,chat=1", name="tokfile")  # fmt: skip
    pt = s["arms"]["default"]["prompt_tokens"]
    print(pt)
    assert pt["exact_share"] == 1.0 and pt["min"] == pt["max"] == 1000


def test_vllm_reasoning_parser_gives_the_answers_wait(reasoning, tmp_path):
    """vLLM's reasoning parser (deepseek_r1) over the tiny think model, the thinking of each
    request ended by its ``thinking_token_budget`` of 12 (the server forces </think>; the
    weights never choose it): every request thinks 12 tokens, then answers; its answer's
    wait is after its first token, and each phase has a speed. Without a budget it thinks
    to its limit: no answer time, counted as never answered. What a tiny random model
    cannot show: thinking whose length the model chooses, or an answer worth reading."""
    s, rec = run(tmp_path, reasoning, "-n", "8", "-c", "2", "--max-tokens", "40",
                 "--ignore-eos", "--extra-body", '{"thinking_token_budget": 12}')  # fmt: skip
    assert len(rec.records) == 8
    for r in rec.records:
        assert r.outcome == "ok", r
        assert r.reasoning_tokens == 12, r
        assert r.ttfc_ms is not None and r.ttfc_ms > r.ttft_ms, r
        assert r.reasoning_tps and r.answer_tps, r
    a = s["reasoning"]["arms"]["default"]
    assert a["requests"] == 8 and a["never_answered"] == 0, a
    # vLLM 0.32's usage says reasoning_tokens 0 here: below the chunks it streamed, so
    # counted from them, and said
    assert (
        a["reasoning_tokens_p50"] == 12
        and a["reasoning_tokens_source"] == "counted from its chunks"
    )
    # one model at one load: the two phases decode at about one speed (measured 239 and
    # 242 tok/s; an answer timed from its first text but counted from the forced end was
    # 35% fast)
    ratio = a["answer_decode_tokens_per_s_p50"] / a["thinking_decode_tokens_per_s_p50"]
    assert 0.5 < ratio < 2.0, a
    s2, rec2 = run(tmp_path, reasoning, "-n", "4", "-c", "2", "--max-tokens", "16",
                   "--ignore-eos", name="r2")  # fmt: skip
    assert all(r.ttfc_ms is None and r.answer_tps is None for r in rec2.records)
    assert s2["reasoning"]["arms"]["default"]["never_answered"] == 4


def test_vllm_guided_decoding_through_its_grammar_backend(plain, tmp_path):
    """``--mix guided=1`` against vLLM's grammar backend: half the requests under tokmon's
    JSON schema, the other half the same prompts free (12 each: the cost's least). Every guided answer is checked
    against the schema; the tiny random model opens the object the grammar forces and
    then fills its whitespace with tabs to its max_tokens (to a random model every
    allowed token is as unlikely as the next), so none validates — counted as invalid,
    never as valid — and the grammar's cost in TTFT is given with its interval. What a
    tiny random model cannot show: a grammar's cost on answers that complete the object.
    (Tool calls: ``test_vllm_tool_calls_through_its_tool_parser``.)"""
    s, rec = run(tmp_path, plain, "-n", "24", "-c", "2", "--mix", "guided=1",
                 "--max-tokens", "24", "--ignore-eos")  # fmt: skip
    assert len(rec.records) == 24 and all(r.outcome == "ok" for r in rec.records)
    kinds = sorted(r.kind for r in rec.records)
    assert kinds == ["guided"] * 12 + ["guided-free"] * 12, kinds
    guided = [(r.valid, r.error) for r in rec.records if r.kind == "guided"]
    assert guided == [(0, "invalid: not JSON")] * 12, guided
    assert all(r.valid is None for r in rec.records if r.kind == "guided-free")
    g = s["structured"]["arms"]["default"]
    assert g["valid"]["guided"]["checked"] == 12 and g["valid"]["guided"]["valid"] == 0, g
    lo, hi = g["guided_cost"]["ttft"]["ci95"]
    assert lo <= g["guided_cost"]["ttft"]["ratio"] <= hi, g


def test_vllm_tool_calls_through_its_tool_parser(plain, tmp_path):
    """``--mix tools=1`` against vLLM with a tool parser: every request asks for
    ``get_metric`` (``tool_choice: required``), which vLLM answers through its grammar and
    streams only once the call's JSON parses. The tiny random model never completes one
    within its 24 tokens, so vLLM sends no delta at all before the end: each request is
    ok, its tokens the server's count, no TTFT made up where no token reached the client,
    and the call counted invalid ("no tool called"), never valid. What a tiny random
    model cannot show: the tool-call delta stream's timing of a call that completes (the
    simulator's tests measure that)."""
    s, rec = run(tmp_path, plain, "-n", "6", "-c", "2", "--mix", "tools=1",
                 "--max-tokens", "24", "--ignore-eos")  # fmt: skip
    assert len(rec.records) == 6
    for r in rec.records:
        assert (r.outcome, r.kind, r.output_tokens, r.tokens_estimated) == (
            "ok", "tools", 24, False), r  # fmt: skip
        assert r.ttft_ms is None and r.valid == 0 and r.error == "invalid: no tool called", r
    t = s["structured"]["arms"]["default"]["valid"]["tools"]
    assert (t["valid"], t["checked"]) == (0, 6), t
    assert s["arms"]["default"]["ttft_ms"]["p50"] is None
