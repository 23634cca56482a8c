"""What to send and when: length distributions, arrival processes, prompts, task kinds."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tokmon.gate import loads
from tokmon.model.workloads.images import IMAGE, data_url
from tokmon.model.workloads.structured import GUIDED, TOOLS, guided_body, tools_body


class WorkloadError(ValueError):
    """A workload option that cannot be used; the message names it."""


_SUFFIX = {"k": 1_000, "K": 1_024}


def parse_count(text: str) -> int:
    """``512``, ``4k`` (4000), ``32K`` (32768)."""
    t = text.strip()
    mult = 1
    if t and t[-1] in _SUFFIX:
        mult = _SUFFIX[t[-1]]
        t = t[:-1]
    try:
        v = float(t)
    except ValueError:
        raise WorkloadError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise WorkloadError(f"not a finite number: {text!r}")
    return int(round(v * mult))


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution: fixed, uniform ``lo:hi`` or ``normal:mean,sd``."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LengthDist:
        t = str(text).strip()
        if t.startswith("normal:"):
            parts = t[7:].split(",")
            if len(parts) != 2:
                raise WorkloadError(f"expected normal:MEAN,SD, got {text!r}")
            mean, sd = parse_count(parts[0]), float(parts[1])
            if mean < 1 or sd < 0:
                raise WorkloadError(f"normal:MEAN,SD needs MEAN >= 1 and SD >= 0, got {text!r}")
            return cls("normal", mean, sd)
        if ":" in t:
            lo_s, hi_s = t.split(":", 1)
            lo, hi = parse_count(lo_s), parse_count(hi_s)
            if lo < 1 or hi < lo:
                raise WorkloadError(f"uniform LO:HI needs 1 <= LO <= HI, got {text!r}")
            return cls("uniform", lo, hi)
        v = parse_count(t)
        if v < 1:
            raise WorkloadError(f"a length must be at least 1, got {text!r}")
        return cls("fixed", v)

    def sample(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(rng.integers(int(self.a), int(self.b) + 1))
        return max(1, int(round(rng.normal(self.a, self.b))))

    @property
    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "uniform":
            return f"{int(self.a)}:{int(self.b)}"
        return f"normal:{int(self.a)},{self.b:g}"


class Arrivals:
    """Open-loop inter-arrival gaps: poisson, constant, or gamma with a burstiness shape.

    Gamma with shape 1 is Poisson; shape < 1 is burstier, > 1 smoother. The mean gap is
    always 1/rate, so the long-run rate holds whatever the shape.
    """

    KINDS = ("poisson", "constant", "gamma")

    def __init__(self, kind: str, rate: float, burstiness: float = 1.0, seed: int | None = None):
        if kind not in self.KINDS:
            raise WorkloadError(f"--arrival must be one of {', '.join(self.KINDS)}, got {kind!r}")
        if not (rate > 0 and math.isfinite(rate)):
            raise WorkloadError(f"--rate must be a positive number, got {rate!r}")
        if not (burstiness > 0 and math.isfinite(burstiness)):
            raise WorkloadError(f"--burstiness must be positive, got {burstiness!r}")
        self.kind = kind
        self.rate = rate
        self.burstiness = burstiness
        self.rng = np.random.default_rng(seed)

    def set_rate(self, rate: float) -> None:
        self.rate = rate

    def next_gap(self) -> float:
        """Seconds until the next arrival."""
        if self.kind == "constant":
            return 1.0 / self.rate
        if self.kind == "poisson":
            return float(self.rng.exponential(1.0 / self.rate))
        k = self.burstiness
        return float(self.rng.gamma(k, 1.0 / (self.rate * k)))


def load_text(mode: str, level: float) -> str:
    """The load in a few words: ``8 streams``, ``2.5 req/s``, ``trace 2×``."""
    if mode == "concurrency":
        return f"{level:g} streams"
    if mode == "trace":
        return f"trace {level:g}×"
    return f"{level:g} req/s"


def describe_load(st: dict[str, Any]) -> str:
    """What a run sent, in one line, from its recorded settings (the method: write the
    request pattern down): the load's shape, then the lengths and kinds."""
    mode = st.get("mode")
    if mode == "trace":
        return str(st.get("trace") or "a trace")
    if mode == "rate":
        parts = [f"open loop {st.get('rate')} req/s, {st.get('arrival')} arrivals"]
        if st.get("arrival") == "gamma":
            parts[0] += f" (burstiness {st.get('burstiness')})"
    else:
        parts = [f"closed loop {st.get('concurrency')} streams"]
    conv = st.get("conversations") if isinstance(st.get("conversations"), dict) else None
    if conv and conv.get("scripts"):
        parts.append(f"conversations {conv['scripts']}")
    elif st.get("prompts"):
        parts.append(f"prompts {st['prompts']}")
    else:
        pt = f"prompt tokens {st.get('prompt_tokens')}"
        sp = st.get("shared_prefix")
        if isinstance(sp, dict):
            pt += f" (shared prefix {sp.get('words')}, pool {sp.get('pool')})"
        parts.append(pt)
    if conv and not conv.get("scripts"):
        turns = conv.get("turns") if isinstance(conv.get("turns"), dict) else {}
        parts.append(f"{turns.get('a', '?'):g} turns" if isinstance(turns.get("a"), (int, float))
                     else "turns")  # fmt: skip
    parts.append(
        f"max tokens {st.get('max_tokens')}" + (" (ignore_eos)" if st.get("ignore_eos") else "")
    )
    mix = st.get("mix")
    if isinstance(mix, list) and len(mix) > 1:
        parts.append(
            "mix " + ", ".join(f"{k} {float(w):.0%}" for k, w in mix if isinstance(w, (int, float)))
        )
    return " · ".join(parts)


