"""Before a run: how to build prompts of an exact prompt-token count on this server.

Two measurements, both against the server itself:

* which filler words are one token each in running text, asked of the server's own
  tokenizer (``POST /tokenize``: vLLM's and SGLang's ``{"prompt"}`` form, llama.cpp's
  ``{"content"}``; llama-cpp-python's ``/extras/tokenize``); a word is one token when
  eight more of it add eight tokens;
* what the rest of a prompt of each task kind costs (BOS, the chat template, the unique
  head, the kind's opening sentence), from two real requests per kind (``max_tokens`` 1)
  whose filler differs by a known number of words: the server's ``usage.prompt_tokens`` is
  the count that matters, template included, whatever the tokenizer endpoint applies.

Without a tokenizer endpoint the same two requests give the mean tokens per word, and the
lengths are near, not exact (the summary says which). Without ``usage`` nothing can be
measured: the prompts stay word-sized, and the summary says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from tokmon.bodies import BodyTooLarge, fetch
from tokmon.engine.worker import build_body, endpoint_url, request_headers
from tokmon.engines import TOKENIZE_FORMS
from tokmon.gate import loads
from tokmon.inputs import InputError, check_input
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.workload import (
    HEAD_WORDS,
    WORDS,
    Prompt,
    PromptShape,
    compose,
    prefix_text,
)

LEADS_SAMPLE = 8  # filler words of the short probe
LEADS_LONG = 40  # of the long one


class CalibrationError(Exception):
    pass


TRIES = 3  # a probe is asked this many times before the measurement gives up
BACKOFF_S = (0.1, 0.4)  # between the tries


def post(client: httpx.Client, url: str, **kw: Any) -> httpx.Response:
    """One probe, retried on a transport error (a reset, a garbled status line) or an
    answer that says "later" (5xx, 429): one fault among the probes is not a server that
    cannot count. Raises the last transport error; returns the last answer."""
    last: Exception | None = None
    r: httpx.Response | None = None
    for i in range(TRIES):
        if i:
            time.sleep(BACKOFF_S[min(i - 1, len(BACKOFF_S) - 1)])
        try:
            r = fetch(client, "POST", url, **kw)
        except BodyTooLarge as e:  # (a probe's answer is one token: this is no answer)
            raise CalibrationError(str(e)) from None
        except httpx.TransportError as e:  # (RemoteProtocolError: a garbled status line)
            last, r = e, None
            continue
        if r.status_code != 429 and not 500 <= r.status_code < 600:
            return r
    if r is not None:
        return r
    assert last is not None
    raise last


def _root(url: str) -> str:
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _body(key: str, model: str) -> Callable[[str], dict[str, Any]]:
    """A tokenizer endpoint's body for a text: vLLM's and SGLang's ``prompt`` form names
    the model and asks for no special tokens (the text alone is counted)."""
    if key == "prompt":
        return lambda t: {"model": model, "prompt": t, "add_special_tokens": False}
    return lambda t: {key: t}


def tokenizer(
    client: httpx.Client, arm: Arm, headers: dict[str, str]
) -> Callable[[str], int] | None:
    """A function counting the server's tokens in a text, or None where it has no
    tokenizer endpoint (or one that answers in no known form)."""
    root = _root(arm.url)
    for tf in TOKENIZE_FORMS:  # (each engine's, in ``tokmon/engines``)
        url = root + tf.path
        form = _body(tf.key, arm.model)
        try:
            r = post(client, url, json=form("Ticket"), headers=headers)
            if r.status_code != 200 or not _count(loads(r.content)):
                continue
        except (httpx.HTTPError, ValueError):
            continue

        def count(text: str, url: str = url, form: Callable[[str], dict[str, Any]] = form) -> int:
            r = post(client, url, json=form(text), headers=headers)
            r.raise_for_status()
            n = _count(loads(r.content))
            if n is None:
                raise CalibrationError("/tokenize answered without tokens")
            return n

        return count
    return None


def local_tokenizer(path: str) -> Callable[[str], int]:
    """A token counter from a Hugging Face ``tokenizer.json`` (or a folder holding one),
    through the ``tokenizers`` package (no deep-learning stack needed): for servers with
    no tokenizer endpoint. Raises CalibrationError with one line."""
    from pathlib import Path

    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CalibrationError(
            "--tokenizer needs the tokenizers package: pip install 'tokmon-live[tokenizer]'"
        ) from None
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    try:
        check_input(str(p), "--tokenizer")
    except InputError as e:
        raise CalibrationError(str(e)) from None
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as e:  # the library raises plain Exceptions for a bad file
        why = "no such file" if not p.exists() else str(e).splitlines()[0][:120]
        raise CalibrationError(f"--tokenizer: cannot read {p}: {why}") from None

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def _count(obj: Any) -> int | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("count"), int):
        return int(obj["count"])
    if isinstance(obj.get("tokens"), list):
        return len(obj["tokens"])
    return None


UNITS_NEEDED = 8  # distinct one-token units: a request's unique head draws from them
SYNTH_UNITS = 16


def unit_words(count: Callable[[str], int]) -> tuple[str, ...]:
    """The filler words that are one token each where they stand in a prompt (after a
    space, after other words). Where too few of the common words are (a byte- or
    character-level tokenizer: "four bytes a token"), made-up words of one length are
    tried, the shortest length whose words are one token each: a handful of calls."""
    base = "Ticket the"
    n0 = count(base)

    def one(w: str) -> bool:
        return count(base + f" {w}" * 8) - n0 == 8

    found = tuple(w for w in WORDS if one(w))
    if len(found) >= UNITS_NEEDED:
        return found
    rng = np.random.default_rng(20261205)
    letters = np.array(list("bcdfghjklmnpqrstvwxz"))
    for length in range(1, 9):
        if not one("q" * length):
            continue
        # (sorted: a set's order varies from run to run, the units must not)
        made = sorted({"".join(rng.choice(letters, length)) for _ in range(4 * SYNTH_UNITS)})
        words = tuple(w for w in made[:SYNTH_UNITS] if one(w))
        if len(words) >= UNITS_NEEDED:
            return words
    return found


def prompt_tokens(client: httpx.Client, cfg: RunConfig, arm: Arm, prompt: Prompt) -> int:
    """The server's own count of a prompt: one request, one token out, not streamed."""
    body = build_body(cfg, arm, prompt, 1)
    body["stream"] = False
    body.pop("stream_options", None)
    hdr = request_headers(cfg, arm) | {"accept": "application/json"}
    r = post(client, endpoint_url(arm), content=json.dumps(body).encode(), headers=hdr)
    if r.status_code != 200:
        raise CalibrationError(f"a probe request answered HTTP {r.status_code}")
    try:
        n = loads(r.content)["usage"]["prompt_tokens"]
    except (ValueError, KeyError, TypeError):
        raise CalibrationError("the server's answer has no usage.prompt_tokens") from None
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n < 10_000_000:
        raise CalibrationError(f"usage.prompt_tokens is not a count: {n!r}")
    return n


