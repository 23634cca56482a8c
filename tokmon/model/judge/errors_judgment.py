"""What the server said when a request failed: a registered judgment.

Per arm, whole run, of its counted requests that failed: the commonest messages with
their counts and outcomes, so that "http_4xx 6" comes with its cause ("HTTP 400:
tool_choice="required" requires --tool-call-parser to be set"). Messages that differ
only in their numbers (a context length, a request id) are one message, shown as the
first came; at most ``KEEP`` messages are kept per arm, the rest counted as others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.registry import PerArm, register
from tokmon.model.data.table import RequestTable

KEEP = 64  # distinct messages kept per arm (a server that puts an id in each: bounded)
SHOWN = 3  # the commonest shown per arm
MAX_CHARS = 160  # a message shown at most this long
_DIGITS = re.compile(r"\d+")


@dataclass
class _Arm:
    failed: int = 0
    others: int = 0  # failures whose message was past KEEP distinct ones
    by: dict[tuple[str, str], list[Any]] = field(default_factory=dict)  # key -> [n, first]


@dataclass(frozen=True, slots=True)
class Cause:
    outcome: str
    message: str  # as the first of its kind said it (cut at MAX_CHARS)
    requests: int


@dataclass(frozen=True, slots=True)
class ArmCauses:
    arm: str
    failed: int
    causes: tuple[Cause, ...]  # the commonest first

    def lines(self) -> tuple[str, ...]:
        shown = sum(c.requests for c in self.causes)
        out = [f"{self.arm}: {c.requests} × {c.outcome}: {c.message or '(no message)'}"
               for c in self.causes]  # fmt: skip
        if self.failed > shown:
            out.append(f"{self.arm}: {self.failed - shown} more, with other messages")
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ErrorsView:
    arms: tuple[ArmCauses, ...]

    def lines(self) -> tuple[str, ...]:
        out = ["what the server said of the failures (whole run, counted requests):"]
        return (*out, *("  " + x for a in self.arms for x in a.lines()))

    def panel_lines(self) -> tuple[str, ...]:
        return self.lines()


@register
class Errors(PerArm[_Arm]):
    name = "errors"
    state = _Arm

    def rows(self, tb: RequestTable) -> np.ndarray:
        return np.flatnonzero(tb.counted() & (tb.cols["outcome"] != tb.code("outcome", "ok")))

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        a.failed += int(sel.size)
        oc, ec = c["outcome"][sel].astype(np.int64), c["error"][sel].astype(np.int64)
        span = int(ec.max()) + 1 if ec.size else 1
        # each (outcome, message) in the order it first came: which messages are kept, and
        # which is shown for those that differ in numbers, never depend on the batches
        _, first, counts = np.unique(oc * span + ec, return_index=True, return_counts=True)
        for i in np.argsort(first, kind="stable"):
            row, n = int(first[i]), int(counts[i])
            outcome, said = tb.vocab["outcome"][int(oc[row])], str(tb.vocab["error"][int(ec[row])])
            key = (outcome, _DIGITS.sub("#", said))
            got = a.by.get(key)
            if got is not None:
                got[0] += n
            elif len(a.by) < KEEP:
                a.by[key] = [n, said]
            else:
                a.others += n

    def view(self, now: int, reads: dict[str, Any]) -> ErrorsView | None:
        arms = []
        for name, a in self.arms.items():
            top = sorted(a.by.items(), key=lambda kv: -kv[1][0])[:SHOWN]
            causes = tuple(Cause(k[0], _cut(v[1]), v[0]) for k, v in top)
            arms.append(ArmCauses(name, a.failed, causes))
        return ErrorsView(tuple(arms)) if arms else None

    def figures(self, v: ErrorsView) -> dict[str, Any]:
        return {"arms": {a.arm: {"failed": a.failed,
                                 "causes": [{"outcome": c.outcome, "message": c.message,
                                             "requests": c.requests} for c in a.causes]}
                         for a in v.arms}}  # fmt: skip


def _cut(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= MAX_CHARS else s[: MAX_CHARS - 1] + "…"
