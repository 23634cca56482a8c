"""A recording rotated into parts (``--record-rotate``): read from its first part it is
one run, equal to the live run's summary and to the same run written unrotated; each
part reads alone; a part that is gone is named, and the rest still reads."""

import json
import os

import numpy as np
import pytest
from helpers import tokmon

from tokmon.model.data.commands import End, Jump, Seek
from tokmon.model.data.facts import Requests
from tokmon.recording.parts import part_numbers, part_path, run_bytes
from tokmon.recording.play import summary_of
from tokmon.recording.reader import Session, _part_at, part_start, read_recording, scan
from tokmon.recording.window import Window
from tokmon.recording.writer import Recorder
from tokmon.report.render import render_file
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.sources.replay import ReplaySource
from tokmon.textsafe import dumps


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
    src.command(End())
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
    from tokmon.cli.parser import UsageError
    from tokmon.cli.plan import parse_size, rotation

    with pytest.raises(UsageError, match="--append and --record-rotate"):
        rotation("1h", None, True)
    assert rotation("1h", "2GB", False) == (
        3600.0, 2 * 10**9)  # fmt: skip
    assert parse_size("1.5GiB") == int(1.5 * 2**30) and parse_size("500") == 500


# ---------------------------------------------------------------- a window of the run
def in_window(rec, lo_s, hi_s):
    """Per arm, the ok requests sent and ended in [lo, hi] (from the raw columns)."""
    whole = read_recording(str(rec))
    c, vocab = whole.requests.cols, whole.requests.vocab
    keep = (c["t_sched"] >= lo_s * 1e9) & (c["t_end"] <= hi_s * 1e9)
    ok = np.array([vocab["outcome"][o] == "ok" for o in c["outcome"]], dtype=bool)
    return {a: int((keep & ok & (c["arm"] == i)).sum()) for i, a in enumerate(vocab["arm"])}


def test_a_window_counts_what_was_sent_and_ended_in_it(rotated):
    rec, live = rotated
    r = tokmon("report", str(rec), "--format", "json", "--from", "2.5s", "--to", "5.5s")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["window"] == {"from_s": 2.5, "to_s": 5.5} and s["duration_s"] == 3.0
    want = in_window(rec, 2.5, 5.5)
    assert {a: v["requests"]["ok"] for a, v in s["arms"].items()} == want
    assert 0 < sum(want.values()) < sum(a["requests"]["ok"] for a in live["arms"].values())
    # the arms took turns: the time each was measured lies in the window, and no more
    assert 0 < sum(a["active_s"] for a in s["arms"].values()) <= 3.0
    buckets = read_recording(str(rec)).ticks
    for name, a in s["arms"].items():
        arrived = sum(n for t, arm, n in buckets if arm == name and 2.5e9 <= t < 5.5e9)
        assert a["active_tokens"] <= arrived  # no token from outside the window
    text = tokmon("report", str(rec), "--from", "2.5s", "--to", "5.5s").stdout
    assert "a window of the run from 0:00:02.5 to 0:00:05.5 into the run" in text


def test_a_window_from_the_start_is_the_whole_run(rotated):
    rec, live = rotated
    s = json.loads(render_file(str(rec), "json", window=Window(0))[0])
    assert s["arms"] == live["arms"] and s.get("comparison") == live.get("comparison")


def test_a_window_reads_from_the_part_it_begins_in(rotated, tmp_path):
    rec, _ = rotated
    t = 4_500_000_000
    k = _part_at(str(rec), t)
    assert k > 1  # the parts before hold no request sent from t on: not read
    first = next(i for i in scan(str(rec), start_ns=t) if isinstance(i, Requests))
    assert first.table.n <= request_lines(part_path(str(rec), k))
    one = tmp_path / "one.jsonl.gz"
    unrotated(rec, one)
    assert _part_at(str(one), t) == 1
    w = Window(t, 6_500_000_000)
    # the state carried into that part is the state the whole file reaches at t
    assert render_file(str(rec), "json", window=w)[0] == render_file(str(one), "json", window=w)[0]


def test_a_part_read_alone_covers_its_own_time(rotated):
    rec, _ = rotated
    third = part_path(str(rec), 3)
    alone = read_recording(third)
    t0 = alone.header["rotation"]["from_ns"]
    s = summary_of(alone)
    assert s["window"]["from_s"] == t0 / 1e9
    span = s["window"]["to_s"] - s["window"]["from_s"]
    assert 0 < sum(a["active_s"] for a in s["arms"].values()) <= span + 1e-9
    assert {a: v["requests"]["ok"] for a, v in s["arms"].items()} == {
        a: n for a, n in in_window_part(alone, t0).items()
    }


