"""A day-long recording, written in the recording's own format, then reported.

    python bench/day_recording.py [--hours 24] [--rate 200] [--rotate 1h] [--keep DIR]

The generator writes what a live soak writes, a second at a time: the requests that
ended in that second (two arms; spec decodes 1.3× as fast), the token buckets, a GPU,
host and server sample, and the tick. The first hour is a ladder (concurrency 8, 16, 32,
64, 15 minutes each, then its end); from then on the arms switch every 30 s, and a marker
is dropped every hour. Request lines are formatted directly (the keys and encodings of
``record_to_line``) and compressed at zlib level 1: a day is 17 million requests, and
the point is to time the reader, not the writer (``bench/recording.py`` times that).

Then ``tokmon report`` (text: the summary, segments, drift, change points, jitter) runs
in a fresh process, its wall time and peak memory (VmHWM) measured; two runs, the
better quoted (the machine is shared). Target (#41): ≤ 60 s and ≤ 1 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, table  # noqa: E402

ARMS = ("baseline", "spec")
LADDER = (8, 16, 32, 64)
STEP_S = 900
SWITCH_S = 30


class Out:
    """One gzip member per part; a new part every ``rotate_s`` (0: one file)."""

    def __init__(self, path: str, rotate_s: int, header: dict) -> None:
        self.path, self.rotate_s, self.header = path, rotate_s, header
        self.part = 0
        self.f = None
        self.z = None
        self.state: dict[str, str] = {}  # the last event of each carried kind
        self.sent_max = 0  # the last request sent in the parts written (as the writer's)

    def begin(self, t_ns: int) -> None:
        from tokmon.recording.parts import part_path

        self.end_part()
        self.part += 1
        self.f = open(part_path(self.path, self.part), "wb")  # noqa: SIM115
        self.z = zlib.compressobj(1, zlib.DEFLATED, 31)
        h = dict(self.header)
        if self.rotate_s:
            h["rotation"] = {"part": self.part, "run": "bench", "from_ns": t_ns,
                             "sent_max": self.sent_max}  # fmt: skip
        lines = [json.dumps(h, separators=(",", ":"))]
        if self.part > 1:
            for line in sorted(self.state.values(), key=lambda s: json.loads(s)["t"]):
                lines.append(line[:-1] + ',"carried":true}')
        self.write(lines)

    def write(self, lines: list[str]) -> None:
        data = self.z.compress(("\n".join(lines) + "\n").encode())
        self.f.write(data)

    def event(self, t: int, kind: str, msg: str, data: dict) -> str:
        line = json.dumps({"k": "e", "t": t, "kind": kind, "msg": msg, "data": data, "wall": 0},
                          separators=(",", ":"))  # fmt: skip
        if kind in ("arm", "level", "step", "ladder", "pause"):
            self.state[kind] = line
        return line

    def end_part(self) -> None:
        if self.f is not None:
            self.f.write(self.z.flush(zlib.Z_FINISH))
            self.f.close()


def generate(path: str, hours: float, rate: int, rotate_s: int, seed: int = 1) -> int:
    rng = np.random.default_rng(seed)
    header = {"k": "header", "schema_version": 1, "tokmon_version": "bench",
              "settings": {"arms": [{"name": a} for a in ARMS], "assign": "switch",
                           "concurrency": 32}, "t0_ns": 0, "t0_perf_ns": 0}  # fmt: skip
    out = Out(path, rotate_s, header)
    out.begin(0)
    seconds = int(hours * 3600)
    rid = 0
    seg, arm, step = 0, 0, 0
    n_req = 0
    lines: list[str] = []
    lines.append(out.event(0, "step", "step 1: concurrency 8", {"step": 0, "arm": ARMS[0],
                 "value": "8", "warm_s": 10, "param": "concurrency"}))  # fmt: skip
    for s in range(seconds):
        t = s * 1_000_000_000
        if rotate_s and s and s % rotate_s == 0:
            out.write(lines)
            lines = []
            out.begin(t)
        ladder = s < STEP_S * len(LADDER)
        if ladder and s and s % STEP_S == 0:
            step = s // STEP_S
            lines.append(out.event(t, "step", f"step {step + 1}: concurrency {LADDER[step]}",
                                   {"step": step, "arm": ARMS[0], "value": str(LADDER[step]),
                                    "warm_s": 10, "param": "concurrency"}))  # fmt: skip
        elif s == STEP_S * len(LADDER):
            lines.append(out.event(t, "ladder", "ladder done", {"reason": "done"}))
            step = -1
        elif not ladder and (s - STEP_S * len(LADDER)) % SWITCH_S == 0 and s:
            seg += 1
            arm = 1 - arm
            lines.append(out.event(t, "arm", f"arm → {ARMS[arm]}", {"arm": ARMS[arm],
                                                                     "segment": seg}))  # fmt: skip
        if s % 3600 == 1800:
            lines.append(out.event(t, "marker", f"hour {s // 3600} half way", {}))
        # the requests that ended in this second
        n = rate
        te = t + np.sort(rng.integers(0, 1_000_000_000, n))
        ttft = rng.lognormal(np.log(90.0), 0.35, n)
        tpot = rng.lognormal(np.log(12.0 if arm == 0 else 9.2), 0.15, n)
        ntok = rng.integers(64, 320, n)
        e2e = ttft + tpot * (ntok - 1)
        ts = te - (e2e * 1e6).astype(np.int64)
        pt = rng.integers(64, 1024, n)
        kinds = np.where(rng.random(n) < 0.5, "code", "chat")
        a = ARMS[arm]
        stp = f',"stp":{step}' if step >= 0 else ""
        sg = f',"seg":{seg}' if seg else ""
        for i, (ts_, te_, k_, tt, e2, nt, p, tp) in enumerate(
            zip(
                ts.tolist(),
                te.tolist(),
                kinds.tolist(),
                np.round(ttft, 3).tolist(),
                np.round(e2e, 3).tolist(),
                ntok.tolist(),
                pt.tolist(),
                np.round(tpot, 3).tolist(),
                strict=True,
            )  # fmt: skip
        ):
            lines.append(
                f'{{"k":"r","id":{rid + i},"arm":"{a}","o":"ok","ts":{ts_},"te":{te_},'
                f'"kind":"{k_}"{sg}{stp},"tsd":{ts_ + 150000},"lag":0.15,"ttfb":{round(tt * 0.2, 3)},'
                f'"ttft":{tt},"ttfc":{tt},"e2e":{e2},"n":{nt},"pt":{p},"ch":{nt},'
                f'"tpot":{tp},"dec":{round(1000 / tp, 3)},"mg":{round(tp * 1.8, 3)},'
                f'"fr":"length","hs":200}}'
            )
        rid += n
        n_req += n
        out.sent_max = max(out.sent_max, int(ts.max()))
        tok = int(ntok.sum())
        lines.append('{"k":"tok","v":[' + ",".join(
            f'[{t + q * 250_000_000},"{a}",{tok // 4}]' for q in range(4)) + "]}")  # fmt: skip
        lines.append(f'{{"k":"p","src":"gpu","t":{t},"v":{{"gpu_util":93.0,'
                     f'"gpu_mem_used_gib":71.2,"power_w":{650 + (s % 7)}.0}}}}')  # fmt: skip
        lines.append(f'{{"k":"p","src":"host","t":{t},"v":{{"cpu_pct":12.0,"self_rss_mib":90.0}}}}')
        lines.append(f'{{"k":"p","src":"server","t":{t},"v":{{"kv_pct":41.5,"queue":2.0}}}}')
        lines.append(f'{{"k":"tick","t":{t + 1_000_000_000}}}')
        if len(lines) > 20_000:
            out.write(lines)
            lines = []
    end = seconds * 1_000_000_000
    lines.append(f'{{"k":"tick","t":{end},"final":true}}')
    lines.append(f'{{"k":"end","t":{end}}}')
    out.write(lines)
    out.end_part()
    return n_req


REPORT = r"""
import sys, time
t0 = time.perf_counter()
from tokmon.report.render import render_file
from tokmon.recording.window import Window
w = None if sys.argv[2] == "-" else Window(*(int(float(x) * 1e9) for x in sys.argv[2].split(":")))
text, rec = render_file(sys.argv[1], "text", window=w)
t1 = time.perf_counter()
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(f"{t1 - t0:.1f} {peak:.0f} {rec.lines}")
"""

REPLAY = r"""
import sys, time
t0 = time.perf_counter()
from tokmon.recording import Window
from tokmon.sources.replay import ReplaySource
w = Window(*(int(float(x) * 1e9) for x in sys.argv[2].split(":")))
src = ReplaySource(sys.argv[1], window=w)
src.start()
assert src.snapshot() is not None
t1 = time.perf_counter()
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(f"{t1 - t0:.1f} {peak:.0f} {src.rec.requests.n}")
src.close()
"""

# The whole run replayed as it is read: the first frame (the replay opened, its first
# second drawn), then a seek to hour 18 (the part in force there opened in the run's
# state), then a minute on from there (folded on the way).
REPLAY_DAY = r"""
import sys, time
from tokmon.model.data.commands import Seek
from tokmon.sources.replay import ReplaySource
t0 = time.perf_counter()
src = ReplaySource(sys.argv[1])
src.playing = False
src.start()
src.seek_to(1_000_000_000)
assert src.snapshot() is not None and src.streamed
t1 = time.perf_counter()
src.seek_to(int(float(sys.argv[2]) * 1e9))
assert src.snapshot() is not None
t2 = time.perf_counter()
src.command(Seek(60))
assert src.snapshot() is not None
t3 = time.perf_counter()
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(f"{t1 - t0:.1f} {t2 - t1:.1f} {t3 - t2:.1f} {peak:.0f} {src.player.start / 3600e9:.2f}")
src.close()
"""


def _paths(mode: str) -> list[tuple[str, bool]]:
    """The report's paths timed: (label, with companions)."""
    if mode == "both":
        return [(" · JSON", False), (" · columns", True)]
    return [("", mode == "on")]


