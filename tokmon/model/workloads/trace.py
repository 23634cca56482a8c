"""A load given request by request: a production trace (Mooncake's JSON Lines) or an
earlier tokmon recording, each request sent at its own time with its own lengths.

Mooncake's format, one request a line: ``timestamp`` (ms since the trace began),
``input_length`` and ``output_length`` (tokens) and, optionally, ``hash_ids``: one id per
block of ``block`` prompt tokens, equal ids meaning equal blocks. A prompt is built from
its blocks, each the same words wherever its id appears, so requests that shared a prefix
in production share it here and the server's prefix cache sees what it saw there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from tokmon.model.workloads.workload import (
    HEAD_WORDS,
    Prompt,
    PromptShape,
    WorkloadError,
    compose,
    filler_count,
    filler_words,
    json_object,
    json_objects,
    prefix_text,
)

MOONCAKE_BLOCK = 512  # tokens a hash id stands for in Mooncake's published traces
MAX_TRACE = 10_000_000  # requests: a bound on what a file may make tokmon hold
# where the words of block ``hid`` come from (shared prefixes use seeds from 1_000_003 on)
_BLOCK_SEEDS = 1 << 40


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace: when (ms after the first), how long in and out, its
    blocks (equal ids: equal text), its task kind, and — replayed from a recording made
    with ``--record-prompts`` — the very prompt that was sent."""

    t_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    kind: str = ""
    prompt: Prompt | None = None


@dataclass(frozen=True, slots=True)
class TraceStream:
    """A trace too large to hold, read by each engine as it is sent (its share of the
    lines, a little ahead of their times): where it is, how many requests it holds, the
    first request's timestamp (time 0) and the span to the last, all from a scan that
    holds no entry."""

    path: str
    count: int
    t0_ms: float
    span_ms: float


@dataclass(frozen=True)
class Trace:
    """A whole trace, its first request at 0 ms, sent ``speed`` times faster than it was
    recorded. ``source`` says where it came from (for the header and the summary). A
    large file is not held: ``stream`` says where the engines read it, ``entries`` is
    empty."""

    entries: tuple[TraceEntry, ...]
    speed: float = 1.0
    block: int = MOONCAKE_BLOCK
    source: str = ""
    stream: TraceStream | None = None

    @property
    def count(self) -> int:
        """Requests in the trace."""
        return self.stream.count if self.stream is not None else len(self.entries)

    @property
    def span_s(self) -> float:
        """Seconds from the first send to the last, at the trace's speed."""
        if self.stream is not None:
            return self.stream.span_ms / 1000 / self.speed
        return self.entries[-1].t_ms / 1000 / self.speed if self.entries else 0.0

    @property
    def kinds(self) -> tuple[tuple[str, float], ...]:
        """The task kinds, by their share of the requests (a trace without kinds: chat;
        a Mooncake file has none)."""
        if self.stream is not None:
            return (("chat", 1.0),)
        names = [e.kind or "chat" for e in self.entries]
        u, n = np.unique(np.array(names, dtype=object), return_counts=True)
        return tuple((str(k), float(c) / len(names)) for k, c in zip(u, n, strict=True))

    def describe(self) -> str:
        read = " (read as it is sent)" if self.stream is not None else ""
        return (
            f"{self.count} requests over {self.span_s:.0f} s at {self.speed:g}× "
            f"from {self.source}{read}"
        )

    def share(self, worker: int, nworkers: int) -> Iterator[tuple[int, TraceEntry]]:
        """A held trace's entries for one engine of ``nworkers``: every ``nworkers``-th,
        so the shares interleave and ``-n N`` sends the first N."""
        for i in range(worker, len(self.entries), nworkers):
            yield i, self.entries[i]


MAX_TIMESTAMP_MS = 1e10  # 115 days: a trace's clock, like every time tokmon reads, is bounded
MAX_TOKENS = 10_000_000  # a prompt or an answer: every length from a file is held to it


