"""A recording's columnar companion (``recording.companion``): the same items, the same
reports, by either path; one that does not match its part is ignored and named; a cut
part reads as before; the recorder makes them off its own process."""

import dataclasses
import gzip
import importlib.util
import os
import re
import shutil
import sys

import pytest

from tests.test_scan_ahead import _items
from tests.test_scan_ahead import _write as write_varied
from tests.test_table import varied
from tokmon.cli.commands import main
from tokmon.model.data.facts import Tick
from tokmon.recording import companion
from tokmon.recording.parts import part_numbers, part_path
from tokmon.recording.writer import Recorder
from tokmon.report.render import render_file

pytest.importorskip("pyarrow")

DATA = os.path.join(os.path.dirname(__file__), "data", "rec")


def _write(path: str, n: int = 900, rotate_s: float | None = None, seed: int = 5) -> None:
    """A finished run of three arms (the recorder writes no companion: too small)."""
    write_varied(path, 1, rotate_s, n=n, arms=("plain", "spec", "third"), end=True, seed=seed)


def _parts(path: str) -> list[str]:
    return [path, *(part_path(path, k) for k in sorted(part_numbers(path)))]


def _index(path: str) -> None:
    for p in _parts(path):
        companion.build(p)


@pytest.mark.parametrize("case", ["plain", "gzip", "rotated"])
@pytest.mark.parametrize("ahead", [False, True])
def test_a_scan_from_companions_gives_the_items_the_json_gives(tmp_path, monkeypatch, case, ahead):
    from tokmon.recording import jsonl

    monkeypatch.setattr(jsonl, "BATCH", 37)  # many batches, facts between and inside them
    path = str(tmp_path / ("run.jsonl" if case == "plain" else "run.jsonl.gz"))
    _write(path, rotate_s=1e-9 if case == "rotated" else None)
    json_items, json_rec = _items(path, ahead)
    _index(path)
    assert all(os.path.exists(companion.companion_path(p)) for p in _parts(path))
    col_items, col_rec = _items(path, ahead)
    assert sum(1 for x in json_items if isinstance(x, tuple) and x[0] == "r") >= 20
    assert col_items == json_items
    for name in ("corrupt", "t_seen", "lines", "truncated", "sessions", "t_end", "offset"):
        assert getattr(col_rec, name) == getattr(json_rec, name), name
    assert col_rec.requests.vocab == json_rec.requests.vocab
    assert col_rec.notes == []


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _reports(path: str) -> dict[str, str]:
    # (the HTML's charts are named by plotly with a fresh UUID each time it is written)
    return {
        fmt: _UUID.sub("<id>", render_file(path, fmt)[0])
        for fmt in ("text", "md", "json", "csv", "html")
    }


@pytest.mark.parametrize("name", sorted(os.listdir(DATA)))
def test_every_recorded_fixture_reports_the_same_by_either_path(tmp_path, name):
    path = str(tmp_path / name)
    shutil.copy(os.path.join(DATA, name), path)
    before = _reports(path)
    _index(path)
    assert os.path.exists(companion.companion_path(path))
    assert _reports(path) == before


