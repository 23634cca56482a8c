"""The environment block of ``tokmon env``, the reports and ``report --compare``: the
same labelled lines (``model.environment.rows``) in text, Markdown and HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from tokmon.model.env.environment import ServerEnv, differences, rows
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


def arm_env_lines(arms: Sequence[tuple[str, str, ServerEnv]], fmt: str = "text") -> list[str]:
    """The servers of several arms: the lines that differ between the first two arms
    first (one row each, every arm's value), then each arm's whole record under its
    name and its server as run."""
    (a0, _, e0), (a1, _, e1) = arms[0], arms[1]
    diff = [(k, va, vb) for k, va, vb, d in differences(e0, e1) if d]
    out: list[str] = []
    if fmt == "md":
        out += [f"**the servers differ (arm {_md(a0)} · arm {_md(a1)})**", "",
                f"| | {_md(a0)} | {_md(a1)} |", "|---|---|---|"]  # fmt: skip
        out += [f"| {_md(k)} | {_md(va)} | {_md(vb)} |" for k, va, vb in diff]
        out.append("")
    else:
        out.append(f"the servers differ: arm {_c(a0)} · arm {_c(a1)}"
                   + ("" if diff else " (in nothing they reported)"))  # fmt: skip
        out += [f"  {_c(k):<24} {_c(va)}  ·  {_c(vb)}" for k, va, vb in diff]
    for arm, shown, e in arms:
        head = f"arm {_c(arm)}: {_c(shown) or _c(e.url)}"
        if fmt == "md":
            out += [f"**{_md(head)}**", "", "| | |", "|---|---|"]
            out += [f"| {_md(k)} | {_md(v)} |" for k, v in rows(e)]
            out.append("")
        else:
            out.append(head)
            out += [f"  {_c(k):<24} {_c(v)}" for k, v in rows(e)]
    return out


def arm_env_html(arms: Sequence[tuple[str, str, ServerEnv]]) -> str:
    """``arm_env_lines`` as HTML: what differs between the first two arms' servers, then
    each arm's record under its name and its server as run."""
    (a0, _, e0), (a1, _, e1) = arms[0], arms[1]
    diff = [(k, va, vb) for k, va, vb, d in differences(e0, e1) if d]
    h = html.escape
    parts = [f"<h3>the servers differ</h3><table class='env'><tr><th></th><th>{h(_c(a0))}</th>"
             f"<th>{h(_c(a1))}</th></tr>"]  # fmt: skip
    parts += [f"<tr><th>{h(_c(k))}</th><td>{h(_c(va))}</td><td>{h(_c(vb))}</td></tr>"
              for k, va, vb in diff]  # fmt: skip
    parts.append("</table>")
    for arm, shown, e in arms:
        body = "".join(f"<tr><th>{h(_c(k))}</th><td>{h(_c(v))}</td></tr>" for k, v in rows(e))
        parts.append(f"<h3>arm {h(_c(arm))}: {h(_c(shown) or _c(e.url))}</h3>"
                     f"<table class='env'>{body}</table>")  # fmt: skip
    return "".join(parts)


def env_html(envs: Sequence[ServerEnv]) -> str:
    parts = []
    for e in envs:
        body = "".join(
            f"<tr><th>{html.escape(_c(k))}</th><td>{html.escape(_c(v))}</td></tr>"
            for k, v in rows(e)
        )
        parts.append(f"<h3>{html.escape(_c(e.url))}</h3><table class='env'>{body}</table>")
    return "".join(parts)


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def machine_rows(header: dict[str, Any]) -> list[tuple[str, str]]:
    """The client machine and tokmon of a recording, as labelled lines."""
    host: dict[str, Any] = _d(header.get("host"))
    gpu: dict[str, Any] = _d(header.get("gpu"))
    gpus: list[Any] = gpu["gpus"] if isinstance(gpu.get("gpus"), list) else []
    mem = host.get("mem_gib")
    return [
        ("tokmon", str(header.get("tokmon_version") or "?")),
        ("client CPU", f"{host.get('cpu') or '?'} · {host.get('cores') or '?'} cores"),
        ("client memory", f"{mem:.0f} GiB" if isinstance(mem, (int, float)) else "?"),
        ("GPU", ", ".join(map(str, gpus)) or "none recorded"),
        ("GPU driver", str(gpu.get("driver") or "—")),
    ]


Machines = tuple[list[tuple[str, str]], list[tuple[str, str]]]


def compare_rows(
    a: Sequence[ServerEnv], b: Sequence[ServerEnv], machines: Machines = ([], [])
) -> tuple[list[tuple[str, str, str, bool]], int]:
    """The machine and the first server of each run side by side: (label, A, B,
    differs) and how many differ."""
    ea, eb = (a[0] if a else None), (b[0] if b else None)
    mb = dict(machines[1])
    diff = [(k, va, mb.get(k, "—"), va != mb.get(k, "—")) for k, va in machines[0]]
    diff += differences(ea, eb)
    return diff, sum(1 for *_, d in diff if d)


def compare_lines(
    a: Sequence[ServerEnv],
    b: Sequence[ServerEnv],
    fmt: str = "text",
    machines: Machines = ([], []),
) -> tuple[list[str], int]:
    """``compare_rows`` as text, Markdown or HTML lines; and how many lines differ."""
    diff, n = compare_rows(a, b, machines)
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
