"""Exact input lengths, as the server counts them: the simulator's tokenizer and its
/tokenize, the calibration before a run, and a run's requested vs. counted prompt tokens
(end to end, against real loopback servers)."""

import json

import httpx
import numpy as np
import pytest
from helpers import tokmon

from tokmon.engine.calibrate import calibrate
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.workload import HEAD_WORDS, synthetic_prompt
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


@pytest.fixture(scope="module")
def model_sim():
    # the batching model (prefill costs time per uncached token), not a fixed schedule
    with SimProcess(SimConfig(seed=4)) as s:
        yield s


def test_a_shared_prefix_is_hit_as_built_and_nothing_else_is(model_sim, tmp_path):
    """A pool of one 512-token system prompt in prompts of 1,000: the server's own
    counters find about 512 of each 1,000 prompt tokens cached (32 blocks of 16); without
    a shared prefix, none (each request's own words come first)."""
    s = run_summary(model_sim.url, tmp_path, "-n", "40", "--prompt-tokens", "1k",
                    "--shared-prefix", "512", "--metrics-interval", "0.2s")  # fmt: skip
    a = s["arms"]["default"]
    assert a["prompt_tokens"]["exact_share"] == 1.0
    assert a["prefix_cache_hit_rate"] == pytest.approx(0.512, abs=0.03)
    # the server says which requests found it cached (usage.prompt_tokens_details): all
    # but the first ones (-c 4: up to four at once; the calibration's probes used a
    # prefix of their own and left none cached)
    by = a["ttft_ms_by_cache"]
    assert by["cached"]["count"] >= 32 and 1 <= by["uncached"]["count"] <= 4
    with_prefix = a["ttft_ms"]["p50"]
    s = run_summary(model_sim.url, tmp_path, "-n", "40", "--prompt-tokens", "1k",
                    "--metrics-interval", "0.2s")  # fmt: skip
    assert s["arms"]["default"]["prefix_cache_hit_rate"] == 0.0
    # the same load with half of each prompt cached waits for half the prefill
    # (measured: TTFT p50 131 ms against 261 ms)
    assert with_prefix < 0.8 * s["arms"]["default"]["ttft_ms"]["p50"]


def test_a_pool_of_prefixes_is_that_many_prefixes():
    from tokmon.model.workloads.workload import SharedPrefix

    rng = np.random.default_rng(5)
    sp = SharedPrefix(64, pool=3)
    systems = {synthetic_prompt("chat", 300, rng, None, sp).messages[0][1] for _ in range(60)}
    assert len(systems) == 3 and all(len(t.split()) == 64 for t in systems)


def test_the_probe_reads_the_prefix_cache_hit_rate_over_its_window():
    from tokmon.probes.server import ServerMetricsProbe

    p = ServerMetricsProbe("http://x/metrics", ("a",), window_s=10)
    base = {"engine": "vllm", "prefix_queries": 1000.0, "prefix_hits": 0.0}
    p.ingest(0, base)
    out = p.ingest(int(5e9), base | {"prefix_queries": 3000.0, "prefix_hits": 1500.0})
    assert out["prefix_hit_pct"] == pytest.approx(75.0) and out["delta"][3:] == [2000.0, 1500.0]
    # impossible counters (more hits than lookups) give no figure, never one over 100%
    out = p.ingest(int(6e9), base | {"prefix_queries": 3100.0, "prefix_hits": 5000.0})
    assert "prefix_hit_pct" not in out


def test_a_prompt_tokens_ladder_says_what_the_server_counted_at_each_step(sim, tmp_path):
    s = run_summary(sim.url, tmp_path, "--ladder", "prompt-tokens=128,1k",
                    "--step-duration", "3s", "--step-warmup", "1s")  # fmt: skip
    steps = s["ladder"]["steps"]
    assert [(st["value"], st["prompt_tokens_p50"]) for st in steps] == [
        ("128", 128.0),
        ("1k", 1000.0),
    ]


