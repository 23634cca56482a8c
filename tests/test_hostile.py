"""A hostile server, a hostile file, a full disk: nothing reaches the terminal, nothing
leaks, nothing is lost silently (the README's reliability table, item by item).

Servers are scripted on 127.0.0.1 (tests/hostile.py); tokmon runs as a user would, in a
subprocess, and what it wrote is checked as raw bytes."""

from __future__ import annotations

import ast
import base64
import gzip
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import tokmon
from hostile import ESC_MODEL, Hostile, sse_events, text_event, usage_event

from tokmon.model.data.facts import Sample
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.probes.server import ServerMetricsProbe
from tokmon.recording.reader import read_recording
from tokmon.recording.writer import Recorder
from tokmon.textsafe import csv_cell, dumps

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent
# bytes a terminal interprets: ESC, BEL, and the 8-bit CSI/OSC/ST as UTF-8
CONTROL = (b"\x1b", b"\x07", b"\xc2\x9b", b"\xc2\x9d", b"\xc2\x9c")


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 90):
    return tokmon(*args, env=env, timeout=timeout, text=False)


def no_control(*blobs: bytes) -> None:
    for b in blobs:
        for c in CONTROL:
            assert c not in b, (c, b[max(0, b.find(c) - 60) : b.find(c) + 60])


def quick(url: str, tmp: Path, *extra: str) -> list[str]:
    return ["run", "--url", url, "--headless", "-c", "2", "-n", "6", "--no-gpu", *extra]


def strict_json(text: str) -> Any:
    def no_constant(name: str) -> Any:
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=no_constant)


# ----------------------------------------------------------------------------- 1, 2


def test_terminal_injection_reaches_no_output(tmp_path):
    """A model id, a version and a finish_reason full of escape sequences: the run's
    summary, every report format, --compare and the CSV export carry none of them."""
    with Hostile() as srv:
        srv.model_id = ESC_MODEL
        srv.events = sse_events(
            text_event("a\x1b]0;title\x07b"),
            text_event("c", "=cmd|' /C calc'!A0\x1b[2J"),
            usage_event(2),
            "[DONE]",
        )
        rec = tmp_path / "r.jsonl"
        p = run(
            *quick(
                srv.url, tmp_path, "--record", str(rec), "--summary-json", str(tmp_path / "s.json")
            )
        )
        assert p.returncode == 0, p.stderr
        no_control(p.stdout, p.stderr, (tmp_path / "s.json").read_bytes())
        # the pre-flight error lists the server's models
        bad = run(*quick(srv.url, tmp_path, "--model", "nope"))
        assert bad.returncode == 2 and b"the server has" in bad.stderr
        no_control(bad.stdout, bad.stderr)
    for fmt in ("text", "md", "json", "csv", "html"):
        r = run("report", str(rec), "--format", fmt)
        assert r.returncode == 0, r.stderr
        no_control(r.stdout, r.stderr)
    outs = {}
    for fmt in ("text", "json", "md", "csv", "html"):
        r = run("report", str(rec), "--compare", str(rec), "--format", fmt)
        assert r.returncode == 0, r.stderr
        no_control(r.stdout)
        outs[fmt] = r.stdout
    # each format is itself
    assert len(set(outs.values())) == 5
    assert outs["html"].startswith(b"<!doctype html>") and outs["csv"].startswith(b"section,")
    assert b"| speculative decoding |" in outs["md"] or b"| engine |" in outs["md"]
    json.loads(outs["json"])
    csv = run("export", str(rec), "--format", "csv")
    assert csv.returncode == 0
    no_control(csv.stdout)
    # 2: a cell that begins like a formula is text to a spreadsheet
    assert b",'=cmd|" in csv.stdout and b",=cmd" not in csv.stdout


def test_csv_cell_neutralises_formulas():
    for v in ("=1+1", "+1", "-1", "@SUM(A1)", "\t=1"):
        assert csv_cell(v).startswith("'"), v
    assert csv_cell(-1) == -1 and csv_cell("stop") == "stop"


# ----------------------------------------------------------------------------- 3


