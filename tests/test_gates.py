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
from tokmon.model.data.table import RequestTable
from tokmon.model.judge.quality import CHECK_CHARS, first_json_object, is_correct, judge
from tokmon.model.judge.timesplit import TimeSplitReducer
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
    # the prompt-length probe answered 10 MB (an internal error, exit 70, once its read
    # was capped): the prompts are not measured, said in one line, and the run goes on
    with Hostile() as srv:
        srv.events = sse_events(*[text_event("x" * 100_000) for _ in range(100)], "[DONE]")
        p = run("run", "--url", srv.url, "--headless", "--no-gpu", "-n", "1", "--no-env",
                "--status-interval", "1h")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "prompt tokens: not measured" in p.stderr and "over 8 MiB" in p.stderr


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
    assert "4 of 50 requests left out: server figures over the client's TTFT" in lines
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
    # a tenth of the TPOT where that is more than a millisecond (a first chunk read late
    # shortens the client's average); past it, a mismatch
    for si, left_out in ((18.6, 0), (18.8, 40)):
        tb = _table(40, tpot=17.0, si=si)
        red = TimeSplitReducer()
        red.requests(tb, np.arange(tb.n))
        p = red.view("a", 2.0, np.full(40, 50.0), np.full(40, 17.0)).tpot
        assert p.mismatched == left_out, (si, p)


# ----------------------------------------------------------------------------- files


