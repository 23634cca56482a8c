"""The fuzzer's short, seeded run (#59): each door of ``tests/fuzzing.py`` with a budget
that fits the quick suite, the same cases every run (``derandomize``). The long run is
``bench/fuzz.py`` (docs/reliability.md has its figures)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fuzzing import (
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
from hypothesis import HealthCheck, given, settings


def quick(n: int) -> settings:
    return settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@quick(300)
@given(streams())
def test_fuzz_streamed_answers(case):
    stream_case(*case)


@quick(150)
@given(answers())
def test_fuzz_answer_checks(case):
    # (bounded: the slowest adversarial answer takes tens of ms; a stall was 33–80 s)
    assert answer_case(*case) < 2.0


@quick(200)
@given(timings())
def test_fuzz_server_timings(tb):
    split_case(tb)


@quick(200)
@given(frame_bytes())
def test_fuzz_frames(data):
    frame_case(data)


@quick(40)
@given(recording_lines())
def test_fuzz_recording_files(case):
    with tempfile.TemporaryDirectory() as d:
        recording_case(Path(d) / "r.jsonl", *case)


def test_the_cases_the_fuzzer_found_stay_fixed(tmp_path):
    """Each defect the fuzzer found, kept: a request line with ``"arm": null``, an event
    at ``t = 10**400`` in a line that also holds a lone surrogate escape (both read by
    the standard parser: orjson refuses the surrogate), and a ``mean_itl_ms`` of
    ``10**400`` written as an integer."""
    from fuzzing import HEADER

    lines = [
        json.dumps(HEADER),
        *(
            json.dumps(
                {
                    "k": "r",
                    "id": i,
                    "arm": "a",
                    "o": "ok",
                    "ts": i * 10**8,
                    "te": i * 10**8 + 5 * 10**7,
                }
            )
            for i in range(13)
        ),  # fmt: skip
        '{"k": "r", "id": 13, "arm": null, "o": "ok", "ts": 1300000000, "te": 1350000000}',
        '{"k": "e", "t": 1' + "0" * 400 + ', "kind": "", "msg": "\\ud83d\\ude00", "data": null}',
    ]
    recording_case(tmp_path / "r.jsonl", ("\n".join(lines) + "\n").encode(), False, -1)
    body = (b'data: {"choices": [{"index": 0, "delta": {"reasoning": ""}, "finish_reason": '
            b'null}], "metrics": {"queue_time_ms": 0.0, "time_to_first_token_ms": 0.0, '
            b'"mean_itl_ms": 1' + b"0" * 400 + b"}}\n\n")  # fmt: skip
    stream_case(body, [], [0])