# ----------------------------------------------------------------------------- prompts

# (guided: under a JSON schema, every other one the same prompt without it; tools: a
# tool it must call — ``model/workloads/structured.py``)
# the kinds whose answer is text (what an output check compares), then today's requests
TEXT_KINDS = ("chat", "code", "structured", "summarize", "creative")
KINDS = (*TEXT_KINDS, GUIDED, TOOLS, IMAGE)

WORDS = (  # common words: filler for synthetic prompts (and the tests' and benches')
    "the",
    "service",
    "latency",
    "model",
    "request",
    "token",
    "cache",
    "batch",
    "queue",
    "memory",
    "system",
    "data",
    "time",
    "value",
    "result",
    "engine",
    "server",
    "stream",
    "output",
    "input",
    "user",
    "report",
    "metric",
    "window",
    "sample",
    "measure",
    "speed",
    "rate",
    "load",
    "test",
    "run",
    "step",
    "change",
    "error",
    "signal",
    "trend",
    "level",
    "point",
    "case",
    "state",
    "price",
    "energy",
    "power",
    "budget",
    "plan",
    "team",
    "review",
    "network",
    "storage",
    "compute",
    "process",
)

_KIND_LEADS = {
    "chat": "Let us talk about how a busy team keeps a service healthy.",
    "code": "Write a Python function that parses a log file and returns the error count.",
    "structured": "Extract the fields below into JSON with keys name, value and unit.",
    "summarize": "Summarize the following notes in three sentences.",
    "creative": "Write a short story with an unexpected ending about a lighthouse.",
    GUIDED: "Record the measurement below as JSON: its name, its value as a whole number, "
    "its unit (ms, s, tokens or requests) and whether it is ok.",
    TOOLS: "Call the tool to read the latency of the checkout service over the last 15 minutes.",
    IMAGE: "Describe the image: its colours, its pattern and what it might show.",
}


