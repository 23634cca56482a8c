"""Secrets in command lines, by rule, in one place.

A server command (``serve=``), tokmon's own command line and what a server says of
itself are written down (the recording, the summary, reports, logs): never with a
secret in them. The rule: the value of any option whose name says it is one (it holds
key, token, secret, password, passwd, pass, auth, credential, cookie, signature, sig,
jwt or sas as a word: ``--api-key v``, ``--hf_token=v``, ``--admin-api-key``,
``--auth-token``, ``--session-cookie``, ``--sas-sig``, ``--jwt``, ``-k``), a
``NAME=value`` word whose NAME says so (an environment variable), the value of a header
whose name says so (``-H 'X-Api-Key: v'``, ``'Cookie: v'``), a bearer or basic
credential anywhere in an argument (``'Authorization: Bearer …'``), and the password of
a URL. A name given to ``--show-arg`` is kept as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tokmon.textsafe import REDACTED

# words of an option's name that make its value a secret (``--max-tokens`` and
# ``--tokenizer`` hold none of them: words are matched whole)
SECRET_WORDS = frozenset(
    ("key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd",
     "pwd", "pass", "auth", "credential", "credentials", "bearer", "cookie", "cookies",
     "signature", "sig", "jwt", "sas", "authorization")
)  # fmt: skip
# short options that are keys by convention (curl, openssl, many servers' -k KEY)
SHORT_SECRETS = ("-k",)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9._~+/=:-]{4,})")
# a header whose name holds a secret word: its value (``X-Api-Key: v``, ``Cookie: v``)
_SECRET_HEADER = (r"[\w-]*(?:key|token|auth|secret|cookie|signature|sig|password|passwd|"
                  r"jwt|authorization|credential)[\w-]*")  # fmt: skip
_AUTH_HEADER = re.compile(rf"(?i)\b({_SECRET_HEADER})(\s*:\s*)(\S.*)")
_HEADER_NAME = re.compile(rf"(?i){_SECRET_HEADER}:")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def _norm(name: str) -> str:
    return name.lstrip("-").lower().replace("_", "-").replace(".", "-")


def is_secret_name(name: str, shown: Iterable[str] = ()) -> bool:
    """Whether an option or variable of this name holds a secret."""
    n = _norm(name)
    if any(_norm(s) == n for s in shown):
        return False
    if name in SHORT_SECRETS:
        return True
    return any(w in SECRET_WORDS for w in n.split("-"))


def redact_text(text: str) -> str:
    """Credentials inside one argument: bearer/basic tokens, an authorization header's
    value, a URL's user:password."""
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _USERINFO.sub(REDACTED + "@", text)


def _scan(argv: Sequence[str], shown: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """One walk over a command line: it as it may be written down, and its secrets."""
    written: list[str] = []
    found: list[str] = []
    hide = False
    for a in argv:
        if hide and a.strip("'\"").lower() in ("bearer", "basic"):
            written.append(a)  # 'Authorization:' 'Bearer' 'TOKEN': the token is the secret
            continue
        if hide:  # the value after a secret option, or after 'Bearer'
            written.append(REDACTED)
            found.append(a.strip("'\"") or a)
            hide = False
            continue
        if a.lower() in ("bearer", "basic"):  # 'Authorization:' 'Bearer' 'TOKEN'
            written.append(a)
            hide = True
            continue
        if _HEADER_NAME.fullmatch(a.strip("'\"")):  # 'X-Api-Key:' 'VALUE' (split on spaces)
            written.append(a)
            hide = True
            continue
        name, eq, value = a.partition("=")
        if a.startswith("-") and is_secret_name(name, shown):
            if eq:
                written.append(f"{name}={REDACTED}")
                found.append(value)
            else:
                written.append(a)
                hide = True
            continue
        if (
            eq
            and not a.startswith("-")
            and re.fullmatch(r"[A-Za-z_][\w.-]*", name)
            and is_secret_name(name, shown)
        ):
            written.append(f"{name}={REDACTED}")
            found.append(value)
            continue
        if " " in a.strip():  # a command line in one argument (--arm 'b:serve=… --api-key k')
            inner_w, inner_f = _scan(a.split(" "), shown)
            written.append(" ".join(inner_w))
            found.extend(inner_f)
            continue
        found.extend(m.group(3) for m in _BEARER.finditer(a))
        found.extend(m.group(3) for m in _AUTH_HEADER.finditer(a))
        for m in _USERINFO.finditer(a):
            found += [m.group(0)[:-1], m.group(0)[:-1].partition(":")[2]]
        written.append(redact_text(a))
    return written, found


def secrets_in(argv: Sequence[str], shown: Iterable[str] = ()) -> list[str]:
    """The secret values of a command line (to scrub them from every output too); a list
    of keys (``--api-keys k1,k2``) is each of them too."""
    _, found = _scan(argv, tuple(shown))
    return [p for s in found for p in dict.fromkeys([s, *s.split(",")]) if p]


def redact_argv(argv: Sequence[str], shown: Iterable[str] = ()) -> list[str]:
    """``argv`` as it may be written down."""
    return _scan(argv, tuple(shown))[0]


def short_command(argv: Sequence[str], words: int = 4) -> str:
    """A managed server's command in a few words, redacted: what a header names."""
    red = redact_argv(argv)
    head = [red[0].rsplit("/", 1)[-1], *red[1:words]] if red else []
    return " ".join(head) + (" …" if len(red) > words else "")


def redact_tree(obj: object, found: list[str], path: str = "") -> object:
    """A server's JSON answer as it may be written down: the value of every key whose
    name says it is a secret (SGLang's ``server_args.api_key``) replaced; ``found`` gets
    the path of each, so the record can warn that the server publishes it."""
    if isinstance(obj, dict):
        out: dict[object, object] = {}
        for k, v in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if is_secret_name(str(k)) and v not in (None, "", [], {}, False):
                out[k] = REDACTED
                found.append(where)
            else:
                out[k] = redact_tree(v, found, where)
        return out
    if isinstance(obj, list):
        return [redact_tree(v, found, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
