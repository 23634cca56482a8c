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
from typing import IO

from tokmon.model.trace import MOONCAKE_BLOCK, Trace, parse_mooncake
from tokmon.model.workload import (
    Prompt,
    Script,
    WorkloadError,
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
# Read here, parsed by the pure model (tokmon.model.workload, tokmon.model.trace).


def load_prompt_file(path: str) -> list[Prompt]:
    """``--prompts``: JSON Lines with ``prompt`` or ``messages``, or ShareGPT JSON.
    Raises WorkloadError with one line."""
    try:
        return parse_prompt_file(read_input(path, "--prompts"), path)
    except InputError as e:
        raise WorkloadError(str(e)) from None


def load_conversations(path: str) -> tuple[Script, ...]:
    """``--conversations``. Raises WorkloadError with one line."""
    try:
        return parse_conversations(read_input(path, "--conversations"), path)
    except InputError as e:
        raise WorkloadError(str(e)) from None


def load_mooncake(path: str, speed: float = 1.0, block: int = MOONCAKE_BLOCK) -> Trace:
    """``--trace``: a Mooncake trace, parsed line by line as it is read. Raises
    WorkloadError with one line."""
    try:
        with open_input(path, "--trace") as f:
            return parse_mooncake(f, path, speed, block)
    except InputError as e:
        raise WorkloadError(str(e)) from None
