"""tokmon's own figures as Prometheus metrics (``--prometheus HOST:PORT``): the client's
view beside the server's own ``/metrics`` in the dashboards teams already have.

Counts and histograms are folded from the same request batches the live fold takes, with
numpy, a batch at a time (per request, not per token), in the parent process; so at the
end of a run the counters equal the summary exactly. Gauges are read from the fold when
Prometheus scrapes. prometheus-client serves them (its exposition format and HTTP server
are well kept); the engines, which measure, never do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from tokmon.model.data.facts import Fact, Requests
from tokmon.model.data.records import Event

# Bucket bounds in seconds, fitted to LLM latencies (the first token in tens of ms to
# tens of seconds under load; a token in ms; a whole answer in seconds to minutes).
BUCKETS = {
    "ttft": (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5,
             2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
    "tpot": (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
             0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0),
    "e2e": (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
            90.0, 120.0, 180.0, 300.0, 600.0),
    "max_chunk_gap": (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
}  # fmt: skip
COLUMN = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "max_chunk_gap": "max_gap_ms"}
HELP = {
    "ttft": "Time to first token as the client saw it (counted ok requests)",
    "tpot": "Time per output token after the first, per request (counted ok requests)",
    "e2e": "Request time from send to the last byte (counted ok requests)",
    "max_chunk_gap": "Longest gap between two chunks of a request (counted ok requests)",
}


@dataclass
class _Hist:
    bounds: np.ndarray
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    total: float = 0.0

    def add(self, seconds: np.ndarray) -> None:
        if not self.counts.size:
            self.counts = np.zeros(self.bounds.size + 1, np.int64)
        # le semantics: a value equal to a bound belongs to that bucket
        idx = np.searchsorted(self.bounds, seconds, side="left")
        self.counts += np.bincount(idx, minlength=self.bounds.size + 1)
        self.total += float(seconds.sum())


@dataclass(frozen=True)
class LiveGauges:
    """What the gauges show at a scrape, read from the live session."""

    arms: tuple[str, ...]
    arm: str
    level: float
    mode: str
    in_flight: int
    send_lag_s: float
    ladder_step: int | None
    acceptance: dict[str, tuple[float, str]]  # arm -> (rate 0-1, source)


MAX_KINDS = 64  # label values per label: the kinds a scrape names one by one
MAX_LABEL = 64  # characters of a label value taken from a file
OTHER_KIND = "other"


class TokmonCollector(Collector):
    """The metrics, kept as plain arrays and read out at each scrape."""

    def __init__(self, gauges: Callable[[], LiveGauges] | None = None) -> None:
        self.lock = threading.Lock()
        self.gauges = gauges
        self.hists: dict[tuple[str, str, str], _Hist] = {}  # (metric, arm, kind)
        self.requests: dict[tuple[str, str], int] = {}  # (arm, outcome)
        self.excluded: dict[tuple[str, str], int] = {}  # (arm, warmup|settle)
        self.tokens: dict[str, int] = {}
        self.alerts: dict[str, int] = {}
        # the kinds given a label of their own: the first MAX_KINDS seen; the rest are
        # "other" (50k kinds made a 14 MB exposition and 1.5 s scrapes)
        self.kinds: set[str] = set()
        self.kinds_folded = 0

    def _kind_label(self, kind: str) -> str:
        kind = kind[:MAX_LABEL]
        if kind in self.kinds:
            return kind
        if len(self.kinds) < MAX_KINDS:
            self.kinds.add(kind)
            return kind
        self.kinds_folded += 1
        return OTHER_KIND

    # ------------------------------------------------------------------ folding
    def fact(self, fact: Fact) -> None:
        if isinstance(fact, Requests):
            self._requests(fact)
        elif isinstance(fact, Event) and fact.kind == "alert":
            kind = fact.data.get("alert")
            with self.lock:
                k = str(kind) if isinstance(kind, str) else "other"
                self.alerts[k] = self.alerts.get(k, 0) + 1

    def _requests(self, fact: Requests) -> None:
        tb = fact.table
        if tb.n == 0:
            return
        c = tb.cols
        # integer codes, not strings: a batch costs a few numpy calls (the names come
        # from the table's vocabulary only for the groups present)
        arm_c, out_c, kind_c = c["arm"], c["outcome"], c["kind"]
        names = tb.vocab
        warm, settle = c["warmup"], c["settle"] & ~c["warmup"]
        counted_ok = (out_c == tb.code("outcome", "ok")) & ~warm & ~c["settle"]
        with self.lock:
            for ac in np.unique(arm_c):
                arm = str(names["arm"][ac])
                a = arm_c == ac
                for oc, n in zip(*np.unique(out_c[a], return_counts=True), strict=True):
                    key = (arm, str(names["outcome"][oc]))
                    self.requests[key] = self.requests.get(key, 0) + int(n)
                for why, m in (("warmup", warm), ("settle", settle)):
                    n = int(np.count_nonzero(a & m))
                    if n:
                        self.excluded[(arm, why)] = self.excluded.get((arm, why), 0) + n
                ok = a & counted_ok
                if not ok.any():
                    continue
                self.tokens[arm] = self.tokens.get(arm, 0) + int(c["output_tokens"][ok].sum())
                for kc in np.unique(kind_c[ok]):
                    rows = ok & (kind_c == kc)
                    kind = self._kind_label(str(names["kind"][kc]) or "default")
                    for metric, col in COLUMN.items():
                        v = c[col][rows]
                        v = v[~np.isnan(v)]
                        if v.size:
                            h = self.hists.get((metric, arm, kind))
                            if h is None:
                                h = self.hists[(metric, arm, kind)] = _Hist(
                                    np.asarray(BUCKETS[metric])
                                )
                            h.add(v / 1000.0)

    # ------------------------------------------------------------------ exposition
    def collect(self) -> Iterator[Any]:
        with self.lock:
            hists = {k: (h.counts.copy(), h.total) for k, h in self.hists.items()}
            requests = dict(self.requests)
            excluded = dict(self.excluded)
            tokens = dict(self.tokens)
            alerts = dict(self.alerts)
            folded = self.kinds_folded
        kf = CounterMetricFamily(
            "tokmon_kind_label_folds",
            f"Request groups whose task kind was counted as kind={OTHER_KIND!r}: only the "
            f"first {MAX_KINDS} kinds get a label of their own",
        )
        kf.add_metric([], folded)
        yield kf
        for metric, bounds in BUCKETS.items():
            hist = HistogramMetricFamily(
                f"tokmon_{metric}_seconds", HELP[metric], labels=["arm", "kind"]
            )
            for (m, arm, kind), (counts, total) in sorted(hists.items()):
                if m != metric:
                    continue
                cum = np.cumsum(counts)
                buckets = [(_le(b), float(cum[i])) for i, b in enumerate(bounds)]
                buckets.append(("+Inf", float(cum[-1])))
                hist.add_metric([arm, kind], buckets, total)
            yield hist
        req = CounterMetricFamily(
            "tokmon_requests", "Requests that ended, by outcome (warm-up included)",
            labels=["arm", "outcome"],
        )  # fmt: skip
        for (arm, o), n in sorted(requests.items()):
            req.add_metric([arm, o], n)
        yield req
        exc = CounterMetricFamily(
            "tokmon_requests_excluded",
            "Requests left out of every figure: warm-up, or sent within --settle of a switch",
            labels=["arm", "why"],
        )
        for (arm, why), n in sorted(excluded.items()):
            exc.add_metric([arm, why], n)
        yield exc
        tok = CounterMetricFamily(
            "tokmon_output_tokens", "Output tokens of counted ok requests", labels=["arm"]
        )
        for arm, n in sorted(tokens.items()):
            tok.add_metric([arm], n)
        yield tok
        al = CounterMetricFamily("tokmon_alerts", "Alerts raised, by kind", labels=["kind"])
        for kind, n in sorted(alerts.items()):
            al.add_metric([kind], n)
        yield al
        if self.gauges is not None:
            yield from self._gauges(self.gauges())

    def _gauges(self, g: LiveGauges) -> Iterator[Any]:
        fam = GaugeMetricFamily("tokmon_arm_active", "1 for the arm now measured", labels=["arm"])
        for a in g.arms:
            fam.add_metric([a], 1.0 if a == g.arm else 0.0)
        yield fam
        yield GaugeMetricFamily(
            "tokmon_streams_in_flight", "Requests sent and not yet ended", value=g.in_flight
        )
        yield GaugeMetricFamily(
            "tokmon_send_lag_seconds",
            "How late the client sent its latest requests against their schedule",
            value=g.send_lag_s,
        )
        fam = GaugeMetricFamily(
            "tokmon_load_level", "Streams (concurrency) or requests/s (rate) asked for",
            labels=["mode"],
        )  # fmt: skip
        fam.add_metric([g.mode], g.level)
        yield fam
        if g.ladder_step is not None:
            yield GaugeMetricFamily(
                "tokmon_ladder_step", "The ladder step now running (0-based)", value=g.ladder_step
            )
        fam = GaugeMetricFamily(
            "tokmon_acceptance_rate",
            "Speculative decoding: accepted / drafted tokens over the live window",
            labels=["arm", "source"],
        )
        for arm, (rate, source) in sorted(g.acceptance.items()):
            fam.add_metric([arm, source], rate)
        yield fam


def _le(b: float) -> str:
    return repr(float(b))


class PromServer:
    """The collector on its own registry, served over HTTP from a thread of the parent."""

    def __init__(self, host: str, port: int, gauges: Callable[[], LiveGauges] | None) -> None:
        self.collector = TokmonCollector(gauges)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
