"""The report's analyses as reducers (``tokmon.model.judge.analyses``): fed batch by batch they
give what the whole table gives, and a figure from a sample or a late request says so."""

import numpy as np
import pytest

from tokmon.model.data.records import Event
from tokmon.model.data.table import RequestTable
from tokmon.model.judge import analyses
from tokmon.model.judge.analyses import Analyses, DriftFigures, SegmentFigures
from tokmon.model.statistics.trend import drift
from tokmon.sim.requests import synthetic_batch

S = 1_000_000_000


def batches(n_batches, per, seg_of=lambda i: 0, seed=3):
    vocab: dict = {}
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_batches):
        out.append(synthetic_batch(vocab, i * per, per, i * per * S // 200, rng, seg_of(i)))
    return out


def test_drift_fed_in_batches_equals_the_drift_of_each_regimes_rows(monkeypatch):
    monkeypatch.setattr(analyses, "DRIFT_ROWS", 1 << 20)  # (below the bound: every row)
    tbs = batches(140, 2000)  # 1400 s of arm a at 200 req/s, in 10 s batches
    d = DriftFigures(limit_pct_h=1e9)  # (every interval "tells": the figure is kept)
    boundary = 700 * S
    for i, tb in enumerate(tbs):
        d.requests(tb, tb.vocab["arm"])
        if i == 69:  # the regime's event comes after rows that ended past it
            d.event(Event(t=boundary, kind="level", message="+", data={}))
    whole = RequestTable.concat(tbs, tbs[0].vocab, free=False)
    t = whole.cols["t_end"] / 1e9
    found = d.figures()["a"]
    assert len(found) == 2
    assert (t[: 70 * 2000] >= 700).any()  # (rows fed before the event that ended past it)
    for rg, sel in zip(found, (t < 700, t >= 700), strict=True):
        want = drift(t[sel], whole.cols["decode_tps"][sel])
        got = rg["drift"]["decode_tokens_per_s"]
        assert want is not None and got is not None
        assert got["pct_per_hour"] == want["pct_per_hour"] and got["ci95"] == want["ci95"]
        assert rg["from_s"] == round(max(found.index(rg) * 700.0, t[sel].min()), 3)
        assert "sampled" not in rg
    assert d.late == 0


def test_drift_past_its_bound_is_a_sample_and_says_so(monkeypatch):
    monkeypatch.setattr(analyses, "DRIFT_ROWS", 5000)
    d = DriftFigures(limit_pct_h=1e9)
    for tb in batches(70, 2000):  # 700 s at 200 req/s: 140,000 requests
        d.requests(tb, tb.vocab["arm"])
    (rg,) = d.figures()["a"]
    assert rg["sampled"] == 140_000
    assert rg["drift"]["decode_tokens_per_s"] is not None


def test_a_segment_settles_two_segments_on_and_counts_a_late_request():
    tbs = batches(4, 100, seg_of=lambda i: i)
    s = SegmentFigures()
    for tb in tbs[:3]:
        s.requests(tb)
    assert s.segments[0].decode is None  # settled: segment 2 began
    s.requests(tbs[0].slice(0, 5))  # five more of segment 0, after it settled
    f0 = s.figures(0)
    assert f0["ok"] == 105 and f0["late"] == 5
    assert f0["decode_p50"] == float(np.median(tbs[0].cols["decode_tps"]))
    assert s.figures(2)["ok"] == 100 and s.figures(2)["late"] == 0


def test_errors_and_jitter_fed_in_batches_equal_one_feed():
    tbs = batches(6, 300, seg_of=lambda i: i % 2)
    a, b = Analyses(5.0), Analyses(5.0)
    for tb in tbs:
        a.requests(tb)
    b.requests(RequestTable.concat(tbs, tbs[0].vocab, free=False))
    ja, jb = a.jitter.figures(), b.jitter.figures()
    assert ja.keys() == jb.keys() == {"a", "b"}
    for arm in ja:  # (the sum of squares in another order: the last bits differ)
        assert ja[arm] == pytest.approx(jb[arm], rel=1e-12)
    assert a.errors.figures() == b.errors.figures() == {}