def test_multi_turn_histories_grow_by_what_was_sent(sim, tmp_path):
    """One conversation at a time (-c 1), three turns each: every later turn's prompt, as
    the server counted it, is the previous prompt plus the reply the server generated
    (at least its completion tokens) plus the new user message; the user waits
    --think-time before each later turn; the summary gives the figures per turn."""
    from tokmon.recording.reader import read_recording

    rec = tmp_path / "r.jsonl"
    s = run_summary(sim.url, tmp_path, "-c", "1", "-n", "9", "--turns", "3",
                    "--think-time", "0.3s", "--followup-tokens", "20", "--prompt-tokens", "200",
                    "--max-tokens", "16", "--ignore-eos", "--record", str(rec))  # fmt: skip
    rs = sorted(read_recording(str(rec)).records, key=lambda r: r.t_sched)
    assert [r.turn for r in rs] == [1, 2, 3] * 3
    for a, b in zip(rs, rs[1:], strict=False):
        if b.turn == a.turn + 1:
            assert b.prompt_tokens >= a.prompt_tokens + a.output_tokens + 20
            assert (b.t_sched - a.t_end) / 1e9 >= 0.3
    by = s["arms"]["default"]["by_turn"]
    assert list(by) == ["1", "2", "3"] and all(v["requests"] == 3 for v in by.values())
    assert by["1"]["prompt_tokens_p50"] == 200
    assert (
        by["1"]["prompt_tokens_p50"] < by["2"]["prompt_tokens_p50"] < by["3"]["prompt_tokens_p50"]
    )


def test_turns_need_streams_not_a_rate(sim):
    r = tokmon("run", "--url", sim.url, "--headless", "--rate", "2", "--turns", "3", "-n", "4")
    assert r.returncode == 2 and "--turns" in r.stderr and "Traceback" not in r.stderr


def test_the_prefix_cache_demo_scene(tmp_path):
    out = tmp_path / "s.json"
    r = tokmon("demo", "--scene", "prefix-cache", "--headless", "--duration", "6s", "--seed", "3",
               "--summary-json", str(out), "--status-interval", "1h")  # fmt: skip
    assert r.returncode == 0, r.stderr
    a = json.loads(out.read_text())["arms"]["default"]
    assert a["prefix_cache_hit_rate"] > 0.3 and "2" in a["by_turn"]
    assert a["by_turn"]["2"]["ttft_ms_p50"] < a["by_turn"]["1"]["ttft_ms_p50"]


def word_tokenizer(path, words) -> str:
    """A Hugging Face tokenizer.json that has ``words`` whole and spells any other word
    letter by letter."""
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers

    letters = string.ascii_letters + string.digits
    pieces = ["[UNK]", *sorted(set(words)), *letters, *(f"##{c}" for c in letters)]
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return str(path)


def test_a_local_tokenizer_makes_lengths_exact_without_tokenize(sim_without_tokenize, tmp_path):
    """A server with no /tokenize, and the model's tokenizer.json given: the lengths are
    exact again (the file picks the one-token words, the server's usage the rest)."""
    from tokmon.model.workloads.workload import WORDS

    path = word_tokenizer(tmp_path / "tokenizer.json", [w for w in WORDS if len(w) <= 6])
    s = run_summary(sim_without_tokenize.url, tmp_path, "-n", "12", "--prompt-tokens", "2k",
                    "--tokenizer", path)  # fmt: skip
    pt = s["arms"]["default"]["prompt_tokens"]
    assert pt["exact_share"] == 1.0 and pt["min"] == pt["max"] == 2000


def test_a_tokenizer_that_is_not_the_servers_is_caught(sim_without_tokenize, tmp_path):
    """A tokenizer.json that counts a word as one token where the server counts two: the
    probe requests disagree with it, and the lengths are said to be near, not exact."""
    from tokmon.model.workloads.workload import WORDS

    path = word_tokenizer(tmp_path / "tokenizer.json", WORDS)  # "latency" is two tokens there
    s = run_summary(sim_without_tokenize.url, tmp_path, "-n", "8", "--prompt-tokens", "1k",
                    "--tokenizer", path)  # fmt: skip
    assert s["arms"]["default"]["prompt_tokens"]["exact_share"] < 1.0


