"""The server's own view: scrape Prometheus ``/metrics`` and map each engine's names to
neutral fields. Parsing uses prometheus_client's text parser (well kept, handles every
quirk of the exposition format); rates come from counter deltas; a counter that goes
down is a server restart: an event and a gap, never a negative rate.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tokmon.engines import METRIC_MAPS
from tokmon.engines.base import EngineMap
from tokmon.model.judge.probe_state import INCONSISTENT
from tokmon.model.workloads.defaults import WINDOW_S
from tokmon.probes.base import Sampler

COUNTERS = (
    "preemptions",
    "prompt_tokens",
    "gen_tokens",
    "drafts",
    "draft_tokens",
    "accepted",
    "skipped_sum",
    "skipped_count",
    "prefix_queries",
    "prefix_hits",
)


# A /metrics body is read up to this size, and only the series of known engines in it
# are parsed, at most MAX_SERIES of them: a hostile or huge exporter (200,000 series,
# 90 MB) would otherwise cost the parent process hundreds of MB and CPU that the
# measured streams share on a small machine.
MAX_BODY = 4 << 20
MAX_SERIES = 20_000


class MetricsTooLarge(ValueError):
    pass


def known_lines(text: str) -> str:
    """The lines of ``text`` that belong to a known engine's series (and their comments)."""
    markers = tuple(e.marker for e in METRIC_MAPS)
    keep = []
    for line in text.splitlines():
        name = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if name.startswith(markers):
            keep.append(line)
            if len(keep) > 3 * MAX_SERIES:  # HELP + TYPE + samples
                raise MetricsTooLarge(f"more than {MAX_SERIES} series")
    return "\n".join(keep) + "\n"


