import numpy as np
import pytest

from tokmon.model.changepoint import cusum
from tokmon.model.trend import drift


def test_step_change_flagged_near_where_it_happened():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100, 3, 80), rng.normal(85, 3, 80)])
    cps = cusum(np.arange(x.size) * 10.0, x)
    assert len(cps) == 1
    assert abs(cps[0].index - 80) <= 3
    assert cps[0].change_pct == pytest.approx(-15, abs=3)


def test_flat_series_raise_no_alarm():
    alarms = sum(
        len(cusum(np.arange(360.0), np.random.default_rng(s).normal(100, 3, 360)))
        for s in range(100)
    )
    assert alarms <= 1  # measured: 0 in 200 series of 360 windows


def test_drift_slope_within_interval():
    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(0, 7200, 4000))  # two hours
    true = -2.0  # % per hour
    v = 40 * (1 + true / 100 * t / 3600) * rng.lognormal(0, 0.05, t.size)
    d = drift(t, v)
    assert d["ci95"][0] <= true <= d["ci95"][1]
    flat = drift(t, 40 * rng.lognormal(0, 0.05, t.size))
    assert flat["ci95"][0] <= 0 <= flat["ci95"][1]
