"""The parts of a rotated recording (``--record-rotate``, ``--record-max-size``): the
first is the file named, the later ones beside it, numbered. Each part begins with the
run's header (its ``rotation`` says which part it is and of which run) and the run's
state at that moment (the last arm switch, load level, ladder step and pause, marked
``carried``), so that a part is readable alone; read from the first, the parts are one
run and the carried lines are skipped."""

from __future__ import annotations

import os
import re

# The events whose last one a later part repeats (``carried``): what the run was doing
# when the part began -- the arm, the load level, the ladder step, a pause. A report of
# a window of the run starts from the same state (``recording/window.py``).
CARRIED = ("arm", "level", "step", "ladder", "pause")

# A request's line reaches the file when the parent has it, a little after the request
# ended: a reader of a window reads this far past it, and from a part this far before.
LATE_LINE_NS = 30_000_000_000


def part_path(path: str, k: int) -> str:
    """Part ``k`` of a rotated recording: the first is the file named, the others beside
    it numbered (``run.jsonl.gz`` → ``run.part002.jsonl.gz``)."""
    if k <= 1:
        return path
    d, name = os.path.split(path)
    stem, ext = _split(name)
    return os.path.join(d, f"{stem}.part{k:03d}{ext}")


def _split(name: str) -> tuple[str, str]:
    """A file name's stem and its recording extension (``.jsonl.gz`` whole)."""
    for ext in (".jsonl.gz", ".json.gz", ".ndjson.gz"):
        if name.endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)], ext
    return os.path.splitext(name)


def part_numbers(path: str) -> set[int]:
    """The numbers of the later parts found beside ``path``."""
    d, name = os.path.split(path)
    stem, ext = _split(name)
    pat = re.compile(re.escape(stem) + r"\.part(\d{3,})" + re.escape(ext) + "$")
    try:
        names = os.listdir(d or ".")
    except OSError:
        return set()
    return {int(m.group(1)) for n in names if (m := pat.match(n))}


def run_bytes(path: str) -> int:
    """The size of a recording with all its parts (0 where none is written yet)."""
    total = 0
    for p in [path, *(part_path(path, k) for k in sorted(part_numbers(path)))]:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total