def test_a_parquet_export_is_written_as_every_file_of_tokmons(tmp_path):
    """pyarrow wrote the file itself: it followed a planted symlink and overwrote its
    target, made a dangling link's target, clobbered a file that was not tokmon's, wrote
    0644 and left escape sequences in its strings. Now the writer opens it."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rec = tmp_path / "r.jsonl"
    with Hostile() as srv:
        srv.events = sse_events(text_event("a"), text_event("b", "st\x1b]0;x\x07op"),
                                usage_event(2), "[DONE]")  # fmt: skip
        p = run("run", "--url", srv.url, "--headless", "--no-gpu", "-n", "2", "--no-env",
                "--record", str(rec))  # fmt: skip
    assert p.returncode == 0, p.stderr
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    link = tmp_path / "link.parquet"
    link.symlink_to(victim)
    dangling = tmp_path / "dangling.parquet"
    dangling.symlink_to(tmp_path / "made.txt")
    for out in (link, dangling, victim):
        p = run("export", str(rec), "-F", "parquet", "-o", str(out))
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert victim.read_text() == "the user's own file" and not (tmp_path / "made.txt").exists()
    out = tmp_path / "r.parquet"
    for _ in range(2):  # tokmon's own export is replaced
        p = run("export", str(rec), "-F", "parquet", "-o", str(out))
        assert p.returncode == 0, p.stderr
    assert out.stat().st_mode & 0o777 == 0o600
    reasons = pq.read_table(out).column("finish_reason").to_pylist()
    assert "stop" in "".join(reasons) and not any("\x1b" in r or "\x07" in r for r in reasons)


# ----------------------------------------------------------------------------- the drawing boundary

EVIL = "\x1b[2J\x1b]0;title\x07\x1b]52;c;ZXZpbA==\x07\x9b31m\x07"


def poisoned(obj: object) -> object:
    """``obj`` (a snapshot) with every string it holds followed by escape sequences."""
    import dataclasses

    if isinstance(obj, str):
        return obj + EVIL
    if isinstance(obj, tuple):
        return tuple(poisoned(x) for x in obj)
    if isinstance(obj, list):
        return [poisoned(x) for x in obj]
    if isinstance(obj, dict):
        return {k: poisoned(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = object.__new__(type(obj))
        for f in dataclasses.fields(obj):
            object.__setattr__(out, f.name, poisoned(getattr(obj, f.name)))
        return out
    return obj


class _Still:
    commands = frozenset()

    def __init__(self, snap: object) -> None:
        self.snap = snap

    def snapshot(self) -> object:
        return self.snap

    def command(self, cmd: object) -> None:
        return None

    def close(self) -> None:
        pass


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
async def test_an_attached_views_frame_draws_no_escape(size):
    """A frame of tokmon's own types whose every string holds ESC sequences (an attached
    view's peer): nothing the dashboard draws carries a control character (the header's
    status field and the split panel's scope and source were drawn as they came, an
    ``ESC[2J``, an OSC title and an OSC 52 clipboard write on the user's terminal)."""
    from fakes import FakeSource

    from tokmon.sources import frames
    from tokmon.ui.app import DashboardApp

    snap = poisoned(FakeSource(split=True).snapshot())
    frame = frames.decode(frames.encode(snap))  # as an attached view receives it
    app = DashboardApp(_Still(frame))  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        for key in ("", "w", "z"):
            if key:
                await pilot.press(key)
            app.draw()
            await pilot.pause(0.3)
            text = "".join(seg.text for strip in app.screen._compositor.render_strips()
                           for seg in strip)  # fmt: skip
            bad = {c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0}
            assert not bad, (key, sorted(map(hex, map(ord, bad))))
            assert "\ufffd" in text or "]0;title" not in text


# ----------------------------------------------------------------------------- the smaller doors


def test_secrets_the_keyword_rule_missed_are_redacted():
    """Secrets in serve= commands that the keyword rule missed were written verbatim to
    recordings, summaries and server logs."""
    from tokmon.model.env.redact import redact_argv, secrets_in

    argv = ["srv", "-H", "X-Api-Key: hk-111111", "--header", "X-Session-Token: st-222222",
            "-H", "Cookie: ck-333333", "--jwt", "jw-444444", "--session-cookie", "sc-555555",
            "--sas-sig", "sg-666666", "--sas-token=sv-777777", "--pass", "pw-888888",
            "--password", "pw-999999", "-H", "Authorization: Bearer bb-000000",
            "--max-tokens", "64", "--max-num-batched-tokens", "4096", "--passes", "3",
            "-H", "Accept: text/plain"]  # fmt: skip
    red = " ".join(redact_argv(argv))
    found = secrets_in(argv)
    for s in ("hk-111111", "st-222222", "ck-333333", "jw-444444", "sc-555555", "sg-666666",
              "sv-777777", "pw-888888", "pw-999999", "bb-000000"):  # fmt: skip
        assert s not in red and s in found, s
    for keep in ("--max-tokens 64", "--max-num-batched-tokens 4096", "--passes 3",
                 "Accept: text/plain"):  # fmt: skip
        assert keep in red, keep
    # a command in one word, its header quoted
    one = redact_argv(["--arm", "b:serve=x -H 'X-Api-Key: hk-111111' --port 1"])
    assert "hk-111111" not in " ".join(one)


@pytest.mark.parametrize(
    "toml, says",
    [
        ("extra_body = {when = 1979-05-27T07:32:00Z}", "extra_body in CFG.when: a TOML datetime"),
        ('[arms.a]\nurl = "http://127.0.0.1:9/v1"\nbody = {d = [1979-05-27]}',
         "arm a: body.d[0]: a TOML date is not a JSON value"),
        ('[arms.a]\nurl = "http://127.0.0.1:9/v1"\nbody = {x = inf}',
         "arm a: body.x: inf is not a JSON number"),
    ],
)  # fmt: skip
def test_a_toml_value_json_cannot_hold_is_one_line(tmp_path, toml, says):
    """A TOML datetime in extra_body or an arm's body was a raw traceback (exit 1)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('url = "http://127.0.0.1:9/v1"\n' * ("arms" not in toml) + toml + "\n")
    p = run("run", "--config", str(cfg), "-n", "1", "--headless")
    assert p.returncode == 2 and says.replace("CFG", str(cfg)) in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_streamed_trace_cut_while_read_is_named(tmp_path):
    """A streamed trace truncated at a line boundary mid-run sent half its requests and
    exited 0 with no notice: the engine that reads past its end names it."""
    from tokmon.inputs import load_mooncake, read_share
    from tokmon.model.workloads.workload import WorkloadError

    p = tmp_path / "t.jsonl"
    lines = [json.dumps({"timestamp": i, "input_length": 5, "output_length": 2}) + "\n"
             for i in range(200)]  # fmt: skip
    p.write_text("".join(lines))
    tr = load_mooncake(str(p), stream_over=0)
    p.write_text("".join(lines[:120]))  # cut at a line boundary, after the scan
    got = []
    with pytest.raises(WorkloadError, match="ended after 120 of the 200 requests"):
        got.extend(read_share(tr, 0, 1))
    assert len(got) == 120


def test_a_quality_file_nested_deep_or_huge_is_one_line(tmp_path):
    """``10**400`` was ``internal error (OverflowError)``, exit 70; a line nested 100k
    deep said ``maximum recursion depth exceeded`` and named no file."""
    for name, line, says in (
        ("big.jsonl", '{"prompt": "p", "answer": 1' + "0" * 400 + ', "check": "number"}',
         'big.jsonl line 1: a number check\'s "answer" must be a number'),
        ("deep.jsonl", "[" * 100_000 + "]" * 100_000, "deep.jsonl line 1: nested deeper than 64"),
    ):  # fmt: skip
        f = tmp_path / name
        f.write_text(line + "\n")
        p = run("run", "--url", "http://127.0.0.1:9/v1", "--headless", "--quality", "2",
                "--quality-file", str(f))  # fmt: skip
        assert p.returncode == 2 and says in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "recursion" not in p.stderr


# ----------------------------------------------------------------------------- one shutdown


class Running:
    """``tokmon ARGS`` in its own process group, its stderr read line by line."""

    def __init__(self, *args: str, cwd: object = None) -> None:
        import os
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TOKMON_API_KEY")}
        self.p = subprocess.Popen(
            [sys.executable, "-m", "tokmon", *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
            stdin=subprocess.DEVNULL, cwd=cwd,
        )  # fmt: skip
        self.err: list[str] = []

    def until(self, text: str, times: int = 1, timeout: float = 120) -> None:
        import time

        assert self.p.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.err.append(line)
            if sum(text in x for x in self.err) >= times:
                return
        raise AssertionError(f"never said {text!r} {times}×: {''.join(self.err)}")

    def signal(self, sig: str = "TERM", timeout: float = 60) -> tuple[str, str, float]:
        import os
        import signal as s
        import time

        t0 = time.monotonic()
        os.killpg(self.p.pid, getattr(s, f"SIG{sig}"))
        try:
            out, err = self.p.communicate(timeout=timeout)
        finally:
            if self.p.poll() is None:
                os.killpg(self.p.pid, s.SIGKILL)
        return out, "".join(self.err) + err, time.monotonic() - t0


SCRIPT = """import os, sys, time
run, port = sys.argv[1], sys.argv[sys.argv.index("--port") + 1]
if run == "2":
    time.sleep(300)  # run 2's server never becomes ready
os.execv(sys.executable, [sys.executable, "-m", "tokmon", "sim", "--port", port,
                          "--profile", "small-cpu"])
"""


@pytest.mark.slow
def test_sigterm_while_a_server_starts_ends_the_repeat_with_what_finished(tmp_path):
    """SIGTERM while run 2's managed server starts killed tokmon in 17 ms: no summary and
    a 0-byte r-2.jsonl. Now the server is stopped, run 1's files stand, run 2 leaves no
    empty recording, and the exit code says which signal ended it."""
    import sys

    (tmp_path / "srv.py").write_text(SCRIPT)
    r = Running("run", "--arm", f"a:serve={sys.executable} srv.py {{run}} --port {{port}}",
                "--repeat", "3", "-n", "6", "-c", "2", "--max-tokens", "8", "--headless",
                "--no-gpu", "--no-env", "--record", "r.jsonl", "--summary-json", "s.json",
                cwd=tmp_path)  # fmt: skip
    r.until("run 2 of 3")
    r.until("starting arm a's server", times=2)
    out, err, took = r.signal("TERM")
    assert r.p.returncode == 143, err
    assert "Traceback" not in err and "run 3 of 3" not in err
    assert "stopped at run 2 of 3" in err, err
    assert (tmp_path / "r-1.jsonl").stat().st_size > 0 and (tmp_path / "s-1.json").exists()
    assert not (tmp_path / "r-2.jsonl").exists()


@pytest.mark.slow
def test_sigterm_in_a_runs_drain_or_a_cooldown_ends_the_repeat(tmp_path):
    """SIGTERM during run 2 of 3 drained run 2 and then started run 3; in a cooldown it
    killed tokmon with no table over runs. Now either ends the repeat: a run cut short is
    left out of the figures over runs (and said), the runs that finished are compared."""
    from tokmon.sim.process import SimProcess
    from tokmon.sim.server import SimConfig

    with SimProcess(SimConfig(schedule=(5.0, 2.0, 1), seed=1)) as sim:
        common = ("run", "--url", sim.url, "--headless", "--no-gpu", "--no-env", "-c", "2",
                  "--max-tokens", "8", "--status-interval", "0.5s")  # fmt: skip
        # a signal in the cooldown after run 2: runs 1 and 2 compared, no run 3
        # (the first cooldown passes; the signal comes within the second, 6 s long)
        r = Running(*common, "-n", "10", "--repeat", "3", "--between", "cooldown=6s",
                    "--record", "c.jsonl", cwd=tmp_path)  # fmt: skip
        r.until("cooling down", times=2)
        out, err, took = r.signal("TERM")
        assert r.p.returncode == 143, err
        assert "run 3 of 3" not in err and "in the cooldown" in err, err
        assert "2 runs: c-1.jsonl · c-2.jsonl" in out and took < 30, (out, took)
        # a signal in a run (one that would take minutes): drained, left out, no next run
        r = Running(*common, "-d", "5m", "--repeat", "3", "--record", "d.jsonl",
                    cwd=tmp_path)  # fmt: skip
        r.until(" · ok ")  # (a status line: the run is under way)
        out, err, took = r.signal("TERM")
    assert r.p.returncode == 143, err
    assert "run 2 of 3" not in err and "stopped at run 1 of 3" in err, err
    assert "left out: d-1.jsonl (stopped by SIGTERM)" in err, err
    assert (tmp_path / "d-1.jsonl").stat().st_size > 0  # its recording whole, all the same


def test_a_run_whose_server_died_is_not_compared():
    """A run whose server died mid-way was counted in "reproduces within ±1.1% over 3
    runs": a managed server that failed, or requests that could not reach their server,
    leave the run out of the figures over runs (and say why)."""
    from tokmon.model.judge.runs import not_whole

    whole = {"arms": {"a": {"requests": {"by_outcome": {"ok": 90, "http_5xx": 2}}}}}
    assert not_whole(whole) == ""
    died = {"arms": {"a": {"requests": {"by_outcome": {"ok": 40, "connect": 12}}}}}
    assert not_whole(died) == "the server of arm a could not be reached for 12 requests"
    failed = {**whole, "managed_servers": {"a": {"starts": 2, "failed": 1}}}
    assert not_whole(failed) == "the server of arm a failed"
