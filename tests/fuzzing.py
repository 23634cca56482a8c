"""The hostile-server and hostile-file fuzzer (#59): Hypothesis strategies for what comes
from outside, and the invariants every case must hold.

Five doors, each a target: a streamed answer (SSE bytes in random pieces, events of
hostile shapes: nesting, huge and impossible numbers, escapes, timing objects), an
answer's text against every check, the server's timing of a request against the
client's, a frame of an attached view, and a recording file. The invariants, for every
case: no exception but the one the door raises by design; no figure impossible (a
negative duration, a part larger than its whole, acceptance over 100%); nothing
measured lost (a request that had a first token keeps its TTFT); bounded work (the text
kept, the time a check takes); no raw control byte in any output.

``tests/test_fuzz.py`` runs each target with a short seeded budget in the quick suite;
``bench/fuzz.py`` runs them long (its result is in docs/reliability.md).
"""

from __future__ import annotations

import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tokmon.engine.chunks import MAX_COUNT, MAX_MS, ProtocolError
from tokmon.engine.client import StreamSink, Tick, _finish
from tokmon.engine.sse import SSEError
from tokmon.model.data.records import RequestRecord
from tokmon.model.data.table import RequestTable, record_to_line
from tokmon.model.judge.quality import judge
from tokmon.model.judge.timesplit import TOL_MS, TPOT_TOL_SHARE, TimeSplitReducer
from tokmon.model.workloads.questions import CHECKS
from tokmon.recording import RecordingError
from tokmon.sources import frames
from tokmon.textsafe import dumps

KEEP = 4096  # characters of an answer the fuzzed meter keeps
CONTROL = {*range(0x20), *range(0x7F, 0xA0)} - {0x09, 0x0A}  # (a tab and a newline are text)

# ----------------------------------------------------------------------------- values

HOSTILE_TEXT = st.lists(
    st.sampled_from(
        list('{}[]":,\\ab0123456789 .-e\n\t') + ["\x1b[2J", "\x1b]0;x\x07", "\x9b", "\ud800",
                                                "\u2028", "\x00", "é", "😀", "\x07"]
    ),
    max_size=40,
).map("".join)  # fmt: skip
NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([0, 1, -1, 10**400, MAX_COUNT, MAX_COUNT + 1, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -0.0, 3_000_000.0, MAX_MS, MAX_MS * 2, 1e-300]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, HOSTILE_TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
COUNTS = st.one_of(st.integers(min_value=0, max_value=5000), SCALARS)
MS = st.one_of(st.floats(min_value=0, max_value=5000), st.sampled_from([3_000_000.0]), SCALARS)


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@st.composite
def events(draw: Any) -> bytes:
    """One event's payload: most shaped like a server's chunk with hostile fields, some
    arbitrary JSON, bytes that are no JSON, nesting 0–2,000 deep, ``[DONE]``."""
    kind = draw(st.sampled_from(["chunk"] * 6 + ["json", "raw", "deep", "done", "error"]))
    if kind == "done":
        return b"[DONE]"
    if kind == "raw":
        return draw(st.binary(max_size=64))
    if kind == "deep":
        return _nested(draw(st.integers(min_value=0, max_value=2000))).encode()
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    if kind == "error":
        return json.dumps({"error": draw(JSON)}).encode()
    delta: dict[str, Any] = {}
    if draw(st.booleans()):
        delta["content"] = draw(st.one_of(HOSTILE_TEXT, SCALARS))
    if draw(st.integers(0, 4)) == 0:
        delta[draw(st.sampled_from(["reasoning", "reasoning_content"]))] = draw(HOSTILE_TEXT)
    if draw(st.integers(0, 5)) == 0:
        delta["tool_calls"] = draw(JSON)
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta,
                                        "finish_reason": draw(st.one_of(st.none(), SCALARS))}]}  # fmt: skip
    if draw(st.booleans()):
        obj["usage"] = {"completion_tokens": draw(COUNTS), "prompt_tokens": draw(COUNTS)}
        if draw(st.booleans()):
            obj["usage"]["prompt_tokens_details"] = {"cached_tokens": draw(COUNTS)}
    if draw(st.integers(0, 3)) == 0:
        obj["metrics"] = {"queue_time_ms": draw(MS), "time_to_first_token_ms": draw(MS),
                          "mean_itl_ms": draw(MS)}  # fmt: skip
        if draw(st.booleans()):
            obj["metrics"]["speculative_decoding"] = {
                "num_draft_tokens": draw(COUNTS), "num_accepted_draft_tokens": draw(COUNTS),
                "num_spec_steps": draw(COUNTS), "mean_acceptance_length": draw(MS)}  # fmt: skip
    if draw(st.integers(0, 4)) == 0:
        obj["timings"] = {"predicted_n": draw(COUNTS), "prompt_ms": draw(MS),
                          "predicted_ms": draw(MS), "draft_n": draw(COUNTS),
                          "draft_n_accepted": draw(COUNTS), "cache_n": draw(COUNTS)}  # fmt: skip
    return json.dumps(obj).encode()


