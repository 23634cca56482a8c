"""An earlier run as a load (``tokmon run --replay-load FILE``): its requests at their
times, with their kinds and lengths, and the very prompts where the run recorded them
(``--record-prompts``), so two servers can be compared under the identical load."""

from __future__ import annotations

import numpy as np

from tokmon.model.workloads.trace import MAX_TOKENS, MOONCAKE_BLOCK, Trace, TraceEntry, make_trace
from tokmon.model.workloads.workload import Prompt, WorkloadError
from tokmon.recording import RecordingError
from tokmon.recording.reader import read_recording


def trace_of_recording(path: str, speed: float = 1.0) -> Trace:
    """The requests of a recording as a trace. Lengths: what each request asked for
    (else what the server counted; else the recording's median). Raises WorkloadError
    with one line."""
    try:
        rec = read_recording(path)
    except RecordingError as e:
        raise WorkloadError(f"--replay-load: {e}") from None
    tb = rec.requests
    if not tb.n:
        raise WorkloadError(f"--replay-load: {path} holds no requests")
    c = tb.cols
    kinds = tb.vocab.get("kind", [])

    def lengths(asked: str, counted: str) -> np.ndarray:
        v = np.where(np.isnan(c[asked]), c[counted].astype(np.float64), c[asked])
        known = v[np.isfinite(v) & (v >= 1)]
        fill = float(np.median(known)) if known.size else 128.0
        return np.where(np.isfinite(v) & (v >= 1), v, fill)

    ins = lengths("prompt_tokens_asked", "prompt_tokens")
    # (no max_tokens recorded: what came out; a request cut short asks for what it gave)
    outs = lengths("max_tokens_asked", "output_tokens")
    # every length from a file is held to the trace's cap (a crafted pta of 50M built a
    # 3.3 GB prompt): one line, as --trace says it
    for name, v in (("prompt tokens", ins), ("max tokens", outs)):
        if v.size and float(v.max()) > MAX_TOKENS:
            i = int(np.argmax(v))
            raise WorkloadError(
                f"--replay-load: {path}: request {int(c['rid'][i])} asks {v[i]:.0f} {name}, "
                f"over {MAX_TOKENS:,}"
            )
    ts = c["t_sched"]
    entries: list[TraceEntry] = []
    for i in range(tb.n):
        rid = int(c["rid"][i])
        sent = rec.prompts.get(rid)
        kind = str(kinds[int(c["kind"][i])]) if kinds else ""
        prompt = None
        if sent is not None:
            prompt = Prompt(kind=kind, messages=sent.messages, text=sent.text)
        entries.append(
            TraceEntry(
                t_ms=int(ts[i]) / 1e6,
                input_tokens=max(1, int(round(ins[i]))),
                output_tokens=max(1, int(round(outs[i]))),
                kind=kind,
                prompt=prompt,
            )
        )
    return make_trace(entries, speed, MOONCAKE_BLOCK, f"recording {path.rsplit('/', 1)[-1]}")
