"""Hostile answers against a live run: does it stay responsive and bounded?

    python bench/hostile_answers.py

Three servers, each answering every request with one attack: 64 KB of ``{`` (to quality
probes: the answer checker rescanned it for 33–80 s on the engine's event loop), a
10 MB answer (held whole by the engine), an event nested 1,200 deep (a RecursionError
that lost the request's timing). For each: a headless run of quality probes and plain
requests, the engine's peak RSS while it runs, then SIGTERM and the seconds until tokmon
exits with its summary, and whether every request kept its TTFT. Targets (#59): exit
within 5 s of SIGTERM, engine RSS under 200 MB, every request timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostile import Hostile, sse_events, text_event, usage_event  # noqa: E402

from tokmon.recording.reader import read_recording  # noqa: E402

ATTACKS = {
    "64 KB of {": lambda: sse_events(text_event("{" * 65_536, "stop"), usage_event(96), "[DONE]"),
    "10 MB answer": lambda: sse_events(
        *[text_event("x" * 100_000) for _ in range(100)], usage_event(100), "[DONE]"
    ),
    "1,200 deep": lambda: sse_events(
        text_event("hi"), '{"a":' * 1200 + "1" + "}" * 1200, usage_event(2), "[DONE]"
    ),
}


def one(i: int, events: list[bytes], d: Path) -> dict[str, object]:
    rec, summ = d / f"{i}.jsonl", d / f"{i}.json"
    with Hostile() as srv:
        srv.events = events
        p = subprocess.Popen(
            [sys.executable, "-m", "tokmon", "run", "--url", srv.url, "--headless", "--no-gpu",
             "--no-env", "-c", "4", "-d", "5m", "--quality-probes", "50%", "--record",
             str(rec), "--summary-json", str(summ), "--status-interval", "1s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        peak = 0
        t_end = time.monotonic() + 15
        while time.monotonic() < t_end:  # 15 s of the attack, the engines' RSS sampled
            try:
                kids = psutil.Process(p.pid).children(recursive=True)
                peak = max([peak, *(k.memory_info().rss for k in kids)])
            except psutil.Error:
                pass
            time.sleep(0.2)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        took = time.monotonic() - t0
        if not rec.exists():
            raise SystemExit(f"the run failed: {p.stderr.read() if p.stderr else ''}")
    records = read_recording(str(rec)).records
    timed = sum(1 for r in records if r.ttft_ms is not None)
    return {
        "exit": p.returncode,
        "exit_s": round(took, 2),
        "summary": summ.exists() and bool(json.loads(summ.read_text())["arms"]),
        "engine_rss_mb": round(peak / 2**20, 1),
        "requests": len(records),
        "timed": timed,
    }


def main() -> int:
    d = Path(tempfile.mkdtemp(prefix="tokmon-hostile-"))
    print(f"{'attack':<14} {'exit':>4} {'SIGTERM→exit':>13} {'summary':>8} "
          f"{'engine RSS':>11} {'requests':>9} {'with TTFT':>10}")  # fmt: skip
    for i, (name, make) in enumerate(ATTACKS.items()):
        r = one(i, make(), d)
        print(f"{name:<14} {r['exit']:>4} {r['exit_s']:>11.2f} s {str(r['summary']):>8} "
              f"{r['engine_rss_mb']:>8.1f} MB {r['requests']:>9} {r['timed']:>10}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