@st.composite
def streams(draw: Any) -> tuple[bytes, list[int], list[int]]:
    """An SSE body (events, comments, CRLF or LF, a final event without its blank line),
    where it is cut into reads, and the gaps (ns) between the reads."""
    out = []
    for payload in draw(st.lists(events(), max_size=12)):
        sep = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n\r\n", b"\n\n: ping\n\n"]))
        out.append(b"data: " + payload + sep)
    if draw(st.booleans()):
        out.append(b"data: " + draw(events()))  # (no blank line: the end of the body ends it)
    body = b"".join(out)
    cuts = sorted(set(draw(st.lists(st.integers(0, max(0, len(body))), max_size=8))))
    gaps = draw(st.lists(st.integers(0, 50_000_000), min_size=len(cuts) + 1,
                         max_size=len(cuts) + 1))  # fmt: skip
    return body, cuts, gaps


# ----------------------------------------------------------------------------- targets


def stream_case(body: bytes, cuts: list[int], gaps: list[int]) -> RequestRecord:
    """A streamed answer measured as the engine measures it: the bytes in reads, each
    stamped, then the request's record. Asserts the invariants; returns the record."""
    t_sched = 1_000_000_000
    t_send = t_sched + 1_000_000
    ticks = Tick()
    sink = StreamSink(ticks, "a", 1000.0, KEEP)
    sink.on_head(200, t_send, t_send + 1)
    pieces = [body[i:j] for i, j in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    t = t_send
    outcome, error = "ok", ""
    try:
        for piece, gap in zip(pieces, gaps, strict=True):
            t += gap
            if piece and sink.on_body(t, piece):
                break
        sink.at_end()
        outcome, error = sink.outcome, sink.error
    except (ProtocolError, SSEError) as e:  # the errors the door raises by design
        outcome, error = "protocol", str(e)
    meter = sink.meter
    assert meter is not None
    st_ = {"send": t_send, "headers": t_send + 1, "c0": 0, "c1": 0}
    fields = _finish(meter, t + 1, outcome, st_, t_sched, t_sched, 200, error)
    rec = RequestRecord(rid=1, arm="a", outcome=outcome, t_sched=t_sched, t_end=t + 1, **fields)
    check_record(rec)
    # bounded: the text kept never past its cap
    assert sum(map(len, meter.text_parts)) <= KEEP
    # nothing measured lost: a first token keeps its TTFT (unless its timeline was
    # impossible, which the detail says), whatever came after it
    if meter.t_first_text is not None and not rec.error.startswith("clock: "):
        assert rec.ttft_ms is not None, rec
    # the record as a recording line: strict JSON, no raw control byte
    line = dumps(record_to_line(rec, 0))
    assert not {ord(c) for c in line} & CONTROL
    json.loads(line)
    split_case(RequestTable.from_records([rec]))
    return rec


def check_record(r: RequestRecord) -> None:
    """No figure of a request impossible."""
    assert "internal" not in r.error, r.error  # a defect, counted, but a defect
    for name in ("ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms", "decode_tps", "max_gap_ms",
                 "send_lag_ms", "ttfb_ms", "srv_queue_ms", "srv_prefill_ms", "srv_itl_ms"):  # fmt: skip
        v = getattr(r, name)
        assert v is None or (math.isfinite(v) and v >= 0), (name, v)
    if r.ttft_ms is not None and r.e2e_ms is not None:
        assert r.e2e_ms >= r.ttft_ms - 1e-3
    assert 0 <= r.output_tokens <= MAX_COUNT
    if r.cached_tokens is not None and r.prompt_tokens is not None:
        assert r.cached_tokens <= r.prompt_tokens
    if r.spec_accepted_tokens is not None and r.spec_draft_tokens is not None:
        assert r.spec_accepted_tokens <= r.spec_draft_tokens  # never over 100%
    for name in ("srv_queue_ms", "srv_prefill_ms", "srv_itl_ms"):
        v = getattr(r, name)
        assert v is None or v <= MAX_MS


def split_case(tb: RequestTable) -> None:
    """Where the time goes, of these requests: no part larger than its whole, none
    negative, shares at most 100%."""
    red = TimeSplitReducer()
    ok = np.flatnonzero(tb.cols["outcome"] == tb.code("outcome", "ok"))
    red.requests(tb, ok)
    ttft, tpot = tb.cols["ttft_ms"][ok], tb.cols["tpot_ms"][ok]
    sp = red.view("a", 1.0, ttft[~np.isnan(ttft)], tpot[~np.isnan(tpot)])
    t, p = sp.ttft, sp.tpot
    for v in (t.network, t.queue, t.prefill, t.front, p.server_step, p.stream):
        assert v is None or (math.isfinite(v) and v >= 0), sp
    if t.client is not None:
        for v in (t.queue, t.prefill):
            assert v is None or v <= t.client + TOL_MS, sp
    if p.client is not None and p.server_step is not None:
        # (a request's ITL within its tolerance: max(1 ms, a tenth of its TPOT))
        assert p.server_step <= p.client * (1 + TPOT_TOL_SHARE) + TOL_MS, sp


@st.composite
def timings(draw: Any) -> RequestTable:
    """Requests whose server timing is anything against the client's."""
    n = draw(st.integers(1, 30))
    lines = []
    for i in range(n):
        d: dict[str, Any] = {"id": i, "arm": "a", "o": "ok", "ts": i * 10**9,
                             "te": i * 10**9 + 10**9, "n": draw(st.integers(0, 500))}  # fmt: skip
        for k in ("ttft", "tpot", "sq", "sp", "si"):
            v = draw(st.one_of(st.none(), st.floats(0, 1e7), st.sampled_from([3e6, 0.0, 1e-9])))
            if v is not None:
                d[k] = v
        lines.append(d)
    return RequestTable.from_lines(lines, {})


ANSWER_PIECES = st.sampled_from(["{", "}", '"', "\\", "[", "]", ":", ",", "1", "a", " ",
                                 '{"a":', '"x"', "\\boxed{", "-", ".", "1,000", "\n",
                                 '{"name": "y", "age": 3}'])  # fmt: skip


@st.composite
def answers(draw: Any) -> tuple[str, str, str]:
    """(check, expected answer, a server's answer): long adversarial texts made of a few
    pieces repeated (64 KB of ``{`` froze the engine), or short random ones."""
    check = draw(st.sampled_from(CHECKS))
    want = {"number": "12", "exact": "Paris", "contains": "a b a", "json": '{"a": 1}'}[check]
    if draw(st.booleans()):
        unit = "".join(draw(st.lists(ANSWER_PIECES, min_size=1, max_size=6)))
        text = unit * draw(st.integers(1, 70_000 // len(unit) + 1))
    else:
        text = draw(HOSTILE_TEXT)
    return check, want, text


def answer_case(check: str, want: str, text: str) -> float:
    """A check of an answer: judged or unjudged, never raising; the seconds it took."""
    t0 = time.perf_counter()
    verdict, why = judge(check, want, text)
    took = time.perf_counter() - t0
    assert verdict in (True, False, None)
    assert (verdict is None) == bool(why), (verdict, why)
    return took


@st.composite
def frame_bytes(draw: Any) -> bytes:
    """A frame: a real snapshot's, mutated (bytes flipped, cut, nested, a type named), or
    arbitrary JSON."""
    base = draw(st.sampled_from(FRAMES))
    how = draw(st.sampled_from(["flip", "cut", "json", "nest", "type", "as is"]))
    if how == "flip":
        b = bytearray(base)
        for _ in range(draw(st.integers(1, 8))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    if how == "cut":
        return base[: draw(st.integers(0, len(base)))]
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    if how == "nest":
        return ('{"~t":[' * draw(st.integers(1, 3000))).encode()
    if how == "type":
        name = draw(st.sampled_from(["os.system", "snapshot.Snapshot", "views.Cost", "x.y"]))
        return json.dumps({"~": name, "v": draw(JSON)}).encode()
    return base


def frame_case(data: bytes) -> None:
    try:
        frames.decode(data)
    except frames.FrameError:
        pass


def _frames() -> list[bytes]:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fakes import FakeSource

    return [frames.encode(FakeSource(split=s).snapshot()) for s in (False, True)]


FRAMES = _frames()

HEADER = {"k": "header", "schema_version": 1, "settings": {"arms": [{"name": "a"}]}}
REQUEST_KEYS = ("id", "arm", "o", "ts", "te", "ttft", "tpot", "e2e", "n", "pt", "ct", "sq",
                "sp", "si", "sd", "sa", "sn", "q", "kind", "err", "fr", "stp", "seg", "w")  # fmt: skip


@st.composite
def recording_lines(draw: Any) -> tuple[bytes, bool, int]:
    """A recording: a header, then request lines whose fields are anything, events,
    samples, arbitrary lines; gzip or not; cut or not (bytes kept, -1: whole)."""
    header = dict(HEADER)
    if draw(st.integers(0, 4)) == 0:
        header[draw(st.sampled_from(["slo", "command", "settings", "rotation", "env"]))] = draw(
            JSON
        )
    lines = [json.dumps(header)]
    for i in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["r"] * 5 + ["event", "json", "raw", "end"]))
        if kind == "r":
            d: dict[str, Any] = {"k": "r", "id": i, "arm": "a", "o": "ok", "ts": i * 10**8,
                                 "te": i * 10**8 + 5 * 10**7}  # fmt: skip
            for k in draw(st.lists(st.sampled_from(REQUEST_KEYS), max_size=6)):
                d[k] = draw(SCALARS)
            lines.append(json.dumps(d))
        elif kind == "event":
            lines.append(json.dumps({"k": "e", "t": draw(NUMBERS), "kind": draw(HOSTILE_TEXT),
                                     "msg": draw(HOSTILE_TEXT), "data": draw(JSON)}))  # fmt: skip
        elif kind == "json":
            lines.append(json.dumps(draw(JSON)))
        elif kind == "end":
            lines.append(json.dumps({"k": "end", "t": draw(NUMBERS)}))
        else:
            lines.append(draw(st.binary(max_size=40)).decode("latin-1"))
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    zipped = draw(st.booleans())
    cut = draw(st.one_of(st.just(-1), st.integers(0, 400)))
    return data, zipped, cut


def recording_case(path: Path, data: bytes, zipped: bool, cut: int) -> None:
    """A recording file read, summarised and reported in every format: RecordingError
    (one line) or a report, never another exception; no control byte in any output (as
    the report is written: through the one sink, ``textsafe.write_out``)."""
    import contextlib
    import io

    from tokmon.report.render import render_file
    from tokmon.textsafe import write_out

    raw = gzip.compress(data) if zipped else data
    path.write_bytes(raw if cut < 0 else raw[:cut])
    for fmt in ("text", "json", "csv", "md"):
        try:
            doc, _ = render_file(str(path), fmt)
        except RecordingError:
            return
        with contextlib.redirect_stdout(io.StringIO()) as out:
            write_out(doc)
        text = out.getvalue()
        if fmt == "csv":
            text = text.replace("\r\n", "\n")  # (CSV's own line ends, RFC 4180)
        assert not {ord(c) for c in text} & CONTROL, fmt
