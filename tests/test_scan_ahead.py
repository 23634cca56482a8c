"""A scan read in two stages (``scan(ahead=True)``: lines read in one thread, parsed in
another) gives the very items a scan in one thread gives, in the same order, with the
same tallies, across batches, sessions, rotated parts and corrupt lines."""

import dataclasses
import gzip
import threading

import numpy as np
import pytest

from tests.test_table import varied
from tokmon.model.data.facts import Requests, Tick
from tokmon.model.data.records import Event
from tokmon.recording.prefetch import read_ahead
from tokmon.recording.reader import scan
from tokmon.recording.writer import Recorder


def _write(
    path: str,
    sessions: int,
    rotate_s: float | None = None,
    n: int = 400,
    arms: tuple[str, ...] = ("plain", "spec"),
    end: bool = False,
    seed: int = 5,
) -> None:
    """``sessions`` runs of ``n`` varied requests in one file (``end``: each ends as a
    finished run does), a tick after every 50 and a marker after every 150."""
    for s in range(sessions):
        w = Recorder(path, rotate_s=rotate_s)
        w.open({"settings": {"arms": [{"name": a} for a in arms]}}, 0)
        recs = [dataclasses.replace(r, rid=1000 * s + r.rid) for r in varied(n, seed=s + seed)]
        recs.sort(key=lambda r: r.t_end)
        for i in range(0, len(recs), 50):
            part = recs[i : i + 50]
            w.records(part)
            t = part[-1].t_end + 1
            if i % 150 == 0:
                w.fact(Event(t=t, kind="marker", message=f"m{i}", data={}, wall=0.0))
            w.fact(Tick(t))
        if end:
            w.end(recs[-1].t_end + 2)
        w.close()


def _items(path: str, ahead: bool) -> tuple[list[object], object]:
    out: list[object] = []
    rec = None
    for x in scan(path, series=False, cut=(Event, Tick), ahead=ahead):
        rec = getattr(x, "rec", rec)
        if isinstance(x, Requests):
            tb = x.table
            # (bytes: equal to the bit, NaN included)
            out.append(("r", {k: (v.dtype.str, v.tobytes()) for k, v in tb.cols.items()}, tb.gaps))
        elif hasattr(x, "rec"):
            out.append(("session",))
        else:
            out.append(x)
    return out, rec


@pytest.mark.parametrize("case", ["sessions", "rotated", "corrupt-gz"])
def test_a_scan_ahead_gives_what_a_scan_in_one_thread_gives(tmp_path, monkeypatch, case):
    from tokmon.recording import jsonl

    monkeypatch.setattr(jsonl, "BATCH", 37)  # many batches, facts between and inside them
    path = str(tmp_path / ("run.jsonl.gz" if case == "corrupt-gz" else "run.jsonl"))
    if case == "rotated":
        _write(path, 1, rotate_s=1e-9)  # a new part at every tick
    else:
        _write(path, 2 if case == "sessions" else 1)
    if case == "corrupt-gz":
        with gzip.open(path, "rb") as f:
            lines = f.read().split(b"\n")
        lines[120] = b'{"k":"r","id":'  # a request line cut short, and one not JSON
        lines[300] = b"not json"
        with gzip.open(path, "wb") as f:
            f.write(b"\n".join(lines))
    one, rec1 = _items(path, ahead=False)
    two, rec2 = _items(path, ahead=True)
    assert len(one) > 20 and sum(1 for x in one if isinstance(x, tuple) and x[0] == "r") >= 8
    assert two == one
    assert (rec2.corrupt, rec2.t_seen, rec2.lines, rec2.truncated, rec2.sessions) == (
        rec1.corrupt,
        rec1.t_seen,
        rec1.lines,
        rec1.truncated,
        rec1.sessions,
    )
    assert rec1.corrupt == (2 if case == "corrupt-gz" else 0)
    assert np.array_equal(rec1.requests.cols["rid"], rec2.requests.cols["rid"])


def test_a_chunk_of_one_is_handed_on_before_the_next_item_is_made():
    """A stage of big items (a batch of lines) must not wait for more of them."""
    taken = threading.Event()

    def source():
        yield 1
        assert taken.wait(10), "the first item was held back until a second was made"
        yield 2

    it = read_ahead(source(), depth=2, chunk=1)
    assert next(it) == 1
    taken.set()
    assert list(it) == [2]


def test_line_bounds_are_the_lines_of_a_split_and_their_first_bytes():
    """The lines found at once (``line_bounds``) are those ``split`` finds, and those
    that begin as a request line are those ``startswith`` finds, short lines included."""
    from tokmon.recording.jsonl import _REQUEST, line_bounds

    rng = np.random.default_rng(4)
    words = [b"", b"{", b'{"k":"r"', _REQUEST, _REQUEST + b'"id":1}', b'{"k":"tick"}', b"\xff"]
    for _ in range(200):
        region = b"\n".join(words[i] for i in rng.integers(0, len(words), rng.integers(1, 12)))
        starts, stops, req = line_bounds(region)
        lines = region.split(b"\n")
        got = [region[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
        assert got == lines
        assert req.tolist() == [ln.startswith(_REQUEST) for ln in lines]
