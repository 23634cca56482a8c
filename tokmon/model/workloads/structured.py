"""Structured output and tool calls as kinds of the workload (#61).

* ``guided``: a request under a JSON schema (``response_format: json_schema``: vLLM's,
  SGLang's guided decoding). Every other one of its requests is the same prompt sent
  without the schema (kind ``guided-free``): the control that says what the grammar
  costs in TPOT and TTFT, on the same prompts, with its interval.
* ``tools``: a request with a tool it must call (``tools``, ``tool_choice: required``):
  a stream of tool-call deltas, measured as its own kind.

Each is checked as it comes back: the JSON parses and validates against the schema; the
call names the tool and its arguments parse and validate against its parameters. A
small validator of the schemas tokmon itself sends (objects, their required keys, the
types of their properties, enums, arrays): the answers are only ever read.
"""

from __future__ import annotations

from typing import Any

from tokmon.gate import loads

GUIDED = "guided"
GUIDED_FREE = "guided-free"  # the same prompts, without the schema: the control
TOOLS = "tools"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "value": {"type": "integer"},
        "unit": {"type": "string", "enum": ["ms", "s", "tokens", "requests"]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "value", "unit", "ok"],
    "additionalProperties": False,
}

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_metric",
        "description": "Read one metric of a service over a window.",
        "parameters": {
            "type": "object",
            "properties": {
                "service": {"type": "string"},
                "metric": {"type": "string", "enum": ["latency", "errors", "throughput"]},
                "window_minutes": {"type": "integer"},
            },
            "required": ["service", "metric", "window_minutes"],
        },
    },
}


def guided_body() -> dict[str, Any]:
    """What a guided request adds to its body."""
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "record", "schema": SCHEMA}}}  # fmt: skip


def tools_body() -> dict[str, Any]:
    return {"tools": [TOOL], "tool_choice": "required"}


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def validate(value: Any, schema: dict[str, Any], at: str = "$") -> str:
    """Why ``value`` does not validate against ``schema`` ("" where it does). Bounded: the
    schemas are tokmon's own, a few levels deep."""
    t = schema.get("type")
    if isinstance(t, str) and t in _TYPES:
        ok = isinstance(value, _TYPES[t]) and not (t in ("integer", "number")
                                                  and isinstance(value, bool))  # fmt: skip
        if not ok:
            return f"{at}: not a{'n' if t[0] in 'aeiou' else ''} {t}"
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"{at}: {str(value)[:40]!r} is not one of {', '.join(map(str, enum))}"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k in schema.get("required") or []:
            if k not in value:
                return f"{at}: no {k!r}"
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in props]
            if extra:
                return f"{at}: {str(extra[0])[:40]!r} is not a property"
        for k, sub in props.items():
            if k in value and isinstance(sub, dict):
                why = validate(value[k], sub, f"{at}.{k}")
                if why:
                    return why
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, x in enumerate(value[:1000]):
            why = validate(x, schema["items"], f"{at}[{i}]")
            if why:
                return why
    return ""


def check_json(text: str) -> str:
    """A guided answer: "" where it is one JSON object that validates, else why not."""
    try:
        obj = loads(text, what="the answer")  # (the gate: size and depth bounded)
    except ValueError:
        return "not JSON"
    return validate(obj, SCHEMA)


def check_call(name: str, arguments: str) -> str:
    """A tool call: "" where it names the tool and its arguments validate, else why not."""
    want = TOOL["function"]["name"]
    if name != want:
        return f"called {name[:40]!r}, not {want!r}" if name else "no tool called"
    try:
        args = loads(arguments, what="the call's arguments")
    except ValueError:
        return "arguments not JSON"
    return validate(args, TOOL["function"]["parameters"])
