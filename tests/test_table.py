"""Requests as columns: the exact records back, and the same totals as record by record."""

import dataclasses
import random

import numpy as np
import pytest

from tokmon.model.data.facts import Requests, Tick
from tokmon.model.data.records import OUTCOMES, RequestRecord
from tokmon.model.data.table import RequestTable, distinct_pairs, record_to_line
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.model.statistics.stats import Slo
from tokmon.recording.play import summary_of
from tokmon.recording.reader import read_recording
from tokmon.recording.writer import Recorder


def varied(n: int, seed: int = 1) -> list[RequestRecord]:
    """Every shape a record takes: failures, warm-up, settling, kinds, speculative
    counts, estimated tokens, missing figures, stalls, chunk gaps, connect failures."""
    rng = random.Random(seed)
    out = []
    t = 0
    for i in range(n):
        t += rng.randint(1_000_000, 30_000_000)
        outcome = rng.choice(["ok"] * 12 + list(OUTCOMES[1:]))
        ok = outcome == "ok"
        spec = ok and rng.random() < 0.5
        ttft = round(rng.lognormvariate(4, 0.5), 3) if ok and rng.random() < 0.97 else None
        n_tok = rng.randint(1, 300) if ok else 0
        out.append(
            RequestRecord(
                rid=i,
                arm=rng.choice(["plain", "spec", "third"]),
                outcome=outcome,
                # out of order: a long request scheduled early can end after short ones
                t_sched=t - rng.randint(0, 2_000_000_000),
                t_end=t,
                kind=rng.choice(["", "code", "chat", "creative"]),
                segment=i // 37,
                step=rng.choice([-1, 0, 1]),
                t_send=None if outcome == "connect" else t - 5_000,
                send_lag_ms=rng.choice([None, 0.125, 3.5]),
                connect_ms=None if rng.random() < 0.8 else 1.25,
                ttfb_ms=ttft and round(ttft * 0.3, 3),
                ttft_ms=ttft,
                ttfc_ms=ttft,
                e2e_ms=round(rng.uniform(50, 5000), 3) if ok else None,
                output_tokens=n_tok,
                tokens_estimated=rng.random() < 0.1,
                prompt_tokens=rng.choice([None, 128, 4096]),
                chunks=n_tok,
                tpot_ms=round(rng.uniform(5, 40), 4) if ok and n_tok > 1 else None,
                decode_tps=round(rng.uniform(20, 200), 4) if ok and n_tok > 1 else None,
                max_gap_ms=round(rng.uniform(5, 2000), 3) if ok else None,
                stalls=rng.choice([0, 0, 0, 1, 2]) if ok else 0,
                gaps=np.full(3, 1.5, dtype="<f4").tobytes() if rng.random() < 0.2 else b"",
                finish_reason=rng.choice([None, "stop", "length"]),
                http_status=None if outcome in ("connect", "timeout") else 200,
                error="" if ok else f"{outcome} error \u00e9 {rng.randint(0, 3)}",
                warmup=i < 20,
                settle=rng.random() < 0.05,
                spec_draft_tokens=rng.choice([0, 12, 40]) if spec else None,
                spec_accepted_tokens=rng.randint(0, 12) if spec else None,
                spec_drafts=rng.choice([None, 4]) if spec else None,
                spec_source="response:vllm" if spec else "",
                worker=rng.randint(0, 2),
            )
        )
    return out


def test_rows_come_back_as_the_exact_records():
    recs = varied(500)
    tb = RequestTable.from_records(recs)
    assert len(tb) == 500
    assert [tb.record(i) for i in range(500)] == recs


def test_recording_reads_back_exact_records_across_batches(tmp_path, monkeypatch):
    import tokmon.recording.jsonl as recording

    monkeypatch.setattr(recording, "BATCH", 64)  # many batches, new strings in later ones
    recs = varied(700, seed=2)
    path = str(tmp_path / "r.jsonl")
    w = Recorder(path, chunks=True)
    w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
    w.records(recs)
    w.close()
    rec = read_recording(path)
    assert rec.records == recs and rec.corrupt == 0


def _fold(slo=Slo()):
    return Fold(FoldSettings(arms=("plain", "spec"), slo=slo))


