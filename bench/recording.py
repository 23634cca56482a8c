"""Recordings: bytes per request, write cost, and how fast a big one is reported/replayed.

    python bench/recording.py [--requests 100000] [--big 1000000]

Requests are synthetic but shaped like real ones (every field a streamed chat request
fills, durations to the microsecond); ticks and probe samples are written at the rates a
live run writes them (4 tick buckets and 3 probe samples a second, 50 requests a second).
The read side runs in a fresh process so its peak memory is its own.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402

from tokmon.model.data.facts import Sample, Tick, Tokens  # noqa: E402
from tokmon.model.data.records import RequestRecord, TokenTick  # noqa: E402
from tokmon.recording.writer import Recorder  # noqa: E402

RATE = 50.0  # requests per second of simulated run


def fake_records(n: int, chunks: bool, seed: int = 1) -> list[RequestRecord]:
    import array

    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = int(i / RATE * 1e9)
        ttft = round(rng.lognormvariate(4.5, 0.3), 3)
        tpot = round(rng.lognormvariate(3.2, 0.1), 3)
        n_tok = rng.randint(128, 384)
        e2e = round(ttft + tpot * (n_tok - 1), 3)
        gaps = array.array("f", [tpot] * (n_tok - 1)).tobytes() if chunks else b""
        out.append(
            RequestRecord(
                rid=i,
                arm="baseline" if (i // 500) % 2 == 0 else "spec",
                outcome="ok",
                t_sched=t,
                t_end=t + int(e2e * 1e6),
                kind="code",
                segment=i // 500,
                t_send=t + 150_000,
                send_lag_ms=0.15,
                connect_ms=None,
                ttfb_ms=round(ttft * 0.2, 3),
                ttft_ms=ttft,
                ttfc_ms=ttft,
                e2e_ms=e2e,
                output_tokens=n_tok,
                prompt_tokens=rng.randint(64, 512),
                chunks=n_tok,
                tpot_ms=tpot,
                decode_tps=round(1000 / tpot, 3),
                max_gap_ms=round(tpot * 1.8, 3),
                finish_reason="length",
                http_status=200,
                gaps=gaps,
            )
        )
    return out


def write(path: str, n: int, chunks: bool) -> tuple[int, float]:
    recs = fake_records(n, chunks)
    r = Recorder(path, chunks=chunks)
    t0 = time.perf_counter()
    r.open(
        {
            "tokmon_version": "bench",
            "settings": {"arms": [{"name": "baseline"}, {"name": "spec"}], "assign": "switch"},
        },
        0,
    )
    per_s = int(RATE)
    for k in range(0, n, per_s):
        sec = k // per_s
        r.records(recs[k : k + per_s])
        r.fact(
            Tokens(tuple(TokenTick(int((sec + q / 4) * 1e9), "baseline", 4000) for q in range(4)))
        )
        for src in ("gpu", "host", "server"):
            r.fact(
                Sample(
                    int(sec * 1e9),
                    src,
                    {"gpu_util": 93.0, "gpu_mem_used_gib": 71.2, "kv_pct": 41.5, "queue": 2.0},
                )
            )
        r.fact(Tick(int((sec + 1) * 1e9)))  # the live run's clock, as a session writes it
    r.end(int(n / RATE * 1e9))
    r.close()
    return os.path.getsize(path), (time.perf_counter() - t0) / n * 1e6


REPORT = r"""
import sys, time
t0 = time.perf_counter()
from tokmon.report.render import render_file
render_file(sys.argv[1], "json")  # as `tokmon report --format json`: streamed
t1 = time.perf_counter()
render_file(sys.argv[1], "text")
t2 = time.perf_counter()
# VmHWM, not ru_maxrss: the latter can carry the parent's peak across fork and exec
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {peak:.0f}")
"""

REPLAY = r"""
import sys, time
t0 = time.perf_counter()
from tokmon.model.data.commands import End
from tokmon.sources.replay import ReplaySource
src = ReplaySource(sys.argv[1])
src.start()
while src.snapshot() is None:
    time.sleep(0.001)
t1 = time.perf_counter()
out = src.command(End())
assert out is not None and src.pos > 0, out  # (a command it did not take would be 0 s)
t2 = time.perf_counter()
src.close()
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {peak:.0f}")
"""


def run(script: str, path: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", script, path], capture_output=True, text=True, check=True
    ).stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    a = ap.parse_args()
    rows = [["recording", "requests", "bytes/request", "write µs/request"]]
    with tempfile.TemporaryDirectory() as d:
        for name, chunks, gz in (
            ("per-request figures", False, False),
            ("with --record-chunks", True, False),
            ("per-request, .gz", False, True),
        ):
            path = os.path.join(d, "r.jsonl" + (".gz" if gz else ""))
            size, us = write(path, a.requests, chunks)
            rows.append([name, f"{a.requests:,}", f"{size / a.requests:.0f}", f"{us:.1f}"])
            os.remove(path)
        print(f"recording size and write cost · {machine()}")
        print(table(rows))
        if a.big:
            path = os.path.join(d, "big.jsonl")
            size, _ = write(path, a.big, False)
            rep = run(REPORT, path)
            rep2 = run(REPORT, path)  # two runs: the machine is shared, quote the better
            if float(rep2[1]) < float(rep[1]):
                rep = rep2
            rpl = run(REPLAY, path)
            # the same with its columnar companion (``tokmon index``): the lines not parsed
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tokmon", "index", path], check=True,
                           capture_output=True)  # fmt: skip
            t_index = time.perf_counter() - t
            col = min((run(REPORT, path) for _ in range(2)), key=lambda r: float(r[1]))
            col_rpl = run(REPLAY, path)
            from tokmon.recording.companion import companion_path

            csize = os.path.getsize(companion_path(path))
            print()
            print(f"a {a.big:,}-request recording ({size / 2**20:.0f} MiB):")
            print(
                table(
                    [
                        ["step", "seconds from start", "peak memory"],
                        ["report --format json (streamed)", rep[0], ""],
                        ["report (text: drift, change points, jitter…)", rep[1], f"{rep[2]} MiB"],
                        ["replay: first frame", rpl[0], ""],
                        ["replay: then jump to the end", rpl[1], f"{rpl[2]} MiB"],
                        [
                            f"with its companion ({csize / 2**20:.0f} MiB, written in "
                            f"{t_index:.1f} s):",
                            "",
                            "",
                        ],
                        ["  report --format json", col[0], ""],
                        ["  report (text)", col[1], f"{col[2]} MiB"],
                        ["  replay: first frame", col_rpl[0], ""],
                        ["  replay: then jump to the end", col_rpl[1], f"{col_rpl[2]} MiB"],
                    ]
                )
            )
            print("targets: under 10 s to start report and replay, under 1 GB of memory")


if __name__ == "__main__":
    main()
