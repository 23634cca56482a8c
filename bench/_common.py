"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable

import httpx
import psutil

from tokmon.probes.server import neutral


def tree_cpu(pid: int) -> float:
    """user+sys CPU seconds of a process and all its children (alive ones)."""
    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for q in procs:
        try:
            t = q.cpu_times()
            total += (
                t.user
                + t.system
                + getattr(t, "children_user", 0)
                + getattr(t, "children_system", 0)
            )
        except psutil.Error:
            pass
    return total


def server_tokens(url: str) -> float:
    """Generation tokens so far, by the server's own counter."""
    text = httpx.get(url.replace("/v1", "/metrics"), timeout=5).text
    return float(neutral(text).get("gen_tokens", 0.0))


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def table(rows: list[list[str]]) -> str:
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [
        "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows
    ]
    out.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(out)


def machine() -> str:
    from tokmon.recording.writer import environment

    env = environment()
    return f"{env['cores']} cores · {env['cpu']} · {time.strftime('%Y-%m-%d')}"