def in_window_part(rec, t0):
    c, vocab = rec.requests.cols, rec.requests.vocab
    ok = np.array([vocab["outcome"][o] == "ok" for o in c["outcome"]], dtype=bool)
    keep = ok & (c["t_sched"] >= t0)
    return {a: int((keep & (c["arm"] == i)).sum()) for i, a in enumerate(vocab["arm"])}


def test_a_window_by_clock_time(rotated):
    from datetime import datetime, timedelta

    rec, _ = rotated
    began = datetime.fromisoformat(read_recording(str(rec)).header["started_at"])
    at = (began + timedelta(seconds=3)).isoformat()
    by_clock = tokmon("report", str(rec), "-F", "json", "--from", at, "--to", "5s")
    by_offset = tokmon("report", str(rec), "-F", "json", "--from", "3s", "--to", "5s")
    assert by_clock.returncode == 0, by_clock.stderr
    assert json.loads(by_clock.stdout) == json.loads(by_offset.stdout)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--from", "5s", "--to", "2s"], "--to must be later than --from"),
        (["--from", "soon"], "--from: not a time: 'soon'"),
        (["--from", "1999-01-01T00:00"], "--from 1999-01-01T00:00: before the run began"),
        (["--from", "1s", "-F", "html"], "--from/--to: --format text, md or json"),
        # (a run of 7 s: a loaded machine drains its last requests a second later)
        (["--from", "2h"], "--from is past the run's end (it ran 0:00:0"),
    ],
)
def test_window_options_checked(rotated, args, needle):
    rec, _ = rotated
    r = tokmon("report", str(rec), *args)
    assert r.returncode != 0
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_a_replay_of_a_window_opens_at_its_start_and_ends_as_its_report(rotated):
    rec, _ = rotated
    w = Window(3_500_000_000, 6_000_000_000)
    src = ReplaySource(str(rec), window=w)
    assert src.rec.requests.n < read_recording(str(rec)).requests.n  # parts before: unread
    src.start()
    snap = src.snapshot()
    assert src.pos == w.t_from and snap.replay["from_s"] == 3.5
    src.command(Seek(-100))
    assert src.pos == w.t_from  # never before the window
    src.command(End())
    report = json.loads(render_file(str(rec), "json", window=w)[0])
    assert json.loads(dumps(src.summary())) == report  # the replay ends where its report is
    src.close()
    r = tokmon("replay", str(rec), "--from", "3s", "--follow")
    assert r.returncode != 0 and "do not go with --follow" in r.stderr


def test_windowed_cuts_facts_by_their_own_times():
    """The state before the window arrives at its start; a tick's token buckets are cut
    each by its time, even when they come before any other fact of the window."""
    from tokmon.model.data.facts import Tick, Tokens
    from tokmon.model.data.records import Event, TokenTick
    from tokmon.recording.window import windowed

    s = 1_000_000_000
    items = [
        Event(1 * s, "step", "step 1", {"step": 0, "arm": "a", "warm_s": 10}),
        Event(2 * s, "arm", "arm → b", {"arm": "b", "segment": 1}),
        Event(3 * s, "pause", "paused", {}),
        Event(4 * s, "pause", "resumed", {}),
        Tokens((TokenTick(5 * s - 1, "b", 7), TokenTick(5 * s + 1, "b", 9))),
        Tick(6 * s),
        Tokens((TokenTick(8 * s - 1, "b", 3), TokenTick(8 * s, "b", 4))),
        Tick(9 * s),
    ]
    out = list(windowed(items, Window(5 * s, 8 * s)))
    head = [e for e in out if isinstance(e, Event)]
    assert [(e.kind, e.t) for e in head] == [("arm", 5 * s), ("step", 5 * s)]  # resumed: none
    assert head[1].data["warm_s"] == 6.0 and all(e.data["carried"] for e in head)
    toks = [b for f in out if isinstance(f, Tokens) for b in f.buckets]
    assert [(b.t, b.tokens) for b in toks] == [(5 * s + 1, 9), (8 * s - 1, 3)]
    assert [f.t for f in out if isinstance(f, Tick)] == [5 * s, 6 * s]  # a frame at the start


