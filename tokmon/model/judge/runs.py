"""Does it reproduce: figures over repeated runs, where the unit of replication is the run.

Each run gives one value per headline figure and arm (its p50 of decode speed, TTFT and
TPOT, and its output tokens/s). Over runs: the mean, the between-run
coefficient of variation, the min–max, and a 95% t interval of the mean; a verdict in
words. A median is held to its runs' own noise: each run's median comes with its own 95%
interval (what its requests' sampling allows), and the runs disagree only where their
spread is beyond that (Cochran's Q, a test of heterogeneity, at 95%) — eight requests a
run vary by 11% from sampling alone, and "check the environment" would be a false alarm. Two groups of runs (two configurations, each run several times) are compared by
the ratio of their geometric means with a Welch interval over run-level log values:
the difference counts only where the interval excludes 1, i.e. where it exceeds what the
runs themselves vary by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from tokmon.model.data.coerce import number

# the 97.5% quantile of Student's t by degrees of freedom (1–30); beyond, the normal's
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
REPRODUCES_PCT = 5.0  # a figure whose runs span less than this (max−min over the mean)

# the 95% quantile of chi-square by degrees of freedom (1–30); beyond, Wilson–Hilferty
_CHI95 = (3.841, 5.991, 7.815, 9.488, 11.070, 12.592, 14.067, 15.507, 16.919, 18.307, 19.675,
          21.026, 22.362, 23.685, 24.996, 26.296, 27.587, 28.869, 30.144, 31.410, 32.671,
          33.924, 35.172, 36.415, 37.652, 38.885, 40.113, 41.337, 42.557, 43.773)  # fmt: skip


def chi95(df: int) -> float:
    if df <= len(_CHI95):
        return _CHI95[max(df, 1) - 1]
    a = 2.0 / (9.0 * df)
    return df * (1 - a + 1.644854 * math.sqrt(a)) ** 3


# figure -> (where in an arm's summary, how it reads, higher is better)
FIGURES: dict[str, tuple[tuple[str, ...], str]] = {
    "decode_p50": (("decode_tokens_per_s", "p50"), "decode p50 (tok/s)"),
    "ttft_p50": (("ttft_ms", "p50"), "TTFT p50 (ms)"),
    "tpot_p50": (("tpot_ms", "p50"), "TPOT p50 (ms)"),
    "tokens_per_s": (("output_tokens_per_s",), "output tok/s"),
}


def t975(df: float) -> float:
    if df < 1:
        return math.inf
    i = int(df)
    return _T975[i - 1] if i <= len(_T975) else 1.96


def _ci(arm: dict[str, Any], path: tuple[str, ...]) -> tuple[float, float] | None:
    v: Any = arm
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    if isinstance(v, list) and len(v) == 2 and all(number(x) is not None for x in v):
        return float(v[0]), float(v[1])
    return None


def figure(arm: dict[str, Any], path: tuple[str, ...]) -> float | None:
    v: Any = arm
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True, slots=True)
class Spread:
    """One figure over runs."""

    name: str
    values: tuple[float, ...]
    mean: float
    cv: float  # sd / mean
    lo: float  # the 95% t interval of the mean
    hi: float
    span_pct: float  # (max − min) / mean, in %
    # each run's own noise, where its figure has an interval (a median's): the typical
    # half-width of the runs' own 95% intervals over the mean, in %, and whether the
    # runs disagree beyond it (Cochran's Q at 95%); None: no interval to hold them to
    noise_pct: float | None = None
    beyond_noise: bool | None = None

    @property
    def reproduces(self) -> bool:
        if self.beyond_noise is False:
            return True  # the runs differ by no more than their own sampling says
        return self.span_pct <= REPRODUCES_PCT

    def verdict(self) -> str:
        n = len(self.values)
        if n < 2:
            return f"{self.name}: one run, nothing to compare"
        half = 100 * (self.hi - self.mean) / self.mean if self.mean else math.inf
        noise = "" if self.noise_pct is None else f"each run's own interval ±{self.noise_pct:.0f}%"
        if self.span_pct <= REPRODUCES_PCT:
            return f"{self.name} reproduces within ±{half:.1f}% over {n} runs"
        if self.beyond_noise is False:
            return (f"{self.name} agrees over {n} runs within their own noise (they span "
                    f"{self.span_pct:.0f}%, {noise}): more requests a run would tell more")  # fmt: skip
        why = f", beyond {noise}" if noise else ""
        return (f"{self.name} varies by {self.span_pct:.0f}% between runs{why}: check the "
                "environment")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "values": list(self.values),
            "mean": self.mean,
            "cv": self.cv,
            "ci95": [self.lo, self.hi],
            "min": min(self.values),
            "max": max(self.values),
            "span_pct": self.span_pct,
            "noise_pct": self.noise_pct,
            "beyond_noise": self.beyond_noise,
            "reproduces": self.reproduces,
            "verdict": self.verdict(),
        }


def spread(
    name: str, values: list[float], cis: list[tuple[float, float] | None] | None = None
) -> Spread | None:
    """One figure over runs; ``cis``: each run's own 95% interval of it, where it has one
    (its median's), to hold the runs' spread to their own noise."""
    pairs = [(v, (cis or [None] * len(values))[i]) for i, v in enumerate(values)
             if v is not None and math.isfinite(v)]  # fmt: skip
    x = np.asarray([v for v, _ in pairs], dtype=np.float64)
    if x.size == 0:
        return None
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size > 1 else 0.0
    half = t975(x.size - 1) * sd / math.sqrt(x.size) if x.size > 1 else math.inf
    span = 100 * float(x.max() - x.min()) / mean if mean else math.inf
    noise, beyond = _noise(x, [c for _, c in pairs], mean)
    return Spread(name, tuple(float(v) for v in x), mean, sd / mean if mean else math.inf,
                  mean - half, mean + half, span, noise, beyond)  # fmt: skip


def _noise(
    x: np.ndarray, cis: list[tuple[float, float] | None], mean: float
) -> tuple[float | None, bool | None]:
    """(the runs' typical own half-width in % of the mean, whether they disagree beyond
    it): Cochran's Q = Σ (x_i − x̄_w)² / se_i², its 95% chi-square bound at k − 1."""
    if x.size < 2 or not mean or any(c is None for c in cis):
        return None, None
    se = np.array([(c[1] - c[0]) / (2 * 1.959964) for c in cis if c is not None])
    if (se <= 0).any() or not np.isfinite(se).all():
        return None, None
    w = 1.0 / se**2
    center = float((w * x).sum() / w.sum())
    q = float((w * (x - center) ** 2).sum())
    noise = 100 * float(np.median(se)) * 1.959964 / mean
    return noise, q > chi95(int(x.size) - 1)


@dataclass(frozen=True, slots=True)
class GroupRatio:
    """Group B over group A for one figure: the ratio of geometric means of the runs'
    values with its Welch 95% interval over runs."""

    name: str
    ratio: float
    lo: float
    hi: float
    n: tuple[int, int]

    @property
    def differs(self) -> bool:
        return self.lo > 1.0 or self.hi < 1.0

    def to_json(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "ci95": [self.lo, self.hi], "runs": list(self.n),
                "differs": self.differs}  # fmt: skip


def group_ratio(name: str, a: list[float], b: list[float]) -> GroupRatio | None:
    """B/A over runs (each group at least 2 runs): Welch's interval on the logs."""
    xa = np.log([v for v in a if v and v > 0])
    xb = np.log([v for v in b if v and v > 0])
    if xa.size < 2 or xb.size < 2:
        return None
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    se = math.sqrt(va + vb)
    d = float(xb.mean() - xa.mean())
    if se == 0:
        return GroupRatio(name, math.exp(d), math.exp(d), math.exp(d), (xa.size, xb.size))
    # Welch–Satterthwaite degrees of freedom
    df = (va + vb) ** 2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1))
    half = t975(df) * se
    return GroupRatio(name, math.exp(d), math.exp(d - half), math.exp(d + half),
                      (int(xa.size), int(xb.size)))  # fmt: skip


