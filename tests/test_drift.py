"""The step detector (a self-starting CUSUM on per-second values, within a regime) and the
drift slope: flagged soon after a step and near it, silent on flat noise, never across a
change the user made."""

import numpy as np
import pytest

from tokmon.model.judge.changepoint import GUARD_S, MIN_REF, StepDetector, StepWatch
from tokmon.model.statistics.trend import drift


def run(x, metric="decode"):
    d = StepDetector(metric)
    return [cp for i, v in enumerate(x) if (cp := d.add(float(i), float(v)))]


@pytest.mark.parametrize("cv,drop", [(0.05, 0.2), (0.15, 0.2), (0.05, 0.5)])
def test_step_flagged_soon_after_it_and_placed_near_it(cv, drop):
    rng = np.random.default_rng(1)
    hits = []
    for _ in range(20):
        x = 40 * rng.lognormal(0, cv, 600)
        x[300:] *= 1 - drop
        cps = run(x)
        assert len(cps) == 1, [(c.t, c.t_found) for c in cps]
        hits.append(cps[0])
    delays = [c.t_found - 300 for c in hits]
    # never before it; measured: 3–6 s at 5% noise, 19–69 s (median 28) at 15%
    assert min(delays) >= 0 and np.median(delays) <= 30
    where = [abs(c.t - 300) for c in hits]
    # measured: median 0–1 s; at 15% noise, found later, one in five lands 4–12 s off
    assert np.median(where) <= 2 and np.percentile(where, 80) <= 10 and max(where) <= 25
    # (the new level from the few seconds seen at the alarm: as noisy as they are)
    assert all(c.change_pct == pytest.approx(-100 * drop, abs=max(8, 60 * cv)) for c in hits)


def test_a_step_in_a_quiet_stepped_series_is_placed_where_it_is():
    """Tokens/s of 4 streams in lock-step on the simulator (recorded, seconds 25–60): 164
    a second with 2–7% dips where prefills land, then a third slower from 43 s. The series
    is so quiet that its noise is the floor; a split that weighed each dip as much as the
    step placed it at 37 s."""
    seen = [164, 164, 160, 164, 164, 152, 164, 164, 164, 164, 164, 160, 156, 160, 164, 164,
            164, 112, 106, 102, 112, 108, 108, 108, 112, 108, 108, 108, 100, 112, 108, 108,
            108, 112, 108]  # fmt: skip
    x = [164.0] * 26 + seen  # the seconds before: the flat level (the series starts at 0)
    cps = run(x, "tok_s")
    assert [c.t for c in cps] == [43.0]
    assert cps[0].change_pct == pytest.approx(-34, abs=1)


def test_flat_noise_raises_no_alarm():
    rng = np.random.default_rng(2)
    alarms = sum(len(run(40 * rng.lognormal(0, 0.10, 3600))) for _ in range(40))
    assert alarms == 0  # 40 hours of per-second values (measured over 24 h: see bench)


def test_one_wild_second_is_not_a_step():
    rng = np.random.default_rng(3)
    x = 40 * rng.lognormal(0, 0.05, 400)
    x[200] = 4000.0  # a stall, a clock jump: one second far off
    x[250] = 0.1
    assert run(x) == []


def test_the_detector_waits_for_a_reference():
    x = np.r_[np.full(5, 40.0), np.full(60, 20.0)]  # a step before any reference exists
    d = StepDetector("decode")
    early = [d.add(float(i), v) for i, v in enumerate(x[: int(GUARD_S + MIN_REF) - 1])]
    assert not any(early)


def test_a_change_the_user_made_is_a_new_regime_not_a_step():
    w = StepWatch()
    rng = np.random.default_rng(4)
    found = []
    for sec in range(200):
        if sec == 100:
            w.new_regime(100.0)  # an arm switch, a ladder step, + or -
        level = 40.0 if sec < 100 else 20.0
        t = sec + rng.uniform(0, 1, 3)
        w.requests("a", t, level * rng.lognormal(0, 0.05, 3), np.full(3, 50.0))
        w.token_bucket("a", sec + 0.5, int(level * 4))
        found += w.close(sec + 1.0 + 1.0)
    assert found == []


def test_drift_slope_within_interval():
    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(0, 7200, 4000))  # two hours
    true = -2.0  # % per hour
    v = 40 * (1 + true / 100 * t / 3600) * rng.lognormal(0, 0.05, t.size)
    d = drift(t, v)
    assert d["ci95"][0] <= true <= d["ci95"][1]
    flat = drift(t, 40 * rng.lognormal(0, 0.05, t.size))
    assert flat["ci95"][0] <= 0 <= flat["ci95"][1]


def _fold_run(levels, regime_events: bool):
    """A fold fed a second at a time: requests whose decode speed follows ``levels`` (one
    per 60 s), with or without the ladder's step events at the boundaries."""
    from tokmon.model.data.facts import Requests, Tick, Tokens
    from tokmon.model.data.records import Event, RequestRecord, TokenTick
    from tokmon.model.data.table import RequestTable
    from tokmon.model.folding.fold import Fold, FoldSettings

    fold = Fold(FoldSettings(arms=("a",)), derive=True)
    rng = np.random.default_rng(7)
    rid = 0
    alerts = []
    for sec in range(60 * len(levels)):
        step, t = divmod(sec, 60)
        if t == 0 and regime_events:
            fold.apply(Event(t=sec * 10**9, kind="step", message="step",
                             data={"step": step, "arm": "a", "value": str(step), "param": "concurrency"}))  # fmt: skip
        recs = []
        for _ in range(4):
            dec = levels[step] * float(rng.lognormal(0, 0.05))
            end = int((sec + rng.uniform(0, 1)) * 1e9)
            recs.append(RequestRecord(rid=rid, arm="a", outcome="ok", t_sched=end - 10**9,
                                      t_end=end, ttft_ms=50.0, decode_tps=dec, tpot_ms=1000 / dec,
                                      e2e_ms=1000.0, output_tokens=int(dec)))  # fmt: skip
            rid += 1
        tb = RequestTable.from_lines([r for r in map(_line, recs)], fold.vocab)
        alerts += fold.apply(Requests(tb))
        alerts += fold.apply(Tokens((TokenTick(sec * 10**9, "a", int(4 * levels[step])),)))
        alerts += fold.apply(Tick((sec + 1) * 10**9))
    return fold, [a for a in alerts if a.data.get("alert") == "change_point"]