def test_a_rotated_run_is_replayed_as_it_is_read_and_a_far_seek_says_what_it_covers(rotated):
    """A soak's replay holds no request (a day would not fit): the parts are folded as
    they are read. A seek far ahead opens the run at the part in force there, in the
    run's state then, and its whole-run figures say they begin there; back at the start,
    they cover the whole run again."""
    rec, live = rotated
    src = ReplaySource(str(rec))
    held = ReplaySource(str(rec), rec=read_recording(str(rec)))
    assert src.streamed and not held.streamed and src.end_t == held.end_t
    src.near_ns = 1_000_000_000  # (ten minutes in a real soak; this run lasts seven seconds)
    src.playing = False  # (the clock stands: positions from the commands alone)
    src.start()
    src.command(Seek(1))  # (near: the way folded)
    assert src.pos == 1_000_000_000 and "from_s" not in src.snapshot().replay
    src.command(Seek(4))
    at = part_start(str(rec), 5_000_000_000)
    assert 0 < at <= 5_000_000_000 and src.pos == 5_000_000_000
    assert src.snapshot().replay["from_s"] == at / 1e9  # "figures from" in the header
    src.command(End())  # (far too: opened at the last part)
    last = part_start(str(rec), src.end_t)
    assert last >= at and src.snapshot().replay["from_s"] == last / 1e9
    report = json.loads(render_file(str(rec), "json", window=Window(last))[0])
    assert json.loads(dumps(src.summary())) == report  # the window's figures, as its report
    assert src.rec.requests.n == 0  # nothing held
    src.command(Seek(-100))
    assert src.pos == 0 and src.player.start == 0  # the whole run again
    src.near_ns = 10**15
    src.command(End())  # (near: every part folded on the way)
    assert src.summary() == live and "from_s" not in src.snapshot().replay
    src.close()


def test_a_jump_in_a_streamed_replay_finds_the_next_event_as_it_reads(rotated):
    rec, _ = rotated
    held = ReplaySource(str(rec), rec=read_recording(str(rec)))  # (every event known)
    src = ReplaySource(str(rec))
    for s in (held, src):
        s.playing = False
        s.start()
    stops = []
    for _ in range(4):
        held.command(Jump(1))
        src.command(Jump(1))
        stops.append((held.pos, src.pos))
    assert all(a == b for a, b in stops) and stops[-1][0] > stops[0][0], stops
    held.command(Jump(-1))
    src.command(Jump(-1))
    assert held.pos == src.pos
    held.close()
    src.close()


def _copy_run(rec, d):
    import shutil

    d.mkdir()
    first = d / rec.name
    shutil.copy(rec, first)
    for k in part_numbers(str(rec)):
        shutil.copy(part_path(str(rec), k), part_path(str(first), k))
    return first


def test_a_copied_or_stray_part_is_named_and_never_counted_twice(rotated, tmp_path):
    """A part copied over the next (part004 = part003) and a stray part999 = the last
    part: each named as what its header says it is and skipped (they were counted twice:
    550 requests for 436, and the stray gave 992 "missing" notes)."""
    import shutil

    rec, _ = rotated
    whole = read_recording(str(rec)).requests.n
    first = _copy_run(rec, tmp_path / "copy")
    last = max(part_numbers(str(first)))
    shutil.copy(part_path(str(first), 3), part_path(str(first), 4))
    shutil.copy(part_path(str(first), last), part_path(str(first), 999))
    got = read_recording(str(first))
    assert got.requests.n == whole - request_lines(part_path(str(rec), 4))
    assert got.missing == [
        f"{part_path(str(first), 4)} (a copy of part 3, not part 4: not read)",
        f"{part_path(str(first), 999)} (after the run's end: not of it)",
    ]
    r = tokmon("report", str(first))
    assert r.returncode == 0 and "a copy of part 3" in r.stdout, r.stderr


def test_a_damaged_middle_part_is_named_as_itself(rotated, tmp_path):
    """A gzip part cut in the middle of the run: the note names that part, not the
    run's first file ("run.jsonl.gz was cut"), and the parts after it still read."""
    rec, _ = rotated
    first = _copy_run(rec, tmp_path / "copy")
    third = part_path(str(first), 3)
    with open(third, "rb") as f:
        data = f.read()
    with open(third, "wb") as f:
        f.write(data[: len(data) // 2])
    got = read_recording(str(first))
    assert got.truncated and got.cut == [third] and not got.missing
    assert got.requests.n > read_recording(str(rec)).requests.n - request_lines(
        part_path(str(rec), 3)
    )
    r = tokmon("report", str(first))
    assert r.returncode == 0, r.stderr
    assert f"note: {third} was cut" in r.stderr and f"note: {first} was cut" not in r.stderr