def env_of(summary: dict[str, Any], arm: str) -> dict[str, str]:
    """What the arm's server said of itself (engine, version, configuration), flat; for a
    server tokmon started, its command too (the port it picked put back as {port})."""
    a = (summary.get("arms") or {}).get(arm) or {}
    managed = (summary.get("managed_servers") or {}).get(arm) or {}
    env = managed.get("env") or (summary.get("environment") or {}).get(a.get("server") or "") or {}
    out = {}
    if isinstance(managed.get("command"), list):
        try:
            port = str(urlsplit(str(env.get("url") or "")).port or "")
        except ValueError:  # (a recording is untrusted: a port that is no number)
            port = ""
        out["command"] = " ".join(
            "{port}" if str(w) == port else str(w) for w in managed["command"]
        )
    for k in ("engine", "version"):
        if env.get(k) is not None:
            out[k] = str(env[k])
    for k, v in (env.get("config") or {}).items():
        out[f"config.{k}"] = str(v)
    out["tokmon"] = str(summary.get("tokmon_version"))
    return out


def changed_env(summaries: list[dict[str, Any]], arm: str) -> list[str]:
    """The environment fields that differ between the runs, with their values."""
    envs = [env_of(s, arm) for s in summaries]
    keys = sorted({k for e in envs for k in e})
    out = []
    for k in keys:
        vals = [e.get(k, "—") for e in envs]
        if len(set(vals)) < 2:
            continue
        words = [v.split() for v in vals]
        if k == "command" and len({len(w) for w in words}) == 1:
            # a command line: only the words that differ, each after the one before it
            for j in range(len(words[0])):
                col = [w[j] for w in words]
                if len(set(col)) > 1:
                    out.append(f"command {words[0][j - 1] if j else ''}".rstrip()
                               + f": {' / '.join(col)}")  # fmt: skip
            continue
        out.append(f"{k}: {' / '.join(vals)}")
    return out


