"""The quality probes' questions: prompts whose answers are known, made here or read
from a user's file, each with the rule its answer is checked by (``judge/quality.py``
checks an answer and keeps each arm's accuracy).

The built-in set is generated here, deterministic with a seed; its tasks have one
checkable answer each (arithmetic, counting, reversing, sorting, extraction into JSON, and
what a short program prints — computed here by tokmon, never by running the model's
text). A user's own set comes from a JSON-lines file (``parse_items``). The simulator
answers them with ``solve`` (and ``wrong``, for an arm that errs at a known rate).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from tokmon.gate import GateError, finite_number, loads
from tokmon.model.workloads.workload import Prompt

CHECKS = ("number", "exact", "contains", "json")
TASKS = ("arith", "count", "reverse", "sort", "json", "code")
QUALITY_SET = 500  # built-in questions drawn in turn (then again from the first)
QUALITY_PASS = 50  # questions per arm of a quality pass (`o` on the dashboard)
QUALITY_MAX_TOKENS = 96  # a probe's answer is short: room for a sentence around it
KIND_PREFIX = "qa:"  # a probe's task kind: qa:arith, qa:json, … (qa:own from a file)

_NAMES = ("Maria", "Kenji", "Amara", "Lars", "Priya", "Tomas", "Ines", "Omar", "Yuki", "Ada")
_CITIES = ("Lisbon", "Osaka", "Accra", "Oslo", "Pune", "Brno", "Quito", "Tunis", "Perth")
_FRUIT = ("apples", "pears", "plums", "lemons", "melons", "figs")
_WORDS = ("river", "copper", "lantern", "maple", "orbit", "velvet", "harbor", "quartz",
          "meadow", "signal", "tundra", "falcon", "ember", "glacier", "cobalt", "willow")  # fmt: skip


@dataclass(frozen=True, slots=True)
class QualityItem:
    """One question with its answer and the rule that checks it."""

    task: str  # arith, count, reverse, sort, json, or own (a user's file)
    prompt: Prompt
    answer: str  # as text; a json answer is a JSON object's text
    check: str  # one of CHECKS

    @property
    def kind(self) -> str:
        return KIND_PREFIX + self.task


def _ask(task: str, question: str, answer: str, check: str) -> QualityItem:
    return QualityItem(task, Prompt(KIND_PREFIX + task, (("user", question),)), answer, check)


def make_item(task: str, rng: random.Random) -> QualityItem:
    """One question of a built-in task, drawn with ``rng``."""
    if task == "arith":
        fruit = rng.choice(_FRUIT)
        a, b, c = rng.randint(12, 89), rng.randint(11, 60), rng.randint(3, 11)
        q = (f"A market stall has {a} {fruit}. It buys {b} more, then sells {c}. How many "
             f"{fruit} does it have now? Answer with the number.")  # fmt: skip
        return _ask(task, q, str(a + b - c), "number")
    if task == "count":
        w = "".join(rng.choice("abcde") for _ in range(rng.randint(9, 15)))
        ch = rng.choice("abc")
        q = f"How many times does the letter '{ch}' appear in '{w}'? Answer with the number."
        return _ask(task, q, str(w.count(ch)), "number")
    if task == "reverse":
        w = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(5, 8)))
        q = f"Reverse the letters of '{w}'. Answer with the reversed letters only."
        return _ask(task, q, w[::-1], "contains")
    if task == "sort":
        ws = rng.sample(_WORDS, rng.randint(4, 6))
        q = (f"Sort these words alphabetically: {', '.join(ws)}. Answer with the words in "
             "order, separated by spaces.")  # fmt: skip
        return _ask(task, q, " ".join(sorted(ws)), "contains")
    if task == "json":
        name, city, age = rng.choice(_NAMES), rng.choice(_CITIES), rng.randint(19, 77)
        q = (f"{name} is {age} years old and lives in {city}. Extract the person as JSON with "
             'the keys "name", "age" and "city". Answer with the JSON object only.')  # fmt: skip
        return _ask(task, q, json.dumps({"name": name, "age": age, "city": city}), "json")
    if task == "code":
        a, n, k = rng.randint(2, 9), rng.randint(3, 6), rng.randint(1, 4)
        q = (f"What does this Python program print?\n\nx = {a}\nfor i in range({n}):\n"
             f"    x = x * 2 - i * {k}\nprint(x)\n\nAnswer with the number.")  # fmt: skip
        return _ask(task, q, str(_program(a, n, k)), "number")
    raise ValueError(f"no built-in task {task!r}")


def _program(a: int, n: int, k: int) -> int:
    """What the ``code`` task's program prints, computed here (never by running text)."""
    x = a
    for i in range(n):
        x = x * 2 - i * k
    return x


def builtin_items(n: int, seed: int = 0) -> tuple[QualityItem, ...]:
    """``n`` questions, the tasks in turn, the same for the same seed (every arm is asked
    the same questions in the same order)."""
    rng = random.Random(seed * 7919 + 104729)
    return tuple(make_item(TASKS[i % len(TASKS)], rng) for i in range(n))


_TASK_NAME = re.compile(r"[a-z0-9_-]{1,24}")
_ROLES = ("system", "user", "assistant")


