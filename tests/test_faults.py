"""Faults survived: every request accounted for, the server's death and return shown,
Ctrl-C drains, a second Ctrl-C stops, nothing a server sends reaches the terminal raw."""

import asyncio
import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
from helpers import wait_running

from tokmon.engine.worker import Engine
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig, Timeouts
from tokmon.model.workloads.workload import LengthDist
from tokmon.recording.reader import read_recording
from tokmon.sim.faults import Faults
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.textsafe import clean_text

PY = sys.executable


def test_mixed_fault_soak_accounting(make_sim):
    f = Faults(
        http_500=0.02,
        http_429=0.02,
        stream_error=0.02,
        drop=0.02,
        malformed=0.02,
        stall=0.02,
        # (a stall eight times the idle timeout: a loaded machine that stops the test's
        # process for longer than the timeout reads the stalled chunk before its timer —
        # at 0.5 s, 2 of 50 stalls were read as chunks on a loaded run — and the client
        # leaves at the timeout whatever the stall's length, so this costs no time)
        stall_s=2.0,
    )
    sim = make_sim(schedule=(0.5, 0.2, 1), faults=f, seed=9)
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=16,
        requests=3000,
        max_tokens=LengthDist("fixed", 5),
        timeouts=Timeouts(idle_s=0.25),
    )
    eng = Engine(cfg, 0, 1, None)
    asyncio.run(eng.run())
    recs = [r for b in eng.batches for r in b.records]
    assert len(recs) == 3000 == eng.sent
    assert len({r.rid for r in recs}) == 3000  # exactly one outcome per request
    by: dict[str, int] = {}
    for r in recs:
        by[r.outcome] = by.get(r.outcome, 0) + 1
    inj = sim.sim.fault_counts
    assert by.get("http_5xx", 0) == inj.get("http_500", 0)
    assert by.get("http_429", 0) == inj.get("http_429", 0)
    assert by.get("protocol", 0) == inj.get("malformed", 0)
    assert by.get("stream_error", 0) == inj.get("stream_error", 0) + inj.get("drop", 0)
    assert by.get("timeout", 0) == inj.get("stall", 0)  # stalls ended by the idle timeout
    assert by["ok"] == 3000 - sum(inj.values())


