"""Every file tokmon reads goes through here: one check before a byte is read.

A path given by a user may be a symlink to ``/dev/zero``, a FIFO, or a file far larger
than any real trace or prompt set: read whole it is gigabytes of memory before the run
starts. So each reader names what it reads and its size cap; a file that is not a
regular file (after following links: the target is what would be read) or is over the
cap is one line naming it, never a MemoryError or a traceback.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator
from typing import IO

from tokmon.model.workloads.questions import QualityItem, parse_items
from tokmon.model.workloads.trace import (
    IN_ORDER,
    MAX_TRACE,
    MOONCAKE_BLOCK,
    Trace,
    TraceEntry,
    TraceStream,
    check_speed,
    mooncake_entry,
    parse_mooncake,
    source_of,
    stream_share,
)
from tokmon.model.workloads.workload import (
    Prompt,
    Script,
    WorkloadError,
    json_object,
    parse_conversations,
    parse_prompt_file,
)

MiB = 1 << 20
# the size caps: each well above any real file of the kind
CAPS = {
    "--prompts": 512 * MiB,
    "--conversations": 512 * MiB,
    "--trace": 2048 * MiB,
    "--config": 1 * MiB,
    "--quality-file": 256 * MiB,
    "--tokenizer": 512 * MiB,
}


class InputError(ValueError):
    """A file that cannot be read as asked: one line that names it."""


def check_input(path: str, what: str, cap: int | None = None) -> int:
    """The size of ``path``, once it is known to be a regular file within ``what``'s
    cap. Raises InputError."""
    cap = CAPS.get(what, 512 * MiB) if cap is None else cap
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what}: {path} is not a regular file")
    if st.st_size > cap:
        raise InputError(
            f"{what}: {path} is {st.st_size / MiB:,.0f} MiB, over the {cap / MiB:,.0f} MiB "
            "this reader takes"
        )
    return st.st_size


def open_input(path: str, what: str, cap: int | None = None) -> IO[str]:
    """``path`` opened as UTF-8 text after ``check_input``. Raises InputError."""
    check_input(path, what, cap)
    try:
        return open(path, encoding="utf-8")  # noqa: SIM115 - the caller closes it
    except OSError as e:
        raise InputError(f"{what}: cannot read {path}: {e.strerror or e}") from None


def read_input(path: str, what: str, cap: int | None = None) -> str:
    """The whole text of ``path`` after ``check_input``. Raises InputError."""
    with open_input(path, what, cap) as f:
        try:
            return f.read()
        except UnicodeDecodeError:
            raise InputError(f"{what}: {path} is not UTF-8 text") from None


def read_input_bytes(path: str, what: str, cap: int | None = None) -> bytes:
    check_input(path, what, cap)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{what}: cannot read {path}: {e.strerror or e}") from None


# ---------------------------------------------------------------- the workload's files
# Read here, parsed by the pure model (tokmon.model.workloads.workload, tokmon.model.workloads.trace).


def load_prompt_file(path: str) -> list[Prompt]:
    """``--prompts``: JSON Lines with ``prompt`` or ``messages``, or ShareGPT JSON.
    Raises WorkloadError with one line."""
    try:
        return parse_prompt_file(read_input(path, "--prompts"), path)
    except InputError as e:
        raise WorkloadError(str(e)) from None


def load_quality_file(path: str) -> tuple[QualityItem, ...]:
    """A user's own questions with their answers (model/workloads/questions.py parse_items)."""
    try:
        return parse_items(read_input(path, "--quality-file", CAPS["--quality-file"]),
                           f"--quality-file: {path}")  # fmt: skip
    except ValueError as e:
        raise WorkloadError(str(e)) from None


def load_conversations(path: str) -> tuple[Script, ...]:
    """``--conversations``. Raises WorkloadError with one line."""
    try:
        return parse_conversations(read_input(path, "--conversations"), path)
    except InputError as e:
        raise WorkloadError(str(e)) from None


# A trace larger than this is not held: the engines read it as it is sent (a 3M-line
# trace held whole was 40 s and 1.3 GB before the run started).
STREAM_OVER = 16 * MiB
HEAD_LINES = 100  # a streamed trace's first lines, checked before the run starts


def load_mooncake(
    path: str, speed: float = 1.0, block: int = MOONCAKE_BLOCK, stream_over: int | None = None
) -> Trace:
    """``--trace``: a Mooncake trace. Up to ``stream_over`` bytes it is parsed line by line
    as it is read and held; above, it is scanned (counted, its first lines checked, its
    first and last times read) and streamed by the engines (``read_share``). Raises
    WorkloadError with one line."""
    limit = STREAM_OVER if stream_over is None else stream_over
    try:
        if check_input(path, "--trace") > limit:
            return _scan_mooncake(path, speed, block)
        with open_input(path, "--trace") as f:
            return parse_mooncake(f, path, speed, block)
    except InputError as e:
        raise WorkloadError(str(e)) from None


def _scan_mooncake(path: str, speed: float, block: int) -> Trace:
    """A large trace without holding its entries: the count, the first lines checked
    (a wrong file fails before the run, not an hour into it), the span from its first
    and last lines. Its other lines are checked by the engine that sends them."""
    where = f"--trace: {path}"
    count = 0
    head: list[TraceEntry] = []
    last: tuple[int, bytes] | None = None
    try:
        with open(path, "rb") as f:
            for ln, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                count += 1
                last = (ln, raw)
                if count <= HEAD_LINES:
                    at = f"{where} line {ln}"
                    e = mooncake_entry(json_object(raw.decode(), at), at)
                    if head and e.t_ms < head[-1].t_ms:
                        raise WorkloadError(
                            f"{at}: timestamp {e.t_ms:g} is before the line above's; {IN_ORDER}"
                        )
                    head.append(e)
    except UnicodeDecodeError:
        raise WorkloadError(f"{where} is not UTF-8 text") from None
    except OSError as e:
        raise WorkloadError(f"{where}: cannot read: {e.strerror or e}") from None
    if not head or last is None:
        raise WorkloadError(f"{where} holds no requests")
    if count > MAX_TRACE:
        raise WorkloadError(f"{where} holds over {MAX_TRACE:,} requests")
    ln, raw = last
    at = f"{where} line {ln}"
    end = mooncake_entry(json_object(raw.decode(errors="replace"), at), at)
    t0 = head[0].t_ms
    if end.t_ms < t0:
        raise WorkloadError(f"{where} line {ln}: the last request is before the first")
    stream = TraceStream(path=path, count=count, t0_ms=t0, span_ms=end.t_ms - t0)
    return Trace((), check_speed(speed), block, source_of(path), stream)


def read_share(
    trace: Trace, worker: int, nworkers: int
) -> Generator[tuple[int, TraceEntry], None, None]:
    """One engine's share of a trace: the held entries, or a streamed file's lines as
    they are needed (a fault in a line is a WorkloadError that names it)."""
    if trace.stream is None:
        yield from trace.share(worker, nworkers)
        return
    try:
        with open_input(trace.stream.path, "--trace") as f:
            try:
                yield from stream_share(f, trace.stream, worker, nworkers)
            except UnicodeDecodeError:
                raise WorkloadError(f"--trace: {trace.stream.path} is not UTF-8 text") from None
    except InputError as e:
        raise WorkloadError(str(e)) from None