def kind_lead(kind: str) -> str:
    """The opening sentence of a synthetic prompt of this kind."""
    return _KIND_LEADS.get(kind, _KIND_LEADS["chat"])


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: chat messages or completion text, with its task kind (and, for a
    synthetic one, the prompt tokens it was built to have)."""

    kind: str
    messages: tuple[tuple[str, str], ...] = ()
    text: str = ""
    approx_tokens: int = 0
    asked: int | None = None
    # fields of the request's body besides its messages (a schema, tools), each as its
    # key and its JSON text (frozen: a prompt is shared between requests)
    extra: tuple[tuple[str, str], ...] = ()
    image: int = 0  # the image kind: the side of its image in pixels (0: none)

    def body_fields(self, endpoint: str) -> dict[str, Any]:
        if endpoint == "completions":
            if self.text:
                return {"prompt": self.text}
            return {"prompt": "\n".join(c for _, c in self.messages)}
        extra = {k: json.loads(v) for k, v in self.extra}
        if self.image:  # the text, then the image as a data URL (the OpenAI chat form)
            msgs = list(self.messages) or [("user", self.text)]
            out: list[dict[str, Any]] = [{"role": r, "content": c} for r, c in msgs[:-1]]
            out.append({"role": msgs[-1][0], "content": [
                {"type": "text", "text": msgs[-1][1]},
                {"type": "image_url", "image_url": {"url": data_url(self.image)}}]})  # fmt: skip
            return {"messages": out, **extra}
        if self.messages:
            return {"messages": [{"role": r, "content": c} for r, c in self.messages], **extra}
        return {"messages": [{"role": "user", "content": self.text}], **extra}

    def without_extra(self, kind: str) -> Prompt:
        """The same prompt without its body's extras, as another kind (the control)."""
        return dataclasses.replace(self, kind=kind, extra=())


HEAD_WORDS = 6  # words unique to each request, first: no two prompts share a prefix by accident


@dataclass(frozen=True, slots=True)
class PromptShape:
    """How to build a prompt of an exact prompt-token count on one server, measured before
    the run (``engine/calibrate.py``): filler words that are one token each there (in
    running text), and what the rest of a prompt of each kind costs (BOS, the chat
    template, the request's unique head and the kind's opening sentence), as the server
    counts it in ``usage.prompt_tokens``. ``per_word`` is 1 when the words were checked
    with the server's tokenizer; otherwise it is the mean measured, and lengths are near,
    not exact. ``source`` says which ("tokenize", "tokenizer file" or "usage")."""

    units: tuple[str, ...]
    overhead: tuple[tuple[str, int], ...]
    source: str
    per_word: float = 1.0

    @property
    def exact(self) -> bool:
        return self.per_word == 1.0

    def cost(self, kind: str) -> int | None:
        return next((n for k, n in self.overhead if k == kind), None)


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """A system prompt shared by many requests: ``pool`` distinct ones of ``words`` words
    each (one token a word where the prompt shape says so), each request drawing one."""

    words: int
    pool: int = 1

    def pick(self, rng: np.random.Generator) -> int:
        return int(rng.integers(0, self.pool)) if self.pool > 1 else 0


@lru_cache(maxsize=1024)  # (a trace's blocks come and go; ~3.5 KB each at 512 words)
def prefix_text(index: int, n: int, words: tuple[str, ...]) -> str:
    """Shared prefix number ``index``: the same text every time it is drawn (so a server
    can cache it), different for every index (so a pool is that many prefixes)."""
    rng = np.random.default_rng(1_000_003 + index)
    return " ".join(words[i] for i in rng.integers(0, len(words), n))


@dataclass(frozen=True, slots=True)
class Conversations:
    """Multi-turn chats: each stream holds one conversation of ``turns`` requests (drawn
    per conversation), ``think_s`` apart; every request after the first carries the whole
    history — the user's messages and the text the server actually generated — and a new
    user message of about ``followup`` tokens."""

    turns: LengthDist
    think_s: float = 0.0
    followup: int = 64
    # conversations from a file (--conversations): each stream takes the next in turn,
    # its user messages in order, and its recorded replies (where given) as the history
    scripts: tuple[Script, ...] = ()


