"""A recording rotated into parts (``--record-rotate``): read from its first part it is
one run, equal to the live run's summary and to the same run written unrotated; each
part reads alone; a part that is gone is named, and the rest still reads."""

import json
import os

import pytest
from helpers import tokmon

from tokmon.model.facts import Requests
from tokmon.recording.parts import part_numbers, part_path, run_bytes
from tokmon.recording.play import summary_of
from tokmon.recording.reader import Session, read_recording, scan
from tokmon.recording.writer import Recorder
from tokmon.report.render import render_file
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.sources.replay import ReplaySource


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    d = tmp_path_factory.mktemp("rot")
    a = SimProcess(SimConfig(schedule=(15.0, 2.0, 1), seed=1))
    b = SimProcess(SimConfig(schedule=(15.0, 1.0, 2), seed=2))
    a.start()
    b.start()
    try:
        rec, summ = d / "run.jsonl.gz", d / "live.json"
        r = tokmon(
            "run", "--arm", f"plain:url={a.url}", "--arm", f"fast:url={b.url}",
            "--headless", "-c", "4", "--duration", "7s", "--alternate", "1s",
            "--max-tokens", "24", "--warmup", "3", "--no-gpu", "--status-interval", "1h",
            "--record", str(rec), "--record-rotate", "1s", "--summary-json", str(summ),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    finally:
        a.stop()
        b.stop()
    return rec, json.loads(summ.read_text())


def unrotated(src, dst):
    """The same run written again as one file: the facts of every part, in order."""
    w = Recorder(str(dst))
    w.mode = "wb"
    rec = None
    for item in scan(str(src)):
        if isinstance(item, Session):
            rec = item.rec
            header = {k: v for k, v in rec.header.items() if k not in ("k", "rotation")}
            w.open(header, 0)
        elif isinstance(item, Requests):
            w.records(list(item.table.records()))
        else:
            w.fact(item)
    assert rec is not None
    if rec.summary is not None:
        w.summary(rec.summary)
    w.end(rec.t_end)
    w.close()


def request_lines(path):
    import gzip

    with gzip.open(path, "rt") as f:
        return sum(1 for line in f if line.startswith('{"k":"r"'))


def test_a_rotated_run_reads_as_one_run(rotated, tmp_path):
    rec, live = rotated
    parts = sorted(part_numbers(str(rec)))
    assert len(parts) >= 5, parts  # seven seconds, a part a second (at the first tick past)
    assert run_bytes(str(rec)) == sum(os.path.getsize(part_path(str(rec), k)) for k in [1, *parts])
    r = tokmon("report", str(rec), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == live  # every part, as the live run folded them
    assert live["arms"]["plain"]["requests"]["ok"] > 10
    # equal, figure for figure, to the same run written as one file
    one = tmp_path / "one.jsonl.gz"
    unrotated(rec, one)
    assert summary_of(read_recording(str(one))) == live
    assert render_file(str(one), "text")[0] == render_file(str(rec), "text")[0]
    # and a replay plays every part to the same end
    src = ReplaySource(str(rec))
    src.start()
    src.command("end")
    assert src.summary() == live
    assert src.end_t == ReplaySource(str(one)).end_t
    src.close()


def test_one_part_reads_alone(rotated):
    rec, live = rotated
    third = part_path(str(rec), 3)
    alone = read_recording(third)
    assert alone.part == 3 and not alone.missing
    assert alone.requests.n == request_lines(third)  # this part's requests, no other's
    text, _ = render_file(third, "text")
    assert "part 3 of a rotated run, read alone" in text
    s = summary_of(alone)
    ok = sum(a["requests"]["ok"] for a in s["arms"].values())
    assert 0 < ok < sum(a["requests"]["ok"] for a in live["arms"].values())


def test_a_missing_middle_part_is_named_not_fatal(rotated, tmp_path):
    rec, live = rotated
    # a copy of the run without its third part
    import shutil

    d = tmp_path / "copy"
    d.mkdir()
    first = d / rec.name
    shutil.copy(rec, first)
    for k in part_numbers(str(rec)):
        if k != 3:
            shutil.copy(part_path(str(rec), k), part_path(str(first), k))
    gone = part_path(str(first), 3)
    r = tokmon("report", str(first))
    assert r.returncode == 0, r.stderr
    assert f"a part of this rotated run is missing: {gone}" in r.stdout
    whole = read_recording(str(rec)).requests.n
    got = read_recording(str(first))
    assert got.missing == [gone]
    assert got.requests.n == whole - request_lines(part_path(str(rec), 3))


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--record-rotate", "0.5s"], "--record-rotate: at least 1s"),
        (["--record-rotate", "soon"], "--record-rotate: not a duration"),
        (["--record-max-size", "12XB"], "--record-max-size: not a size"),
        (["--record-max-size", "10kB"], "--record-max-size: at least 64KiB"),
    ],
)
def test_rotation_options_checked(tmp_path, args, needle):
    r = tokmon("demo", "--headless", "-d", "1s", "--record", str(tmp_path / "r.jsonl"), *args)
    assert r.returncode != 0
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_rotation_and_append_exclude_each_other():
    import argparse

    from tokmon.cli.parser import UsageError
    from tokmon.cli.run import _rotation, parse_size

    with pytest.raises(UsageError, match="--append and --record-rotate"):
        _rotation(argparse.Namespace(record_rotate="1h", record_max_size=None), True)
    assert _rotation(argparse.Namespace(record_rotate="1h", record_max_size="2GB"), False) == (
        3600.0, 2 * 10**9)  # fmt: skip
    assert parse_size("1.5GiB") == int(1.5 * 2**30) and parse_size("500") == 500
