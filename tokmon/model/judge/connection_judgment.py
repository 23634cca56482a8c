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

from tokmon.model.contract.registry import PerArm, register
from tokmon.model.data.table import RequestTable
from tokmon.model.statistics.sketch import Quantiles

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
class ArmWay:
    """One arm's way to the server: its requests, those that opened a connection, the
    setup's p50 and its phases' (ms; None where no request had one), the TTFB p50."""

    arm: str
    requests: int
    fresh: int
    setup: float | None
    dns: float | None
    tcp: float | None
    tls: float | None
    ttfb: float | None

    def text(self) -> str:
        line = f"{self.arm}: {self.fresh} of {self.requests} requests opened a connection"
        if self.setup is not None:
            parts = [f"{k} {v:.2f}" for k, v in (("DNS", self.dns), ("TCP", self.tcp),
                                                ("TLS", self.tls)) if v is not None]  # fmt: skip
            line += f" (setup p50 {self.setup:.2f} ms: " + " + ".join(parts) + ")"
        if self.ttfb is not None:
            line += f" · TTFB p50 {self.ttfb:.1f} ms"
        return line

    def churns(self) -> bool:
        """A fifth of its requests or more opened a connection."""
        return self.fresh * CHURN_SHARE_INV >= self.requests > 0


@dataclass(frozen=True, slots=True)
class ConnectionView:
    arms: tuple[ArmWay, ...]

    def panel_lines(self) -> tuple[str, ...]:
        """On the dashboard only where connections are opened often (a fifth of requests or
        more: a proxy or server that closes them, their setup in the TTFT); kept alive,
        the report says it."""
        return self.lines() if any(a.churns() for a in self.arms) else ()

    def lines(self) -> tuple[str, ...]:
        return ("the way to the server (whole run, counted requests that ended ok, "
                "tokmon's stamps):",
                *("  " + a.text() for a in self.arms))  # fmt: skip

    def of(self, arm: str) -> ArmWay | None:
        return next((a for a in self.arms if a.arm == arm), None)


@register
class Connection(PerArm[_Arm]):
    name = "connection"
    state = _Arm

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        a.requests += int(sel.size)
        a.fresh += int((~np.isnan(c["connect_ms"][sel])).sum())
        for k in _PHASES:
            v = c[k][sel]
            a.q[k].extend(v[~np.isnan(v)])

    def view(self, now: int, reads: dict[str, Any]) -> ConnectionView | None:
        if not self.arms:
            return None
        return ConnectionView(tuple(
            ArmWay(n, a.requests, a.fresh, *(a.q[k].median() for k in _PHASES))
            for n, a in self.arms.items()
        ))  # fmt: skip

    def figures(self, v: ConnectionView) -> dict[str, Any]:
        def ms(x: float | None) -> float | None:  # (to the µs, as the time split gives it)
            return None if x is None else round(float(x), 3)

        return {"arms": {a.arm: {"requests": a.requests, "new_connections": a.fresh,
                                 "setup_ms_p50": ms(a.setup), "dns_ms_p50": ms(a.dns),
                                 "tcp_ms_p50": ms(a.tcp), "tls_ms_p50": ms(a.tls),
                                 "ttfb_ms_p50": ms(a.ttfb)}
                         for a in v.arms}}  # fmt: skip