@dataclass(frozen=True, slots=True)
class Script:
    """One conversation from a file: what comes before the first user message (a system
    prompt), then each user message with the reply recorded for it (None: the server's
    own reply goes into the history)."""

    opening: tuple[tuple[str, str], ...]
    turns: tuple[tuple[str, str | None], ...]
    kind: str = "chat"


def followup_message(n: int, rng: np.random.Generator, shape: PromptShape | None) -> str:
    """A user's next message: about ``n`` tokens (one a word where the shape says so)."""
    words = filler_words(shape)
    body = " ".join(words[i] for i in rng.integers(0, len(words), max(1, n - 3)))
    return f"And then: {body}"


def compose(kind: str, head: str, filler: str, prefix: str = "") -> Prompt:
    """The one layout of a synthetic prompt (the calibration measures this same one): a
    shared system prompt if any, then the user's text: its own head, the kind's opening
    sentence, the filler."""
    text = f"Ticket {head}. {kind_lead(kind)} {filler}".rstrip()
    body = guided_body() if kind == GUIDED else tools_body() if kind == TOOLS else {}
    extra = tuple((k, json.dumps(v)) for k, v in body.items())
    if prefix:
        return Prompt(kind=kind, messages=(("system", prefix), ("user", text)), extra=extra)
    return Prompt(kind=kind, text=text, extra=extra)


def synthetic_prompt(
    kind: str,
    tokens: int,
    rng: np.random.Generator,
    shape: PromptShape | None = None,
    shared: SharedPrefix | None = None,
) -> Prompt:
    """A readable prompt: a head of words unique to the request, the kind's opening
    sentence, then filler (after a shared system prompt, if asked for). With a shape, of
    exactly ``tokens`` prompt tokens as the server counts them (where the fixed part alone
    is longer, that many); without one, about ``tokens`` (one common English word ≈ one
    token)."""
    words = filler_words(shape)
    head = " ".join(words[i] for i in rng.integers(0, len(words), HEAD_WORDS))
    prefix = prefix_text(shared.pick(rng), shared.words, words) if shared else ""
    n_fill, got = filler_count(kind, tokens, shape, shared.words if shared else 0)
    idx = rng.integers(0, len(words), n_fill)
    p = compose(kind, head, " ".join(words[i] for i in idx), prefix)
    return dataclasses.replace(p, approx_tokens=got, asked=tokens)


def filler_words(shape: PromptShape | None) -> tuple[str, ...]:
    """The words prompts are made of: one token each on the server where it was measured."""
    return shape.units if shape is not None and shape.units else WORDS


def filler_count(
    kind: str, tokens: int, shape: PromptShape | None, shared: int = 0
) -> tuple[int, int]:
    """How many filler words make a prompt of ``kind`` ``tokens`` long (``compose``'s
    layout), and the length it will then have: exact with a measured shape (never shorter
    than the kind's fixed part), else about one word a token (``shared``: words of a
    shared prefix, counted in it)."""
    fixed = shape.cost(kind) if shape is not None else None
    if shape is None or fixed is None:
        n_fixed = len(kind_lead(kind).split()) + HEAD_WORDS + 1
        return max(0, tokens - n_fixed - shared), tokens
    return max(0, round((tokens - fixed) / shape.per_word)), max(tokens, fixed)