def _line(r):
    from tokmon.model.data.table import record_to_line

    return record_to_line(r, 0)


def test_a_ladders_step_boundaries_are_not_change_points():
    levels = [100.0, 70.0, 50.0, 40.0]  # a ladder: each step's load slows decoding
    _, with_steps = _fold_run(levels, regime_events=True)
    assert with_steps == []
    _, without = _fold_run(levels, regime_events=False)  # the same data, no regimes
    assert len(without) >= 3  # (so the test above could fail)


def test_a_short_run_reports_no_drift_figure(tmp_path):
    """A 20-second run cannot bound a drift of a few %/h: the report says so, and gives no
    figure (it once printed ±100 %/h); its change points are "not watched", not "none"."""
    from tokmon.model.data.records import RequestRecord
    from tokmon.recording.reader import read_recording
    from tokmon.recording.writer import Recorder
    from tokmon.report.render import render

    rng = np.random.default_rng(8)
    w = Recorder(str(tmp_path / "r.jsonl"))
    w.open({"settings": {"arms": [{"name": "a"}]}}, 0)
    recs = []
    for i in range(400):
        end = int(i * 0.05e9) + 10**9
        dec = 40 * float(rng.lognormal(0, 0.05))
        recs.append(RequestRecord(rid=i, arm="a", outcome="ok", t_sched=end - 10**9, t_end=end,
                                  ttft_ms=50.0, tpot_ms=1000 / dec, decode_tps=dec,
                                  e2e_ms=1000.0, output_tokens=40))  # fmt: skip
    w.records(recs)
    w.end(21 * 10**9)
    w.close()
    text = render(read_recording(str(tmp_path / "r.jsonl")), "text")
    part = text.split("Drift per regime")[1].split("Alerts raised")[0]
    assert "too short to tell" in part and "%/h  [" not in part
    # nor does it call the change points "none": the detector never looked
    steps = text.split("Change points")[1].split("Jitter")[0]
    assert "not watched" in steps and "lasted 21 s" in steps and "none" not in steps


def wander(rng, n, level, phi, sd, jitter):
    """A flat server whose speed wanders: an AR(1) of persistence phi and spread sd on the
    log scale, plus independent per-second jitter."""
    w = np.zeros(n)
    e = rng.normal(0, sd * np.sqrt(1 - phi**2), n)
    for i in range(1, n):
        w[i] = phi * w[i - 1] + e[i]
    return level * np.exp(w + rng.normal(0, jitter, n))


def test_a_slow_wander_is_read_as_noise_not_as_steps():
    """A server whose speed wanders slowly (a busy host: ±5% over half a minute, under 2.5%
    per-second jitter) without any step. Scaled by the per-second noise alone, the CUSUM
    takes each wander for a step; with the long-run noise (``long_run_noise``: the
    persistence and the 5-20 s block spreads) it raises many times fewer. Measured: 82
    against 2 alarms in 10 hours."""
    import tokmon.model.judge.changepoint as cpm

    class PerSecond(StepDetector):
        def _ref_level(self):
            lv = super()._ref_level()
            if lv is None:
                return None
            r = np.fromiter(self.ref, dtype=np.float64, count=len(self.ref))
            return lv[0], max(cpm.noise(r), self.floor)

    rng = np.random.default_rng(5)
    series = [wander(rng, 3600, level=40, phi=0.97, sd=0.05, jitter=0.025) for _ in range(10)]

    def alarms(cls):
        total = 0
        for x in series:
            d = cls("decode")
            total += sum(1 for i, v in enumerate(x) if d.add(float(i), float(v)))
        return total

    ours, per_second = alarms(StepDetector), alarms(PerSecond)
    assert per_second >= 3 * ours and per_second >= 50, (ours, per_second)


def test_a_wandering_server_is_quiet_while_its_noise_is_learned(monkeypatch):
    """The first minutes of a regime: the reference is short, and a slow wander looks
    like independent noise over a few seconds of it. vLLM on a busy CPU swings ±40% for
    a minute at a time; read off the block spreads alone, ten-minute flat runs of such
    noise raised several alarms each. With the persistence (an AR(1) fitted robustly,
    raised by what a short reference cannot show) one at most. Measured: 0 against 90 in
    60 ten-minute runs."""
    import tokmon.model.judge.changepoint as cpm

    rng = np.random.default_rng(6)
    runs = [wander(rng, 600, level=200, phi=0.9, sd=0.15, jitter=0.03) for _ in range(60)]

    def alarms():
        return sum(len(run(x)) for x in runs)

    ours = alarms()
    monkeypatch.setattr(cpm, "persistence", lambda x: 0.0)
    blocks_only = alarms()
    assert ours <= 1 and blocks_only >= 50, (ours, blocks_only)
