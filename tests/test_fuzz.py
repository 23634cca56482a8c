"""The fuzzer's short, seeded run (#59): each door of ``tests/fuzzing.py`` with a budget
that fits the quick suite, the same cases every run (``derandomize``). The long run is
``bench/fuzz.py`` (docs/reliability.md has its figures)."""

from __future__ import annotations

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