class _companions_aside:
    """The companions moved out of the reader's way for a while (``away``: else kept)."""

    def __init__(self, path: str, away: bool) -> None:
        from tokmon.recording.companion import companion_path
        from tokmon.recording.parts import part_numbers, part_path

        parts = [path, *(part_path(path, k) for k in sorted(part_numbers(path)))]
        self.found = [c for c in map(companion_path, parts) if os.path.exists(c)] if away else []

    def __enter__(self) -> None:
        for c in self.found:
            os.rename(c, c + ".aside")

    def __exit__(self, *exc: object) -> None:
        for c in self.found:
            os.rename(c + ".aside", c)


def companions(path: str, mode: str) -> str:
    """Write the parts' companions (``tokmon index``) where the run reads them, timed:
    its wall and CPU time (the recorder pays the CPU as each part closes, in a process of
    its own), and their size against the parts', and against a part recompressed as the
    recorder writes it (gzip level 6; this generator writes level 1)."""
    if mode == "off":
        return ""
    import resource

    from tokmon.recording.companion import companion_path
    from tokmon.recording.parts import part_numbers, part_path

    parts = [path, *(part_path(path, k) for k in sorted(part_numbers(path)))]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tokmon", "index", path], check=True,
                   capture_output=True)  # fmt: skip
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cols = sum(os.path.getsize(companion_path(p)) for p in parts)
    jsonl = sum(os.path.getsize(p) for p in parts)
    import gzip

    with gzip.open(parts[0], "rb") as f:
        body = f.read()
    level6 = len(zlib.compress(body, 6)) / os.path.getsize(parts[0]) * jsonl
    hours = max(len(parts), 1)
    return (
        f"companions: {len(parts)} written by `tokmon index` in {wall:.1f} s wall, "
        f"{cpu:.1f} CPU-s ({cpu / hours:.1f} CPU-s a part: "
        f"{100 * cpu / hours / 3600:.2f}% of a core for an hour's part); "
        f"{cols / 2**20:.0f} MiB = {100 * cols / jsonl:.0f}% of the parts as written here "
        f"(gzip 1), {100 * cols / level6:.0f}% of them at the recorder's gzip 6"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--rotate", default="1h", help="a part every DURATION (0: one file)")
    ap.add_argument("--keep", default=None, help="write (or reuse) the recording in DIR")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument(
        "--window",
        default=None,
        metavar="FROM-TO",
        help="also report this window of the run (18h-19h): report --from/--to",
    )
    ap.add_argument("--window-only", action="store_true", help="only the window")
    ap.add_argument(
        "--replay-from",
        default=None,
        metavar="TIME",
        help="also time a replay's first frame from TIME (18h): replay --from",
    )
    ap.add_argument(
        "--replay-seek",
        default=None,
        metavar="TIME",
        help="also time a replay of the whole run: its first frame, a seek to TIME (18h) "
        "and a minute on from there",
    )
    ap.add_argument(
        "--companions",
        choices=["off", "on", "both"],
        default="off",
        help="report without the parts' columnar companions (off), with them (on: "
        "written first by `tokmon index`, timed), or both, side by side",
    )
    a = ap.parse_args()
    from tokmon.model.workloads.workload import parse_duration

    rotate_s = int(parse_duration(a.rotate)) if a.rotate not in ("0", "off") else 0
    d = a.keep or tempfile.mkdtemp(prefix="tokmon-day-")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"day-{a.hours:g}h-{a.rate}.jsonl.gz")
    if not os.path.exists(path):
        t = time.perf_counter()
        n = generate(path, a.hours, a.rate, rotate_s)
        print(f"wrote {n:,} requests in {time.perf_counter() - t:.0f} s")
    from tokmon.recording.parts import run_bytes

    size = run_bytes(path)

    def timed(window: str, script: str = REPORT) -> list[str]:
        """The report's median time of ``runs`` runs, and its peak memory."""
        runs = [subprocess.run([sys.executable, "-c", script, path, window],
                               capture_output=True, text=True, check=True).stdout.split()
                for _ in range(a.runs)]  # fmt: skip
        runs.sort(key=lambda r: float(r[0]))
        return runs[len(runs) // 2]

    n = int(a.hours * 3600 * a.rate)
    name = os.path.basename(path) + (f" ({a.rotate} parts)" if rotate_s else "")
    rows = [["recording", "requests", "size", "time", "peak memory"]]
    index_note = companions(path, a.companions)
    if not a.window_only:
        for label, on in _paths(a.companions):
            with _companions_aside(path, not on):
                whole = timed("-")
            rows.append([name + label, f"{n:,}", f"{size / 2**20:.0f} MiB", f"{whole[0]} s",
                         f"{whole[1]} MiB"])  # fmt: skip
    # the window and the replays: with the companions unless they are off (then aside)
    with _companions_aside(path, a.companions == "off"):
        if a.window:
            lo, hi = (parse_duration(x) for x in a.window.split("-"))
            part = timed(f"{lo}:{hi}")
            rows.append([f"  --from {a.window.replace('-', ' --to ')}", f"{int((hi - lo) * a.rate):,}",
                         "", f"{part[0]} s", f"{part[1]} MiB"])  # fmt: skip
        if a.replay_from:
            span = [parse_duration(x) for x in a.replay_from.split("-")]
            first = timed(":".join(map(str, span)), REPLAY)
            rows.append([f"  replay --from {a.replay_from.replace('-', ' --to ')}: first frame", f"{int(first[2]):,} held",
                         "", f"{first[0]} s", f"{first[1]} MiB"])  # fmt: skip
        if a.replay_seek:
            at = parse_duration(a.replay_seek)
            r = timed(str(at), REPLAY_DAY)
            rows.append(["  replay: first frame", "", "", f"{r[0]} s", f"{r[3]} MiB"])
            rows.append([f"  replay: seek to {a.replay_seek} (figures from {float(r[4]):g} h)", "",
                         "", f"{r[1]} s", ""])  # fmt: skip
            rows.append(["  replay: then a minute on", "", "", f"{r[2]} s", ""])
    print(f"a {a.hours:g}-hour recording at {a.rate} req/s · {machine()}")
    print(table(rows))
    if index_note:
        print(index_note)
    print(
        "target: report ≤ 60 s and ≤ 1 GB; replay first frame ≤ 5 s and a seek to hour 18 "
        "≤ 2 s (24 h at 200 req/s)"
    )
    if not a.keep:
        import shutil

        shutil.rmtree(d)


if __name__ == "__main__":
    main()