def flatten(text: str) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Sample name -> value summed over label sets; and per-position series. Samples of
    no known engine are not parsed; NaN and infinite values (legal in the exposition
    format) are left out, never summed into a figure."""
    flat: dict[str, float] = {}
    per_pos: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(known_lines(text)):
        for s in fam.samples:
            v = float(s.value)
            if not math.isfinite(v):
                continue
            flat[s.name] = flat.get(s.name, 0.0) + v
            pos = s.labels.get("position")
            if pos is not None:
                d = per_pos.setdefault(s.name, {})
                d[pos] = d.get(pos, 0.0) + v
    return flat, per_pos


def detect(flat: dict[str, float]) -> EngineMap | None:
    for e in METRIC_MAPS:
        if any(k.startswith(e.marker) for k in flat):
            return e
    return None


def _first(flat: dict[str, float], names: tuple[str, ...]) -> float | None:
    for n in names:
        if n in flat:
            return flat[n]
    return None


def neutral(text: str) -> dict[str, Any]:
    """One scrape as neutral fields (gauges as they are, counters cumulative)."""
    flat, per_pos = flatten(text)
    e = detect(flat)
    if e is None:
        return {"engine": None}
    out: dict[str, Any] = {"engine": e.engine}
    for field in (
        "running",
        "waiting",
        "kv",
        "preemptions",
        "prompt_tokens",
        "gen_tokens",
        "drafts",
        "draft_tokens",
        "accepted",
        "acc_rate_gauge",
        "acc_len_gauge",
        "prefix_queries",
        "prefix_hits",
        "prefix_hit_gauge",
    ):
        v = _first(flat, getattr(e, field))
        if v is not None:
            out[field] = v
    for n in e.per_pos:
        if n in per_pos:
            out["per_pos"] = {int(k): v for k, v in per_pos[n].items() if k.isdigit()}
    for field in ("queue_hist", "prefill_hist", "itl_hist"):
        for n in getattr(e, field):
            if n + "_sum" in flat and n + "_count" in flat:
                out[field] = (flat[n + "_sum"], flat[n + "_count"])
                break
    if e.skipped_hist:
        s = flat.get(e.skipped_hist + "_sum")
        c = flat.get(e.skipped_hist + "_count")
        if s is not None and c is not None:
            out["skipped_sum"], out["skipped_count"] = s, c
    return out


def hist_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[float] | None:
    """Between two scrapes: the seconds and the count added to each of the queue,
    prefill and per-token histograms ([queue s, n, prefill s, n, per-token s, n]; 0 for a
    histogram the server lacks). None where nothing was added or a figure went back."""
    out: list[float] = []
    for field in ("queue_hist", "prefill_hist", "itl_hist"):
        if field in a and field in b:
            ds, dn = b[field][0] - a[field][0], b[field][1] - a[field][1]
            if ds < 0 or dn < 0:
                return None
            out += [ds, dn]
        else:
            out += [0.0, 0.0]
    return out if any(out[1::2]) else None


class ServerMetricsProbe(Sampler):
    """Scrapes one server's /metrics (1 Hz by default) for the arms that use it."""

    name = "server"

    def __init__(
        self,
        url: str,
        arms: tuple[str, ...] = (),
        interval: float = 1.0,
        window_s: float = WINDOW_S,
        headers: dict[str, str] | None = None,
        insecure: bool = False,
    ) -> None:
        super().__init__(interval)
        self.url = url
        self.arms = arms
        self.window_s = window_s
        self.headers = headers or {}
        self.insecure = insecure
        self.history: deque[tuple[int, dict[str, Any]]] = deque()
        self._prev: tuple[int, dict[str, Any]] | None = None
        self._client: Any = None
        self._unavailable = False
        self.engine: str | None = None
        self.restarts = 0
        self._planned = 0  # (ns) a restart tokmon itself makes, expected until then

    def expect_restart(self, within_s: float = 600.0) -> None:
        """A restart tokmon makes (a managed server's arm taking its turn): the next
        counters that go back are that restart, already told by its own events, not a
        restart detected."""
        import time as _t

        self._planned = _t.perf_counter_ns() + int(within_s * 1e9)

    def ident(self) -> dict[str, Any]:
        return {"url": self.url, "arms": list(self.arms)}

    def _scrape(self) -> str | None:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=2.0, verify=not self.insecure, trust_env=False)
        try:
            with self._client.stream("GET", self.url, headers=self.headers) as r:
                if r.status_code != 200:
                    self._note_unavailable(f"HTTP {r.status_code}")
                    return None
                body = bytearray()
                for part in r.iter_bytes():
                    body += part
                    if len(body) > MAX_BODY:
                        self._note_unavailable(f"body over {MAX_BODY >> 20} MiB: not read")
                        return None
        except httpx.HTTPError as e:
            self._note_unavailable(f"{type(e).__name__}")
            return None
        if self._unavailable:
            self._unavailable = False
            self.event("probe", f"server metrics available again at {self.url}")
        return body.decode("utf-8", "replace")

    def _note_unavailable(self, why: str) -> None:
        if not self._unavailable:
            self._unavailable = True
            self.event("probe", f"no server metrics at {self.url} ({why}); the run goes on")

    def sample(self) -> dict[str, Any]:
        import time as _t

        text = self._scrape()
        if text is None:
            return {"server_note": "no server metrics"}
        try:
            cur = neutral(text)
        except MetricsTooLarge as e:
            self._note_unavailable(str(e))
            return {"server_note": f"/metrics too large ({e})"}
        except Exception:
            return {"server_note": "unparseable /metrics"}
        return self.ingest(_t.perf_counter_ns(), cur)

    def ingest(self, t: int, cur: dict[str, Any]) -> dict[str, Any]:
        """Fold one scrape in; returns the live fields. Separate from I/O for tests."""
        if cur.get("engine") is None:
            return {"server_note": "unknown metrics (no known engine)"}
        self.engine = cur["engine"]
        prev = self._prev
        reset = False
        delta: list[float] | None = None
        if prev is not None:
            for k in COUNTERS:
                if k in cur and k in prev[1] and cur[k] < prev[1][k]:
                    reset = True
            if reset:
                self.history.clear()
                if t <= self._planned:  # the restart tokmon made: said by its events
                    self._planned = 0
                else:
                    self.restarts += 1
                    self.event(
                        "restart",
                        f"server restart detected at {self.url} (counters went back)",
                        {"url": self.url},
                    )
            else:
                delta = [
                    cur.get(k, 0) - prev[1].get(k, 0)
                    for k in ("drafts", "draft_tokens", "accepted", "prefix_queries", "prefix_hits")
                ]
        self._prev = (t, cur)
        self.history.append((t, cur))
        lim = t - int(self.window_s * 1e9)
        while len(self.history) > 1 and self.history[1][0] <= lim:
            self.history.popleft()
        out: dict[str, Any] = {
            "engine": cur["engine"],
            "url": self.url,
            "arms": list(self.arms),
            "t_ns": t,
        }
        if delta is not None and any(delta):
            out["delta"] = delta  # recorded, so a report recomputes the same acceptance
        if prev is not None and not reset:
            split = hist_deltas(prev[1], cur)
            if split is not None:
                out["split"] = split  # (recorded: a replay splits the time the same way)
        if "kv" in cur:
            out["kv_pct"] = 100.0 * cur["kv"]
        if "waiting" in cur:
            out["queue"] = cur["waiting"]
        if "running" in cur:
            out["running"] = cur["running"]
        if "preemptions" in cur:
            out["preemptions"] = cur["preemptions"]
        out.update(self.window_acceptance())
        out.update(self.window_prefix_hits())
        return out

    def window_prefix_hits(self) -> dict[str, Any]:
        """The prefix cache's hit rate over the window: hit tokens / looked-up tokens, from
        the server's counters (else its own gauge)."""
        h = self.history
        if len(h) >= 2:
            a, b = h[0][1], h[-1][1]
            dq = b.get("prefix_queries", 0) - a.get("prefix_queries", 0)
            dh = b.get("prefix_hits", 0) - a.get("prefix_hits", 0)
            if dq > 0 and 0 <= dh <= dq:
                return {"prefix_hit_pct": 100.0 * dh / dq}
        g = h[-1][1].get("prefix_hit_gauge") if h else None
        if g is not None and 0 <= g <= 1:
            return {"prefix_hit_pct": 100.0 * g}
        return {}

    def window_acceptance(self) -> dict[str, Any]:
        """Acceptance over the window from counter deltas (source rank 1), else gauges."""
        h = self.history
        if len(h) >= 2:
            a, b = h[0][1], h[-1][1]
            dd = b.get("draft_tokens", 0) - a.get("draft_tokens", 0)
            da = b.get("accepted", 0) - a.get("accepted", 0)
            dn = b.get("drafts", 0) - a.get("drafts", 0)
            if dd > 0 and da > dd:
                # impossible counters: flagged, never an acceptance over 100%
                return {"spec_source": "server counters", "spec_note": INCONSISTENT}
            if dd > 0:
                out = {"spec_acceptance_rate": da / dd, "spec_source": "server counters"}
                if dn > 0:
                    out["spec_acceptance_length"] = 1 + da / dn
                if "per_pos" in a and "per_pos" in b and dn > 0:
                    out["spec_per_pos"] = {
                        k: (b["per_pos"].get(k, 0) - a["per_pos"].get(k, 0)) / dn
                        for k in sorted(b["per_pos"])
                    }
                return out
            sc = b.get("skipped_count", 0) - a.get("skipped_count", 0)
            if sc > 0:
                ss = b.get("skipped_sum", 0) - a.get("skipped_sum", 0)
                return {"spec_acceptance_length": 1 + ss / sc, "spec_source": "server counters"}
        last = h[-1][1] if h else {}
        if "acc_rate_gauge" in last or "acc_len_gauge" in last:
            out = {"spec_source": "server gauges"}
            if "acc_rate_gauge" in last:
                if 0 <= last["acc_rate_gauge"] <= 1:
                    out["spec_acceptance_rate"] = last["acc_rate_gauge"]
                else:
                    out["spec_note"] = f"acceptance gauge out of range ({last['acc_rate_gauge']:g})"
            if "acc_len_gauge" in last:
                out["spec_acceptance_length"] = last["acc_len_gauge"]
            return out
        return {}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def metrics_url_for(api_url: str) -> str:
    """The /metrics next to an API base URL: http://h:8000/v1 -> http://h:8000/metrics."""
    base = api_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return base + "/metrics"