def parse_prompt_file(raw: str, path: str) -> list[Prompt]:
    """A prompts file's text (``tokmon.inputs.load_prompt_file`` reads it): JSON Lines with
    ``prompt`` or ``messages`` (optional ``kind``), or ShareGPT JSON."""
    prompts: list[Prompt] = []
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            data = loads(raw)
        except ValueError as e:
            raise WorkloadError(f"--prompts: {path} is not valid JSON: {e}") from None
        for item in data:
            conv = item.get("conversations") if isinstance(item, dict) else None
            if not isinstance(conv, list):
                continue
            for turn in conv:
                if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                    v = str(turn.get("value", ""))
                    if v:
                        prompts.append(Prompt(kind="chat", text=v, approx_tokens=len(v.split())))
                    break
    else:
        for where, obj in json_objects(raw.splitlines(), f"--prompts: {path}"):
            # a conversation is chat; a bare prompt without a kind gets none (it used to be
            # called "chat", which read as the endpoint on a completions run)
            kind = str(obj.get("kind") or ("chat" if "messages" in obj else ""))
            if "messages" in obj and isinstance(obj["messages"], list):
                msgs = tuple(
                    (str(m.get("role", "user")), str(m.get("content", "")))
                    for m in obj["messages"]
                    if isinstance(m, dict)
                )
                n = sum(len(c.split()) for _, c in msgs)
                prompts.append(Prompt(kind=kind, messages=msgs, approx_tokens=n))
            elif "prompt" in obj:
                t = str(obj["prompt"])
                prompts.append(Prompt(kind=kind, text=t, approx_tokens=len(t.split())))
            else:
                raise WorkloadError(f"{where} has neither 'prompt' nor 'messages'")
    if not prompts:
        raise WorkloadError(f"--prompts: {path} holds no prompts")
    return prompts


MAX_LINE = 16 << 20  # characters of one JSON line of a trace or prompt file


def json_objects(lines: Any, where: str) -> Any:
    """The JSON objects of a JSON Lines file, each with the words that name its line in
    an error (``{where} line N``); a line that is not one object is one clear message."""
    for ln, line in enumerate(lines, 1):
        if not line.strip():
            continue
        at = f"{where} line {ln}"
        yield at, json_object(line, at)


def json_object(line: str, at: str) -> dict[str, Any]:
    """One JSON Lines line's object; anything else is one message that says ``at``."""
    if len(line) > MAX_LINE:
        raise WorkloadError(f"{at} is over {MAX_LINE >> 20} MiB")
    try:
        obj = loads(line)
    except ValueError as e:
        raise WorkloadError(f"{at} is not JSON ({str(e)[:80]})") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"{at} is not a JSON object")
    return obj


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
          "chatgpt": "assistant", "bard": "assistant", "system": "system", "developer": "system"}  # fmt: skip
MAX_TURNS = 10_000


def _script(msgs: list[tuple[str, str]], kind: str, where: str) -> Script:
    """A conversation's messages (roles already mapped) as a script: what precedes the
    first user message opens it; each user message is a turn, the assistant message
    right after it that turn's recorded reply."""
    opening: list[tuple[str, str]] = []
    turns: list[tuple[str, str | None]] = []
    for role, content in msgs:
        if role == "user":
            turns.append((content, None))
        elif not turns:
            opening.append((role, content))
        elif role == "assistant" and turns[-1][1] is None:
            turns[-1] = (turns[-1][0], content)
        # (a second reply in a row, or a system message mid-way: not a turn; left out)
    if not turns:
        raise WorkloadError(f"{where} has no user message")
    if len(turns) > MAX_TURNS:
        raise WorkloadError(f"{where} has over {MAX_TURNS:,} turns")
    return Script(tuple(opening), tuple(turns), kind or "chat")


def _messages(items: Any, where: str, role_key: str, text_key: str) -> list[tuple[str, str]]:
    if not isinstance(items, list):
        raise WorkloadError(f"{where}: the messages are not a list")
    out = []
    for m in items:
        if not isinstance(m, dict):
            raise WorkloadError(f"{where}: a message is not a JSON object")
        role = _ROLES.get(str(m.get(role_key, "")).lower())
        if role is None:
            raise WorkloadError(f"{where}: unknown role {str(m.get(role_key))[:40]!r}")
        text = m.get(text_key)
        if not isinstance(text, str):
            raise WorkloadError(f"{where}: a message has no {text_key!r} text")
        out.append((role, text))
    return out


