"""The environment block of ``tokmon env``, the reports and ``report --compare``: the
same labelled lines (``model.environment.rows``) in text, Markdown and HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence

from tokmon.model.environment import ServerEnv, differences, rows
from tokmon.textsafe import clean_text


def _c(s: str) -> str:
    return clean_text(s, False)


def _md(s: str) -> str:
    return _c(s).replace("|", "\\|")


def env_lines(envs: Sequence[ServerEnv], fmt: str = "text") -> list[str]:
    """One block per server: label and value, aligned (text) or a table (md)."""
    out: list[str] = []
    for e in envs:
        if fmt == "md":
            out += [f"**{_md(e.url)}**", "", "| | |", "|---|---|"]
            out += [f"| {_md(k)} | {_md(v)} |" for k, v in rows(e)]
            out.append("")
        else:
            out.append(f"server {_c(e.url)}")
            out += [f"  {_c(k):<24} {_c(v)}" for k, v in rows(e)]
    return out


def env_html(envs: Sequence[ServerEnv]) -> str:
    parts = []
    for e in envs:
        body = "".join(
            f"<tr><th>{html.escape(_c(k))}</th><td>{html.escape(_c(v))}</td></tr>"
            for k, v in rows(e)
        )
        parts.append(f"<h3>{html.escape(_c(e.url))}</h3><table class='env'>{body}</table>")
    return "".join(parts)


def compare_lines(
    a: Sequence[ServerEnv], b: Sequence[ServerEnv], fmt: str = "text"
) -> tuple[list[str], int]:
    """The first server of each run side by side, every difference marked; and how many
    lines differ."""
    ea, eb = (a[0] if a else None), (b[0] if b else None)
    diff = differences(ea, eb)
    n = sum(1 for *_, d in diff if d)
    if fmt == "md":
        out = ["| | A | B | |", "|---|---|---|---|"]
        out += [
            f"| {_md(k)} | {_md(va)} | {_md(vb)} | {'**differs**' if d else ''} |"
            for k, va, vb, d in diff
        ]
        return out, n
    if fmt == "html":
        out = ["<table class='env'><tr><th></th><th>A</th><th>B</th></tr>"]
        out += [
            f"<tr{' class=differs' if d else ''}><th>{html.escape(_c(k))}</th>"
            f"<td>{html.escape(_c(va))}</td><td>{html.escape(_c(vb))}</td></tr>"
            for k, va, vb, d in diff
        ]
        out.append("</table>")
        return out, n
    w = max((len(_c(va)) for _, va, _, _ in diff), default=10)
    w = min(w, 40)
    out = [f"  {'':<24} {'A':<{w}}   B"]
    for k, va, vb, d in diff:
        mark = "≠" if d else " "
        out.append(f"{mark} {_c(k):<24} {_c(va):<{w}}   {_c(vb)}")
    return out, n