@pytest.mark.slow
def test_server_killed_and_restarted_mid_run(tmp_path):
    sim = SimProcess(SimConfig(schedule=(5.0, 2.0, 1)))
    port = sim.start()
    rec = tmp_path / "r.jsonl"
    p = subprocess.Popen(
        [
            PY,
            "-m",
            "tokmon",
            "run",
            "--url",
            sim.url,
            "--headless",
            "-c",
            "4",
            "--duration",
            "9s",
            "--max-tokens",
            "20",
            "--record",
            str(rec),
            "--summary-json",
            str(tmp_path / "s.json"),
            "--no-gpu",
            "--status-interval",
            "1s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_running(sim, 8)  # the run is under way
        sim.stop()
        time.sleep(2.5)  # the scenario: the server stays down this long
        sim2 = SimProcess(SimConfig(schedule=(5.0, 2.0, 1)), port=port)
        sim2.start()
        out, err = p.communicate(timeout=60)
    finally:
        sim.stop()
        if "sim2" in locals():
            sim2.stop()
    assert p.returncode == 0, err
    assert "SERVER DOWN" in err  # the status line said so while it was down
    s = json.loads((tmp_path / "s.json").read_text())["arms"]["default"]
    by = s["requests"]["by_outcome"]
    assert by.get("connect", 0) > 0 and by.get("ok", 0) > 20
    r = read_recording(str(rec))
    kinds = [e.kind for e in r.events]
    assert "down" in kinds and "up" in kinds and kinds.index("down") < kinds.index("up")
    ok_after = [
        x for x in r.records if x.ok and x.t_end > next(e.t for e in r.events if e.kind == "up")
    ]
    assert ok_after
    # ok + every failure class = sent, in the summary and in the recording
    assert sum(by.values()) == len(r.records)


@pytest.fixture
def slow_sim():
    # Requests of 100 tokens at 30 ms each: 3 s in flight.
    with SimProcess(SimConfig(schedule=(30.0, 30.0, 1))) as s:
        yield s


def start_run(sim, tmp_path, *extra):
    return subprocess.Popen(
        [
            PY,
            "-m",
            "tokmon",
            "run",
            "--url",
            sim.url,
            "--headless",
            "-c",
            "3",
            "--max-tokens",
            "100",
            "--record",
            str(tmp_path / "r.jsonl"),
            "--summary-json",
            str(tmp_path / "s.json"),
            "--no-gpu",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_drains_in_flight(slow_sim, tmp_path):
    p = start_run(slow_sim, tmp_path)
    wait_running(slow_sim, 3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err  # an interrupted run says so (README: exit codes)
    assert "draining" in err
    s = json.loads((tmp_path / "s.json").read_text())["arms"]["default"]
    assert s["requests"]["ok"] >= 3 and s["requests"]["failed"] == 0  # they finished
    r = read_recording(str(tmp_path / "r.jsonl"))
    assert not r.truncated and r.summary is not None


def test_second_ctrl_c_stops_at_once(slow_sim, tmp_path):
    p = start_run(slow_sim, tmp_path)
    wait_running(slow_sim, 3)
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err  # an interrupted run says so (README: exit codes)
    r = read_recording(str(tmp_path / "r.jsonl"))
    assert not r.truncated
    s = json.loads((tmp_path / "s.json").read_text())["arms"]["default"]
    assert s["requests"]["by_outcome"].get("cancelled", 0) >= 1
    # Stopped, not drained: the cancelled requests (3 s each) ended before their time.
    # (Read from the recording, not from a wall-clock bound a loaded machine can miss.)
    cancelled = [x for x in r.records if x.outcome == "cancelled"]
    assert cancelled and all(x.t_end - x.t_sched < 2.9e9 for x in cancelled)
    assert sum(s["requests"]["by_outcome"].values()) == len(r.records)


def test_sigterm_stops_with_a_valid_recording(slow_sim, tmp_path):
    p = start_run(slow_sim, tmp_path)
    wait_running(slow_sim, 3)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    r = read_recording(str(tmp_path / "r.jsonl"))
    assert r.summary is not None and not r.truncated


@pytest.mark.parametrize(
    "raw,clean",
    [
        ("\x1b]0;owned\x07title", "title"),
        ("\x1b]52;c;Y2xpcA==\x07x", "x"),  # clipboard write
        ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),  # hyperlink
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1bP1$r\x1b\\ok", "ok"),  # DCS
        ("a\x00b\x07c\x7fd\x9be", "abcd"),
        ("keep\nlines\tand tabs", "keep\nlines\tand tabs"),
        ("[bold]markup[/bold]", "[bold]markup[/bold]"),  # markup stays text; the UI never parses it
    ],
)
def test_terminal_sequences_neutralised(raw, clean):
    assert clean_text(raw) == clean


def test_error_text_from_server_is_cleaned(make_sim):

    from tokmon.engine.client import error_message

    body = json.dumps({"error": {"message": "bad \x1b]0;x\x07 thing\x1b[2J"}}).encode()
    assert error_message(body) == "bad  thing"
    assert "\x1b" not in error_message(b"\x1b[31mnot json")
    _ = httpx


def test_error_burst_is_an_event(make_sim):
    from tokmon.sources.live import LiveSession

    sim = make_sim(schedule=(2.0, 1.0, 1), faults=Faults(http_500=0.5), seed=4)
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=4,
        duration_s=3.0,
        max_tokens=LengthDist("fixed", 5),
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b")
    s.start()
    assert s.wait(30)
    s.close()
    bursts = [e for e in s.fold.events if e.kind == "errors"]
    assert len(bursts) == 1 and "http_5xx" in bursts[0].message  # once per 30 s at most