def parse_conversations(raw: str, path: str) -> tuple[Script, ...]:
    """Conversations for ``--conversations`` from the file's text (read by
    ``tokmon.inputs.load_conversations``): JSON Lines, one conversation a line, as
    ``{"turns": ["first question", {"user": "…", "assistant": "recorded reply"}, …]}``
    (optional ``system`` and ``kind``) or ``{"messages": [{"role", "content"}, …]}``; or a
    ShareGPT JSON array (``conversations`` of ``{"from", "value"}``)."""
    out: list[Script] = []
    if raw.lstrip().startswith("["):
        try:
            data = loads(raw)
        except ValueError as e:
            raise WorkloadError(f"--conversations: {path} is not valid JSON: {e}") from None
        for i, item in enumerate(data):
            where = f"--conversations: {path} item {i + 1}"
            conv = item.get("conversations") if isinstance(item, dict) else None
            if not isinstance(conv, list):
                raise WorkloadError(f"{where} has no 'conversations' list")
            out.append(_script(_messages(conv, where, "from", "value"), "chat", where))
    else:
        for where, obj in json_objects(raw.splitlines(), f"--conversations: {path}"):
            kind = str(obj.get("kind") or "chat")
            if "messages" in obj:
                msgs = _messages(obj["messages"], where, "role", "content")
            elif isinstance(obj.get("turns"), list):
                msgs = [("system", str(obj["system"]))] if obj.get("system") else []
                for t in obj["turns"]:
                    if isinstance(t, str):
                        msgs.append(("user", t))
                    elif isinstance(t, dict) and isinstance(t.get("user"), str):
                        msgs.append(("user", t["user"]))
                        if isinstance(t.get("assistant"), str):
                            msgs.append(("assistant", t["assistant"]))
                    else:
                        raise WorkloadError(f"{where}: a turn is neither text nor {{'user': …}}")
            else:
                raise WorkloadError(f"{where} has neither 'turns' nor 'messages'")
            out.append(_script(msgs, kind, where))
    if not out:
        raise WorkloadError(f"--conversations: {path} holds no conversations")
    return tuple(out)


def key_numbers(
    text: str, option: str, known: tuple[str, ...], noun: str, value: str, hi: float = math.inf
) -> dict[str, float]:
    """``a=0.3,b=0.5``: a number in [0, ``hi``] for each of the ``known`` names (``--mix``
    weights, the simulator's ``--wrong`` rates), each fault named in one line."""
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise WorkloadError(f"{option}: expected {noun.upper()}={value.upper()}, got {part!r}")
        k, v = part.split("=", 1)
        k = k.strip()
        if k not in known:
            raise WorkloadError(f"{option}: unknown {noun} {k!r} ({noun}s: {', '.join(known)})")
        try:
            w = float(v)
        except ValueError:
            raise WorkloadError(f"{option}: {value} of {k} is not a number: {v!r}") from None
        if not (0 <= w <= hi and math.isfinite(w)):  # (NaN fails this too)
            bound = "must be >= 0" if hi == math.inf else f"must be in [0, {hi:g}]"
            raise WorkloadError(f"{option}: {value} of {k} {bound}")
        out[k] = w
    return out


def parse_mix(text: str) -> dict[str, float]:
    """``code=0.3,chat=0.5,creative=0.2`` -> normalised weights."""
    weights = key_numbers(text, "--mix", KINDS, "kind", "weight")
    total = sum(weights.values())
    if total <= 0:
        raise WorkloadError("--mix: weights must sum to a positive number")
    return {k: w / total for k, w in weights.items()}


def parse_duration(text: str) -> float:
    """``30s``, ``10m``, ``2h``, ``1h30m``, ``500ms`` or plain seconds -> seconds."""
    t = str(text).strip().lower()
    if not t:
        raise WorkloadError("empty duration")
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if v < 0 or not math.isfinite(v):
            raise WorkloadError(f"a duration must be >= 0, got {text!r}")
        return v
    total = 0.0
    pos = 0
    for m in re.finditer(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", t):
        if m.start() != pos:
            raise WorkloadError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h)")
        pos = m.end()
        n = float(m.group(1))
        total += n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if pos != len(t) or pos == 0:
        raise WorkloadError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h)")
    return total
