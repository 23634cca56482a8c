"""The bounded gates (#59): every byte from outside bounded in size, depth and the time
spent on it, and every figure derived from it checked against what it is part of. Each
test is an attack that broke tokmon before the gates: a 64 KB ``{`` answer that froze
the engine, an event nested 1,200 deep that lost its request, a body of hundreds of MB
held whole, a server's timing larger than the whole it belongs to."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import tokmon
from hostile import Hostile, sse_events, text_event, usage_event

from tokmon import gate
from tokmon.engine.chunks import ChunkInfo, ProtocolError, interpret
from tokmon.engine.measure import CUT_PREFIX, StreamMeter
from tokmon.model.quality import CHECK_CHARS, first_json_object, is_correct, judge
from tokmon.model.table import RequestTable
from tokmon.model.timesplit import TimeSplitReducer
from tokmon.recording.reader import read_recording
from tokmon.report.split_text import arm_lines


def run(*args: str, timeout: float = 120):
    return tokmon(*args, timeout=timeout, text=True)


def deep(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


# ----------------------------------------------------------------------------- the JSON gate


def test_the_json_gate_bounds_size_and_depth():
    assert gate.depth('{"a": [1, {"b": "[[[{{{"}]}') == 3  # brackets in strings left out
    assert gate.depth(b'{"a": "\\"[[[[", "b": []}') == 2  # (an escaped quote in a string)
    with pytest.raises(gate.GateError, match="nested deeper than 64"):
        gate.loads(deep(65))
    assert gate.loads(deep(64))["a"]["a"]
    with pytest.raises(gate.GateError, match="nested deeper"):
        gate.loads("[" * 100_000)  # a RecursionError before the gate
    with pytest.raises(gate.GateError, match="over the 1 KiB"):
        gate.loads(b"[" + b"1," * 1000 + b"1]", limit=1024)
    assert gate.loads('"m\\ud800x"') == "m\ufffdx"  # a lone surrogate made text
    assert gate.finite_number(10**400) is None and gate.finite_number(2) == 2.0


def test_an_event_nested_deeply_is_a_protocol_error_never_a_recursion_error():
    for n in (65, 1_200, 100_000):
        with pytest.raises(ProtocolError, match="nested deeper"):
            interpret(deep(n).encode())
    assert interpret(b'{"choices":[{"delta":{"content":"x"}}]}').text == "x"


def test_a_1200_deep_event_keeps_its_requests_timing(tmp_path):
    """The event after the first text is nested 1,200 deep: the request is a protocol
    error that names it, and keeps the TTFT and the tokens it had (a RecursionError
    escaped the event's parse, and the worker's catch-all dropped the measured record)."""
    rec = tmp_path / "r.jsonl"
    with Hostile() as srv:
        srv.events = sse_events(text_event("hi"), deep(1200), usage_event(2), "[DONE]")
        p = run("run", "--url", srv.url, "--headless", "--no-gpu", "-n", "3", "-c", "1",
                "--record", str(rec), "--no-env", "--status-interval", "1h")  # fmt: skip
    assert "Traceback" not in p.stderr
    r = read_recording(str(rec)).records
    assert len(r) == 3
    for x in r:
        assert x.outcome == "protocol" and "nested deeper than 64" in x.error, x
        assert x.ttft_ms is not None and x.ttft_ms > 0 and x.chunks == 1


# ----------------------------------------------------------------------------- answers


def test_answer_checks_are_linear_and_bounded():
    """The answers that froze the engine (≈ length × 20,000 steps): judged or left
    unjudged in bounded work, never a stall; the checks still read what they did."""
    assert judge("json", '{"a": 1}', "{" * 60_000)[0] is None  # unjudged: out of passes
    assert judge("json", '{"a": 1}', "{" * (CHECK_CHARS + 1)) == (
        None,
        f"unjudged: an answer over {CHECK_CHARS:,} characters",
    )
    assert judge("json", '{"a": 1}', deep(30_000))[0] is None
    # the contains check: a substring search of the words (was a regex, length × length)
    assert judge("contains", "a " * 10_000 + "b", "a " * 30_000) == (False, "")
    assert is_correct("contains", "paris", "It is Paris.")
    assert not is_correct("contains", "par", "It is Paris.")  # whole words only
    # prose braces and quotes before the object; braces and escapes inside its strings
    assert first_json_object('He said "hi {" then {"a": "b\\n}", "c": 2} ok') == {
        "a": "b\n}",
        "c": 2,
    }
    assert first_json_object('x {"name": "y", "age": 3} z') == {"name": "y", "age": 3}
    assert first_json_object('{"a": {"b": 1}') == {"b": 1}
    assert is_correct("json", '{"n": 1}', '{"n": 1.0000000001}')
    assert not is_correct("json", '{"n": 1}', '{"n": 1e400}')  # not an OverflowError
    assert is_correct("number", "12", "so \\boxed{12}")


def test_a_server_answering_64kb_of_braces_leaves_the_run_whole(tmp_path):
    """Every quality probe answered with 70,000 ``{`` (a 33–80 s stall each, on the
    engine's event loop, before): the run ends by itself, every probe is counted as
    unjudged with its reason, and the summary says so."""
    summ, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    with Hostile() as srv:
        srv.events = sse_events(text_event("{" * 70_000, "stop"), usage_event(96), "[DONE]")
        p = run("run", "--url", srv.url, "--headless", "--no-gpu", "--quality", "6", "-c",
                "2", "--summary-json", str(summ), "--record", str(rec), "--no-env",
                "--status-interval", "1h")  # fmt: skip
    assert p.returncode == 0, p.stderr
    q = json.loads(summ.read_text())["quality"]["arms"]["default"]
    assert (q["n"], q["unjudged"]) == (0, 6)  # no answer judged, each counted
    r = read_recording(str(rec)).records
    assert len(r) == 6 and all(x.error.startswith("unjudged: an answer over") for x in r)
    assert "0/0 correct [0%, 100%], 6 unjudged" in p.stdout


def test_a_kept_answer_is_capped_and_the_cut_named():
    """A 10 MB answer to a probe or a conversation: the meter keeps its first
    ``keep_chars`` characters (the engine held all 300 MB before), the rest counted."""
    m = StreamMeter(0, keep_text=True, keep_chars=1000)
    for i in range(100):
        info = ChunkInfo(text_chars=100_000, content_chars=100_000, text="x" * 100_000)
        m.on_event((i + 1) * 1_000_000, info)
    assert len(m.text) == 1000 and m.cut == 10_000_000 - 1000
    out = m.finish(101_000_000)
    assert out["note"] == f"{CUT_PREFIX}kept the first 1,000 characters of 10,000,000"
    assert out["ttft_ms"] == 1.0 and out["tpot_ms"] is not None


def test_a_huge_non_streamed_answer_is_read_up_to_its_cap(tmp_path):
    """/models answering 20 MB (a probe's answer of 300 MB took the main process to
    933 MB): the read stops at 8 MiB and the pre-flight says so in one line."""
    with Hostile() as srv:
        srv.models_body = b'{"data": [' + b'{"id": "m"},' * 2_000_000 + b'{"id": "m"}]}'
        p = run("run", "--url", srv.url, "--headless", "--no-gpu", "-n", "1")
    assert p.returncode == 2 and "answered over 8 MiB" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- parts and wholes


def _table(n: int, **cols: object) -> RequestTable:
    lines = []
    for i in range(n):
        d = {"id": i, "arm": "a", "o": "ok", "ts": i * 10**9, "te": i * 10**9 + 10**9,
             "ttft": 50.0, "tpot": 20.0, "n": 10}  # fmt: skip
        for k, v in cols.items():
            d[k] = v(i) if callable(v) else v
        lines.append(d)
    return RequestTable.from_lines(lines, {})


def test_a_server_timing_larger_than_its_whole_is_left_out():
    """``queue_time_ms`` of 3,000,000 on a 50 ms TTFT (under the one-hour cap) showed as
    ``queue 3000000 ms (1415094340%)``: such a request is a counted mismatch, left out
    of every part; the others' split is whole and no share is over 100%."""
    tb = _table(50, sq=lambda i: 3_000_000.0 if i < 4 else 10.0, sp=30.0, si=18.0)
    red = TimeSplitReducer()
    red.requests(tb, np.arange(tb.n))
    sp = red.view("a", 2.0, np.full(50, 50.0), np.full(50, 20.0))
    t = sp.ttft
    assert (t.n, t.mismatched, t.queue, t.prefill, t.front) == (46, 4, 10.0, 30.0, 8.0)
    lines = "\n".join(arm_lines("a", sp.to_json(), 200))
    assert "4 of 50 requests left out (server figures over the client's TTFT" in lines
    assert "3000000" not in lines and "▓queue 10.0 ms (20%)" in lines


def test_a_server_itl_over_the_clients_tpot_is_no_negative_stream():
    """``TPOT 17.0 ms: server 24.3 ms · stream -7.3 ms`` in a report: a server's time per
    token over the client's TPOT of the same request is a mismatch; past a tenth of
    the requests, no split is given, and the text says why."""
    tb = _table(40, tpot=17.0, si=24.3)
    red = TimeSplitReducer()
    red.requests(tb, np.arange(tb.n))
    p = red.view("a", 2.0, np.full(40, 50.0), np.full(40, 17.0)).tpot
    assert p.mismatched == 40 and p.server_step is None and p.stream is None
    text = "\n".join(arm_lines("a", {"tpot_ms": p.to_json()}, 200))
    assert "no split" in text and "40 of 40 requests left out" in text and "-7" not in text
    # within a millisecond: rounding and a late first read, never a negative figure
    tb = _table(40, tpot=17.0, si=17.6)
    red = TimeSplitReducer()
    red.requests(tb, np.arange(tb.n))
    p = red.view("a", 2.0, np.full(40, 50.0), np.full(40, 17.0)).tpot
    assert p.mismatched == 0 and p.stream == 0.0 and p.server_step == pytest.approx(17.6)
