"""What happened, as each report lists it: the recent events the dashboard shows, every
listed event, the alerts, and the marks the next history point carries — a reducer of
``Event`` facts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from tokmon.model.data.records import Event

# events that start a regime: the user changed what runs (never a change point)
REGIME_KINDS = frozenset({"arm", "step", "level", "pause"})
# events every report lists, but these: a stall is one a second at most and each is in
# the requests (their stall counts); a clock estimate is a worker's offset
UNLISTED_KINDS = frozenset({"stall", "clock"})
MARK_KINDS = {
    "arm": "arm",
    "marker": "marker",
    "alert": "alert",
    "restart": "alert",
    "down": "alert",
    "errors": "alert",
    "stall": "stall",
}


def listed_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The events every report lists (the summary's ``events``), from a fold or straight
    from a recording: the same list either way."""
    return [event_entry(e) for e in events if e.kind not in UNLISTED_KINDS]


def event_entry(e: Event) -> dict[str, Any]:
    """An event as the summary lists it: when (s from the run's start), what kind, what
    it said, and its plain fields (a marker's note is its message)."""
    out: dict[str, Any] = {"t_s": round(e.t / 1e9, 3), "kind": e.kind, "message": e.message}
    for k, v in e.data.items():
        if isinstance(v, (str, int, float, bool)) and k not in out:
            out[k] = v
    return out


class EventLog:
    def __init__(self) -> None:
        self.recent: deque[Event] = deque(maxlen=500)  # the dashboard's event list
        self.listed: list[Event] = []  # what happened, for every report
        self.alerts: list[Event] = []
        self._marks: list[str] = []

    def add(self, ev: Event) -> None:
        if ev.kind == "alert":
            self.alerts.append(ev)
        if ev.kind not in UNLISTED_KINDS:
            self.listed.append(ev)
        self.recent.append(ev)
        self.mark(MARK_KINDS.get(ev.kind))

    def mark(self, mark: str | None) -> None:
        """A mark the next history point carries (an arm switch, an alert, a stall)."""
        if mark:
            self._marks.append(mark)

    def take_marks(self) -> tuple[str, ...]:
        marks = tuple(dict.fromkeys(self._marks))
        self._marks.clear()
        return marks
