"""Answers checked for correctness: how an answer is read from a model's text, and each
arm's accuracy with its interval (the questions themselves: ``workloads/questions.py``).

Speed is not quality: a quantised model, another draft or sampling at temperature > 0
gives texts that differ by design, and what matters is whether the answers are still
right. A model's output is only ever read, never run.

Reading an answer is tolerant, and the same for every arm:

* ``number``: the number in a ``\\boxed{}``, else the last number in the text (commas
  between digit groups allowed); equal to the answer within 1e-6.
* ``exact``: the text, its first line or a ``\\boxed{}``, stripped of spaces, quotes and a
  final full stop, equal to the answer (case-insensitive).
* ``contains``: the answer appears in the text as whole words (case-insensitive).
* ``json``: the first balanced ``{…}`` that parses as a JSON object holds every key of
  the answer with an equal value (numbers compared as numbers).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.gate import finite_number, loads
from tokmon.model.data.table import RequestTable, distinct, distinct_pairs
from tokmon.model.statistics.stats import wilson
from tokmon.model.workloads.questions import KIND_PREFIX, plain_number

_WORD = re.compile(r"\w+")
_BRACES = re.compile(r'[{}"\\]')
# the detail of a probe that ended ok with an answer no check could judge, and why
UNJUDGED = "unjudged: "
CHECK_CHARS = 64 * 1024  # an answer longer than this is not judged (a probe asks ≤ 96 tokens)
JSON_TRIES = 16  # balanced spans a json check parses at most
JSON_PASSES = 4  # passes over the answer, each after a brace left open
JSON_BUDGET = 4  # … of at most this many times the answer's length, in all
_NUM = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def read_number(text: str) -> float | None:
    b = _BOXED.findall(text)
    for cand in reversed(b):
        m = _NUM.findall(cand)
        if m:
            return plain_number(m[-1])
    m = _NUM.findall(text)
    return plain_number(m[-1]) if m else None


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first balanced ``{…}`` in the text (by where it opens) that parses as a JSON
    object. Linear: a pass pairs the braces from the first ``{`` (strings tracked inside
    an object only, where they are JSON's; outside, a quote is prose); where none of
    its spans parses (the first ``{`` was prose's), one more pass starts at the next
    ``{``, ``JSON_PASSES`` at most; at most ``JSON_TRIES`` spans are parsed, of at most ``JSON_BUDGET`` × the
    text's length in all. Raises ``Unjudged`` where a bound is reached first."""
    start = text.find("{")
    budget, tries = JSON_BUDGET * len(text), 0
    tried: set[tuple[int, int]] = set()
    for _ in range(JSON_PASSES):
        if start < 0:
            return None
        for i, j in _brace_spans(text, start):
            if (i, j) in tried:
                continue
            tried.add((i, j))
            tries += 1
            budget -= j - i
            if tries > JSON_TRIES or budget < 0:
                raise Unjudged(f"no JSON object within {JSON_TRIES} tries")
            try:
                v = loads(text[i:j], what="the answer's JSON")
            except ValueError:
                continue
            return v if isinstance(v, dict) else None
        start = text.find("{", start + 1)  # the first brace may have been prose's
    raise Unjudged(f"no JSON object within {JSON_PASSES} passes")


def _brace_spans(text: str, start: int) -> list[tuple[int, int]]:
    """The balanced ``{…}`` spans from ``start``, in order of where they open."""
    spans: list[tuple[int, int]] = []
    opens: list[int] = []
    in_str, esc_at = False, -1
    for m in _BRACES.finditer(text, start):
        ch, j = m.group(), m.start()
        if in_str:
            if j == esc_at:  # the character after a backslash
                continue
            if ch == "\\":
                esc_at = j + 1
            elif ch == '"':
                in_str = False
            continue
        if ch == "{":
            opens.append(j)
        elif ch == "}":
            if opens:
                spans.append((opens.pop(), j + 1))
        elif ch == '"' and opens:
            in_str = True
    spans.sort()
    return spans


