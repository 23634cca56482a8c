"""A verdict on the client: was tokmon's own host free enough to measure?

tokmon stamps every send and every read with the kernel's clock, so a busy client does
not move a timestamp. But a busy host still costs: an open-loop schedule is sent late
(the send lag), and a server on the same host competes with tokmon for the cores — on
two cores shared with vLLM, the dashboard's run gave TTFT p50 909 ms where the headless
one gave 29 ms. This reducer keeps, through the run, the host's CPU, tokmon's own (its
process and its engines) and the engines' loop lag, and says for which share of the run
the host was saturated, which figures that may have inflated, and whether the server
shares the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokmon.model.contract.registry import Block, Context, Judgment, register
from tokmon.model.data.records import EngineStatus
from tokmon.model.data.samples import HostSample
from tokmon.model.env.environment import host_of, is_loopback
from tokmon.model.statistics.sketch import Quantiles

BUSY_HOST_PCT = 90.0  # the host's CPU, of all its cores: saturated at or above
LATE_LOOP_MS = 50.0  # an engine's event loop this late: the client is the limit
NOTABLE_SHARE = 0.05  # a share of the run worth a warning


@dataclass(frozen=True, slots=True)
class ClientView:
    """The client's verdict while the run goes, where its host was saturated (the
    dashboard's panel says so beside the figures it may inflate)."""

    verdict: str

    def panel_lines(self) -> tuple[str, ...]:
        return (f"WARNING: {self.verdict}",)


@register
class ClientLoad(Judgment):
    name = "client"

    def __init__(self, ctx: Context | None = None) -> None:
        super().__init__(ctx or Context(None, ()))
        self.host = Quantiles(np.float64)  # host CPU %, a sample a second
        self.own = Quantiles(np.float64)  # tokmon's CPU, % of one core
        self.lag = Quantiles(np.float64)  # engines' loop lag, ms, a status a flush
        self.busy = 0  # host samples at or above BUSY_HOST_PCT
        self.late = 0  # statuses at or above LATE_LOOP_MS

    def sample(self, t: int, h: Any) -> None:
        if not isinstance(h, HostSample):
            return
        if h.host_cpu_pct is not None:
            self.host.extend(np.array([h.host_cpu_pct]))
            self.busy += h.host_cpu_pct >= BUSY_HOST_PCT
        if h.self_cpu_pct is not None:
            self.own.extend(np.array([h.self_cpu_pct]))

    def status(self, st: EngineStatus) -> None:
        self.lag.extend(np.array([st.loop_lag_ms]))
        self.late += st.loop_lag_ms >= LATE_LOOP_MS

    def server_local(self) -> bool:
        """Whether a server of the run shares tokmon's host: a managed one, or a URL on
        the loopback."""
        st = self.ctx.settings
        if st is None:
            return False
        for arm in self.ctx.arms:
            where = st.server_of(arm)
            if where.startswith("serve:") or is_loopback(host_of(where)[1]):
                return True
        return False

    def view(self, now: int, reads: dict[str, Any]) -> ClientView | None:
        busy = self.busy >= NOTABLE_SHARE * len(self.host) if len(self.host) else False
        late = self.late >= NOTABLE_SHARE * len(self.lag) if len(self.lag) else False
        if not (busy or late):  # (the shares first: no quantile read on a quiet tick)
            return None
        s = self.summary(self.server_local())
        return None if s is None else ClientView(s["verdict"])

    def block(self, t_end: int, reads: dict[str, Any]) -> Block | None:
        s = self.summary(self.server_local())
        if s is None:
            return None
        head = "WARNING: " if notable(s) else "client: "
        return Block("client", s, (head + s["verdict"],))

    def summary(self, server_local: bool) -> dict[str, Any] | None:
        """The summary's ``client`` block: the figures and the verdict in words."""
        if not len(self.host) and not len(self.lag):
            return None
        busy = self.busy / len(self.host) if len(self.host) else 0.0
        late = self.late / len(self.lag) if len(self.lag) else 0.0

        def q(x: Quantiles, p: float) -> float | None:
            return round(x.quantiles([p])[0], 1) if len(x) else None

        out: dict[str, Any] = {
            "host_cpu_pct_p50": q(self.host, 50),
            "host_cpu_pct_p95": q(self.host, 95),
            "tokmon_cpu_pct_p50": q(self.own, 50),  # (of one core)
            "tokmon_cpu_pct_p95": q(self.own, 95),
            "loop_lag_ms_p95": q(self.lag, 95),
            "loop_lag_ms_max": q(self.lag, 100),
            "host_saturated_share": round(busy, 4),
            "loop_late_share": round(late, 4),
            "server_on_this_host": server_local,
        }
        out["verdict"] = client_verdict(out)
        return out


def notable(c: dict[str, Any]) -> bool:
    """Whether the host was busy for a share of the run worth a warning."""
    return c["host_saturated_share"] >= NOTABLE_SHARE or c["loop_late_share"] >= NOTABLE_SHARE


def client_verdict(c: dict[str, Any]) -> str:
    """The client in one sentence: free, or saturated for a share of the run and what
    that may have inflated."""
    busy, late = c["host_saturated_share"], c["loop_late_share"]
    own = c.get("tokmon_cpu_pct_p50")
    mine = "" if own is None else f"tokmon used {own:.0f}% of a core at its median"
    if busy < NOTABLE_SHARE and late < NOTABLE_SHARE:
        return (f"the client's host was free enough to measure ({mine}, the host "
                f"{c.get('host_cpu_pct_p50') or 0:.0f}%)")  # fmt: skip
    parts = []
    if busy >= NOTABLE_SHARE:
        parts.append(f"the client's host was saturated (CPU ≥ {BUSY_HOST_PCT:.0f}%) for "
                     f"{busy:.0%} of the run")  # fmt: skip
    if late >= NOTABLE_SHARE:
        parts.append(f"tokmon's event loop was late (≥ {LATE_LOOP_MS:.0f} ms) for {late:.0%} "
                     f"of it, up to {c.get('loop_lag_ms_max') or 0:.0f} ms")  # fmt: skip
    out = "; ".join(parts) + (f" ({mine})" if mine else "")
    if c.get("server_on_this_host"):
        out += (": the server runs on this host and competed with tokmon for its cores — "
                "TTFT, TPOT and throughput may be slower than the server alone would give "
                "(run --headless, or tokmon on another host)")  # fmt: skip
    else:
        out += (": the timestamps are the kernel's, but an open-loop rate may have been "
                "sent late (see the send lag) and streams started late")  # fmt: skip
    return out
