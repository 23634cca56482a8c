"""Speed is not quality: send the same greedy prompts to every arm and compare outputs.

Greedy outputs can differ by floating-point noise alone, so the result is a figure (the
share of identical outputs and where the others first diverge), never a verdict.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from tokmon.bodies import fetch
from tokmon.gate import loads
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.workload import TEXT_KINDS, synthetic_prompt
from tokmon.textsafe import clean_text


def fixed_prompts(n: int) -> list[Any]:
    rng = np.random.default_rng(20261203)
    # (text kinds: a tool call's answer has no text to compare, and a schema's answer is
    # a grammar's, not the arm's)
    return [synthetic_prompt(TEXT_KINDS[i % len(TEXT_KINDS)], 48, rng) for i in range(n)]


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def generate(
    client: httpx.Client, arm: Arm, prompt: Any, max_tokens: int, seed: int, headers: dict[str, str]
) -> str | None:
    endpoint = arm.endpoint or "chat"
    body: dict[str, Any] = {
        "model": arm.model,
        **prompt.body_fields(endpoint),
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": seed,
        "stream": False,
    }
    body.update(arm.body)
    url = arm.url.rstrip("/") + (
        "/completions" if endpoint == "completions" else "/chat/completions"
    )
    try:
        r = fetch(client, "POST", url, json=body, headers={**headers, **arm.headers})
        if r.status_code != 200:
            return None
        ch = loads(r.content)["choices"][0]
        return str(ch["message"]["content"] if "message" in ch else ch["text"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


def check_outputs(
    arms: list[Arm],
    n: int,
    *,
    headers: dict[str, str] | None = None,
    max_tokens: int = 64,
    seed: int = 1234,
    timeout: float = 120.0,
    insecure: bool = False,
) -> dict[str, Any]:
    """Compare every arm's greedy outputs with the first arm's, prompt by prompt."""
    prompts = fixed_prompts(n)
    headers = headers or {}
    out: dict[str, Any] = {
        "prompts": n,
        "max_tokens": max_tokens,
        "baseline": arms[0].name,
        "arms": {},
    }
    with httpx.Client(timeout=timeout, verify=not insecure, trust_env=False) as c:
        texts = {
            a.name: [generate(c, a, p, max_tokens, seed, headers) for p in prompts] for a in arms
        }
    base = texts[arms[0].name]
    for a in arms[1:]:
        same = failed = 0
        div: list[int] = []
        examples: list[dict[str, Any]] = []
        for i, (x, y) in enumerate(zip(base, texts[a.name], strict=True)):
            if x is None or y is None:
                failed += 1
                continue
            d = first_divergence(x, y)
            if d is None:
                same += 1
            else:
                div.append(d)
                if len(examples) < 3:
                    examples.append(
                        {
                            "prompt": i,
                            "at": d,
                            "baseline": clean_text(x[max(0, d - 10) : d + 30], False),
                            "other": clean_text(y[max(0, d - 10) : d + 30], False),
                        }
                    )
        compared = n - failed
        out["arms"][a.name] = {
            "compared": compared,
            "identical": same,
            "failed": failed,
            "identical_share": same / compared if compared else None,
            "first_divergence_median": float(np.median(div)) if div else None,
            "examples": examples,
        }
    return out