def _norm(s: str) -> str:
    # spaces, a final full stop and quotes around, in either order: 'Paris'. or 'Paris.'
    return s.strip().rstrip(".").strip("`'\" ").rstrip(".").strip().lower()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        x, y = finite_number(a), finite_number(b)  # (10**400 is no float: never equal)
        return x is not None and y is not None and abs(x - y) < 1e-6
    if isinstance(a, str) and isinstance(b, str):
        return _norm(a) == _norm(b)
    return bool(a == b)


class Unjudged(ValueError):
    """An answer a check cannot judge within its bounds (too long, or its budget spent)."""


def judge(check: str, answer: str, text: str) -> tuple[bool | None, str]:
    """(``is_correct``, ""), or (None, why) where the answer cannot be judged within the
    bounds: an answer over ``CHECK_CHARS`` (a server that sends 64 KB of ``{`` to a
    question whose answer is a number), or a check that spent its budget. Every check
    is linear in the answer's length, so a judgment costs milliseconds at most."""
    if len(text) > CHECK_CHARS:
        return None, f"{UNJUDGED}an answer over {CHECK_CHARS:,} characters"
    try:
        return is_correct(check, answer, text), ""
    except Unjudged as e:
        return None, f"{UNJUDGED}{e}"


def is_correct(check: str, answer: str, text: str) -> bool:
    """Whether ``text`` gives ``answer`` by the rule ``check`` (see the module's text).
    Raises ``Unjudged`` where a check spent its budget (``judge`` says None)."""
    if check == "number":
        got, want = read_number(text), plain_number(answer)
        return got is not None and want is not None and abs(got - want) < 1e-6
    if check == "exact":
        cands = [text, text.strip().split("\n")[0], *_BOXED.findall(text)]
        return any(_norm(c) == _norm(answer) for c in cands)
    if check == "contains":
        # the answer's words, in order, among the text's words: a substring search of
        # the words joined by single spaces (str.find: linear, where a regex of the
        # answer against the text was length × length)
        words = " ".join(_WORD.findall(answer.lower()))
        return bool(words) and f" {words} " in f" {' '.join(_WORD.findall(text.lower()))} "
    if check == "json":
        obj = first_json_object(text)
        try:
            want = loads(answer, what="the expected answer")
        except ValueError:
            return False
        if obj is None or not isinstance(want, dict):
            return False
        return all(k in obj and _same(obj[k], v) for k, v in want.items())
    raise ValueError(f"no check {check!r}")


# ------------------------------------------------------------------ accuracy


def newcombe(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """p2 − p1 with its 95% interval (Newcombe's hybrid score interval, method 10: the
    two Wilson intervals combined; sound at small n and at 0% or 100%)."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1)
    l2, u2 = wilson(k2, n2)
    d = p2 - p1
    lo = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    hi = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return d, max(-1.0, lo), min(1.0, hi)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Answers checked of one arm (or one task of it): ``correct`` of ``n``, with the
    Wilson 95% interval."""

    arm: str
    n: int
    correct: int
    lo: float
    hi: float
    task: str = ""  # "" all tasks
    unjudged: int = 0  # probes that ended ok with an answer no check could judge

    @property
    def rate(self) -> float | None:
        return self.correct / self.n if self.n else None

    def text(self) -> str:
        more = f", {self.unjudged} unjudged" if self.unjudged else ""
        return f"{self.correct}/{self.n} correct [{self.lo:.0%}, {self.hi:.0%}]{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "correct": self.correct,
            "accuracy": None if self.rate is None else round(self.rate, 4),
            "ci95": [round(self.lo, 4), round(self.hi, 4)],
            **({"unjudged": self.unjudged} if self.unjudged else {}),
        }