def calibrate(
    cfg: RunConfig,
    arm: Arm,
    kinds: tuple[str, ...],
    local: Callable[[str], int] | None = None,
) -> PromptShape:
    """The prompt shape for ``arm``'s server (raises CalibrationError with the reason);
    ``local``: a tokenizer of the model's own (``--tokenizer``), used instead of the
    server's endpoint."""
    rng = np.random.default_rng(12345)
    hdr = request_headers(cfg, arm)
    with httpx.Client(timeout=60.0, verify=not cfg.insecure, trust_env=False) as client:
        count = local if local is not None else tokenizer(client, arm, hdr)
        units = unit_words(count) if count is not None else ()
        exact = len(units) >= UNITS_NEEDED
        words = units if exact else WORDS
        overhead: list[tuple[str, int]] = []
        per_word: list[float] = []
        for kind in kinds:
            got = []
            for n in (LEADS_SAMPLE, LEADS_LONG):
                head = " ".join(words[i] for i in rng.integers(0, len(words), HEAD_WORDS))
                fill = " ".join(words[i] for i in rng.integers(0, len(words), n))
                sp = cfg.shared_prefix
                # a prefix of the same length that the run never sends: the probes leave
                # the server's prefix cache as they found it for the run's own prefixes
                prefix = prefix_text(-1 - n, sp.words, words) if sp is not None else ""
                got.append(prompt_tokens(client, cfg, arm, compose(kind, head, fill, prefix)))
            pw = (got[1] - got[0]) / (LEADS_LONG - LEADS_SAMPLE)
            if exact and pw != 1.0:
                # the words were one token each to the tokenizer but not in the request:
                # the lengths are near, not exact, and the summary says so
                exact = False
            per_word.append(pw)
            overhead.append((kind, round(got[0] - pw * LEADS_SAMPLE)))
    pw_all = 1.0 if exact else float(np.mean(per_word))
    if not pw_all > 0:
        raise CalibrationError("the prompt grew by no tokens as words were added")
    return PromptShape(
        units=units if exact else (),
        overhead=tuple(overhead),
        source=("tokenizer file" if local is not None else "tokenize") if exact else "usage",
        per_word=pw_all,
    )