def _bench_generate():
    spec = importlib.util.spec_from_file_location(
        "day_recording", os.path.join(os.path.dirname(__file__), "..", "bench", "day_recording.py")
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod.generate


def test_a_generated_soak_reports_the_same_by_either_path(tmp_path):
    """The bench's day, 12 minutes of it in parts of 4 (a ladder, then arms switched
    every 30 s): 144,000 requests, batches of 50,000 lines within a part."""
    path = str(tmp_path / "day.jsonl.gz")
    n = _bench_generate()(path, 0.2, 200, 240)
    assert n == 144_000 and len(_parts(path)) == 3
    before = {fmt: render_file(path, fmt)[0] for fmt in ("text", "json")}
    assert main(["index", path]) == 0
    assert {fmt: render_file(path, fmt)[0] for fmt in ("text", "json")} == before


def _report_cli(path: str, capsys) -> tuple[str, str]:
    assert main(["report", path]) == 0
    got = capsys.readouterr()
    return got.out, got.err


@pytest.mark.parametrize("damage", ["truncated", "other-run", "digest", "grown", "not-ours"])
def test_a_companion_that_does_not_match_is_ignored_and_named(tmp_path, capsys, damage):
    path = str(tmp_path / "run.jsonl.gz")
    _write(path, rotate_s=1e-9)
    text, _ = _report_cli(path, capsys)
    _index(path)
    victim = part_path(path, 3)
    cpath = companion.companion_path(victim)
    if damage == "truncated":
        with open(cpath, "r+b") as f:
            f.truncate(os.path.getsize(cpath) // 2)
    elif damage == "other-run":
        other = str(tmp_path / "other" / "run.jsonl.gz")
        os.makedirs(os.path.dirname(other))
        _write(other, rotate_s=1e-9, seed=9)
        _index(other)
        shutil.copy(companion.companion_path(part_path(other, 3)), cpath)
    elif damage == "digest":  # the part's bytes changed, its size not
        with open(victim, "rb") as f:
            body = gzip.decompress(f.read())
        body = body.replace(b'"kind":"marker"', b'"kind":"markeR"')
        text = None  # (the part says otherwise now: the JSON's report is the truth)
        with open(victim, "wb") as f:
            f.write(gzip.compress(body, mtime=0))
        os.truncate(victim, os.path.getsize(victim))
    elif damage == "grown":
        with open(victim, "ab") as f:
            f.write(gzip.compress(b'{"k":"tick","t":1}\n', mtime=0))
        text = None
    else:
        with open(cpath, "wb") as f:
            f.write(b"PAR1 not a companion at all PAR1")
    if text is None:
        os.rename(cpath, cpath + ".away")
        text, _ = _report_cli(path, capsys)
        os.rename(cpath + ".away", cpath)
    out, err = _report_cli(path, capsys)
    assert out == text
    notes = [ln for ln in err.splitlines() if "companion ignored" in ln]
    assert len(notes) == 1 and cpath in notes[0], err
    assert "the JSON is read" in notes[0]


def test_a_part_cut_by_a_crash_reads_as_before_with_its_companions_or_without(tmp_path, capsys):
    """kill -9 mid-run: the last part stops inside its gzip stream. It gets no
    companion (``tokmon index`` says why); the report over the others' companions and
    its JSON says what it says without them, and that the run was cut."""
    path = str(tmp_path / "run.jsonl.gz")
    _write(path, rotate_s=1e-9)
    last = _parts(path)[-1]
    with open(last, "rb") as f:
        raw = f.read()
    with open(last, "wb") as f:
        f.write(raw[: len(raw) * 2 // 3])
    text, err = _report_cli(path, capsys)
    assert "was cut" in err
    assert main(["index", path]) == 0
    err = capsys.readouterr().err
    assert f"{last}: not indexed: the file is cut" in err
    assert not os.path.exists(companion.companion_path(last))
    assert os.path.exists(companion.companion_path(path))
    out, err2 = _report_cli(path, capsys)
    assert out == text and "was cut" in err2 and "companion ignored" not in err2


def test_the_recorder_indexes_each_finished_part_in_a_process_of_its_own(tmp_path):
    path = str(tmp_path / "run.jsonl.gz")
    w = Recorder(path, rotate_s=1.0)
    w.index_from = 100  # (the part of 50 requests is not worth one)
    w.open({"settings": {"arms": [{"name": "plain"}]}}, 0)
    recs = sorted(varied(450, seed=3), key=lambda r: r.t_end)
    recs = [dataclasses.replace(r, arm="plain") for r in recs]
    w.records(recs[:200])
    w.fact(Tick(2_000_000_000))  # part 1 ends: 200 requests
    w.records(recs[200:250])
    w.fact(Tick(4_000_000_000))  # part 2 ends: 50 requests
    w.records(recs[250:])
    w.end(5_000_000_000)
    w.close()  # part 3 ends: 200 requests
    assert len(w.indexers) == 2 and os.getpid() not in [p.pid for p in w.indexers]
    assert [p.wait(timeout=120) for p in w.indexers] == [0, 0]
    made = [os.path.exists(companion.companion_path(p)) for p in _parts(path)]
    assert made == [True, False, True]
    for p in (path, part_path(path, 3)):
        comp, why = companion.load(p)
        assert comp is not None and why is None


def test_index_of_what_is_not_a_recording_is_one_line(tmp_path, capsys):
    bad = tmp_path / "x.jsonl"
    bad.write_text("hello\n")
    assert main(["index", str(bad)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a tokmon recording" in err[0]


def test_a_run_of_three_arms_reports_every_pair_in_every_format(tmp_path):
    """(Found by this file's recordings: with three arms the summary's comparison is a
    list, one pair per arm against the first, and the text's time split and the HTML's
    verdict read it as one pair, and failed.)"""
    path = str(tmp_path / "run.jsonl.gz")
    _write(path)
    html = render_file(path, "html")[0]
    assert html.count("class='verdict'>") == 2
    assert "spec / plain" in html and "third / plain" in html
    text = render_file(path, "text")[0]
    assert "spec vs plain" in text and "third vs plain" in text


def test_a_crafted_companion_is_bounded_and_any_damage_is_one_line(tmp_path, capsys):
    """A companion is a file from outside: one whose lines inflate past what its part
    could hold is ignored; bytes flipped anywhere in one give the JSON's report (the
    companion named and ignored) or one line that says to delete it, never a
    traceback."""
    import random

    import orjson
    import pyarrow.parquet as pq

    path = str(tmp_path / "run.jsonl.gz")
    _write(path)
    text, _ = _report_cli(path, capsys)
    companion.build(path)
    cpath = companion.companion_path(path)
    with open(cpath, "rb") as f:
        good = f.read()
    # a bomb: the other lines packed from 64 MiB of zeros (the part is a few KiB)
    f = pq.ParquetFile(cpath)
    meta = orjson.loads(f.schema_arrow.metadata[companion.KEY])
    meta["others"] = companion._pack(b"\0" * (64 << 20))
    table = f.read().replace_schema_metadata({companion.KEY: orjson.dumps(meta)})
    pq.write_table(table, cpath)
    out, err = _report_cli(path, capsys)
    assert out == text and "past their bound" in err
    rng = random.Random(7)
    for _ in range(40):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        with open(cpath, "wb") as fh:
            fh.write(bytes(bad))
        code = main(["report", path])
        got = capsys.readouterr()
        lines = [ln for ln in got.err.splitlines() if "internal error" in ln or "Traceback" in ln]
        assert not lines, got.err
        if code == 0:
            assert got.out == text
        else:
            errs = got.err.strip().splitlines()
            assert len(errs) == 1 and "delete it" in errs[0], got.err


def test_a_window_of_a_rotated_run_reports_the_same_by_either_path(tmp_path):
    """``report --from/--to`` reads the part in force at its start (its carried state)
    and the parts after it: from their companions, the same report."""
    from tokmon.recording.window import Window

    path = str(tmp_path / "run.jsonl.gz")
    _write(path, rotate_s=1e-9)
    t_end = sorted(r.t_end for r in varied(900, seed=5))
    w = Window(t_end[300], t_end[700])
    before = {fmt: render_file(path, fmt, window=w)[0] for fmt in ("text", "json")}
    _index(path)
    assert {fmt: render_file(path, fmt, window=w)[0] for fmt in ("text", "json")} == before
    assert "window" in before["json"]


def test_index_leaves_a_good_companion_and_writes_a_stale_one_again(tmp_path, capsys):
    """What the recorder wrote and still matches its part is not written again; one
    that no longer matches is."""
    path = str(tmp_path / "run.jsonl.gz")
    _write(path, rotate_s=1e-9)
    assert main(["index", path]) == 0
    capsys.readouterr()
    first, second = (companion.companion_path(p) for p in _parts(path)[:2])
    before = os.stat(first).st_mtime_ns, os.stat(second).st_mtime_ns
    with open(second, "wb") as f:
        f.write(b"stale")
    assert main(["index", path]) == 0
    err = capsys.readouterr().err
    assert f"{first} is up to date" in err and f"wrote {second}" in err
    assert os.stat(first).st_mtime_ns == before[0]
    comp, why = companion.load(_parts(path)[1])
    assert comp is not None and why is None
