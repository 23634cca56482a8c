"""Reasoning models (#61): the answer's wait, the thinking and the answer measured to the
token, against a simulated server whose schedule is known — its first 30 of 50 tokens
are thinking, 40 ms to the first token, 10 ms a token after it."""

from __future__ import annotations

import json

from helpers import tokmon

from tokmon.engine.chunks import interpret
from tokmon.engine.measure import NO_ANSWER_PREFIX, StreamMeter
from tokmon.recording.reader import read_recording
from tokmon.report.render import render
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig

MS = 1_000_000


def run(sim_url: str, tmp_path, *extra: str):
    rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
    r = tokmon("run", "--url", sim_url, "-n", "20", "-c", "2", "--max-tokens", "50",
               "--ignore-eos", "--headless", "--no-gpu", "--status-interval", "1h",
               "--record", str(rec), "--summary-json", str(summ), *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(summ.read_text()), read_recording(str(rec)), r.stdout


def test_the_answers_wait_to_the_token(tmp_path):
    """Thinking 30 of 50 tokens (TTFT 40 ms, 10 ms a token): the answer's wait is 340 ms
    per request (its median ±3 ms, the loops' lateness), 30 reasoning tokens by the server's count,
    the thinking and the answer each decoding at 100 tok/s; an SLO on the answer's wait
    is judged on it."""
    with SimProcess(SimConfig(schedule=(40.0, 10.0, 1), reasoning=30, seed=1)) as sim:
        s, rec, out = run(sim.url, tmp_path, "--slo", "answer=400")
    # Each phase is 19 gaps of 10 ms after its first token; a stamp at either end may be
    # late by up to late_ms on a loaded 2-core machine (the sim's schedule is absolute, so
    # lateness does not add up), which bounds one request's rate; the median of 20 is held
    # to 2%.
    late_ms = 8.0
    lo, hi = 19 / (0.190 + late_ms / 1000), 19 / (0.190 - late_ms / 1000)
    for r in rec.records:
        assert r.reasoning_tokens == 30 and not r.reasoning_counted, r
        assert r.ttfc_ms is not None and abs(r.ttfc_ms - 340.0) < late_ms + abs(r.ttft_ms - 40.0), r
        assert lo < r.answer_tps < hi and lo < r.reasoning_tps < hi, r
    for col in ("answer_tps", "reasoning_tps"):
        rates = sorted(getattr(r, col) for r in rec.records)
        assert abs((rates[9] + rates[10]) / 2 - 100.0) < 2.0, (col, rates)
    a = s["reasoning"]["arms"]["default"]
    assert a["requests"] == 20 and a["never_answered"] == 0
    assert a["reasoning_tokens_p50"] == 30 and a["answer_tokens_p50"] == 20
    assert a["reasoning_tokens_source"] == "the server's count"
    assert abs(a["ttfa_ms_p50"] - 340) < 3 and abs(a["thinking_ms_p50"] - 300) < 3
    assert s["slo"]["met"] == 20 and "the answer's wait ≤ 400 ms" in s["slo"]["terms"]
    assert "the answer's wait p50 34" in out and "0 of 20 never answered" in out
    assert "the answer's wait p50 34" in render(rec, "text")  # the report says it too


def test_a_model_that_never_leaves_its_thinking_has_no_answer_time(tmp_path):
    with SimProcess(SimConfig(schedule=(40.0, 10.0, 1), reasoning=-1, seed=1)) as sim:
        s, rec, out = run(sim.url, tmp_path, "--slo", "answer=400")
    for r in rec.records:
        assert r.ttfc_ms is None and r.answer_tps is None and r.reasoning_tokens == 50
        assert r.error.startswith(NO_ANSWER_PREFIX), r.error
    a = s["reasoning"]["arms"]["default"]
    assert a["never_answered"] == 20 and a["ttfa_ms_p50"] is None
    assert s["slo"]["met"] == 0  # no answer, never within the answer's SLO
    assert "20 of 20 never answered" in out


def test_reasoning_counted_from_the_chunks_where_the_server_does_not_say():
    """No ``reasoning_tokens`` in the usage: counted from the reasoning chunks (one token
    a chunk here, the cumulative usage absent), and said so."""
    m = StreamMeter(0)
    t = 10 * MS
    for i in range(5):
        m.on_event(t + i * MS, interpret(b'{"choices":[{"delta":{"reasoning":"hm"}}]}'))
    for i in range(3):
        m.on_event(t + (10 + i) * MS, interpret(b'{"choices":[{"delta":{"content":"ok"}}]}'))
    out = m.finish(t + 13 * MS)
    assert out["reasoning_tokens"] == 5 and out["reasoning_counted"] is True
    assert out["ttft_ms"] == 10.0 and out["ttfc_ms"] == 20.0
    assert abs(out["reasoning_tps"] - 1000.0) < 1e-6  # 4 tokens over 4 ms


def test_each_phase_speed_up_between_two_arms(tmp_path):
    """Two reasoning servers, speculative decoding off and on: the summary gives the
    speed-up of the thinking and of the answer, each with its interval."""
    from tokmon.sim.model import parse_profile

    prof = parse_profile("zero", "step_base_ms=4")
    summ = tmp_path / "s.json"
    with (
        SimProcess(SimConfig(profile=prof, reasoning=20, seed=1)) as plain,
        SimProcess(SimConfig(profile=prof, reasoning=20, spec=True, seed=2)) as spec,
    ):
        r = tokmon("run", "--arm", f"plain:url={plain.url}", "--arm", f"spec:url={spec.url}",
                   "--alternate", "2s", "-d", "8s", "-c", "2", "--max-tokens", "40",
                   "--ignore-eos", "--mix", "code=1", "--headless", "--no-gpu",
                   "--status-interval", "1h", "--summary-json", str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sp = json.loads(summ.read_text())["reasoning"]["speedup"]
    assert (sp["baseline"], sp["other"]) == ("plain", "spec")
    for phase in ("thinking", "answer"):
        lo, hi = sp[phase]["ci95"]
        assert lo <= sp[phase]["ratio"] <= hi and sp[phase]["ratio"] > 1.2, sp
    assert "spec over plain, decode speed: thinking ×" in r.stdout


def test_vllms_stream_of_thinking_counts_as_it_was_sent():
    """vLLM 0.32 (a captured shape): a reasoning delta with no text is a token it holds the
    bytes of, one of the thinking all the same; its usage says ``reasoning_tokens: 0``
    under a thinking budget, below the 3 reasoning chunks its own stream carried — not a
    count, so the thinking is counted from the stream, and said so."""
    m = StreamMeter(0)
    ms = 1_000_000
    for i, delta in enumerate(('{"role":"assistant","content":""}', '{"reasoning":" for"}',
                               '{"reasoning":""}', '{"reasoning":" of"}', '{"content":""}',
                               '{"content":" data"}', '{"content":" su"}')):  # fmt: skip
        m.on_event((i + 1) * ms, interpret(b'{"choices":[{"delta":' + delta.encode() + b"}]}"))
    m.on_event(8 * ms, interpret(b'{"choices":[],"usage":{"prompt_tokens":17,"completion_tokens'
                                 b'":6,"completion_tokens_details":{"reasoning_tokens":0}}}'))  # fmt: skip
    out = m.finish(9 * ms)
    assert out["reasoning_tokens"] == 3 and out["reasoning_counted"], out
    assert out["ttfc_ms"] == 6.0  # the answer's first text, after the forced end's empty step
    # its speed over its own span: 2 tokens from its first text, 1 ms apart (the empty step
    # before it is of the answer but not in that span)
    assert out["answer_tps"] == 1000.0, out