@dataclass(frozen=True, slots=True)
class QualityDiff:
    """``other``'s accuracy minus ``base``'s, with its 95% interval: a quality cost where
    the interval lies below 0."""

    base: str
    other: str
    diff: float
    lo: float
    hi: float

    @property
    def verdict(self) -> str:
        if self.hi < 0:
            return "worse"
        if self.lo > 0:
            return "better"
        return "no difference shown"

    def text(self) -> str:
        return (f"{self.other} − {self.base} {100 * self.diff:+.1f} points "
                f"[{100 * self.lo:+.1f}, {100 * self.hi:+.1f}]: {self.verdict}")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "other": self.other,
            "diff": round(self.diff, 4),
            "ci95": [round(self.lo, 4), round(self.hi, 4)],
            "verdict": self.verdict,
        }


@dataclass
class QualityReducer:
    """Per arm and task: answers checked and those correct (counted requests that ended
    ok; a probe that failed gave no answer and is an error, not a wrong answer)."""

    counts: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    unjudged: dict[str, int] = field(default_factory=dict)  # per arm: probes not judged

    def requests(self, tb: RequestTable) -> None:
        """Every answer checked (warm-up included: a timing warms up, correctness does
        not), and the probes that ended ok with an answer no check could judge."""
        c = tb.cols
        q = np.flatnonzero(~np.isnan(c["quality"]))
        for code, kcode in distinct_pairs(c["arm"][q], c["kind"][q]):
            sel = q[(c["arm"][q] == code) & (c["kind"][q] == kcode)]
            task = str(tb.vocab["kind"][kcode]).removeprefix(KIND_PREFIX)
            self.add(tb.vocab["arm"][code], task, c["quality"][sel])
        codes = [i for i, e in enumerate(tb.vocab["error"]) if str(e).startswith(UNJUDGED)]
        if codes:
            rows = np.flatnonzero(np.isin(c["error"], codes))
            for code in distinct(c["arm"][rows]):
                arm = tb.vocab["arm"][code]
                n = int((c["arm"][rows] == code).sum())
                self.unjudged[arm] = self.unjudged.get(arm, 0) + n

    def add(self, arm: str, task: str, verdicts: np.ndarray) -> None:
        c = self.counts.setdefault((arm, task), [0, 0])
        c[0] += int(verdicts.size)
        c[1] += int((verdicts > 0.5).sum())

    def arms(self) -> list[str]:
        return list(dict.fromkeys([*(a for a, _ in self.counts), *self.unjudged]))

    def accuracy(self, arm: str, task: str = "") -> Accuracy | None:
        keys = [k for k in self.counts if k[0] == arm and (not task or k[1] == task)]
        n = sum(self.counts[k][0] for k in keys)
        unjudged = 0 if task else self.unjudged.get(arm, 0)
        if not n and not unjudged:
            return None
        ok = sum(self.counts[k][1] for k in keys)
        lo, hi = wilson(ok, n)
        return Accuracy(arm, n, ok, lo, hi, task, unjudged)

    def tasks(self, arm: str) -> list[str]:
        return sorted(t for a, t in self.counts if a == arm)

    def diff(self, base: str, other: str) -> QualityDiff | None:
        a, b = self.accuracy(base), self.accuracy(other)
        if a is None or b is None or not a.n or not b.n:
            return None
        d, lo, hi = newcombe(a.correct, a.n, b.correct, b.n)
        return QualityDiff(base, other, d, lo, hi)

    def views(self) -> tuple[Accuracy, ...]:
        out = [self.accuracy(a) for a in self.arms()]
        return tuple(x for x in out if x is not None)

    def to_json(self, order: list[str]) -> dict[str, Any]:
        arms = {}
        for a in [x for x in order if x in self.arms()]:
            acc = self.accuracy(a)
            assert acc is not None
            d = acc.to_json()
            d["by_task"] = {}
            for t in self.tasks(a):
                at = self.accuracy(a, t)
                if at is not None:
                    d["by_task"][t] = at.to_json()
            arms[a] = d
        out: dict[str, Any] = {"arms": arms}
        names = list(arms)
        if len(names) >= 2:
            diff = self.diff(names[0], names[1])
            out["difference"] = None if diff is None else diff.to_json()
        return out