def parse_items(text: str, source: str) -> tuple[QualityItem, ...]:
    """A user's own set (``--quality-file``): one JSON object a line,
    ``{"prompt": "…" | "messages": [{"role", "content"}…], "answer": …, "check":
    "number|exact|json|contains", "task": "name"}`` (task optional: ``own``; blank lines
    skipped). A line that is not one raises ValueError naming the line and what is wrong.
    """
    items = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source} line {no}"
        try:
            d = loads(line, what=where)
        except GateError as e:
            raise ValueError(str(e)) from None
        except ValueError:
            raise ValueError(f"{where}: not a JSON object") from None
        if not isinstance(d, dict):
            raise ValueError(f"{where}: not a JSON object")
        check = d.get("check")
        if check not in CHECKS:
            raise ValueError(f'{where}: "check" must be one of {", ".join(CHECKS)}')
        task = d.get("task", "own")
        if not isinstance(task, str) or not _TASK_NAME.fullmatch(task):
            raise ValueError(f'{where}: "task" must be 1-24 of a-z, 0-9, _ and -')
        if ("prompt" in d) == ("messages" in d):
            raise ValueError(f'{where}: give "prompt" or "messages", one of them')
        if "prompt" in d:
            if not isinstance(d["prompt"], str) or not d["prompt"].strip():
                raise ValueError(f'{where}: "prompt" must be a non-empty string')
            messages: tuple[tuple[str, str], ...] = (("user", d["prompt"]),)
        else:
            ms = d["messages"]
            ok = isinstance(ms, list) and ms and all(
                isinstance(m, dict) and m.get("role") in _ROLES
                and isinstance(m.get("content"), str) for m in ms)  # fmt: skip
            if not ok:
                raise ValueError(f"{where}: \"messages\" must be a non-empty list of "
                                 '{"role": system|user|assistant, "content": "…"}')  # fmt: skip
            messages = tuple((m["role"], m["content"]) for m in ms)
        items.append(QualityItem(task, Prompt(KIND_PREFIX + task, messages),
                                 _answer(d.get("answer"), check, where), check))  # fmt: skip
    if not items:
        raise ValueError(f"{source}: no questions in it")
    return tuple(items)


def _answer(a: Any, check: str, where: str) -> str:
    """An answer as the check reads it: a number's text, a JSON object's text, a string."""
    if check == "json":
        if isinstance(a, str):
            with contextlib.suppress(ValueError):
                a = loads(a, what=where)
        if not isinstance(a, dict) or not a:
            raise ValueError(f'{where}: a json check\'s "answer" must be a JSON object')
        return json.dumps(a)
    if check == "number":
        v = plain_number(a) if isinstance(a, str) else finite_number(a)
        if v is None or not math.isfinite(v):  # (10**400: too large for a float, refused)
            raise ValueError(f'{where}: a number check\'s "answer" must be a number, and finite')
        return str(a)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return str(a)
    if not isinstance(a, str) or not a.strip():
        raise ValueError(f'{where}: "answer" must be a non-empty string')
    return a


# ------------------------------------------------------------------ the simulator's side

_SOLVERS = (
    ("arith", re.compile(r"has (\d+) \w+\. It buys (\d+) more, then sells (\d+)\.")),
    ("count", re.compile(r"the letter '(\w)' appear in '(\w+)'\?")),
    ("reverse", re.compile(r"Reverse the letters of '(\w+)'\.")),
    ("sort", re.compile(r"Sort these words alphabetically: ([\w, ]+)\. Answer")),
    ("json", re.compile(r"(\w+) is (\d+) years old and lives in (\w+)\. Extract")),
    ("code", re.compile(r"x = (\d+)\nfor i in range\((\d+)\):\n    x = x \* 2 - i \* (\d+)\n")),
)


def solve(prompt: str) -> tuple[str, str] | None:
    """(task, answer text) of a built-in question, from its text alone (what the
    simulator answers); None for any other prompt."""
    for task, rx in _SOLVERS:
        m = rx.search(prompt)
        if m is None:
            continue
        g = m.groups()
        if task == "arith":
            return task, str(int(g[0]) + int(g[1]) - int(g[2]))
        if task == "count":
            return task, str(g[1].count(g[0]))
        if task == "reverse":
            return task, g[0][::-1]
        if task == "sort":
            return task, " ".join(sorted(w.strip() for w in g[0].split(",")))
        if task == "code":
            return task, str(_program(int(g[0]), int(g[1]), int(g[2])))
        return task, json.dumps({"name": g[0], "age": int(g[1]), "city": g[2]})
    return None


def wrong(task: str, answer: str) -> str:
    """A plausible wrong answer (the simulator's errors): off by one, or one letter or
    word out of place, or one field changed."""
    if task in ("arith", "count", "code"):
        return str(int(answer) + 1)
    if task == "json":
        d = json.loads(answer)
        d["age"] = int(d["age"]) + 1
        return json.dumps(d)
    if task == "sort":
        ws = answer.split()
        return " ".join([ws[1], ws[0], *ws[2:]]) if len(ws) > 1 else answer + "s"
    return answer[1:] + answer[0] if len(answer) > 1 else answer + "x"


# ------------------------------------------------------------------ reading an answer


def plain_number(s: str) -> float | None:
    """A number as written, digit groups' commas allowed ("1,234.5"); None if it is none."""
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None
