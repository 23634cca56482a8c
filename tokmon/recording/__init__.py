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

SCHEMA_VERSION = 1


class RecordingError(Exception):
    """Not a recording, or one this version cannot read: one clear line."""
