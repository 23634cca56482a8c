"""Step alerts: how soon a step is flagged, how well it is placed, how often flat load
raises one. Prints the table the README quotes.

    python bench/alerts.py [--hours 24] [--trials 200]          # the stored noise
    python bench/alerts.py --record [--seconds 150]              # the simulator's again
    python bench/alerts.py --vllm [--seconds 900]                # vLLM's (CPU) again

The noise is real: per-second figures (exactly the values the live detector takes) of flat
runs against the simulator at 4, 32 and 256 streams and against vLLM on CPU (``--vllm``,
once ``scripts/real-engines.sh setup`` has installed it), recorded and folded
by tokmon. Long series are made from them by a block bootstrap (blocks of 20 s keep the
noise's correlation in time): false alarms are counted over ``--hours`` of flat series per
metric (a long regime: the detector knows the noise); the recorded series is also
watched as ten-minute regimes from their start, where the detector is still learning the
noise (``cold_starts``: a block bootstrap would splice the wander into steps there); steps
of −20% and −50% are put at a random second of a flat series and the detector's delay and
placement measured over ``--trials`` trials.

The series are kept in ``bench/data/noise.npz`` (a few kilobytes) so that a change to the
detector is judged on the same noise in seconds; ``--record``/``--vllm`` measure them again
(a machine's noise is its own: record on a quiet host, and say which). The store also
keeps an earlier vLLM recording made while the host was busier ("host busy"): a worst
case that ``--vllm`` leaves in place.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402

import tokmon.model.judge.changepoint as cp  # noqa: E402
from tokmon.model.workloads.arms import Arm  # noqa: E402
from tokmon.model.workloads.config import RunConfig  # noqa: E402
from tokmon.model.workloads.workload import LengthDist  # noqa: E402
from tokmon.recording.play import fold_report, held  # noqa: E402
from tokmon.recording.reader import read_recording  # noqa: E402
from tokmon.recording.writer import Recorder  # noqa: E402
from tokmon.sources.live import LiveSession  # noqa: E402

METRICS = ("decode", "tok_s", "ttft")
BLOCK = 20
STORE = Path(__file__).parent / "data" / "noise.npz"
WARM_S = 30  # the first seconds of each recording: the load settling
DRAIN_S = 10  # its last seconds: the run's end draining the streams (not the server)
COLD_S = 600  # a flat regime watched from its start: ten minutes


def record(url: str, model: str, streams: int, seconds: float, path: str, max_tokens: str) -> None:
    # output lengths vary (as a real workload's do): streams that all end together would
    # keep the server in lock-step waves, which no real server sees for long
    cfg = RunConfig(
        arms=(Arm("a", url=url, model=model),),
        concurrency=streams,
        duration_s=seconds,
        max_tokens=LengthDist.parse(max_tokens),
        ignore_eos=True,
        seed=streams,
    )
    s = LiveSession(cfg, target=url, model=model, recorder=Recorder(path), header={})
    s.start()
    s.wait(seconds + 120)
    s.close()


def series(path: str) -> dict[str, np.ndarray]:
    """The per-second values the detectors took while folding the recording."""
    got: dict[str, list[tuple[float, float]]] = {m: [] for m in METRICS}

    class Taking(cp.StepDetector):
        def add(self, t: float, value: float) -> cp.ChangePoint | None:
            if self.metric in got:
                got[self.metric].append((t, value))
            return super().add(t, value)

    real = cp.StepDetector
    cp.StepDetector = Taking  # type: ignore[misc]
    try:
        fold_report(held(read_recording(path)))
    finally:
        cp.StepDetector = real  # type: ignore[misc]
    out = {}
    for m, tv in got.items():
        if tv:
            x = np.array([v for t, v in tv if tv[0][0] + WARM_S <= t < tv[-1][0] - DRAIN_S])
            if x.size >= 3 * BLOCK:
                out[m] = x
    return out


def bootstrap(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    starts = rng.integers(0, x.size - BLOCK, n // BLOCK + 1)
    return np.concatenate([x[s : s + BLOCK] for s in starts])[:n]


def run(x: np.ndarray, metric: str) -> list[cp.ChangePoint]:
    """The detector on a series of bins, each at its time (a bin's width apart)."""
    w = cp.WATCHED[metric][1]
    d = cp.StepDetector(metric)
    return [c for i, v in enumerate(x.tolist()) if (c := d.add(float(i * w), v))]


def false_alarms(x: np.ndarray, metric: str, hours: float, rng: np.random.Generator) -> float:
    w = cp.WATCHED[metric][1]
    n = int(hours * 3600) // w
    per = 6 * 3600 // w  # six hours a series: a long regime
    alarms = 0
    for lo in range(0, n, per):
        alarms += len(run(bootstrap(x, min(per, n - lo), rng), metric))
    return alarms / hours * 24


def cold_starts(x: np.ndarray, metric: str) -> tuple[int, int]:
    """Alarms in flat ten-minute regimes watched from their start (the detector learning
    the noise as it goes): the recorded series itself, from every sixth second forward
    and backward (repeated to ten minutes where it is shorter), so its wander is the
    recording's own, not pieced together. Returns (alarms, regimes)."""
    w = cp.WATCHED[metric][1]
    alarms = regimes = 0
    for s in range(0, x.size, max(1, 6 // w)):
        for y in (np.roll(x, -s), np.roll(x[::-1], -s)):
            alarms += len(run(np.resize(y, COLD_S // w), metric))
            regimes += 1
    return alarms, regimes


def steps(
    x: np.ndarray, metric: str, drop: float, trials: int, rng: np.random.Generator
) -> tuple[list[float], list[float], int]:
    delays, where, missed = [], [], 0
    w = cp.WATCHED[metric][1]
    for _ in range(trials):
        y = bootstrap(x, 600 // w, rng)
        at = int(rng.integers(150, 400)) // w
        y[at:] *= 1 - drop
        found = [c for c in run(y, metric) if c.t_found >= (at - 5) * w]
        early = run(y[:at], metric)  # an alarm before the step: a false one
        if early or not found:
            missed += 1
            continue
        delays.append(found[0].t_found - at * w)
        where.append(abs(found[0].t - at * w))
    return delays, where, missed


def measure(seconds: float, sim: bool, vllm: bool) -> dict[str, np.ndarray]:
    """Flat runs recorded and folded: {"source|metric": per-second values}."""
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as d:
        from tokmon.sim.model import PROFILES
        from tokmon.sim.process import SimProcess
        from tokmon.sim.server import SimConfig

        sources: list[tuple[str, str]] = []
        for streams in (4, 32, 256) if sim else ():
            path = os.path.join(d, f"sim{streams}.jsonl")
            with SimProcess(SimConfig(profile=PROFILES["27b-h100"], seed=streams)) as sim:
                record(sim.url, "sim-27b", streams, seconds + WARM_S, path, "64:256")
            sources.append((f"simulator, {streams} streams", path))
        if vllm:
            from server_load import start_vllm

            proc, url = start_vllm(Path(d) / "vllm.log")
            try:
                path = os.path.join(d, "vllm.jsonl")
                record(url + "/v1", "tiny", 4, seconds + WARM_S, path, "32:96")
                sources.append(("vLLM 0.32 CPU (tiny-llama), 4 streams", path))
            finally:
                proc.kill()
        for name, path in sources:
            for metric, x in series(path).items():
                out[f"{name}|{metric}"] = x
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true", help="the simulator's noise again")
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--vllm", action="store_true", help="vLLM's noise (on CPU) again")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    if a.record or a.vllm or not STORE.exists():
        got = measure(a.seconds, a.record or not STORE.exists(), a.vllm)
        if STORE.exists():  # keep what this run did not measure again (vLLM's, say)
            with np.load(STORE) as old:
                got = {**{k: old[k] for k in old.files}, **got}
        STORE.parent.mkdir(exist_ok=True)
        np.savez_compressed(STORE, **got)
    with np.load(STORE) as f:
        stored = {k: f[k] for k in f.files}
    rows = []
    for key, x in stored.items():
        name, metric = key.split("|")
        noise = float(np.median(np.abs(np.diff(np.log(x))))) * 1.4826 / np.sqrt(2)
        fa = false_alarms(x, metric, a.hours, rng)
        n, runs = cold_starts(x, metric)
        cold = f"{n} in {runs} ({n / (runs * COLD_S) * 86400:.1f}/day)"
        cells = [name, metric, f"{x.size} s", f"{noise:.1%}", f"{fa:.2f}", cold]
        for drop in (0.2, 0.5):
            dl, wh, miss = steps(x, metric, drop, a.trials, rng)
            if dl:
                cells += [
                    f"{np.median(dl):.0f} / {np.percentile(dl, 95):.0f}",
                    f"{np.percentile(wh, 95):.0f}",
                    f"{miss}/{a.trials}",
                ]
            else:
                cells += ["—", "—", f"{miss}/{a.trials}"]
        rows.append(cells)
    print(f"step alerts: delay, placement, false alarms · {machine()}")
    print(
        table(
            [["noise from", "metric", "measured", "noise/s", "false alarms /24 h",
              "10-min regimes from cold: alarms",
              "−20%: delay s p50/p95", "place ±s p95", "missed",
              "−50%: delay s p50/p95", "place ±s p95", "missed"], *rows]
        )
    )  # fmt: skip
    print("targets: delay p50 ≤ 30 s, p95 ≤ 45 s; placed within ±5 s; ≤ 1 false alarm a day")


if __name__ == "__main__":
    main()