def _int(v: object, what: str, where: str, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise WorkloadError(f"{where}: {what} is not a number")
    if v != int(v) or v < lo or v > MAX_TOKENS:
        raise WorkloadError(f"{where}: {what} must be a whole number from {lo} to 10M, got {v}")
    return int(v)


def parse_mooncake(
    lines: Iterable[str], path: str, speed: float = 1.0, block: int = MOONCAKE_BLOCK
) -> Trace:
    """A Mooncake trace's lines (JSON Lines, read by ``tokmon.inputs.load_mooncake``);
    every fault is one line naming the file's line."""
    entries: list[TraceEntry] = []
    try:
        for where, obj in json_objects(lines, f"--trace: {path}"):
            entries.append(mooncake_entry(obj, where))
            if len(entries) > MAX_TRACE:
                raise WorkloadError(f"--trace: {path} holds over {MAX_TRACE:,} requests")
    except UnicodeDecodeError:
        raise WorkloadError(f"--trace: {path} is not UTF-8 text") from None
    if not entries:
        raise WorkloadError(f"--trace: {path} holds no requests")
    return make_trace(entries, speed, block, source_of(path))


def mooncake_entry(obj: dict[str, object], where: str) -> TraceEntry:
    """One Mooncake line's request, its timestamp as in the file; every fault is one
    line that says ``where``."""
    for key in ("timestamp", "input_length", "output_length"):
        if key not in obj:
            raise WorkloadError(f"{where} has no {key!r}")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise WorkloadError(f"{where}: timestamp is not a number")
    if not math.isfinite(ts) or not 0 <= ts <= MAX_TIMESTAMP_MS:
        raise WorkloadError(
            f"{where}: timestamp must be >= 0 ms and at most {MAX_TIMESTAMP_MS:.0e}, got {ts}"
        )
    hids = obj.get("hash_ids") or []
    if not isinstance(hids, list):
        raise WorkloadError(f"{where}: hash_ids is not a list")
    # each id is a block of the prompt, and a block holds a token at least:
    # more ids than tokens cannot be (2M ids for 10 tokens built 1.7 GB)
    n_in = _int(obj["input_length"], "input_length", where)
    if len(hids) > n_in:
        raise WorkloadError(
            f"{where}: {len(hids):,} hash_ids for input_length {n_in} "
            "(a block holds a token at least)"
        )
    return TraceEntry(
        t_ms=float(ts),
        input_tokens=n_in,
        output_tokens=_int(obj["output_length"], "output_length", where),
        hash_ids=tuple(_int(h, "a hash id", where, 0) for h in hids),
    )


IN_ORDER = (
    "a trace read as it is sent must be in time order (sort it: jq -c -s 'sort_by(.timestamp)[]')"
)


def stream_share(
    lines: Iterable[str], stream: TraceStream, worker: int, nworkers: int
) -> Iterator[tuple[int, TraceEntry]]:
    """One engine's share of a streamed trace's lines (every ``nworkers``-th request, as
    ``Trace.share``), each parsed only by the engine that sends it, its time from the
    first request's. A streamed trace is sent in file order, so it must be in time
    order: a request before the one sent before it is a fault, as is any line's."""
    last = stream.t0_ms
    i = -1
    where = f"--trace: {stream.path}"
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        i += 1
        if i % nworkers != worker:
            continue
        at = f"{where} line {ln}"
        e = mooncake_entry(json_object(line, at), at)
        if e.t_ms < last:
            raise WorkloadError(
                f"{at}: timestamp {e.t_ms:g} is before the one sent before it ({last:g}); "
                + IN_ORDER
            )
        last = e.t_ms
        yield i, dataclasses.replace(e, t_ms=e.t_ms - stream.t0_ms)
    if i + 1 < stream.count:
        # (every engine reads every line: each sees the file end early, and says so)
        raise WorkloadError(
            f"{where} ended after {i + 1:,} of the {stream.count:,} requests it held when "
            "the run began: it was cut or replaced while the run read it"
        )


def check_speed(speed: float) -> float:
    if not (speed > 0 and math.isfinite(speed)):
        raise WorkloadError(f"--trace-speed must be a positive number, got {speed}")
    return speed


def source_of(path: str) -> str:
    """How the header names a trace file."""
    return f"trace {path.rsplit('/', 1)[-1]}"


def make_trace(entries: list[TraceEntry], speed: float, block: int, source: str) -> Trace:
    """Entries in time order, the first at 0 ms (a trace's clock may start anywhere)."""
    check_speed(speed)
    entries = sorted(entries, key=lambda e: e.t_ms)  # (stable: equal times keep their order)
    t0 = entries[0].t_ms
    shifted = tuple(dataclasses.replace(e, t_ms=e.t_ms - t0) for e in entries)
    return Trace(shifted, speed, block, source)


def block_words(hid: int, n: int, words: tuple[str, ...]) -> str:
    """The text of block ``hid``: the same ``n`` words wherever the id appears."""
    return prefix_text(_BLOCK_SEEDS + hid, n, words)


def trace_prompt(
    e: TraceEntry, index: int, seed: int, block: int, shape: PromptShape | None
) -> Prompt:
    """The prompt of entry ``index``: the recorded one where the trace holds it; else its
    blocks' words (their first words as the head), made up to ``input_tokens`` as the
    server counts them with words unique to the entry (the same on every replay with the
    same seed), or cut to it."""
    if e.prompt is not None:
        return e.prompt
    kind = e.kind or "chat"
    words = filler_words(shape)
    rng = np.random.default_rng((seed, index))
    n_fill, got = filler_count(kind, e.input_tokens, shape)
    if e.hash_ids:
        head = block_words(e.hash_ids[0] + (1 << 39), HEAD_WORDS, words)
        # only the blocks the length holds: the prompt is cut to it anyway
        needed = e.hash_ids[: -(-n_fill // block) if block > 0 else 0]
        blocks = " ".join(block_words(h, block, words) for h in needed).split(" ")
    else:
        head = " ".join(words[i] for i in rng.integers(0, len(words), HEAD_WORDS))
        blocks = []
    # the blocks' words, cut to the length, or made up to it with words of its own
    own = rng.integers(0, len(words), max(0, n_fill - len(blocks)))
    filler = " ".join([*blocks[:n_fill], *(words[i] for i in own)])
    return dataclasses.replace(compose(kind, head, filler), approx_tokens=got, asked=e.input_tokens)