@pytest.mark.parametrize("slo", [Slo(), Slo(ttft_ms=60.0, tpot_ms=30.0, e2e_ms=3000.0)])
def test_totals_folded_in_pieces_equal_totals_folded_at_once(slo):
    """A live run folds a batch at a time, a report between events: the same totals."""
    recs = varied(3000, seed=3)
    tb = RequestTable.from_records(recs)
    whole, pieces = _fold(slo), _fold(slo)
    whole.apply(Requests(tb))
    for lo in range(0, 3000, 701):
        pieces.apply(Requests(tb.slice(lo, min(lo + 701, 3000))))
    assert pieces.t_measure == whole.t_measure
    assert pieces.stalls_total == whole.stalls_total and whole.stalls_total > 0
    assert pieces.down_since == whole.down_since
    for name, a in whole.totals.items():
        b = pieces.totals[name]
        for f in ("by_outcome", "warmup", "settle", "output_tokens", "all_output_tokens"):
            assert getattr(a, f) == getattr(b, f), f
        for f in ("estimated", "good", "stalls", "spec_draft", "spec_accepted", "spec_drafts"):
            assert getattr(a, f) == getattr(b, f), f
        assert (a.spec_source, a.t_first, a.t_last) == (b.spec_source, b.t_first, b.t_last)
        for f in ("ttft", "tpot", "e2e", "decode"):
            assert np.array_equal(getattr(a, f).values(), getattr(b, f).values()), f
        for f in ("by_decode", "by_tpot", "by_ttft"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.values.keys() == y.values.keys(), f
            for sid in x.values:
                sx, sy = x.stratum(sid), y.stratum(sid)
                assert np.array_equal(sx.values.values(), sy.values.values()), f
                assert len(sx.segments) == len(sy.segments), f
                for px, py in zip(sx.segments, sy.segments, strict=True):
                    assert np.array_equal(px, py), f
        assert a.kinds.keys() == b.kinds.keys()
        for k, ka in a.kinds.items():
            kb = b.kinds[k]
            assert (ka.requests, ka.output_tokens, ka.stream_s) == (
                kb.requests,
                kb.output_tokens,
                kb.stream_s,
            )
            assert (ka.spec_draft, ka.spec_accepted) == (kb.spec_draft, kb.spec_accepted)
            assert np.array_equal(ka.decode.values(), kb.decode.values())
    assert pieces.summary(10**10) == whole.summary(10**10)


def test_replay_of_a_file_without_ticks_ends_on_the_whole_window(tmp_path):
    """A file from before ticks were recorded: the replay makes a tick a second; at its
    end it shows the window a fold of every request shows."""
    from tokmon.sources.replay import ReplaySource

    recs = sorted(varied(2000, seed=4), key=lambda r: r.t_end)
    path = str(tmp_path / "r.jsonl")
    w = Recorder(path, chunks=True)
    w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
    w.records(recs)
    w.end(recs[-1].t_end + 1)
    w.close()
    src = ReplaySource(path)
    src.seek_to(src.end_t)
    ref = _fold()
    ref.apply(Requests(RequestTable.from_records(recs)))
    ref.apply(Tick(src.end_t, final=True))
    got, snap = src.snapshot(), ref.snapshot
    assert got.ok == snap.ok and got.failed == snap.failed
    assert got.window == snap.window
    assert [v.window for v in got.arm_views] == [v.window for v in snap.arm_views]
    assert summary_of(src.rec)["arms"] == summary_of(read_recording(path))["arms"]


@pytest.mark.parametrize("name", ["live.jsonl", "live.jsonl.gz"])
def test_replay_follows_a_file_still_being_written(tmp_path, name):
    import os
    import time

    from tokmon.sources.replay import ReplaySource

    recs = sorted(varied(400, seed=5), key=lambda r: r.t_end)
    path = str(tmp_path / name)
    w = Recorder(path)
    w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
    w.records(recs[:200])
    w.flush()

    def ok_seen(n: int, src: ReplaySource) -> bool:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            snap = src.snapshot()
            if snap is not None and snap.ok == n:
                return True
            time.sleep(0.05)
        return False

    src = ReplaySource(path, follow=True, speed=100.0)
    src.start()
    try:
        assert ok_seen(sum(r.ok for r in recs[:200]), src)
        w.records(recs[200:])  # the writer goes on: the replay picks the new lines up
        w.flush()
        assert ok_seen(sum(r.ok for r in recs), src)
        assert not src.snapshot().done  # following: the end is not the end
        # read on from where it stopped, not again from the start (gzip: from the start)
        if name.endswith(".gz"):
            assert src.rec.offset is None
        else:
            assert src.rec.offset == os.path.getsize(path)
        from dataclasses import replace

        assert src.rec.lines == 1 + 400
        assert src.rec.records == [replace(r, gaps=b"") for r in recs]  # (not recorded)
    finally:
        src.close()
        w.close()


def test_a_long_line_wraps_on_words_at_the_terminal_width():
    """The closing summary at 80 columns: the terminal used to cut `exac` / `t in 100%`;
    wrapped here, every word is whole, every line fits, and the words are the same."""
    from tokmon.model.statistics.words import count
    from tokmon.textsafe import fit_lines

    text = (
        "arm      ok fail tok/s\n"
        "baseline prompt tokens: asked p50 322, server counted p50 322; off by +0 to +0,"
        " exact in 100% of 22\n"
        "  baseline by kind: chat 6 req, dec p50 38.9, 2.53/Mtok · code 10 req, dec p50 39.5,"
        " 2.49/Mtok · creative 4 req, dec p50 39.0, 2.53/Mtok"
    )
    out = fit_lines(text, 80)
    lines = out.split("\n")
    assert all(len(ln) <= 80 for ln in lines), out
    assert out.split() == text.split()  # no word cut, none lost
    assert lines[0] == "arm      ok fail tok/s"  # a line that fits is untouched
    assert lines[-1].startswith("    ")  # continued under its own indent plus two
    assert "exact in 100% of 22" in out.replace("\n  ", " ")
    assert [count(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert count(1, "query", "queries") == "1 query" and count(3, "query", "queries") == "3 queries"


def test_a_report_of_an_appended_file_counts_the_last_session_only(tmp_path, monkeypatch):
    """Requests of an earlier session still waiting to be counted (a report counts them
    a stretch at a time) do not leak into the session after it."""
    import tokmon.recording.jsonl as recording
    from tokmon.model.data.facts import Tick
    from tokmon.recording.play import stream_report

    monkeypatch.setattr(recording, "BATCH", 64)  # the first session's requests handed over

    path = str(tmp_path / "two.jsonl")
    for first_rid, n in ((0, 300), (1000, 200)):
        w = Recorder(path)
        w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
        recs = [dataclasses.replace(r, rid=first_rid + r.rid) for r in varied(n, seed=n)]
        w.records(recs)
        w.fact(Tick(max(r.t_end for r in recs) + 1))
        w.close()
    folded = stream_report(path)
    assert folded.rec.sessions == 2
    total = sum(sum(t.by_outcome.values()) for t in folded.fold.totals.values())
    assert total == 200


def test_distinct_pairs_are_the_sorted_set_of_the_rows_pairs():
    g = np.random.default_rng(3)
    a = g.integers(0, 4, 500).astype(np.int32)
    b = g.integers(-1, 7, 500)
    assert distinct_pairs(a, b) == sorted({(int(x), int(y)) for x, y in zip(a, b, strict=True)})
    assert distinct_pairs(a[:0], b[:0]) == []


def test_adjacent_slices_of_a_table_join_as_a_slice_of_it_and_others_as_copies():
    """A report's stretch joins a second's slices of one batch: the same rows as a copy
    would give, as a view of the batch where they are adjacent."""
    a = RequestTable.from_records(varied(300, seed=11))
    b = RequestTable.from_lines([record_to_line(r, 0, True) for r in varied(50, seed=12)], a.vocab)
    cuts = [0, 40, 41, 120, 300]
    parts = [a.slice(lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False)]
    whole = RequestTable.concat(parts, a.vocab, free=False)
    assert whole.n == 300 and np.shares_memory(whole.cols["rid"], a.cols["rid"])
    mixed = [parts[0], parts[2], b.slice(0, 10), b.slice(10, 50), parts[3]]  # (a gap, two tables)
    got = RequestTable.concat(mixed, a.vocab, free=False)
    want = {k: np.concatenate([p.cols[k] for p in mixed]) for k in a.cols}
    for k, v in want.items():
        assert np.array_equal(got.cols[k], v, equal_nan=True), k
    assert got.records_at(np.arange(got.n)) == [r for p in mixed for r in p.records()]


def test_a_table_is_freed_without_the_collector():
    """A report folds with the collector off: a table (or its slices) must not hold
    itself in a cycle, or every batch of a day would stay in memory."""
    import gc
    import weakref

    gc.disable()
    try:
        tb = RequestTable.from_records(varied(20, seed=3))
        part = tb.slice(2, 9)
        alive = weakref.ref(tb), weakref.ref(part)
        del tb, part
        assert alive[0]() is None and alive[1]() is None
    finally:
        gc.enable()
