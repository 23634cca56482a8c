import math

import numpy as np
import pytest

from tokmon.model.contract.history import History, Point
from tokmon.model.data.records import RequestRecord
from tokmon.model.data.table import RequestTable
from tokmon.model.statistics import stats
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.statistics.stats import (
    ArmTotals,
    Slo,
    Stratum,
    _boot_medians,
    pct_summary,
    ratio_ci_requests,
    ratio_ci_stratified,
    window_stats,
)


def rec(i, outcome="ok", ttft=100.0, tpot=10.0, arm="a", seg=0, warm=False, toks=50):
    return RequestRecord(
        rid=i,
        arm=arm,
        outcome=outcome,
        t_sched=0,
        t_end=i,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=ttft + tpot * (toks - 1),
        decode_tps=1000 / tpot,
        output_tokens=toks,
        chunks=toks,
        segment=seg,
        warmup=warm,
    )


def window(recs, tokens, t, width, slo=None):
    tb = RequestTable.from_records(recs)
    return window_stats(tb, np.arange(tb.n), tokens, t, width, slo=slo)


def add(totals, *recs):
    totals.add(RequestTable.from_records(list(recs)), np.arange(len(recs)), None)


def test_percentiles_match_numpy_linear():
    v = np.array([1.0, 2, 3, 4, 10])
    s = pct_summary(v)
    assert s["p50"] == 3 and s["p90"] == round(np.percentile(v, 90), 4) and s["count"] == 5
    assert pct_summary(np.empty(0))["p50"] is None


def test_window_gap_not_zero_and_errors_by_class():
    w = window([], 0, 0, 10.0)
    assert w.ttft_p50 is None and w.tokens_per_s == 0
    recs = [rec(1), rec(2, "http_5xx"), rec(3, "timeout"), rec(4, ttft=300)]
    w = window(recs, 500, 0, 10.0, slo=Slo(ttft_ms=200))
    assert w.errors == {"http_5xx": 1, "timeout": 1}
    assert w.ended == 4 and w.ok == 2 and w.tokens_per_s == 50
    assert w.ttft_p50 == 200 and w.goodput_per_s == 0.1


def test_warmup_excluded_from_totals():
    t = ArmTotals("a")
    add(t, rec(1, warm=True, ttft=999))
    add(t, rec(2))
    assert t.warmup == 1 and len(t.ttft) == 1 and t.ok == 2


def test_boot_medians_match_brute_force():
    rng = np.random.default_rng(1)
    for n in (11, 12):
        x = rng.lognormal(0, 1, n)
        fast = _boot_medians(Quantiles.of(x), 40000, np.random.default_rng(2))
        brute = np.median(rng.choice(x, (40000, n)), axis=1)
        for q in (10, 50, 90):
            assert abs(np.percentile(fast, q) - np.percentile(brute, q)) < 0.06 * np.median(x)


def test_ratio_ci_contains_truth_and_narrows():
    rng = np.random.default_rng(3)
    widths = []
    for n in (100, 1600):
        a = rng.lognormal(np.log(40), 0.2, n)
        b = rng.lognormal(np.log(40 * 1.5), 0.2, n)
        r, lo, hi = ratio_ci_requests(a, b)
        assert lo < 1.5 < hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2.5


def test_segment_bootstrap_resists_drift():
    # No true difference, a slow drift, arms alternating A B A B: the request bootstrap
    # calls the drift an effect, the segment bootstrap does not.
    rng = np.random.default_rng(4)
    a, b, sa, sb = [], [], [], []
    for seg in range(8):
        level = 40 * (1 + 0.05 * seg)  # drift
        v = rng.lognormal(np.log(level), 0.05, 300)
        if seg % 2 == 0:
            a.append(v)
            sa.append(np.full(300, seg))
        else:
            b.append(v)
            sb.append(np.full(300, seg))
    a, b, sa, sb = map(np.concatenate, (a, b, sa, sb))
    _, lo_r, hi_r = ratio_ci_requests(a, b)
    seg = ratio_ci_stratified({0: Stratum.of(a, sa)}, {0: Stratum.of(b, sb)}, segments=True)
    assert seg is not None and seg.method == "segments"
    lo_s, hi_s = seg.lo, seg.hi
    assert lo_r > 1.0  # the request bootstrap says "significant"
    assert lo_s <= 1.0 <= hi_s  # the segment bootstrap does not


def test_history_bounded_and_compressed():
    h = History(recent_points=100, whole_points=64)
    for i in range(10_000):
        h.add(Point(t=float(i), tok_s=float(i % 7), errors=1.0))
    assert len(h.recent) == 100
    whole = h.whole_view()
    assert len(whole) <= 65
    assert abs(sum(p.errors for p in whole) - 10_000) < 1e-6  # counts are kept, not averaged


