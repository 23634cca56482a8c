"""What one inference engine is to tokmon, as data: the names of its ``/metrics`` series,
where it keeps its configuration, its tokenizer endpoint and the per-request figures its
final chunk carries. Each engine is one module of this package holding one ``Engine``;
the package's ``ENGINES`` is the registry every reader takes its tables from.

Pure data: nothing here reads a socket or a file (the probes and the engine's chunk
reader do, with these tables).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def dig(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in an answer's nested objects, None where any step is not an
    object (the one walk of the paths these tables give)."""
    for k in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


@dataclass(frozen=True)
class EngineMap:
    """Where an engine keeps each neutral ``/metrics`` field (first name present wins)."""

    engine: str
    marker: str  # a name prefix that identifies the engine
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    kv: tuple[str, ...] = ()  # 0-1 fraction
    preemptions: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    gen_tokens: tuple[str, ...] = ()
    drafts: tuple[str, ...] = ()
    draft_tokens: tuple[str, ...] = ()
    accepted: tuple[str, ...] = ()
    per_pos: tuple[str, ...] = ()
    acc_rate_gauge: tuple[str, ...] = ()
    acc_len_gauge: tuple[str, ...] = ()
    skipped_hist: str = ""  # TGI: histogram of accepted tokens per step
    prefix_queries: tuple[str, ...] = ()  # prompt tokens looked up in the prefix cache
    prefix_hits: tuple[str, ...] = ()  # of which found
    prefix_hit_gauge: tuple[str, ...] = ()  # 0-1 (SGLang)
    # histograms (names without _sum/_count) of where a request's time went: waiting
    # for a batch slot, scheduled → first token, and each output token's time
    queue_hist: tuple[str, ...] = ()
    prefill_hist: tuple[str, ...] = ()
    itl_hist: tuple[str, ...] = ()
    # a series prefix registered only when speculative decoding is configured (vLLM): its
    # presence says spec is on, its per-position series how many tokens
    spec_prefix: str = ""


@dataclass(frozen=True)
class Field:
    """One neutral configuration field: where it is in an answer (JSON keys, or an info
    gauge's label) and how to read it: int, float, bool, text, or ``not`` (a bool that
    says the opposite, e.g. SGLang's ``disable_radix_cache``)."""

    name: str
    path: tuple[str, ...]
    kind: str = "text"


def field_at(name: str, *path: str, kind: str = "text") -> Field:
    return Field(name, path, kind)


@dataclass(frozen=True)
class ConfigSource:
    """Where an engine keeps configuration: an endpoint's JSON answer, or (``metrics:``
    followed by a series name) the labels of an info gauge on /metrics."""

    engine: str
    endpoint: str
    fields: tuple[Field, ...]
    version: tuple[str, ...] = ()  # where the engine's version is, in the same answer


@dataclass(frozen=True)
class TokenizeForm:
    """A tokenizer endpoint at the server's root and the key its body puts the text under
    (``prompt`` also sends the model and no special tokens, as vLLM and SGLang take it)."""

    path: str
    key: str


@dataclass(frozen=True)
class SpecPath:
    """Per-request speculative-decoding figures in a final chunk: the object's path, and
    for each figure the keys it may be under (the first present is read)."""

    at: tuple[str, ...]
    draft: tuple[str, ...]
    accepted: tuple[str, ...]
    steps: tuple[str, ...] = ()
    length: tuple[str, ...] = ()
    # a key whose presence says drafting happened (llama.cpp sends draft_n only then)
    when: str = ""


@dataclass(frozen=True)
class TimingPath:
    """Where a server says a request's time went, in its final chunk: the object's path,
    and the keys of its queue wait, its prefill (scheduled → first token) and its time
    per output token, in ms — given as a mean (``itl``), or as a total over a count
    (``decode_total`` / ``decode_count``); ``cached``: prompt tokens found in its cache.
    ``any_of``: the keys one of which must be there for the object to be a timing."""

    at: tuple[str, ...]
    queue: str = ""
    prefill: str = ""
    itl: str = ""
    decode_total: str = ""
    decode_count: str = ""
    cached: str = ""
    any_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Engine:
    """One engine: its name, its tables, and what its answers carry per request."""

    name: str
    metrics: EngineMap | None = None
    config: ConfigSource | None = None
    tokenize: tuple[TokenizeForm, ...] = ()
    spec: SpecPath | None = None
    timing: TimingPath | None = None
    source: str = ""  # how its per-request figures are named (``response:vllm``)
