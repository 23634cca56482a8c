"""Step changes, live: a self-starting two-sided CUSUM on per-second values of one metric
within one regime.

Why this detector: it works on the requests as they finish (the median of those that
ended in each second, or the tokens that arrived in it), so a step shows in seconds, not
after the ten-second windows fill; its false-alarm rate follows from its two constants
(``K``, ``H``: about one false alarm per 10⁶ seconds per direction on Gaussian noise,
measured on simulated and real-server noise by ``bench/alerts.py``); and it costs O(1)
per second. The reference level and noise are the median and MAD of the regime's earlier
seconds (those older than ``GUARD_S``, so a step does not leak into its own reference),
the noise raised to what a sum of seconds sees where the series wanders slowly (a real
server does: ``long_run_noise``), and the dead zone widened while the reference is short;
a value is clipped at ``CLIP`` noise units, so one wild second cannot raise an alarm.
The change is placed at the least-absolute-deviation split of the tested seconds, and
reported only when the level moved by at least ``min_change`` (a real step, not a wander
of a very quiet series).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from tokmon.model.data.table import distinct
from tokmon.model.statistics.stats import median, pct

K = 0.5  # half the shift (in noise units) the detector is tuned for
H = 12.0  # alarm threshold (in noise units)
CLIP = 4.0  # one second moves the CUSUM by at most this
GUARD_S = 30.0  # the last seconds are tested, not yet part of the reference
MIN_REF = 20  # seconds of reference before the detector may speak
MAX_REF = 600  # seconds of reference kept (the last ten minutes of the regime)
BLOCKS = (5, 10, 20)  # seconds: the scales of slow wander the noise is read at
MIN_BLOCKS = 8  # blocks of a scale before its spread is trusted
RHO_MAX = 0.95  # persistence at most (the noise of a sum at most 4.4× the per-second one)
# a short reference knows little: the persistence read from n seconds is raised by
# RHO_PAD/√n (a slow wander looks independent over a few seconds of it), and the dead
# zone widened by REF_Z/√n of the noise (the reference median is off by about 1/√n)
RHO_PAD = 4.5
REF_Z = 2.0
HOLD = 0.5  # of H: a CUSUM this far on holds the reference (see add)


@dataclass(frozen=True)
class ChangePoint:
    metric: str
    t: float  # where the new level starts, seconds since the run's start
    t_found: float  # when it was found
    before: float
    after: float
    score: float  # the CUSUM at the alarm (the threshold is H)

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.after - self.before) / self.before if self.before else float("nan")


def noise(x: np.ndarray) -> float:
    """Robust noise of a set of values: the scaled MAD, widened for a small sample (a
    noise level read off ten seconds is itself uncertain)."""
    if x.size < 2:
        return 0.0
    mad = median(np.abs(x - median(x))) * 1.4826
    return mad * (1.0 + 2.0 / np.sqrt(x.size))


def persistence(x: np.ndarray) -> float:
    """How much of a series' spread is slow wander: ρ of an AR(1) fitted robustly, from
    the spread of the values (total) and of their second-to-second differences (fast):
    1 − (fast / total)², 0 for independent seconds, near 1 where the level wanders; raised
    by what a short series cannot show (measured on vLLM's decode speed on CPU: ρ read off
    20 s is 0.34 in the median, off ten minutes 0.72; on a busier host 0.57 and 0.87)."""
    if x.size < 4:
        return 0.0
    total = median(np.abs(x - median(x)))
    fast = median(np.abs(np.diff(x))) / math.sqrt(2)
    if total <= 0:
        return 0.0
    rho = max(0.0, 1.0 - (fast / total) ** 2)
    return min(RHO_MAX, rho + RHO_PAD / math.sqrt(x.size))


def ar1_sum_factor(rho: float, n: float) -> float:
    """Var(sum of n seconds) / (n · Var(one second)) for an AR(1) of persistence ρ:
    (1+ρ)/(1−ρ) for a long sum, less for a sum no longer than the wander lasts."""
    if rho <= 0:
        return 1.0
    return (1 + rho) / (1 - rho) - 2 * rho * (1 - rho**n) / (n * (1 - rho) ** 2)


def long_run_noise(x: np.ndarray) -> float:
    """The noise a sum of consecutive seconds sees, per second: the per-second noise, or
    more where the series wanders slowly (a busy host's speed drifts by 10% for tens of
    seconds; a CUSUM scaled by the per-second noise alone takes each wander for a step).
    Two readings, the larger kept: the spread an AR(1) gives a sum of ``GUARD_S`` seconds
    (the seconds a step is tested over), which a short reference already gives; and the
    spread of block means of 5, 10 and 20 seconds scaled back to one second (for
    independent seconds all give the same figure), once there are enough blocks to say."""
    sd = noise(x) * math.sqrt(ar1_sum_factor(persistence(x), GUARD_S))
    for b in BLOCKS:
        nb = x.size // b
        if nb < MIN_BLOCKS:
            break
        m = x[x.size - nb * b :].reshape(nb, b).mean(axis=1)
        mad = median(np.abs(m - median(m))) * 1.4826
        sd = max(sd, mad * math.sqrt(b))
    return sd


def _where(recent: deque[tuple[float, float]], med: float) -> float:
    """Where the new level starts: the split of the tested seconds that leaves the least
    absolute deviation, those before it from the reference level and those after from
    their own median. Absolute, not a clipped likelihood ratio: a wild second moves it
    little, and a wobble of a very quiet series weighs by its size (clipped at a few noise
    units it weighed as much as the step: a −34% step in tokens/s, whose series dipped by
    2% a few seconds before it, was placed 6 s early)."""
    ts = [s for s, _ in recent]
    x = np.array([v for _, v in recent])
    before = np.concatenate(([0.0], np.cumsum(np.abs(x - med))))
    cost = [before[i] + float(np.abs(x[i:] - np.median(x[i:])).sum()) for i in range(x.size)]
    return float(ts[int(np.argmin(cost))])


class StepDetector:
    """One metric in one regime: feed it a value per second (``add``), in time order."""

    def __init__(self, metric: str, min_change: float = 0.10, floor: float = 0.005) -> None:
        self.metric = metric
        self.min_change = min_change
        self.floor = floor  # noise is at least this share of the level (a too-quiet series)
        self.ref: deque[float] = deque(maxlen=MAX_REF)
        self.recent: deque[tuple[float, float]] = deque()  # (t, x) within the guard
        self.up = self.dn = 0.0
        self._level: tuple[float, float] | None = None  # (median, noise) of ref, cached
        self._moved = 0  # values moved into the reference since the level was read
        self._sd_before = 0.0  # the noise of the reference before the last step

    def _ref_level(self) -> tuple[float, float] | None:
        if len(self.ref) < MIN_REF:
            return None
        if self._level is None:
            r = np.fromiter(self.ref, dtype=np.float64, count=len(self.ref))
            med = median(r)
            # (after a step the reference is short: the noise it had before still holds,
            # a relative noise does not change with the level)
            self._level = (med, max(long_run_noise(r), self.floor, 0.8 * self._sd_before))
        return self._level

    def add(self, t: float, value: float) -> ChangePoint | None:
        if not value > 0:
            return None  # (every watched figure is positive; a zero second says nothing)
        # on the log scale: the noise of speeds and latencies is multiplicative and skewed
        # (a slow request is slower by a factor), a step is a factor too
        x = math.log(value)
        self.recent.append((t, x))
        # (while the CUSUM is well on its way to an alarm the reference is held: a step
        # moved into it would be taken for noise before it is found)
        held = max(self.up, self.dn) > HOLD * H
        while not held and self.recent and self.recent[0][0] <= t - GUARD_S:
            self.ref.append(self.recent.popleft()[1])
            self._moved += 1
        # the level is read again as the reference grows, every tenth second once it is
        # long (a median of hundreds moves little in a second; this keeps a seek fast)
        if self._moved and (len(self.ref) < 60 or self._moved >= 10):
            self._level = None
            self._moved = 0
        lv = self._ref_level()
        if lv is None:
            return None
        med, sd = lv
        k = K + REF_Z / math.sqrt(len(self.ref))  # (see REF_Z)
        z = min(CLIP, max(-CLIP, (x - med) / sd))
        self.up = max(0.0, self.up + z - k)
        self.dn = max(0.0, self.dn - z - k)
        if self.up <= H and self.dn <= H:
            return None
        score = max(self.up, self.dn)
        t0 = _where(self.recent, med)
        after = float(np.median([v for s, v in self.recent if s >= t0]))
        cp = ChangePoint(self.metric, t0, t, math.exp(med), math.exp(after), score)
        self.up = self.dn = 0.0
        if abs(math.expm1(after - med)) < self.min_change:
            return None  # a small shift of a quiet series: noted by nobody, started over
        # the new level is the reference from here on
        self._sd_before = sd
        self.ref.clear()
        self.ref.extend(v for s, v in self.recent if s >= t0)
        self.recent = deque((s, v) for s, v in self.recent if s > t)
        self._level = None
        self._moved = 0
        return cp


# metric -> (label, bin seconds, least requests in a bin)
WATCHED = {
    "tok_s": ("tokens/s", 1, 0),
    "decode": ("decode speed", 1, 1),
    # TTFT depends on which batch step a request lands in: per second its median flips
    # between levels (measured on the simulator at 32 streams: 112 false alarms a day), so
    # it is judged on five seconds, with five requests at least
    "ttft": ("TTFT p50", 5, 5),
    # a tail needs many requests: p95 of ten seconds, and only with 50 or more in them
    "ttft_p95": ("TTFT p95", 10, 50),
}
RAMP_S = 5.0  # a regime's first seconds are the load settling, not the server
# the first moment a regime's detector may speak: settled, a reference, a tested span
SPEAKS_AFTER_S = RAMP_S + MIN_REF + GUARD_S
LAG_S = 1.0  # a second is complete once the clock is this far past it (batches in flight)


class StepWatch:
    """Every watched metric of every arm, within the current regime.

    A regime is what the user set: an arm, a load, a ladder step; a switch, a pause,
    ``+``/``-`` or a new step starts another (``new_regime``), so that a change the user
    made is never taken for a change of the server."""

    def __init__(self, min_change: float = 0.10) -> None:
        self.min_change = min_change
        self.t0 = 0.0  # seconds: the regime's values count from here
        self.detectors: dict[tuple[str, str], StepDetector] = {}
        # (arm, metric, bin index) -> values of the requests in that bin, as the batches
        # brought them (arrays: a second's values are not turned into Python floats)
        self.bins: dict[tuple[str, str, int], list[np.ndarray]] = {}
        self.tokens: dict[tuple[str, int], int] = {}
        # the clock at the last close: a value whose bin closed by then came late, and is
        # left out (the bin was already judged; a replay leaves it out the same way)
        self.last_close = -1e18

    def new_regime(self, t_s: float) -> None:
        self.t0 = t_s + RAMP_S
        self.last_close = -1e18
        self.detectors.clear()
        self.bins.clear()
        self.tokens.clear()

    def requests(self, arm: str, t_end_s: np.ndarray, decode: np.ndarray, ttft: np.ndarray) -> None:
        if t_end_s.size == 0:
            return
        # (a second's batch: most often all kept, all in open bins, in one bin; those
        # cases cost a comparison of its earliest value, not a pass over every value)
        t_lo = float(t_end_s.min())
        keep = None if t_lo >= self.t0 else t_end_s >= self.t0
        has_ttft = ~np.isnan(ttft)
        for metric, vals, has in (
            ("decode", decode, ~np.isnan(decode)),
            ("ttft", ttft, has_ttft),
            ("ttft_p95", ttft, has_ttft),
        ):
            width = WATCHED[metric][1]
            m = has if keep is None else has & keep
            if (t_lo // width + 1) * width + LAG_S <= self.last_close:  # (a bin judged)
                m = m & ((t_end_s // width + 1) * width + LAG_S > self.last_close)
            if m.all():
                t, vs = t_end_s, vals
            elif m.any():
                t, vs = t_end_s[m], vals[m]
            else:
                continue
            bins = (t // width).astype(np.int64)
            # a batch spans a bin or two: one list extension per bin, not per value
            found = distinct(bins)
            for b in found:
                sel = vs if len(found) == 1 else vs[bins == b]
                # (a copy: the batch's columns are not the bin's to keep)
                self.bins.setdefault((arm, metric, b), []).append(np.array(sel, np.float64))

    def token_bucket(self, arm: str, t_s: float, n: int) -> None:
        if t_s >= self.t0 and int(t_s) + 1 + LAG_S > self.last_close:
            key = (arm, int(t_s))
            self.tokens[key] = self.tokens.get(key, 0) + n

    def close(self, now_s: float) -> list[tuple[str, ChangePoint, str]]:
        """Feed every complete bin to its detector, in time order; returns the changes
        found, each with its arm and what the alert should say about its basis."""
        ready: list[tuple[int, str, str, float]] = []
        self.last_close = now_s
        for (arm, metric, b), parts in list(self.bins.items()):
            width = WATCHED[metric][1]
            if (b + 1) * width + LAG_S <= now_s:
                del self.bins[(arm, metric, b)]
                vals = parts[0] if len(parts) == 1 else np.concatenate(parts)
                if vals.size >= max(1, WATCHED[metric][2]):
                    q = 95 if metric == "ttft_p95" else 50
                    ready.append((b * width, arm, metric, pct(vals, q) or 0.0))
        for (arm, s), n in list(self.tokens.items()):
            if s + 1 + LAG_S <= now_s:
                del self.tokens[(arm, s)]
                ready.append((s, arm, "tok_s", float(n)))
        out = []
        for start, arm, metric, v in sorted(ready):
            det = self.detectors.get((arm, metric))
            if det is None:
                det = self.detectors[(arm, metric)] = StepDetector(metric, self.min_change)
            cp = det.add(float(start), v)
            if cp is not None:
                width = WATCHED[metric][1]
                basis = (
                    "per second"
                    if width == 1
                    else f"p95 of {width} s bins of ≥{WATCHED[metric][2]} requests"
                )
                out.append((arm, cp, basis))
        return out