def test_a_bad_tokenizer_path_is_one_line(sim, tmp_path):
    r = tokmon("run", "--url", sim.url, "--headless", "-n", "1",
               "--tokenizer", str(tmp_path / "nope.json"))  # fmt: skip
    assert r.returncode == 2 and "--tokenizer: cannot read" in r.stderr
    assert "Traceback" not in r.stderr


class _Flaky:
    """A loopback front for the simulator whose first probes fail: the first an HTTP
    500, the second a garbled status line; then it forwards what it is asked."""

    def __init__(self, target: str) -> None:
        import socket
        import threading

        self.target = target.removesuffix("/v1")
        self.faults = ["500", "garbled"]
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        with conn:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := f.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = f.read(int(headers.get("content-length", 0)))
                fault = self.faults.pop(0) if self.faults and method == "POST" else None
                if fault == "500":
                    conn.sendall(b"HTTP/1.1 500 Oops\r\ncontent-length: 2\r\n\r\nno")
                    continue
                if fault == "garbled":
                    conn.sendall(b"HTTQ/9 what\r\n\r\n")
                    return
                r = httpx.request(method, self.target + path, content=body,
                                  headers={"content-type": "application/json"})  # fmt: skip
                conn.sendall(
                    f"HTTP/1.1 {r.status_code} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(r.content)}\r\n\r\n".encode()
                    + r.content
                )

    def close(self) -> None:
        self.sock.close()


def test_a_probe_that_fails_once_is_asked_again(sim, tmp_path):
    """The first probe answers HTTP 500, the next a garbled status line: each probe is
    tried three times, so the lengths are still exact (it used to give up at once)."""
    front = _Flaky(sim.url)
    try:
        cfg = cfg_for(front.url)
        shape = calibrate(cfg, cfg.arms[0], ("code",))
        assert shape.exact and shape.source == "tokenize" and not front.faults
    finally:
        front.close()


def test_a_server_that_cannot_measure_says_so_as_an_event(tmp_path):
    """A server whose /tokenize and probes fail every time: the run goes on with
    word-sized prompts, and the warning is an event of the run (in the summary's
    events), not only a line behind the dashboard."""
    from tokmon.sim.faults import Faults

    with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=4, faults=Faults(http_500=1.0))) as s:
        out = tmp_path / "s.json"
        p = tokmon("run", "--url", s.url, "--headless", "--no-gpu", "-n", "4", "-c", "1",
                   "--summary-json", str(out))  # fmt: skip
    events = json.loads(out.read_text())["events"]
    warn = [e for e in events if e["kind"] == "warning" and "prompt tokens" in e["message"]]
    assert warn and "not measured" in warn[0]["message"], (events, p.stderr)


def test_a_tokenizer_where_no_word_is_one_token_still_gives_exact_lengths(tmp_path):
    """A byte-level rule (four bytes a token): of the common filler words only 'the' and
    'run' are one token, too few to build prompts from, so the lengths used to be near
    (mean tokens per word). Made-up words of the shortest one-token length are found
    with a handful of /tokenize calls, and every request is exactly what was asked."""
    calls = []
    with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=6, token_bytes=4)) as s:
        cfg = cfg_for(s.url)
        shape = calibrate(cfg, cfg.arms[0], ("code", "chat"))
        assert shape.exact and shape.source == "tokenize"
        assert all(len(u) == 3 for u in shape.units) and len(shape.units) >= 8
        out = tmp_path / "s.json"
        p = tokmon("run", "--url", s.url, "--headless", "--no-gpu", "-n", "24", "-c", "2",
                   "--prompt-tokens", "100:700", "--mix", "code=1,chat=1", "--summary-json",
                   str(out))  # fmt: skip
        calls.append(p.stderr)
    assert p.returncode == 0, p.stderr
    pt = json.loads(out.read_text())["arms"]["default"]["prompt_tokens"]
    assert pt["exact_share"] == 1.0 and pt["asked_requests"] == 24, pt