def test_secrets_never_written(tmp_path):
    """URL credentials, a custom header's value and the API key (echoed by the server into
    its model id) appear in no output; the credentials are Basic auth on every request."""
    with Hostile() as srv:
        srv.echo_key = True
        url = srv.url.replace("http://", "http://alice:PASSW0RD-xyz@")
        rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
        p = run(
            *quick(url, tmp_path, "--record", str(rec), "--summary-json", str(summ)),
            "--header", "X-Tenant: tenant-secret-42",
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        basic = "Basic " + base64.b64encode(b"alice:PASSW0RD-xyz").decode()
        # pre-flight, /metrics, streams and the network probe; without it, only the
        # environment record's two questions "does it answer anyone?" (one each)
        assert {a for _, a in srv.auth_seen} == {basic, ""}
        bare = sorted(p for p, a in srv.auth_seen if not a)
        assert bare == ["/metrics", "/v1/models"], bare
        keyed = run(
            *quick(srv.url, tmp_path, "--record", str(tmp_path / "k.jsonl"), "--summary-json",
                   str(tmp_path / "k.json")),
            env={"OPENAI_API_KEY": "sk-live-KEY123456"},
        )  # fmt: skip
        assert keyed.returncode == 0, keyed.stderr
        both = run(*quick(url, tmp_path), env={"OPENAI_API_KEY": "sk-live-KEY123456"})
        assert both.returncode == 2 and b"exclude each other" in both.stderr
    reports = [run("report", str(f), "--format", fmt).stdout for f in (rec, tmp_path / "k.jsonl")
               for fmt in ("text", "md", "json", "csv", "html")]  # fmt: skip
    outputs = [p.stdout, p.stderr, keyed.stdout, keyed.stderr, rec.read_bytes(), summ.read_bytes(),
               (tmp_path / "k.jsonl").read_bytes(), (tmp_path / "k.json").read_bytes(), *reports]  # fmt: skip
    for secret in (b"PASSW0RD-xyz", b"alice:", b"tenant-secret-42", b"sk-live-KEY123456"):
        for o in outputs:
            assert secret not in o, (secret, o[:300])
    assert b"<redacted>" in rec.read_bytes()


# ----------------------------------------------------------------------------- 4, 5


class FlakyFile:
    """A file whose writes fail with ENOSPC while ``full`` is set."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "ab", buffering=0)  # noqa: SIM115
        self.full = False

    def write(self, data: bytes) -> int:
        if self.full:
            raise OSError(28, "No space left on device")
        return self.f.write(data)

    def close(self) -> None:
        self.f.close()


def _req(i: int) -> Any:
    from tokmon.model.data.records import RequestRecord

    return RequestRecord(rid=i, arm="a", outcome="ok", t_sched=i * 1000, t_end=i * 1000 + 500,
                         ttft_ms=1.0, e2e_ms=2.0, output_tokens=3)  # fmt: skip


def test_a_full_disk_mid_run_loses_nothing_and_says_so(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(str(path))
    notes: list[str] = []
    rec.on_error = notes.append
    rec.open({"settings": {"arms": [{"name": "a"}]}}, 0)
    flaky = FlakyFile(path)
    rec._raw = flaky  # type: ignore[assignment]
    rec.records([_req(i) for i in range(100)])
    rec.flush()
    flaky.full = True
    rec.records([_req(i) for i in range(100, 244)])
    rec.flush()
    rec.flush()
    assert notes and "No space left" in notes[0] and rec.error
    flaky.full = False
    rec.records([_req(i) for i in range(244, 300)])
    rec.summary({"arms": {}})
    rec.end(10**9)
    rec.close()
    assert "again" in notes[-1] and rec.lost_lines == 0
    r = read_recording(str(path))
    assert sorted(r.requests.cols["rid"].tolist()) == list(range(300))  # none lost
    assert not r.truncated and r.sessions == 1


def test_recording_over_the_file_size_limit_fails_the_run(tmp_path):
    """A real write failure (the file-size limit, EFBIG): shown at once on stderr, the run
    exits non-zero and names what is missing."""
    with Hostile() as srv:
        rec = tmp_path / "r.jsonl"

        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (6000, resource.RLIM_INFINITY))

        p = subprocess.run(
            [PY, "-m", "tokmon", "run", "--url", srv.url, "--headless", "-c", "4", "-n", "60",
             "--no-gpu", "--record", str(rec)],
            capture_output=True, timeout=90, stdin=subprocess.DEVNULL, preexec_fn=limit,
        )  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert b"cannot write" in p.stderr and b"incomplete" in p.stderr


def test_record_refuses_an_existing_file_and_r_continues_the_session(tmp_path):
    with Hostile() as srv:
        rec = tmp_path / "r.jsonl"
        assert run(*quick(srv.url, tmp_path, "--record", str(rec))).returncode == 0
        again = run(*quick(srv.url, tmp_path, "--record", str(rec)))
        assert again.returncode == 2 and b"--overwrite" in again.stderr
        assert run(*quick(srv.url, tmp_path, "--record", str(rec), "--append")).returncode == 0
        r = read_recording(str(rec))
        assert r.sessions == 2 and r.corrupt == 0 and r.requests.n == 6
        assert run(*quick(srv.url, tmp_path, "--record", str(rec), "--overwrite")).returncode == 0
        assert read_recording(str(rec)).sessions == 1
    # the dashboard's r: the same session in the same file, the unrecorded part marked
    path = tmp_path / "t.jsonl"
    recorder = Recorder(str(path))
    recorder.open({"settings": {"arms": [{"name": "a"}]}}, 0)
    recorder.records([_req(1)])
    assert "paused" in recorder.toggle()
    recorder.records([_req(2)])  # not recorded
    assert "again" in recorder.toggle()
    recorder.records([_req(3)])
    recorder.end(10**9)
    recorder.close()
    r = read_recording(str(path))
    assert r.sessions == 1 and r.corrupt == 0 and r.requests.cols["rid"].tolist() == [1, 3]
    assert [g["why"] for g in r.gaps] == ["paused"]


# ----------------------------------------------------------------------------- 6, 7


def test_engine_death_is_an_error_with_one_line():
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.sources.live import LiveSession

    cfg = RunConfig(arms=(Arm("a", url="not a url", model="m"),), requests=2)
    s = LiveSession(cfg)
    s.start()
    assert s.wait(30)
    s.close()
    assert s.failures() and "engine 0 failed" in s.failures()[0], s.failures()
    p = run("run", "--url", "http://127.0.0.1:9/v1", "--seed", "-1", "--headless")
    assert p.returncode == 2 and b"--seed" in p.stderr and b"Traceback" not in p.stderr


def test_more_workers_than_streams_does_not_hang(tmp_path):
    with Hostile() as srv:
        p = run("run", "--url", srv.url, "--headless", "--workers", "2", "-c", "1", "-n", "2",
                "--no-gpu", "--summary-json", str(tmp_path / "s.json"), timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "s.json").read_text())["arms"]["default"]
    assert s["requests"]["ok"] == 2


# ----------------------------------------------------------------------------- 8-11


def test_nan_in_metrics_and_numbers_a_server_cannot_mean(tmp_path):
    """NaN/+Inf in /metrics, usage of 1e30, -100 and true: strict JSON everywhere, the
    request kept with its tokens counted from the chunks, and the field named."""
    with Hostile() as srv:
        srv.metrics_body = (
            b"vllm:num_requests_running +Inf\nvllm:kv_cache_usage_perc NaN\n"
            b"vllm:num_requests_waiting 2\n"
        )
        out = {}
        for bad in ("1e30", "-100", "true"):
            srv.events = sse_events(text_event("a"), text_event("b", "stop"),
                                    '{"choices":[],"usage":{"completion_tokens":X}}'.replace("X", bad),
                                    "[DONE]")  # fmt: skip
            rec, summ = tmp_path / f"r{bad}.jsonl", tmp_path / f"s{bad}.json"
            p = run(*quick(srv.url, tmp_path, "--record", str(rec), "--summary-json", str(summ)),
                    "--gpu-interval", "0.1s")  # fmt: skip
            assert p.returncode == 0, p.stderr
            s = strict_json(summ.read_text())
            for line in rec.read_text().splitlines():
                strict_json(line)
            r = read_recording(str(rec))
            assert r.corrupt == 0
            out[bad] = (s, r.records)
    for bad, (s, recs) in out.items():
        a = s["arms"]["default"]
        assert a["requests"]["ok"] == 6 and a["output_tokens"] == 12, (bad, a)
        assert all(x.output_tokens == 2 and x.tokens_estimated for x in recs)
        assert all("usage.completion_tokens" in x.error for x in recs), recs[0].error


@pytest.mark.parametrize(
    "event,field",
    [
        ('{"choices":[{"index":0,"delta":{"content":5}}]}', "delta.content"),
        ('{"choices":[{"index":0,"delta":{"content":["x"]}}]}', "delta.content"),
        ('{"choices":[{"index":0,"delta":{"content":"x"}}],"metrics":{"speculative_decoding":'
         '{"num_draft_tokens":NaN,"num_accepted_draft_tokens":1}}}', "speculative_decoding"),
        ('{"choices":[{"index":0,"delta":{"content":"x"}}],"metrics":{"speculative_decoding":'
         '{"num_draft_tokens":1e400,"num_accepted_draft_tokens":1}}}', "speculative_decoding"),
        ('{"choices":[{"index":0,"delta":{"content":"x"}}],"metrics":{"speculative_decoding":'
         '{"num_draft_tokens":3,"num_accepted_draft_tokens":5}}}', "accepted of 3 drafted"),
    ],
)  # fmt: skip
def test_malformed_fields_are_a_named_protocol_error(event, field):
    import asyncio

    from tokmon.engine import h1
    from tokmon.engine.client import Tick, stream_request

    with Hostile() as srv:
        srv.events = sse_events(text_event("first"), event, "[DONE]")

        async def go() -> Any:
            pool = h1.Pool(5.0)
            try:
                return await stream_request(
                    pool, h1.prepare(srv.url + "/chat/completions", {}), rid=0, arm="a",
                    body=b"{}", t_sched=0, ticks=Tick(), first_token_s=10, total_s=10,
                )  # fmt: skip
            finally:
                pool.close()

        r = asyncio.run(go())
    assert r.outcome == "protocol" and field in r.error, r.error
    assert r.ttft_ms is not None  # the timing so far is kept


def test_server_counters_never_give_acceptance_over_100_percent():
    p = ServerMetricsProbe("http://127.0.0.1:9/metrics", ("a",))
    base = {"engine": "vllm", "drafts": 10, "draft_tokens": 30, "accepted": 10}
    fold = Fold(FoldSettings(arms=("a",)))
    fold.apply(Sample(0, "server", p.ingest(0, dict(base))))
    live = p.ingest(10**9, {**base, "drafts": 20, "draft_tokens": 60, "accepted": 60})
    fold.apply(Sample(10**9, "server", live))
    assert "spec_acceptance_rate" not in live and "inconsistent" in live["spec_note"]
    tot = fold.server_spec()["a"]
    assert tot["acceptance_rate"] is None


# ----------------------------------------------------------------------------- 12


def _header(**over: Any) -> str:
    h = {"k": "header", "schema_version": 1, "settings": {"arms": [{"name": "a"}]}}
    h.update(over)
    return json.dumps(h)


@pytest.mark.parametrize(
    "name,make",
    [
        ("symlink to /dev/zero", lambda p: p.symlink_to("/dev/zero")),
        ("gzip bomb", lambda p: p.write_bytes(gzip.compress(b"\0" * (40 << 20)))),
        ("a line of 17 MB", lambda p: p.write_bytes(_header().encode() + b"\n" + b"x" * (17 << 20))),
        ("20,000 arms", lambda p: p.write_text(
            _header(settings={"arms": [{"name": f"a{i}"} for i in range(20_000)]}) + "\n")),
        ("slo of the wrong type", lambda p: p.write_text(_header(slo={"ttft_ms": "x"}) + "\n")),
        ("settings as a list", lambda p: p.write_text(_header(settings=[1, 2]) + "\n")),
        ("command as a number", lambda p: p.write_text(_header(command=5) + "\n")),
    ],
)  # fmt: skip
def test_crafted_recordings_are_one_line_and_exit_2(tmp_path, name, make):
    path = tmp_path / "evil.jsonl"
    make(path)
    for args in (["report", str(path)], ["report", str(path), "--format", "html"]):
        p = run(*args, timeout=60)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-500:])
        assert p.stderr.count(b"\n") == 1 and b"internal error" not in p.stderr, p.stderr


def test_an_event_at_1e20_is_dropped_not_plotted(tmp_path):
    path = tmp_path / "far.jsonl"
    lines = [
        _header(),
        json.dumps({"k": "r", "id": 1, "arm": "a", "o": "ok", "ts": 0, "te": 10**9,
                    "ttft": 5.0, "e2e": 9.0, "n": 3}),
        json.dumps({"k": "r", "id": 2, "arm": "a", "o": "ok", "ts": 0, "te": 10**20}),
        json.dumps({"k": "r", "id": 3, "arm": "a", "o": "ok", "ts": 0, "te": 10**9, "ttft": -20.3}),
        json.dumps({"k": "e", "t": 10**20, "kind": "marker", "msg": "far", "data": {}}),
        json.dumps({"k": "end", "t": 2 * 10**9}),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    r = read_recording(str(path))
    assert r.requests.n == 1 and r.corrupt == 3 and not r.events
    p = run("report", str(path), "--format", "html", timeout=60)
    assert p.returncode == 0 and len(p.stdout) < 5_000_000


# ----------------------------------------------------------------------------- 13


def test_a_huge_metrics_body_is_refused_cheaply():
    with Hostile() as srv:
        srv.metrics_body = b"".join(
            b'vllm:num_requests_running{id="%d"} 1\n' % i for i in range(250_000)
        )  # ~9 MB, 250k series
        probe = ServerMetricsProbe(srv.url.replace("/v1", "/metrics"), ("a",))
        notes: list[str] = []
        probe.on_event = lambda kind, msg, data: notes.append(msg)
        out = probe.sample()
        probe.close()
    assert "server_note" in out and notes and "MiB" in notes[0]


# ----------------------------------------------------------------------------- 14, 15


@pytest.mark.parametrize(
    "toml,what",
    [
        ('insecure = "false"', "true or false"),
        ('headless = "no"', "true or false"),
        ("extra_body = [1]", "extra_body"),
        ("record = 5", "record"),
        ("mix = {code = 1}", "single value"),
        ("concurrency = [1, 2]", "single value"),
        ("concurrency = 0", "concurrency"),
    ],
)
def test_config_values_are_checked_like_the_command_line(tmp_path, toml, what):
    cfg = tmp_path / "c.toml"
    cfg.write_text('url = "http://127.0.0.1:9/v1"\n' + toml + "\n")
    p = run("run", f"--config={cfg}")
    assert p.returncode == 2 and what.encode() in p.stderr, p.stderr
    assert b"internal error" not in p.stderr and p.stderr.count(b"\n") == 1


def test_config_with_equals_and_a_non_utf8_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('url = "http://127.0.0.1:9/v1"\nconcurrency = 3\n')
    p = run("run", f"--config={cfg}")
    assert p.returncode == 2 and b"connection refused" in p.stderr  # the file was read
    cfg.write_bytes(b'url = "\xff\xfe"\n')
    p = run("run", "--config", str(cfg))
    assert p.returncode == 2 and b"not valid TOML" in p.stderr and b"Traceback" not in p.stderr


@pytest.mark.parametrize(
    "opt", [("--slo-target", "nan"), ("--slo-target", "-1"), ("--gpu-count", "-1"),
            ("--top-p", "nan"), ("--gpu-hour-price", "inf"), ("--rate", "nan"),
            ("--temperature", "-0.5")],
)  # fmt: skip
def test_numeric_options_refuse_nonfinite_and_out_of_range(opt):
    p = run("run", "--url", "http://127.0.0.1:9/v1", *opt)
    assert p.returncode == 2 and opt[0].encode() in p.stderr, p.stderr


# ----------------------------------------------------------------------------- 16


@pytest.mark.parametrize(
    "status,headers,outcome,says",
    [
        (302, {"location": "/x"}, "protocol", "302"),
        (999, {}, "protocol", "999"),
        (503, {}, "http_5xx", "503"),
        (200, {"content-type": "text/event-stream", "content-encoding": "gzip"}, "protocol",
         "Content-Encoding"),
    ],
)  # fmt: skip
def test_statuses_and_encodings_are_named(tmp_path, status, headers, outcome, says):
    with Hostile() as srv:
        srv.stream_status = status
        srv.stream_headers = headers
        p = run(*quick(srv.url, tmp_path, "--record", str(tmp_path / "r.jsonl")))
    assert p.returncode == 1  # none succeeded
    r = read_recording(str(tmp_path / "r.jsonl"))
    assert {x.outcome for x in r.records} == {outcome}
    assert says in r.records[0].error


def test_arm_table_counts_never_merge():
    from tokmon.ui.panels import _count

    for n in (0, 999, 9_999, 10_000, 672_313, 447_000_000, 5 * 10**12):
        assert len(_count(n)) <= 4, n
    assert _count(672_313) == "672k"


# ----------------------------------------------------------------------------- 17, 18


async def test_ctrl_c_in_the_dashboard_drains_then_stops():
    from fakes import FakeSource

    from tokmon.ui.app import DashboardApp

    src = FakeSource()
    app = DashboardApp(src)
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")
        assert src.stopped is False  # drain first
        src.in_flight = 3
        src._snap = src._make()
        await pilot.press("ctrl+c")
        assert src.stopped is True  # then now
    assert app.interrupted == 2


def test_headless_status_never_repeats_a_snapshot(capsys, monkeypatch):
    from tokmon.model.data.records import Event
    from tokmon.ui import headless as cli

    class Snap:
        t = 1
        elapsed_s, arm, ok, failed, in_flight = 1.0, "a", 1, 0, 1
        window, warming_up, down, restarting = None, False, {}, None
        t_start = 1 - 10**9
        # (the same event in every snapshot: the event log gives it once too)
        events = (Event(t=1, kind="alert", message="change point: x"),)

    class Starved:
        def __init__(self) -> None:
            self.n = 0

        def wait(self, timeout: float) -> bool:
            time.sleep(0.002)  # a starved process: awake, but nothing new to show
            self.n += 1
            return self.n > 40

        def snapshot(self) -> Snap:
            return Snap()

        def command(self, *a: Any) -> None:
            pass

    monkeypatch.setattr(cli, "EVENTS_EVERY_S", 0.001)
    cli.run_headless(Starved(), 0.001)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 2 and sum("ALERT change point: x" in ln for ln in lines) == 1, lines


# ----------------------------------------------------------------------------- the rule


def test_no_output_bypasses_the_sanitiser():
    """Every print and write to the terminal in the package goes through textsafe: a new
    one elsewhere fails here, so server text cannot reach an output unclean."""
    offenders = []
    for f in (ROOT / "tokmon").rglob("*.py"):
        if f.name == "textsafe.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id == "print":
                    offenders.append(f"{f.name}:{node.lineno} print")
                if (
                    isinstance(fn, ast.Attribute)
                    and fn.attr in ("write", "writelines")
                    and isinstance(fn.value, ast.Attribute)
                    and fn.value.attr in ("stdout", "stderr")
                ):
                    offenders.append(f"{f.name}:{node.lineno} sys.{fn.value.attr}.write")
                if isinstance(fn, ast.Attribute) and fn.attr == "write_text":
                    offenders.append(f"{f.name}:{node.lineno} write_text")
    assert not offenders, offenders


def test_strict_json_names_what_was_not_finite():
    d = strict_json(dumps({"a": float("nan"), "b": [1.0, float("inf")], "c": "\x1b[2J"}))
    assert d["a"] is None and d["b"] == [1.0, None] and d["nonfinite"] == ["a", "b[1]"]
    assert np.isfinite(1.0)


def test_a_crafted_fold_header_and_clock_lines_are_bounded(tmp_path):
    """The fold's settings and the tick and status lines come from a file too: a window
    of 1e300 s, a negative threshold, a status of NaN are bounded or dropped, never a crash."""
    path = tmp_path / "fold.jsonl"
    lines = [
        _header(fold={"window_s": 1e300, "drift_alert_pct_h": -5, "gpus": 1e300, "level": "x",
                      "kind_weights": [["a", "nan"], [1, 2]], "slo": {"ttft_ms": 1e308}}),
        json.dumps({"k": "r", "id": 1, "arm": "a", "o": "ok", "ts": 0, "te": 10**9,
                    "ttft": 5.0, "e2e": 9.0, "n": 3}),
        json.dumps({"k": "st", "worker": 0, "sent": float("nan"), "in_flight": -1}),
        json.dumps({"k": "tick", "t": 10**30}),
        json.dumps({"k": "tick", "t": 2 * 10**9, "final": True}),
        json.dumps({"k": "end", "t": 2 * 10**9}),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    r = read_recording(str(path))
    assert r.corrupt == 2 and r.clocked
    for fmt in ("text", "json", "html"):
        p = run("report", str(path), "--format", fmt, timeout=60)
        assert p.returncode == 0, p.stderr[-500:]
    from tokmon.sources.replay import ReplaySource

    src = ReplaySource(str(path))
    src.seek_to(src.end_t)
    snap = src.snapshot()
    assert snap is not None and snap.ok == 1 and snap.done
