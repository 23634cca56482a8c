"""Session recordings: one append-only JSON Lines file (optionally gzip), versioned.

Lines, each a JSON object with a kind ``k``:

* ``header`` — first line: the fold's settings (``fold``), ``schema_version``, tokmon version, command line, resolved
  settings (secrets removed), start time, host, CPU, memory, Python, GPU names, driver
  and NVML versions, each server's ``/v1/models`` answer and version.
* ``r`` — one finished request (short keys, see ``REQUEST_KEYS``); times ``ts``/``te``
  in integer nanoseconds since the session start, durations in ms (µs precision).
* ``tok`` — tokens that arrived, per 250 ms bucket and arm: ``v: [[t_ns, arm, n], ...]``.
* ``p`` — a probe sample: ``src`` (gpu, host, server), ``t`` and its fields ``v``.
* ``e`` — an event (arm switch, pause, marker, alert, restart …).
* ``st`` — an engine's status (requests sent, in flight, loop and send lag), at a tick
  where it changed.
* ``tick`` — the live run's clock: its dashboard was drawn from the facts before it
  (``final``: the last). The lines are in the order the live fold took them, so a
  replay folds them again to the same figures (``tokmon.recording.play``).
* ``q`` — what request ``id`` sent (``--record-prompts``): its messages ``m`` as
  ``[role, content]`` pairs, or its text ``t``; ``--replay-load`` sends them again.
* ``summary`` — the run summary (the ``--summary-json`` object), at the end.
* ``end`` — the session's end time; absent when the writer was killed.

Crash safety: written through a buffer flushed at least once a second (a thread makes
sure of it when nothing is written), so a cut file loses at most the last second; a
reader takes every complete line and says that the file was cut.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Window:
    """A stretch of a run, ``[t_from, t_to)`` in ns from its start (``t_to`` None: to
    its end): what a report or a replay of part of a run covers (``recording.window``)."""

    t_from: int
    t_to: int | None = None

    def end(self, run_end: int) -> int:
        """Where the window ends in a run that ended at ``run_end``."""
        return run_end if self.t_to is None else min(self.t_to, run_end)

    def describe(self, run_end: int) -> dict[str, float]:
        return {"from_s": self.t_from / 1e9, "to_s": self.end(run_end) / 1e9}


class RecordingError(Exception):
    """Not a recording, or one this version cannot read: one clear line."""
