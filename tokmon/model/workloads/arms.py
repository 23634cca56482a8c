"""Arms: named sets of request settings, compared against each other (METRICS.md A/B)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from tokmon.model.data.coerce import json_value
from tokmon.model.env.redact import redact_argv, redact_text, short_command


class ArmError(ValueError):
    pass


ARM_KEYS = ("url", "serve", "model", "body", "header", "endpoint")
PORT = "{port}"  # in a serve command: the loopback port tokmon picked


@dataclass(frozen=True)
class Arm:
    name: str
    url: str = ""
    model: str = ""
    endpoint: str = ""
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # a server tokmon starts, warms and stops itself (argv, "{port}" in it): one GPU,
    # one instance, the arms taking turns
    serve: tuple[str, ...] = ()

    def server(self) -> str:
        """Its server as a header names it: the URL, or the managed command, short and
        without its secrets."""
        return f"serve: {short_command(self.serve)}" if self.serve else self.url


def serve_argv(name: str, value: Any) -> tuple[str, ...]:
    """A serve command as an argument list: a list as it is, a string split as a shell
    would (no shell runs it); it must say where to listen (``{port}``)."""
    if isinstance(value, str):
        text = value.strip()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            text = text[1:-1]
        try:
            argv = shlex.split(text)
        except ValueError as e:
            raise ArmError(f"arm {name}: serve is not a valid command line: {e}") from None
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        argv = list(value)
    else:
        raise ArmError(f"arm {name}: serve must be a command line or a list of arguments")
    if not argv:
        raise ArmError(f"arm {name}: serve is empty")
    if not any(PORT in a for a in argv):
        raise ArmError(
            f"arm {name}: serve must listen where tokmon says: put {PORT} in it "
            "(e.g. --port {port})"
        )
    return tuple(argv)


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside braces, brackets or quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return [p for p in (x.strip() for x in parts) if p]


NAME_MAX = 32
_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{NAME_MAX}}}")


def check_name(name: str, where: str = "--arm") -> None:
    """An arm's name becomes a file name (its server's log), a label of /metrics and a
    column of every report: letters, digits, '-', '_' and '.', at most 32, and not a
    path ('.', '..')."""
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        shown = redact_text(name)[:40].encode("ascii", "backslashreplace").decode()
        raise ArmError(
            f"{where}: arm name {shown!r}: use letters, digits, '-', '_' and '.' "
            f"(at most {NAME_MAX})"
        )


def _shown(text: str) -> str:
    """An --arm value as an error message may echo it: without its secrets."""
    return " ".join(redact_argv(text.split(" ")))


def parse_arm(text: str) -> Arm:
    """``NAME:key=value,...`` with keys url, model, endpoint, body (JSON), header (K:V);
    ``serve=`` takes the rest of the value, commas included (a command line)."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise ArmError(f"--arm {_shown(text)!r}: an arm needs a name, as NAME:key=value,...")
    check_name(name)
    kw: dict[str, Any] = {"body": {}, "headers": {}}
    m = re.search(r"(?:^|,)\s*serve=", rest)
    if m is not None:
        kw["serve"] = serve_argv(name, rest[m.end() :])
        rest = rest[: m.start()]
    for part in _split_top(rest):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise ArmError(f"--arm {name}: expected key=value, got {_shown(part)!r}")
        if key not in ARM_KEYS:
            raise ArmError(f"--arm {name}: unknown key {key!r} (keys: {', '.join(ARM_KEYS)})")
        value = value.strip()
        if key == "body":
            try:
                obj = json.loads(value)
            except ValueError as e:
                raise ArmError(f"--arm {name}: body is not valid JSON: {e}") from None
            if not isinstance(obj, dict):
                raise ArmError(f"--arm {name}: body must be a JSON object")
            kw["body"].update(obj)
        elif key == "header":
            hk, colon, hv = value.partition(":")
            if not colon or not hk.strip():
                raise ArmError(f"--arm {name}: header must be K:V, got {hk.strip()[:40]!r}:…")
            kw["headers"][hk.strip()] = hv.strip()
        elif key == "endpoint":
            if value not in ("chat", "completions"):
                raise ArmError(f"--arm {name}: endpoint must be chat or completions")
            kw["endpoint"] = value
        elif key == "serve":
            kw["serve"] = serve_argv(name, value)
        else:
            kw[key] = value
    if kw.get("serve") and kw.get("url"):
        raise ArmError(f"--arm {name}: give url= or serve=, not both")
    return Arm(name=name, **kw)


def arm_from_mapping(name: str, obj: dict[str, Any]) -> Arm:
    """An arm from a TOML table ``[arms.NAME]``."""
    check_name(name, "--config")
    unknown = set(obj) - {"url", "serve", "model", "endpoint", "body", "headers"}
    if unknown:
        raise ArmError(
            f"arm {name}: unknown {'key' if len(unknown) == 1 else 'keys'} {', '.join(sorted(unknown))}"
        )
    body = obj.get("body", {})
    headers = obj.get("headers", {})
    if not isinstance(body, dict) or not isinstance(headers, dict):
        raise ArmError(f"arm {name}: body and headers must be tables")
    try:
        json_value(body, f"arm {name}: body")
    except ValueError as e:
        raise ArmError(str(e)) from None
    serve = serve_argv(name, obj["serve"]) if "serve" in obj else ()
    if serve and obj.get("url"):
        raise ArmError(f"arm {name}: give url or serve, not both")
    return Arm(
        name=name,
        serve=serve,
        url=str(obj.get("url", "")),
        model=str(obj.get("model", "")),
        endpoint=str(obj.get("endpoint", "")),
        body=dict(body),
        headers={str(k): str(v) for k, v in headers.items()},
    )


def check_unique(arms: list[Arm]) -> None:
    seen: set[str] = set()
    for a in arms:
        if a.name in seen:
            raise ArmError(f"two arms are named {a.name!r}: arm names must be unique")
        seen.add(a.name)
