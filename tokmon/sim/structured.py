"""The simulator's structured output and tool calls: an answer under a JSON schema that
validates against it (guided decoding's), and a tool call whose arguments validate
against the tool's parameters — each a script of small pieces, streamed a token each."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

from tokmon.model.workloads.images import png_size

_WORDS = ("checkout", "latency", "search", "billing", "ingest", "gateway")


def value_for(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that validates against ``schema`` (the common JSON Schema keywords)."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[rng.randrange(len(enum))]
    t = schema.get("type")
    if t == "object":
        props = schema.get("properties") or {}
        return {str(k): value_for(v, rng, depth + 1) for k, v in list(props.items())[:32]}
    if t == "array":
        return [value_for(schema.get("items"), rng, depth + 1) for _ in range(2)]
    if t == "integer":
        return rng.randint(1, 500)
    if t == "number":
        return round(rng.uniform(0, 100), 2)
    if t == "boolean":
        return rng.random() < 0.8
    return _WORDS[rng.randrange(len(_WORDS))]


def structured_script(body: dict[str, Any], chat: bool, rng: random.Random) -> tuple[str, str]:
    """(the JSON text to stream, the tool's name or "") of a request under a schema or
    with a tool it must call; ("", "") for any other."""
    if not chat:
        return "", ""
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        js = rf.get("json_schema")
        schema = js.get("schema") if isinstance(js, dict) else None
        return json.dumps(value_for(schema, rng)), ""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        fn = tools[0].get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return json.dumps(value_for(fn.get("parameters"), rng)), fn["name"][:64]
    return "", ""


def pieces(text: str, size: int = 4) -> list[str]:
    """``text`` in pieces of ``size`` characters: a token each."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


PATCH = 28  # a vision model's patch: an image costs a token per 28 × 28 pixels


def image_tokens_of(part: dict[str, Any]) -> int:
    """The prompt tokens of one content part: an ``image_url`` PNG's patches, else 0."""
    if part.get("type") != "image_url":
        return 0
    url = (
        (part.get("image_url") or {}).get("url")
        if isinstance(part.get("image_url"), dict)
        else None
    )
    if not isinstance(url, str) or not url.startswith("data:image/png;base64,"):
        return 0
    try:
        head = base64.b64decode(url[22:54])  # (its first 24 bytes: the IHDR's size)
    except ValueError:
        return 0
    wh = png_size(head)
    if wh is None:
        return 0
    w, h = wh
    return -(-w // PATCH) * -(-h // PATCH)
