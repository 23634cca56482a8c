"""The way to the server, per request (#61): a registered judgment.

From tokmon's own client's stamps, per arm, whole run: the share of requests that
opened a new connection (the rest reused a kept-alive one), a new connection's setup
p50 and its phases (name resolution, TCP, TLS), and the time to the response's first
byte (TTFB) p50. A request's TTFT counts from its send, after any setup: the setup is
the client's wait before it (in its send lag), and shown here beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.registry import Block, Judgment, register
from tokmon.model.sketch import Quantiles
from tokmon.model.table import RequestTable

# the dashboard shows the way to the server where 1 request in this many opens a connection
# (its setup is then in the TTFT's upper quantiles; a ladder's new streams stay under it)
CHURN_SHARE_INV = 5
_PHASES = ("connect_ms", "dns_ms", "tcp_ms", "tls_ms", "ttfb_ms")


@dataclass
class _Arm:
    requests: int = 0
    fresh: int = 0
    q: dict[str, Quantiles] = field(
        default_factory=lambda: {k: Quantiles(np.float64) for k in _PHASES}
    )


@dataclass(frozen=True, slots=True)
class ConnectionView:
    """Per arm: (arm, requests, new connections, setup p50, dns, tcp, tls, ttfb p50)."""

    arms: tuple[tuple[str, int, int, float | None, float | None, float | None,
                      float | None, float | None], ...]  # fmt: skip

    def panel_lines(self) -> tuple[str, ...]:
        """On the dashboard only where connections are opened often (a fifth of requests or
        more: a proxy or server that closes them, their setup in the TTFT); kept alive,
        the report says it."""
        if not any(fresh * CHURN_SHARE_INV >= n > 0 for _a, n, fresh, *_ in self.arms):
            return ()
        return self.lines()

    def lines(self) -> tuple[str, ...]:
        out = ["the way to the server (whole run, tokmon's stamps):"]
        for arm, n, fresh, setup, dns, tcp, tls, ttfb in self.arms:
            line = f"  {arm}: {fresh} of {n} requests opened a connection"
            if setup is not None:
                parts = [f"{k} {v:.2f}" for k, v in (("DNS", dns), ("TCP", tcp), ("TLS", tls))
                         if v is not None]  # fmt: skip
                line += f" (setup p50 {setup:.2f} ms: " + " + ".join(parts) + ")"
            if ttfb is not None:
                line += f" · TTFB p50 {ttfb:.1f} ms"
            out.append(line)
        return tuple(out)


@register
class Connection(Judgment):
    name = "connection"

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.arms: dict[str, _Arm] = {}

    def requests(self, tb: RequestTable) -> None:
        c = tb.cols
        rows = np.flatnonzero(tb.counted() & (c["t_send"] != np.iinfo(np.int64).min))
        for name, sel in tb.by_arm(rows):
            a = self.arms.setdefault(name, _Arm())
            a.requests += int(sel.size)
            a.fresh += int((~np.isnan(c["connect_ms"][sel])).sum())
            for k in _PHASES:
                v = c[k][sel]
                a.q[k].extend(v[~np.isnan(v)])

    def view(self, now: int, reads: dict[str, Any]) -> ConnectionView | None:
        if not self.arms:
            return None
        rows = []
        for n, a in self.arms.items():
            q = a.q
            rows.append((n, a.requests, a.fresh, q["connect_ms"].median(), q["dns_ms"].median(),
                         q["tcp_ms"].median(), q["tls_ms"].median(), q["ttfb_ms"].median()))  # fmt: skip
        return ConnectionView(tuple(rows))

    def block(self, t_end: int, reads: dict[str, Any]) -> Block | None:
        v = self.view(t_end, reads)
        if v is None:
            return None
        figures = {"arms": {arm: {"requests": n, "new_connections": fresh, "setup_ms_p50": setup,
                                  "dns_ms_p50": dns, "tcp_ms_p50": tcp, "tls_ms_p50": tls,
                                  "ttfb_ms_p50": ttfb}
                            for arm, n, fresh, setup, dns, tcp, tls, ttfb in v.arms}}  # fmt: skip
        return Block("connection", figures, v.lines())
