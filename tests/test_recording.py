"""Recordings: round trip, truncation at every byte, a killed writer, secrets, bad files."""

import gzip
import json
import os
import signal
import subprocess
import time
import zlib
from html.parser import HTMLParser

import pytest
from helpers import PY, tokmon

from tokmon.model.data.records import Event, RequestRecord
from tokmon.recording import RecordingError, jsonl
from tokmon.recording.play import summary_of
from tokmon.recording.reader import read_recording
from tokmon.recording.writer import Recorder
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


@pytest.fixture(scope="module")
def sims():
    a = SimProcess(SimConfig(schedule=(15.0, 2.0, 1), seed=1))
    b = SimProcess(SimConfig(schedule=(15.0, 1.0, 2), seed=2))
    a.start()
    b.start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def recorded(sims, tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    a, b = sims
    rec, summ = d / "run.jsonl", d / "live.json"
    r = tokmon(
        "run",
        "--url",
        a.url,
        "--arm",
        f"plain:url={a.url}",
        "--arm",
        f"fast:url={b.url}",
        "--headless",
        "-c",
        "4",
        "--duration",
        "4s",
        "--alternate",
        "1s",
        "--max-tokens",
        "24",
        "--warmup",
        "3",
        "--record",
        str(rec),
        "--summary-json",
        str(summ),
        "--header",
        "Authorization: Bearer sk-topsecret-123",
        env={"OPENAI_API_KEY": "sk-envsecret-456"},
    )
    assert r.returncode == 0, r.stderr
    return rec, json.loads(summ.read_text())


def test_round_trip_report_equals_live_summary(recorded):
    rec, live = recorded
    r = tokmon("report", str(rec), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == live
    assert live["arms"]["plain"]["requests"]["ok"] > 10
    assert live["arms"]["fast"]["requests"]["ok"] > 10


def test_secrets_never_written(recorded):
    rec, _ = recorded
    text = rec.read_text()
    assert "sk-topsecret-123" not in text and "sk-envsecret-456" not in text
    for fmt in ("text", "md", "json", "csv"):
        out = tokmon("report", str(rec), "--format", fmt).stdout
        assert "sk-topsecret" not in out and "sk-envsecret" not in out


def test_header_writes_the_environment_down(recorded):
    rec, _ = recorded
    h = read_recording(str(rec)).header
    assert h["schema_version"] == 1 and h["host"]["cores"] and h["host"]["python"]
    assert any("sim" in json.dumps(v["models"]) for v in h["servers"].values())
    assert h["settings"]["concurrency"] == 4


def test_truncation_at_every_byte_offset(tmp_path):
    path = tmp_path / "small.jsonl"
    r = Recorder(str(path))
    r.open({"tokmon_version": "t", "settings": {"arms": [{"name": "a"}]}}, 0)
    recs = [
        RequestRecord(
            rid=i,
            arm="a",
            outcome="ok",
            t_sched=i * 10,
            t_end=i * 10 + 5,
            ttft_ms=1.5 + i,
            e2e_ms=9.0,
            output_tokens=3,
        )
        for i in range(5)
    ]
    r.records(recs)
    r.fact(Event(t=7, kind="marker", message="m"))
    r.end(100)
    r.close()
    data = path.read_bytes()
    header_end = data.index(b"\n") + 1
    for cut in range(header_end, len(data) + 1):
        p = tmp_path / "cut.jsonl"
        p.write_bytes(data[:cut])
        rec = read_recording(str(p))
        complete = data[:cut].count(b"\n") - 1
        assert len(rec.records) + len(rec.events) + (rec.t_end is not None) == complete
        assert rec.truncated == (cut < len(data))
    for cut in range(0, header_end):
        p = tmp_path / "cut.jsonl"
        p.write_bytes(data[:cut])
        with pytest.raises(RecordingError):
            read_recording(str(p))


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Each inflater the reader may use: ISA-L (the fast extra) and the standard zlib."""
    if request.param == "zlib":
        monkeypatch.setattr(jsonl, "_inflate", zlib)
        monkeypatch.setattr(jsonl, "_INFLATE_ERRORS", (zlib.error,))
    else:
        pytest.importorskip("isal")
        assert jsonl._inflate is not zlib
    return request.param


def test_gzip_recording_and_cut_gzip(tmp_path, inflater):
    path = tmp_path / "r.jsonl.gz"
    r = Recorder(str(path))
    r.open({"settings": {"arms": [{"name": "a"}]}}, 0)
    r.records([RequestRecord(rid=i, arm="a", outcome="ok", t_sched=0, t_end=1) for i in range(50)])
    r.flush()
    size_mid = path.stat().st_size
    r.end(5)
    r.close()
    assert len(read_recording(str(path)).records) == 50
    assert gzip.decompress(path.read_bytes()).count(b"\n") == 52
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(path.read_bytes()[:size_mid])  # as if killed after a flush
    rec = read_recording(str(p))
    assert len(rec.records) == 50 and rec.truncated
    # a stream broken midway: what inflated before the break is read, the rest is cut
    data = bytearray(path.read_bytes())
    data[size_mid - 8 : size_mid] = b"\xff" * 8
    p.write_bytes(bytes(data))
    rec = read_recording(str(p))
    assert rec.truncated and len(rec.records) <= 50


def test_killed_writer_leaves_a_readable_file(sims, tmp_path):
    a, _ = sims
    path = tmp_path / "killed.jsonl"
    p = subprocess.Popen(
        [
            PY,
            "-m",
            "tokmon",
            "run",
            "--url",
            a.url,
            "--headless",
            "-c",
            "4",
            "--max-tokens",
            "16",
            "--record",
            str(path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60  # until more than 20 requests are on disk
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b'{"k":"r",') > 20:
            break
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    rec = read_recording(str(path))
    assert rec.truncated and len(rec.records) > 20
    assert summary_of(rec)["arms"]["default"]["requests"]["ok"] == len(
        [r for r in rec.records if r.ok]
    )
    r = tokmon("report", str(path))
    assert r.returncode == 0 and "cut" in r.stderr


class _Parser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = set()
        self.scripts = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))


def test_html_report_self_contained(recorded, tmp_path):
    rec, live = recorded
    out = tmp_path / "r.html"
    r = tokmon("report", str(rec), "--format", "html", "-o", str(out))
    assert r.returncode == 0, r.stderr
    p = _Parser()
    p.feed(out.read_text())
    assert {"html", "body", "script"} <= p.tags
    assert all(src is None for src in p.scripts)  # nothing loaded from the network
    assert "plotly" in out.read_text().lower()


def test_export_csv_and_compare(recorded, tmp_path):
    rec, live = recorded
    r = tokmon("export", str(rec), "--format", "csv")
    lines = r.stdout.strip().splitlines()
    n = sum(a["requests"]["ok"] + a["requests"]["failed"] for a in live["arms"].values())
    assert len(lines) == n + 1 and lines[0].startswith("rid,arm,outcome")
    r = tokmon("report", str(rec), "--compare", str(rec))
    assert r.returncode == 0 and "×1.000" in r.stdout


def test_export_parquet_keeps_types_and_missing_figures(recorded, tmp_path):
    import pyarrow.parquet as pq

    rec, live = recorded
    out = tmp_path / "r.parquet"
    r = tokmon("export", str(rec), "--format", "parquet", "-o", str(out))
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out).to_pydict()
    recs = read_recording(str(rec)).records
    assert t["rid"] == [x.rid for x in recs] and t["ttft_ms"] == [x.ttft_ms for x in recs]
    assert t["connect_ms"] == [x.connect_ms for x in recs]  # None stays missing


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "no such file"),
        (b"hello\n", "not a tokmon recording"),
        (b'{"k": "r"}\n', "no header"),
        (b'{"k": "header", "schema_version": 99}\n', "newer tokmon"),
        (b"", "empty"),
        (b'{"k": "header", "schema_version": 1, "rotation": 5}\n', "'rotation' is int"),
        (b'{"k": "header", "schema_version": 1, "rotation": {"part": "x"}}\n', "rotation.part"),
    ],
)
def test_bad_recordings(tmp_path, content, needle):
    p = tmp_path / "x.jsonl"
    if content is not None:
        p.write_bytes(content)
    r = tokmon("report", str(p))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_corrupt_line_in_the_middle_is_counted(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(
        '{"k":"header","schema_version":1,"settings":{"arms":[{"name":"a"}]}}\n'
        '{"k":"r","id":1,"arm":"a","o":"ok","ts":0,"te":5}\nGARBAGE\n'
        '{"k":"r","id":2,"arm":"a","o":"ok","ts":0,"te":6}\n{"k":"end","t":9}\n'
    )
    rec = read_recording(str(p))
    assert rec.corrupt == 1 and len(rec.records) == 2 and not rec.truncated
    r = tokmon("report", str(p))
    assert r.returncode == 0 and "1 corrupt line" in r.stderr


async def test_replay_through_pilot(recorded):
    from tokmon.sources.replay import ReplaySource
    from tokmon.ui.app import DashboardApp

    rec, live = recorded
    src = ReplaySource(str(rec), speed=1.0)
    src.start()
    app = DashboardApp(src)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            await pilot.press("space")
            assert not src.playing
            p0 = src.pos
            await pilot.press("right")
            assert src.pos == min(src.end_t, p0 + 10_000_000_000)
            await pilot.press("left")
            assert src.pos == max(0, min(src.end_t, p0 + 10_000_000_000) - 10_000_000_000)
            await pilot.press("greater_than_sign", "greater_than_sign")
            assert src.speed == 5.0
            await pilot.press("right_square_bracket")  # next event
            assert src.pos in src.event_times or src.pos == src.end_t
            await pilot.press("e")
            assert src.pos == src.end_t
            await pilot.pause(0.3)
            snap = src.snapshot()
            assert snap.done and snap.ok == sum(a["requests"]["ok"] for a in live["arms"].values())
            assert snap.comparison is not None
            # The live-only keys are not offered for a recording (every command key is
            # the one action ``send``, named by its command), the replay's keys are.
            assert app.check_action("send", ("switch",)) is False
            assert app.check_action("send", ("level", 1)) is False
            assert app.check_action("send", ("seek", 10)) is True
    finally:
        src.close()
    assert src.summary() == live
