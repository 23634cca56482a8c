"""Loads given request by request: Mooncake traces (--trace), an earlier recording
(--replay-load, --record-prompts) and conversation files (--conversations), end to end
against the simulator on 127.0.0.1."""

import json

import numpy as np
import pytest
from helpers import tokmon

from tokmon.inputs import STREAM_OVER, load_conversations, load_mooncake, read_share
from tokmon.model.workloads.trace import TraceEntry, trace_prompt
from tokmon.model.workloads.workload import WorkloadError
from tokmon.recording.reader import read_recording
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig

BLOCK = 64  # tokens a hash id stands for in these traces (the simulator caches 16-token blocks)


@pytest.fixture(scope="module")
def sim():
    with SimProcess(SimConfig(schedule=(5.0, 1.0, 4), seed=7)) as s:
        yield s


def write_trace(path, n: int = 40, gap_ms: int = 25, seed: int = 1) -> list[dict]:
    """``n`` requests ``gap_ms`` apart (starting at 5 s: a trace's clock starts anywhere):
    three families of shared blocks, each request adding one or two blocks of its own (the
    last block of a request is the partial one, as in Mooncake's traces: here always its
    own, so the shared blocks are whole)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        family = [[1, 2], [1, 3, 4], [7]][i % 3]
        own = [1000 + 10 * i + k for k in range(int(rng.integers(1, 3)))]
        ids = family + own
        rows.append(
            {
                "timestamp": 5000 + gap_ms * i,
                "input_length": (len(ids) - 1) * BLOCK + int(rng.integers(40, 60)),
                "output_length": int(rng.integers(3, 9)),
                "hash_ids": ids,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def run(url: str, tmp_path, *extra: str, name: str = "r") -> tuple[dict, object]:
    out, rec = tmp_path / f"{name}.json", tmp_path / f"{name}.jsonl"
    r = tokmon("run", "--url", url, "--headless", "--summary-json", str(out),
               "--status-interval", "1h", "--record", str(rec), "--ignore-eos", *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text()), read_recording(str(rec))


def in_send_order(rec) -> list:
    return sorted(rec.records, key=lambda r: (r.t_sched, r.rid))


def shared_blocks(rows: list[dict], j: int) -> int:
    """Blocks request ``j`` shares, from its start, with some earlier request."""
    ids = rows[j]["hash_ids"]
    best = 0
    for r in rows[:j]:
        k = 0
        while k < min(len(ids), len(r["hash_ids"])) and ids[k] == r["hash_ids"][k]:
            k += 1
        best = max(best, k)
    return best


def test_a_trace_is_sent_on_its_schedule_with_its_lengths_and_its_shared_blocks(sim, tmp_path):
    """Every request at its time (the first at 0), none before it; the prompt tokens the
    server counted are the trace's input_length, its output its output_length; a request
    whose first k blocks appeared before finds k blocks cached (less at most one of the
    simulator's 16-token blocks; more by at most the part before the blocks, which equal
    first blocks share too), and one whose first block is new finds nothing cached."""
    rows = write_trace(tmp_path / "t.jsonl")
    s, rec = run(sim.url, tmp_path, "--trace", str(tmp_path / "t.jsonl"),
                 "--trace-block", str(BLOCK), "--metrics-interval", "0.2s")  # fmt: skip
    rs = in_send_order(rec)
    assert len(rs) == len(rows) and all(r.outcome == "ok" for r in rs)
    t0 = rs[0].t_sched
    for j, (r, row) in enumerate(zip(rs, rows, strict=True)):
        assert r.t_sched - t0 == (row["timestamp"] - 5000) * 1_000_000
        assert r.send_lag_ms >= 0
        assert r.prompt_tokens == r.prompt_tokens_asked == row["input_length"]
        assert r.max_tokens_asked == r.output_tokens == row["output_length"]
        k = shared_blocks(rows, j)
        if k == 0:
            assert r.cached_tokens == 0, j
        else:
            assert k * BLOCK - 16 <= r.cached_tokens <= k * BLOCK + 40, (j, k, r.cached_tokens)
    a = s["arms"]["default"]
    assert a["prompt_tokens"]["exact_share"] == 1.0
    assert a["send_lag_ms"]["count"] == len(rows) and a["send_lag_ms"]["min"] >= 0
    assert rec.header["settings"]["mode"] == "trace"
    from tokmon.report.render import render

    assert "load: 40 requests over 1 s at 1× from trace t.jsonl" in render(rec, "text")


def test_trace_speed_compresses_time_and_n_takes_the_first_requests(sim, tmp_path):
    write_trace(tmp_path / "t.jsonl", n=12, gap_ms=100)
    _, rec = run(sim.url, tmp_path, "--trace", str(tmp_path / "t.jsonl"), "--trace-speed", "4",
                 "-n", "9", "--workers", "2", "--approx-prompt-tokens")  # fmt: skip
    rs = in_send_order(rec)
    assert len(rs) == 9
    # two workers share the trace out, each on the same schedule
    assert [(r.t_sched - rs[0].t_sched) // 1_000_000 for r in rs] == [25 * i for i in range(9)]
    assert {r.worker for r in rs} == {0, 1}


def test_equal_hash_ids_are_equal_blocks():
    a = trace_prompt(TraceEntry(0, 3 * 64 + 30, 4, (1, 2, 3)), 0, 0, 64, None)
    b = trace_prompt(TraceEntry(0, 3 * 64 + 30, 4, (1, 2, 9)), 1, 0, 64, None)
    c = trace_prompt(TraceEntry(0, 3 * 64 + 30, 4, (5, 2, 3)), 2, 0, 64, None)
    wa, wb, wc = a.text.split(), b.text.split(), c.text.split()
    n = next(i for i, (x, y) in enumerate(zip(wa, wb, strict=False)) if x != y)
    assert n >= 64 + 64  # the head and blocks 1 and 2 are the same words
    assert wa[1:7] != wc[1:7]  # a different first block: a different head
    assert len(wa) == len(wb) == len(wc)  # (word-sized here: no prompt shape)
    # the same entry, index and seed: the same prompt on every replay
    assert trace_prompt(TraceEntry(0, 100, 4), 3, 1, 64, None) == trace_prompt(
        TraceEntry(0, 100, 4), 3, 1, 64, None
    )


@pytest.mark.parametrize(
    "line,says",
    [
        ("not json", "line 2 is not JSON"),
        ('{"timestamp": 1, "input_length": 5}', "no 'output_length'"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 2}', "timestamp must be >= 0"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 2}', "input_length must be"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": 3}', "not a list"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": ["x"]}', "hash id"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_bad_trace_line_is_named(tmp_path, line, says):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n' + line + "\n")
    with pytest.raises(WorkloadError, match=says):
        load_mooncake(str(p))


def test_a_bad_line_of_a_streamed_trace_is_named_when_its_engine_reads_it(tmp_path, line, says):
    """The same faults in a trace read as it is sent: its first lines are checked before
    the run (a wrong file fails at once), the rest by the engine that reads them."""
    p = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
    p.write_text(good + line + "\n")
    with pytest.raises(WorkloadError, match=says):
        load_mooncake(str(p), stream_over=0)  # (line 2 is in the head)
    p.write_text(good * 150 + line + "\n" + good)
    tr = load_mooncake(str(p), stream_over=0)
    assert tr.stream is not None and tr.count == 152 and tr.entries == ()
    got = []
    with pytest.raises(WorkloadError, match=says) as e:
        for w in (0, 1):
            for x in read_share(tr, w, 2):
                got.append(x)
    assert "line 151" in str(e.value) and len(got) == 75


test_a_bad_line_of_a_streamed_trace_is_named_when_its_engine_reads_it = pytest.mark.parametrize(
    "line,says",
    [
        ("not json", "is not JSON"),
        ('{"timestamp": 1, "input_length": 5}', "no 'output_length'"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 2}', "input_length must be"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": ["x"]}', "hash id"),
    ],
)(test_a_bad_line_of_a_streamed_trace_is_named_when_its_engine_reads_it)


def test_a_streamed_trace_is_the_held_trace_read_share_by_share(tmp_path):
    """Scanned, a large trace holds no entry: its count and span from the scan, each
    engine's share read from the file equal to the held trace's, time 0 at its first
    request; a request before the one its engine sent before is named (a streamed trace
    is sent in file order)."""
    rows = write_trace(tmp_path / "t.jsonl", n=50)
    held = load_mooncake(str(tmp_path / "t.jsonl"))
    tr = load_mooncake(str(tmp_path / "t.jsonl"), stream_over=0)
    assert held.stream is None and tr.stream is not None and tr.entries == ()
    assert (tr.count, tr.span_s, tr.kinds) == (held.count, held.span_s, held.kinds)
    assert tr.describe() == "50 requests over 1 s at 1× from trace t.jsonl (read as it is sent)"
    for n in (1, 3):
        for w in range(n):
            assert list(read_share(tr, w, n)) == list(held.share(w, n))
    rows = write_trace(tmp_path / "t.jsonl", n=200)  # (the head: the first 100 lines)
    rows[150]["timestamp"] = 1000  # before the trace's own first request
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = load_mooncake(str(tmp_path / "t.jsonl"), stream_over=0)
    with pytest.raises(WorkloadError, match="line 151: timestamp 1000 is before"):
        list(read_share(tr, 0, 1))


def padded_trace(path, n: int, gap_ms: int, bad_at: int | None = None) -> None:
    """A trace over the size tokmon holds (each line padded with a field Mooncake's
    format does not use), so a run streams it; line ``bad_at`` is not JSON."""
    pad = "x" * (STREAM_OVER // n + 64)
    lines = [
        json.dumps(
            {"timestamp": 5000 + gap_ms * i, "input_length": 40, "output_length": 3, "pad": pad}
        )  # fmt: skip
        for i in range(n)
    ]
    if bad_at is not None:
        lines[bad_at - 1] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > STREAM_OVER


def test_a_large_trace_streams_on_its_schedule(sim, tmp_path):
    """A trace over 16 MiB is read by the engines as it is sent: the same schedule as a
    held one (two engines sharing it out), its header says so."""
    padded_trace(tmp_path / "t.jsonl", 1500, 20)
    s, rec = run(sim.url, tmp_path, "--trace", str(tmp_path / "t.jsonl"), "-n", "40",
                 "--workers", "2", "--approx-prompt-tokens")  # fmt: skip
    rs = in_send_order(rec)
    assert len(rs) == 40 and all(r.outcome == "ok" for r in rs)
    assert [(r.t_sched - rs[0].t_sched) // 1_000_000 for r in rs] == [20 * i for i in range(40)]
    assert {r.worker for r in rs} == {0, 1}
    assert "1500 requests over 30 s at 1× from trace t.jsonl (read as it is sent)" in str(
        rec.header["settings"]
    )


def test_a_bad_line_met_mid_run_stops_the_run_and_keeps_what_was_measured(sim, tmp_path):
    """Line 131 of a streamed trace is not JSON (after the 100 checked before the run): the requests before it are measured and
    kept, the run stops, and the exit (1) names the line in one line."""
    padded_trace(tmp_path / "t.jsonl", 1500, 10, bad_at=131)
    out, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    r = tokmon("run", "--url", sim.url, "--headless", "--trace", str(tmp_path / "t.jsonl"),
               "--approx-prompt-tokens", "--summary-json", str(out), "--record", str(rec),
               "--status-interval", "1h")  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "t.jsonl line 131 is not JSON" in r.stderr, r.stderr
    got = read_recording(str(rec))
    assert len(got.records) == 130 and all(x.outcome == "ok" for x in got.records)
    assert any("line 131 is not JSON" in e.message for e in got.events)


def test_trace_options_refuse_what_the_trace_fixes(sim, tmp_path):
    write_trace(tmp_path / "t.jsonl", n=3)
    for extra in (["--rate", "2"], ["-c", "4"], ["--turns", "2"], ["--mix", "code=1"]):
        r = tokmon("run", "--url", sim.url, "--headless", "--trace", str(tmp_path / "t.jsonl"),
                   *extra)  # fmt: skip
        assert r.returncode == 2 and "--trace sets the load" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = tokmon("run", "--url", sim.url, "--headless", "--trace", str(tmp_path / "none.jsonl"))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    r = tokmon("run", "--url", sim.url, "--headless", "--replay-load", str(tmp_path / "t.jsonl"))
    assert r.returncode == 2 and "not a tokmon recording" in r.stderr, r.stderr


def test_replay_load_sends_the_very_same_load_again(sim, tmp_path):
    """A run recorded with --record-prompts (a mix of kinds, random lengths, an open
    loop), then --replay-load of it: the same prompts at the same offsets, with the same
    kinds and max_tokens; without the prompts, the same kinds and asked lengths."""
    _, first = run(sim.url, tmp_path, "--rate", "40", "-n", "30", "--prompt-tokens", "50:300",
                   "--max-tokens", "2:9", "--mix", "code=1,creative=1", "--record-prompts",
                   name="first")  # fmt: skip
    _, again = run(sim.url, tmp_path, "--replay-load", str(tmp_path / "first.jsonl"),
                   "--record-prompts", name="again")  # fmt: skip
    a, b = in_send_order(first), in_send_order(again)
    assert len(a) == len(b) == 30
    assert [x.t_sched - a[0].t_sched for x in a] == [y.t_sched - b[0].t_sched for y in b]
    assert [(x.kind, x.max_tokens_asked) for x in a] == [(y.kind, y.max_tokens_asked) for y in b]

    def sent(rec, rs):
        return [(rec.prompts[r.rid].messages, rec.prompts[r.rid].text) for r in rs]

    assert sent(first, a) == sent(again, b)
    assert [x.prompt_tokens for x in a] == [y.prompt_tokens for y in b]
    # a recording without its prompts: the same kinds and lengths, new words
    _, plain = run(sim.url, tmp_path, "--rate", "40", "-n", "10", "--prompt-tokens", "50:300",
                   "--mix", "code=1,creative=1", name="plain")  # fmt: skip
    _, redo = run(sim.url, tmp_path, "--replay-load", str(tmp_path / "plain.jsonl"), name="redo")
    p, q = in_send_order(plain), in_send_order(redo)
    assert [(x.kind, x.prompt_tokens_asked) for x in p] == [
        (y.kind, y.prompt_tokens_asked) for y in q
    ]
    assert [y.prompt_tokens for y in q] == [y.prompt_tokens_asked for y in q]


def test_a_conversation_file_is_sent_turn_by_turn_with_its_recorded_replies(sim, tmp_path):
    conv = tmp_path / "c.jsonl"
    conv.write_text(
        json.dumps({"system": "You are terse.", "kind": "code", "turns": [
            {"user": "Write a loop.", "assistant": "RECORDED-ONE"},
            "Now in C.",
            "And in Go."]}) + "\n"
        + json.dumps({"messages": [
            {"role": "user", "content": "Hi there."},
            {"role": "assistant", "content": "RECORDED-TWO"},
            {"role": "user", "content": "Tell me more."}]}) + "\n"
    )  # fmt: skip
    s, rec = run(sim.url, tmp_path, "-c", "1", "-n", "5", "--conversations", str(conv),
                 "--max-tokens", "6", "--record-prompts")  # fmt: skip
    rs = in_send_order(rec)
    sent = [rec.prompts[r.rid].messages for r in rs]
    assert [r.turn for r in rs] == [1, 2, 3, 1, 2]
    assert [r.kind for r in rs] == ["code"] * 3 + ["chat"] * 2
    assert sent[0] == (("system", "You are terse."), ("user", "Write a loop."))
    assert sent[1][2:] == (("assistant", "RECORDED-ONE"), ("user", "Now in C."))
    # no reply recorded for turn 2: the history holds what the server generated
    generated = sent[2][4]
    assert generated[0] == "assistant" and generated[1] and "RECORDED" not in generated[1]
    assert sent[4] == (
        ("user", "Hi there."),
        ("assistant", "RECORDED-TWO"),
        ("user", "Tell me more."),
    )
    assert rs[0].prompt_tokens < rs[1].prompt_tokens < rs[2].prompt_tokens
    assert s["arms"]["default"]["by_turn"]["3"]["requests"] == 1


@pytest.mark.parametrize(
    "text,says",
    [
        ('{"turns": []}', "no user message"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}', "unknown role"),
        ('{"turns": [3]}', "neither text nor"),
        ('{"prompt": "x"}', "neither 'turns' nor 'messages'"),
        ("[{}]", "no 'conversations' list"),
    ],
)
def test_a_bad_conversation_file_is_named(tmp_path, text, says):
    p = tmp_path / "c.jsonl"
    p.write_text(text + "\n")
    with pytest.raises(WorkloadError, match=says):
        load_conversations(str(p))


def test_sharegpt_conversations_keep_their_replies(tmp_path):
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"conversations": [
        {"from": "system", "value": "S"}, {"from": "human", "value": "Q1"},
        {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"}]}]))  # fmt: skip
    (sc,) = load_conversations(str(p))
    assert sc.opening == (("system", "S"),) and sc.turns == (("Q1", "A1"), ("Q2", None))


def test_the_load_is_written_down_in_one_line():
    from tokmon.model.workloads.workload import describe_load, load_text

    assert load_text("trace", 2.0) == "trace 2×" and load_text("rate", 4) == "4 req/s"
    st = {"mode": "rate", "rate": 4.0, "arrival": "gamma", "burstiness": 0.5,
          "prompt_tokens": "1000", "max_tokens": "256", "ignore_eos": True,
          "shared_prefix": {"words": 512, "pool": 4}, "mix": [["code", 0.5], ["chat", 0.5]]}  # fmt: skip
    assert describe_load(st) == (
        "open loop 4.0 req/s, gamma arrivals (burstiness 0.5) · prompt tokens 1000 (shared "
        "prefix 512, pool 4) · max tokens 256 (ignore_eos) · mix code 50%, chat 50%"
    )
    st = {"mode": "concurrency", "concurrency": 8, "max_tokens": "64",
          "conversations": {"scripts": "<12 conversations>"}}  # fmt: skip
    assert (
        describe_load(st)
        == "closed loop 8 streams · conversations <12 conversations> · max tokens 64"
    )
