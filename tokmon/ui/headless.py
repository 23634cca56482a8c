"""A run without the dashboard (``--headless``): status lines and the event log on
stderr while it goes on, the signals that end it as the first Ctrl-C does, and the
closing summary's text. The terminal's other face, beside the dashboard (``app.py``):
it only reads snapshots, as the dashboard does.
"""

from __future__ import annotations

import time
from typing import Any

from tokmon.model.data.records import Event
from tokmon.model.folding.snapshot import Snapshot
from tokmon.textsafe import say


def summary_text(summary: dict[str, Any]) -> str:
    from tokmon.report.summary_text import alert_lines, summary_table

    lines = [summary_table(summary)]
    alerts = summary.get("alerts") or []
    if alerts:  # what an on-call reader needs first, not only in --summary-json
        lines += [f"alerts raised: {len(alerts)}", *alert_lines(alerts)]
    return "\n".join(lines)


class EventLines:
    """The run's event log as lines, each once: headless, the terminal is the event log.

    A snapshot holds the latest events (a window that slides), so each call gives those
    after the last one given."""

    def __init__(self) -> None:
        self.last: Event | None = None

    def new(self, s: Snapshot) -> list[str]:
        evs = s.events
        start = 0
        if self.last is not None:
            for i in range(len(evs) - 1, -1, -1):
                if evs[i] == self.last:
                    start = i + 1
                    break
            else:  # the window slid past it: what is later than it
                start = next((i for i, e in enumerate(evs) if e.t > self.last.t), len(evs))
        fresh = evs[start:]
        if fresh:
            self.last = fresh[-1]
        return [
            f"[{(e.t - s.t_start) / 1e9:7.1f}s] {'ALERT ' if e.kind == 'alert' else ''}{e.message}"
            for e in fresh
        ]


def run_headless(session: Any, every: float) -> None:
    """Status lines to stderr until the run ends. The signals that stop it (Ctrl-C,
    SIGTERM from systemd or ``timeout``, SIGHUP from an SSH session that dropped) are the
    command's (``cli/shutdown.py``): each drains the run, as the first Ctrl-C does."""
    last_t = None
    events = EventLines()

    def log_events() -> None:
        s = session.snapshot()
        for line in events.new(s) if s is not None else ():
            say(line, err=True, flush=True)

    next_print = time.monotonic() + every
    next_events = time.monotonic() + EVENTS_EVERY_S
    while not session.wait(0.2):
        now = time.monotonic()
        if now >= next_events:  # an alert shows within a second of being raised
            next_events = now + EVENTS_EVERY_S
            log_events()
        if now >= next_print:
            next_print = max(next_print + every, now)
            s = session.snapshot()
            # a starved process may wake twice before a new snapshot: no repeat
            if s is not None and s.t != last_t:
                last_t = s.t
                say(status_line(s), err=True, flush=True)
    log_events()  # those of the run's last moments


EVENTS_EVERY_S = 1.0


def status_line(s: Any) -> str:
    from tokmon.report.summary_text import fmt_ms

    w = s.window
    parts = [
        f"[{s.elapsed_s:7.1f}s]",
        f"arm {s.arm}",
        f"ok {s.ok}",
        f"failed {s.failed}",
        f"in flight {s.in_flight}",
    ]
    if w is not None:
        parts += [
            f"{w.tokens_per_s:8.1f} tok/s",
            f"TTFT p50 {fmt_ms(w.ttft_p50)} p95 {fmt_ms(w.ttft_p95)} ms",
            f"TPOT p50 {fmt_ms(w.tpot_p50)} ms",
        ]
    if s.warming_up:
        parts.append("(warming up)")
    if s.restarting is not None:
        parts.append(
            f"RESTARTING {s.restarting.arm}: {s.restarting.phase} {s.restarting.since_s:.0f} s"
        )
    for arm, secs in s.down.items():
        parts.append(f"SERVER DOWN ({arm}) for {secs:.0f}s")
    return " · ".join(parts)