def _mix_totals(seed: int, factors: dict[str, float], share_code: float = 0.5):
    """Two arms' totals of a code/creative mix whose per-kind speed-ups are known."""
    from tokmon.model.data.records import RequestRecord
    from tokmon.model.statistics.stats import ArmTotals

    rng = np.random.default_rng(seed)
    base_speed = {"code": 40.0, "creative": 55.0}
    tots = []
    for arm, scale in (("plain", None), ("spec", factors)):
        t = ArmTotals(arm)
        recs = []
        for i in range(600):
            kind = "code" if rng.random() < share_code else "creative"
            speed = base_speed[kind] * (scale[kind] if scale else 1.0)
            dec = float(speed * rng.lognormal(0.0, 0.15))
            recs.append(RequestRecord(
                rid=i, arm=arm, outcome="ok", t_sched=i, t_end=i + 1, kind=kind,
                segment=0, ttft_ms=30.0, e2e_ms=1000.0, output_tokens=64,
                tpot_ms=1000.0 / dec, decode_tps=dec,
            ))  # fmt: skip
        add(t, *recs)  # (at once: the totals do not depend on how requests are batched)
        tots.append(t)
    return tots


def test_stratified_ratio_lands_on_the_weighted_truth_of_a_mix():
    """A half-code, half-creative mix with spec ×2.5 on code and ×1.03 on creative: the
    headline is the kinds' ratios combined with the workload's weights, in every run."""
    from tokmon.model.judge.summary import compare

    factors = {"code": 2.5, "creative": 1.03}
    truth = math.exp(0.5 * math.log(2.5) + 0.5 * math.log(1.03))
    plain_errors, covered = [], 0
    for seed in range(10):
        base, spec = _mix_totals(seed, factors)
        c = compare(base, spec, alternations=0, kind_weights={"code": 0.5, "creative": 0.5})
        d = c["decode_tokens_per_s"]
        assert d["strata"] == 2
        assert abs(d["ratio"] / truth - 1) < 0.05, (seed, d)
        covered += d["ci95"][0] <= truth <= d["ci95"][1]
        plain = float(np.median(spec.decode.values()) / np.median(base.decode.values()))
        plain_errors.append(abs(plain / truth - 1))
        bk = c["by_kind"]
        assert abs(bk["code"]["decode_tokens_per_s"]["ratio"] / 2.5 - 1) < 0.08
    # A 95% interval misses the truth one time in twenty: all ten cover it only 60% of
    # the time, nine of ten 91%. (Seeded: this run's count is fixed, 9.)
    assert covered >= 9, covered
    # the ratio of the mixed medians is what the stratification fixes: it misses the truth
    assert max(plain_errors) > 0.05, plain_errors


@pytest.mark.slow
def test_the_stratified_interval_is_calibrated():
    """Over 120 seeded runs of the same mix, the 95% interval holds the weighted truth
    in 90–99% of them (measured: 188 of 200, 94%): neither too narrow to trust nor so wide
    that it covers every run (a correct 95% interval covers ten runs in ten only 60% of
    the time), and the point lands within 5% of the truth in every run."""
    from tokmon.model.judge.summary import compare

    factors = {"code": 2.5, "creative": 1.03}
    truth = math.exp(0.5 * math.log(2.5) + 0.5 * math.log(1.03))
    covered = 0
    for seed in range(120):
        base, spec = _mix_totals(seed, factors)
        c = compare(base, spec, alternations=0, kind_weights={"code": 0.5, "creative": 0.5})
        d = c["decode_tokens_per_s"]
        assert abs(d["ratio"] / truth - 1) < 0.05, (seed, d)
        covered += d["ci95"][0] <= truth <= d["ci95"][1]
    assert 0.90 <= covered / 120 <= 0.99, covered


def test_per_second_points_kept_at_decreasing_resolution():
    """Two days of a point a second: every one of the last hour, one per 10 s of the
    last day, one per minute before that -- 13,321 points, not 172,800; the alerts'
    trends read them as one series in time order."""
    from tokmon.model.contract.history import Thinned

    th: Thinned[float] = Thinned(lambda t: t)
    for t in range(2 * 86400):
        th.append(float(t))
    ts = list(th)
    assert len(th) == len(ts) == 3601 + 8280 + 1440  # (the hour: both its ends)
    assert ts == sorted(ts) and th.last() == 2 * 86400 - 1
    assert all(b - a == 1 for a, b in zip(ts[-3600:], ts[-3599:], strict=False))
    gaps = {b - a for a, b in zip(ts[:-3600], ts[1:-3600], strict=False)}
    assert gaps <= {10.0, 60.0} | {1.0 * k for k in range(1, 61)}


@pytest.mark.parametrize("seed", range(8))
def test_segment_bootstrap_medians_are_the_medians_of_the_drawn_values(seed):
    # the replicates' medians are read off the values sorted once, weighted by how often
    # each segment was drawn: they must be exactly the medians of the drawn values
    g = np.random.default_rng(seed)
    k = int(g.integers(3, 40))
    parts = [
        g.normal(100, 10, int(g.integers(1, 60))).round(int(g.integers(0, 3))) for _ in range(k)
    ]
    chosen = np.random.default_rng(seed).integers(0, k, (50, k))
    flat = np.concatenate(parts)
    order = np.argsort(flat, kind="stable")
    seg_of = np.repeat(np.arange(k), [p.size for p in parts])[order]
    got = stats._weighted_medians(flat[order], seg_of, chosen, k)
    want = [np.median(np.concatenate([parts[j] for j in row])) for row in chosen]
    assert got.tolist() == want


def test_pct_is_numpys_linear_percentile():
    g = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 101, 2000):
        for q in (0, 5, 50, 95, 99, 100):
            v = g.normal(100, 10, n).tolist()
            assert stats.pct(v, q) == pytest.approx(float(np.percentile(v, q)), rel=1e-12)
    assert stats.pct([], 50) is None
