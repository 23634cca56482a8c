"""The fuzzer's long run: every door of ``tests/fuzzing.py`` with a large budget.

    python bench/fuzz.py                      # 100,000 cases in all, seed 1
    python bench/fuzz.py --cases 20000 --seed 7

Prints, per door, the cases run, what they cost, the slowest case, and any invariant
broken (with the case, shrunk); exits 1 if one was. Its figures are in
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzzing import (  # noqa: E402
    answer_case,
    answers,
    frame_bytes,
    frame_case,
    recording_case,
    recording_lines,
    split_case,
    stream_case,
    streams,
    timings,
)
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

# door -> (share of the cases, strategy, the case)
TMP = Path(tempfile.mkdtemp(prefix="tokmon-fuzz-"))
DOORS: dict[str, tuple[float, Any, Any]] = {
    "streamed answers": (0.40, streams(), lambda c: stream_case(*c)),
    "answer checks": (0.15, answers(), lambda c: answer_case(*c)),
    "server timings": (0.15, timings(), split_case),
    "frames": (0.20, frame_bytes(), frame_case),
    "recording files": (0.10, recording_lines(), lambda c: recording_case(TMP / "r.jsonl", *c)),
}


def run_door(name: str, n: int, at: int) -> tuple[int, float, float, str]:
    _, strategy, case = DOORS[name]
    count = [0]
    slowest = [0.0]

    @seed(at)
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def door(c: Any) -> None:
        t0 = time.perf_counter()
        case(c)
        slowest[0] = max(slowest[0], time.perf_counter() - t0)
        count[0] += 1

    t0 = time.perf_counter()
    broke = ""
    try:
        door()
    except Exception:  # an invariant broken: the shrunk case and what it broke
        broke = traceback.format_exc(limit=3)
    return count[0], time.perf_counter() - t0, slowest[0], broke


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000, help="cases in all (default 100,000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"{'door':<18} {'cases':>8} {'seconds':>8} {'cases/s':>8} {'slowest':>9}  result")
    total = 0
    failed = False
    for name, (share, _, _) in DOORS.items():
        n = max(1, round(args.cases * share))
        count, took, slowest, broke = run_door(name, n, args.seed)
        total += count
        result = "no invariant broken" if not broke else "BROKEN"
        print(f"{name:<18} {count:>8,} {took:>8.1f} {count / took:>8.0f} "
              f"{1000 * slowest:>7.1f}ms  {result}", flush=True)  # fmt: skip
        if broke:
            failed = True
            print(broke)
    print(f"{'all':<18} {total:>8,}   (seed {args.seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