def not_whole(summary: dict[str, Any]) -> str:
    """Why a finished run is not one to compare with the others ("" where it is): a
    managed server that failed, or a server that could not be reached for some of its
    requests (it died, or restarted, mid-way). Such a run's figures are not the
    configuration's: ``reproduces`` is judged without it."""
    for arm, m in (summary.get("managed_servers") or {}).items():
        if isinstance(m, dict) and number(m.get("failed")):
            return f"the server of arm {arm} failed"
    for arm, a in (summary.get("arms") or {}).items():
        by = ((a.get("requests") or {}).get("by_outcome") or {}) if isinstance(a, dict) else {}
        lost = number(by.get("connect")) if isinstance(by, dict) else None
        if lost:
            return f"the server of arm {arm} could not be reached for {int(lost)} requests"
    return ""


def between_runs(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The between-run table: per arm in every run, each figure's spread."""
    arms = [a for a in (summaries[0].get("arms") or {}) if all(a in (s.get("arms") or {})
                                                              for s in summaries)]  # fmt: skip
    out: dict[str, Any] = {"runs": len(summaries), "arms": {}}
    for arm in arms:
        figs = {}
        for key, (path, label) in FIGURES.items():
            ci_path = ("p50_ci95", path[0]) if path[-1] == "p50" else None
            cis = [_ci(s["arms"][arm], ci_path) for s in summaries] if ci_path else None
            sp = spread(label, [figure(s["arms"][arm], path) for s in summaries], cis)  # type: ignore[misc]
            if sp is not None:
                figs[key] = sp.to_json()
        out["arms"][arm] = {"figures": figs, "environment_changed": changed_env(summaries, arm)}
    return out


def between_groups(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Group B against group A, arm by arm (arms in every run of both groups)."""
    arms = [x for x in (a[0].get("arms") or {})
            if all(x in (s.get("arms") or {}) for s in [*a, *b])]  # fmt: skip
    out: dict[str, Any] = {"runs": [len(a), len(b)], "arms": {}}
    for arm in arms:
        figs = {}
        for key, (path, label) in FIGURES.items():
            va = [figure(s["arms"][arm], path) for s in a]
            vb = [figure(s["arms"][arm], path) for s in b]
            r = group_ratio(
                label, [v for v in va if v is not None], [v for v in vb if v is not None]
            )
            if r is not None:
                figs[key] = r.to_json()
        out["arms"][arm] = figs
    return out
