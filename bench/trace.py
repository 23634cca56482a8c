"""Trace replay: is a Mooncake trace sent on its schedule, with the lengths it asks for?

    python bench/trace.py [--requests 200] [--rate 20] [--runs 3] [--speed 1]

Writes a Mooncake-format trace (Poisson arrivals at --rate, input lengths of 1-6 blocks of
512 tokens behind shared blocks in three families, outputs of 16-64 tokens), replays it
against the simulator (its own process, batching model, prefix cache of 16-token blocks)
with ``tokmon run --trace``, and reads the recording: the send lag (scheduled → the last
byte of the request left, the kernel's stamp), how far each request's scheduled time is
from the trace's, how many prompts the server counted at exactly the trace's
input_length, and the server's prefix-cache hit rate. Medians over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402
from _common import machine, table  # noqa: E402

from tokmon.recording.reader import read_recording  # noqa: E402
from tokmon.sim.process import SimProcess  # noqa: E402
from tokmon.sim.server import SimConfig  # noqa: E402


def write_trace(path: str, n: int, rate: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    t, rows = 0.0, []
    for i in range(n):
        t += float(rng.exponential(1000.0 / rate))
        family = [[1, 2], [1, 3], [4]][int(rng.integers(0, 3))]
        own = [10_000 + 10 * i + k for k in range(int(rng.integers(0, 4)))]
        ids = family + own
        rows.append(
            {
                "timestamp": round(t),
                "input_length": (len(ids) - 1) * 512 + int(rng.integers(100, 500)),
                "output_length": int(rng.integers(16, 65)),
                "hash_ids": ids,
            }
        )
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def one(url: str, trace: str, rows: list[dict], speed: float, rec: str) -> dict[str, float]:
    subprocess.run(
        [sys.executable, "-m", "tokmon", "run", "--url", url, "--trace", trace,
         "--trace-speed", str(speed), "--headless", "--ignore-eos", "--record", rec,
         "--overwrite", "--no-gpu", "--status-interval", "1h", "--metrics-interval", "0.5s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600,
    )  # fmt: skip
    r = read_recording(rec)
    rs = sorted(r.records, key=lambda x: (x.t_sched, x.rid))  # (one worker: rid is the index)
    t0 = rs[0].t_sched
    sched = np.array([(x.t_sched - t0) / 1e6 for x in rs])
    want = np.array([(row["timestamp"] - rows[0]["timestamp"]) / speed for row in rows])
    lag = np.array([x.send_lag_ms for x in rs if x.send_lag_ms is not None])
    exact = np.mean(
        [x.prompt_tokens == row["input_length"] for x, row in zip(rs, rows, strict=True)]
    )
    hit = (r.summary or {}).get("arms", {}).get("default", {}).get("prefix_cache_hit_rate")
    return {
        "lag_p50": float(np.percentile(lag, 50)),
        "lag_p99": float(np.percentile(lag, 99)),
        "lag_max": float(lag.max()),
        "sched_err": float(np.abs(sched - want).max()),
        "exact": float(exact),
        "hit": float(hit or 0.0),
        "ok": float(np.mean([x.outcome == "ok" for x in rs])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--speed", type=float, default=1.0)
    a = ap.parse_args()
    print(f"trace replay · {machine()}")
    print(f"{a.requests} requests, Poisson at {a.rate:g}/s, replayed at {a.speed:g}×\n")
    got = []
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.jsonl")
        rows = write_trace(trace, a.requests, a.rate, 11)
        for i in range(a.runs):
            with SimProcess(SimConfig(seed=3 + i)) as sim:  # (a cold prefix cache each run)
                got.append(one(sim.url, trace, rows, a.speed, os.path.join(d, f"r{i}.jsonl")))
    med = {k: float(np.median([g[k] for g in got])) for k in got[0]}
    print(
        table(
            [
                ["figure", "median", "runs"],
                ["send lag p50 (ms)", f"{med['lag_p50']:.2f}", " ".join(f"{g['lag_p50']:.2f}" for g in got)],
                ["send lag p99 (ms)", f"{med['lag_p99']:.2f}", " ".join(f"{g['lag_p99']:.2f}" for g in got)],
                ["send lag max (ms)", f"{med['lag_max']:.2f}", " ".join(f"{g['lag_max']:.2f}" for g in got)],
                ["scheduled vs trace, max (ms)", f"{med['sched_err']:.3f}", ""],
                ["prompt tokens = input_length", f"{med['exact']:.1%}", ""],
                ["requests ok", f"{med['ok']:.1%}", ""],
                ["prefix cache hit (server)", f"{med['hit']:.1%}", " ".join(f"{g['hit']:.1%}" for g in got)],
            ]
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
