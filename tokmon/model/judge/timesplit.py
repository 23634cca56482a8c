"""Where the time goes: each arm's TTFT split into network, front end, queue and
prefill; its TPOT into the server's own time per token and the streaming path; TPOT by
the batch the server was running; and a speed-up explained by tokens per step and the
cost of a step.

A reducer of the fold: it takes the counted requests and the server's samples as they
come, keeps only what the split needs, and gives a frozen ``TimeSplit`` per arm. Its
sources, per docs/METRICS.md, best first:

* **per request** — the server's own account on the final chunk (vLLM
  ``--enable-per-request-metrics``: ``queue_time_ms``, ``time_to_first_token_ms`` from
  scheduling, ``mean_itl_ms``; llama.cpp ``timings.prompt_ms``, ``predicted_ms``): each
  request's remainder ``client TTFT − network − queue − prefill`` is its front end;
  the figures are medians over requests.
* **histogram** — the server's ``/metrics`` histograms (vLLM
  ``request_queue_time_seconds``, ``request_prefill_time_seconds``,
  ``inter_token_latency_seconds``): Δsum/Δcount over the arm's samples, against the
  client's mean; the figures are means.

The network is the round trip of a tiny GET on an open connection, sampled during the
run (it holds the server's HTTP handling of that GET too). A request that opened a new
connection waited for its setup (DNS, TCP, TLS) before the send, outside its TTFT: the
split gives that setup's p50 and how many requests paid it, beside the parts. A part is never larger than
the whole it is a part of: a request whose server-reported queue or prefill exceeds its
client TTFT, or whose parts leave a remainder below −1 ms, or whose server ITL exceeds
its client TPOT by more than 1 ms or a tenth of it, is a clock or definition mismatch — counted
and named, and left out of every part and of the client figure the parts are set
against, never shown as a share over 100% or a negative figure; over a tenth of the
requests, the parts it would have given are not given at all. The same holds for the
histograms' means against the client's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.data.samples import ServerSample
from tokmon.model.data.table import RequestTable, distinct
from tokmon.model.statistics.sketch import Quantiles, RowSample, row_keys
from tokmon.model.statistics.stats import ArmTotals, GrowArray, ratio_ci_requests
from tokmon.model.workloads.questions import KIND_PREFIX

Rtt = Callable[[str], "float | None"]  # an arm's network round trip (ms), where measured
SPLIT_EVERY_NS = 2_000_000_000  # the snapshot's split: medians over the run, not every tick

# a remainder this far below zero is a mismatch, not rounding (nor a first chunk read a
# little late on a busy client, which shortens the client's TPOT below the server's)
TOL_MS = 1.0
# A TPOT is an average over the tokens after the first: a first chunk read late by a busy
# client (its loop held up 30 ms on a loaded 2-core CI run, vLLM beside it) shortens it by
# that delay over the tokens, and makes the server's ITL look longer than the whole. Up to
# a tenth of the client's TPOT is such lateness, not a mismatch.
TPOT_TOL_SHARE = 0.1
MISMATCH_SHARE = 0.1  # above this share of mismatched requests, no front end is given
MIN_BIN = 3  # requests a batch-size bin needs to be shown
# batch-size bins: 1, 2, 3–4, 5–8, … (the cost of a step grows with the batch)
_EDGES = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025, 1 << 30)
SAMPLE_GAP_S = 5.0  # a running-batch sample further than this from a request: not its batch


@dataclass(frozen=True, slots=True)
class TtftSplit:
    """One arm's TTFT in parts (ms). ``stat``: "p50" (per-request source: medians over
    the requests the server reported on) or "mean" (histograms: means over the
    window). A part is None where it was not reported; ``front_holds`` then names
    what the remainder holds besides the front end."""

    client: float | None = None
    network: float | None = None
    queue: float | None = None
    prefill: float | None = None
    front: float | None = None
    source: str = ""  # "per-request", "histogram" or "" (no server figures)
    stat: str = "p50"
    n: int = 0  # requests the split covers
    mismatched: int = 0  # requests whose remainder was below −1 ms
    front_holds: tuple[str, ...] = ()  # the parts not reported, inside the remainder
    of: int = 0  # past ROWS requests: how many the uniform sample of ``n`` was drawn from
    # A new connection's setup (DNS, TCP, TLS), before the send and so not in TTFT: its
    # p50 over the requests that opened one (``setup_n`` of the arm's ``sent`` counted
    # requests that ended ok); for them the wait was the setup and the TTFT
    setup: float | None = None
    setup_n: int = 0
    sent: int = 0

    @property
    def mismatch(self) -> bool:
        return self.mismatched > MISMATCH_SHARE * (self.n + self.mismatched)

    def to_json(self) -> dict[str, Any]:
        return {
            "client": _r(self.client),
            "network": _r(self.network),
            "setup": (
                {"p50": _r(self.setup), "requests": self.setup_n, "of": self.sent}
                if self.setup_n
                else None
            ),
            "queue": _r(self.queue),
            "prefill": _r(self.prefill),
            "front": _r(self.front),
            "source": self.source or None,
            "stat": self.stat,
            "n": self.n,
            "mismatched": self.mismatched,
            "front_holds": list(self.front_holds),
            **({"sampled_of": self.of} if self.of else {}),
        }


@dataclass(frozen=True, slots=True)
class TpotSplit:
    """One arm's TPOT (ms): the server's own time per token and the rest, the
    streaming path (detokenisation, SSE framing, the network)."""

    client: float | None = None
    server_step: float | None = None
    stream: float | None = None
    source: str = ""
    stat: str = "p50"
    n: int = 0
    of: int = 0  # past ROWS requests: how many the uniform sample of ``n`` was drawn from
    mismatched: int = 0  # requests whose server ITL exceeded their client TPOT

    @property
    def mismatch(self) -> bool:
        return self.mismatched > MISMATCH_SHARE * (self.n + self.mismatched)

    def to_json(self) -> dict[str, Any]:
        return {
            "client": _r(self.client),
            "server_step": _r(self.server_step),
            "stream": _r(self.stream),
            "source": self.source or None,
            "stat": self.stat,
            "n": self.n,
            "mismatched": self.mismatched,
            **({"sampled_of": self.of} if self.of else {}),
        }


@dataclass(frozen=True, slots=True)
class BatchBin:
    """TPOT p50 of the requests decoded while the server ran ``lo``–``hi`` sequences."""

    lo: int
    hi: int
    tpot: float
    n: int

    @property
    def label(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}–{self.hi}"


@dataclass(frozen=True, slots=True)
class TimeSplit:
    arm: str
    ttft: TtftSplit = field(default_factory=TtftSplit)
    tpot: TpotSplit = field(default_factory=TpotSplit)
    batch: tuple[BatchBin, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ttft_ms": self.ttft.to_json(),
            "tpot_ms": self.tpot.to_json(),
            "batch_tpot": [[b.label, _r(b.tpot), b.n] for b in self.batch],
        }


@dataclass(frozen=True, slots=True)
class SpeedupCauses:
    """A decode speed-up of ``other`` over ``base`` as its causes: tokens per step
    (ratio of medians, other/base) times the inverse cost of a step (base/other), each
    with its 95% interval; ``product`` is what they predict, to set against the measured
    ratio."""

    base: str
    other: str
    tokens_per_step: tuple[float, float]  # (base, other): medians over requests
    step_ms: tuple[float, float]  # (base, other): the server's time per step, medians
    tps_ratio: tuple[float, float, float]  # other/base with its interval
    step_speed: tuple[float, float, float]  # base step / other step with its interval
    source: str  # where the step time came from: "server" or "client"
    n: tuple[int, int]
    kind: str = ""  # the task kind it covers; "" the whole mix

    @property
    def product(self) -> float:
        return self.tps_ratio[0] * self.step_speed[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "other": self.other,
            "tokens_per_step": [_r(x) for x in self.tokens_per_step],
            "step_ms": [_r(x) for x in self.step_ms],
            "tokens_per_step_ratio": [_r(x) for x in self.tps_ratio],
            "step_speed_ratio": [_r(x) for x in self.step_speed],
            "predicted_ratio": _r(self.product),
            "step_source": self.source,
            "n": list(self.n),
            **({"kind": self.kind} if self.kind else {}),
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def _med(x: np.ndarray) -> float | None:
    return float(np.median(x)) if x.size else None


ROWS = 1 << 14  # requests each split holds: all up to this, past it a uniform sample
_SERVER = ("ttft", "queue", "prefill")  # requests the server reported a prefill for
_STEP = ("tpot", "itl", "tps", "step", "client_step", "mid")  # requests with a TPOT


@dataclass
class _Arm:
    # (every counted TTFT and TPOT of the client: the fold's totals hold them already)
    # requests the server reported on: client TTFT, queue (NaN: not reported), prefill
    server: RowSample = field(default_factory=lambda: RowSample(_SERVER, ROWS))
    # per request with a TPOT: the client's TPOT and the server's ITL (NaN: not
    # reported), tokens per step and the time per step (the server's, the client's),
    # and when it was mid-decode (s; matched to the running batch)
    decode: RowSample = field(default_factory=lambda: RowSample(_STEP, ROWS))
    # histograms: [queue s, n, prefill s, n, per-token s, n] summed over the arm's samples
    hist: np.ndarray = field(default_factory=lambda: np.zeros(6))
    # the running batch: (t in s, sequences) of the arm's server, one a probe's sample
    # (16 bytes a sample: 1.4 MB a day of samples every second)
    run_t: GrowArray = field(default_factory=lambda: GrowArray(64, np.float64))
    run_n: GrowArray = field(default_factory=lambda: GrowArray(64, np.float64))
    # a new connection's setup (ms) of each request that opened one, and the requests
    setup: Quantiles = field(default_factory=lambda: Quantiles(np.float64))
    sent: int = 0


class TimeSplitReducer:
    """Per arm, per arm and ladder step (where the knee of a ladder comes from: queueing
    or prefill), and per arm and task kind (a speed-up's causes differ by kind: a draft
    guesses code better than free text)."""

    def __init__(self) -> None:
        self.arms: dict[str, _Arm] = {}
        self.steps: dict[tuple[str, int], _Arm] = {}
        self.kinds: dict[tuple[str, str], _Arm] = {}
        # the view the snapshot shows, made again every SPLIT_EVERY_NS of the run's clock
        self._shown: tuple[TimeSplit, ...] = ()
        self._next = 0

    def _arm(self, name: str) -> _Arm:
        a = self.arms.get(name)
        if a is None:
            a = self.arms[name] = _Arm()
        return a

    def _step(self, name: str, step: int) -> _Arm:
        a = self.steps.get((name, step))
        if a is None:
            a = self.steps[(name, step)] = _Arm()
        return a

    # ------------------------------------------------------------------ intake
    def requests(self, tb: RequestTable, ok: np.ndarray) -> None:
        """The counted requests that ended ok (rows of ``tb``)."""
        if ok.size == 0:
            return
        c = tb.cols
        arms = c["arm"][ok]
        for code in distinct(arms):
            rows = ok[arms == code]
            name = tb.vocab["arm"][code]
            _add(self._arm(name), tb, rows)
            steps = c["step"][rows]
            for st in distinct(steps[steps >= 0]):
                _add(self._step(name, int(st)), tb, rows[steps == st])
            kinds = c["kind"][rows]
            for k in distinct(kinds):
                key = (name, str(tb.vocab["kind"][k]))
                a = self.kinds.get(key)
                if a is None:
                    a = self.kinds[key] = _Arm()
                _add(a, tb, rows[kinds == k])

    def kind_names(self) -> list[str]:
        """The task kinds met, in order; [] where the mix had one kind (the whole run
        already says it)."""
        names = sorted({k for _, k in self.kinds if not k.startswith(KIND_PREFIX)})
        return names if len(names) > 1 else []  # (quality probes: not the workload)

    def server(
        self,
        t: int,
        hist_arm: str | None,
        run_arms: tuple[str, ...],
        smp: ServerSample,
        step: int = -1,
    ) -> None:
        """A server sample: its histogram deltas belong to ``hist_arm`` (the one arm
        in force on that server; None where arms share it and the histograms cannot be
        told apart), its running batch to every arm it serves; both to the ladder
        ``step`` running then too."""
        if hist_arm is not None and smp.split is not None:
            v = np.array(smp.split, dtype=float)
            self._arm(hist_arm).hist += v
            if step >= 0:
                self._step(hist_arm, step).hist += v
        r = smp.running
        if r is not None:
            for name in run_arms:
                for a in (self._arm(name), *((self._step(name, step),) if step >= 0 else ())):
                    a.run_t.append(t / 1e9)
                    a.run_n.append(float(r))

    # ------------------------------------------------------------------ views
    def view(
        self,
        arm: str,
        rtt_ms: float | None,
        ttft: Quantiles | np.ndarray,
        tpot: Quantiles | np.ndarray,
        step: int = -1,
        kind: str = "",
    ) -> TimeSplit:
        """``arm``'s split over the run, over one ladder ``step`` or one task ``kind``;
        ``ttft`` and ``tpot``: the client's figures of the same counted requests (the
        fold's totals)."""
        if kind:
            a = self.kinds.get((arm, kind))
        else:
            a = self.arms.get(arm) if step < 0 else self.steps.get((arm, step))
        if a is None:
            return TimeSplit(arm)
        tt = ttft if isinstance(ttft, Quantiles) else Quantiles.of(ttft)
        tp = tpot if isinstance(tpot, Quantiles) else Quantiles.of(tpot)
        split = dataclasses.replace(
            _ttft(a, rtt_ms, tt),
            setup=a.setup.median() if len(a.setup) else None,
            setup_n=len(a.setup),
            sent=a.sent,
        )
        return TimeSplit(arm, split, _tpot(a, tp), _batch(a))

    def causes(self, base: str, other: str, kind: str = "") -> SpeedupCauses | None:
        """``other``'s decode speed-up over ``base`` as tokens per step × step speed, over
        the mix or one task ``kind``."""
        if kind:
            a, b = self.kinds.get((base, kind)), self.kinds.get((other, kind))
        else:
            a, b = self.arms.get(base), self.arms.get(other)
        if a is None or b is None:
            return None
        da, db = a.decode, b.decode
        sa, sb = da.col("step"), db.col("step")
        source = "server"
        if np.isnan(sa).all() or np.isnan(sb).all():
            sa, sb, source = da.col("client_step"), db.col("client_step"), "client"
        sa, sb = sa[~np.isnan(sa)], sb[~np.isnan(sb)]
        ta, tb_ = da.col("tps"), db.col("tps")
        tps = ratio_ci_requests(ta, tb_) if ta.size >= 10 and tb_.size >= 10 else None
        step = ratio_ci_requests(sb, sa) if sa.size >= 10 and sb.size >= 10 else None
        if tps is None or step is None:
            return None
        return SpeedupCauses(
            base=base,
            other=other,
            tokens_per_step=(float(np.median(ta)), float(np.median(tb_))),
            step_ms=(float(np.median(sa)), float(np.median(sb))),
            tps_ratio=tps,
            step_speed=step,
            source=source,
            n=(int(ta.size), int(tb_.size)),
            kind=kind,
        )

    def causes_by_kind(self, base: str, other: str) -> tuple[SpeedupCauses, ...]:
        """The causes per task kind, for the kinds with enough requests in both arms."""
        out = (self.causes(base, other, k) for k in self.kind_names())
        return tuple(c for c in out if c is not None)

    # ------------------------------------------------------------------ projections
    def whole(
        self, arms: list[str], totals: dict[str, ArmTotals], rtt: Rtt
    ) -> tuple[TimeSplit, ...]:
        """Each arm's split over the run, with the client's figures of its totals."""
        out = []
        for a in arms:
            t = totals.get(a)
            ttft, tpot = (Quantiles(), Quantiles()) if t is None else (t.ttft, t.tpot)
            out.append(self.view(a, rtt(a), ttft, tpot))
        return tuple(out)

    def by_kind(self, arm: str, totals: dict[str, ArmTotals], rtt: Rtt) -> dict[str, TimeSplit]:
        """``arm``'s split per task kind (the client's figures of each kind picked from
        the totals by their stratum); {} where the mix had one kind."""
        t = totals.get(arm)
        if t is None:
            return {}
        out = {}
        for k in self.kind_names():
            ids = [sid for (kind, _), sid in t.strata.items() if kind == k]
            ttft, tpot = t.by_ttft.merged(ids), t.by_tpot.merged(ids)
            out[k] = self.view(arm, rtt(arm), ttft, tpot, kind=k)
        return out

    def shown(
        self, now: int, final: bool, arms: list[str], totals: dict[str, ArmTotals], rtt: Rtt
    ) -> tuple[TimeSplit, ...]:
        """The snapshot's split: made again every 2 s of the run's clock (medians over the
        whole run), so a replay, ticking at the same times, shows the same split."""
        if final or now >= self._next:
            self._next = now + SPLIT_EVERY_NS
            self._shown = self.whole(arms, totals, rtt)
        return self._shown

    def summarise(
        self, out: dict[str, Any], arms: list[str], totals: dict[str, ArmTotals], rtt: Rtt
    ) -> None:
        """The summary's splits (each arm's and each kind's) and each compared pair's
        decode speed-up as its causes (tokens per step × step speed), overall and by kind."""
        for sp in self.whole(arms, totals, rtt):
            if sp.arm in out["arms"]:
                out["arms"][sp.arm]["time_split"] = sp.to_json()
                bk = out["arms"][sp.arm].get("by_kind") or {}
                for k, ksp in self.by_kind(sp.arm, totals, rtt).items():
                    if k in bk:
                        bk[k]["time_split"] = ksp.to_json()
        cmp = out.get("comparison")
        for pair in cmp if isinstance(cmp, list) else [cmp] if isinstance(cmp, dict) else []:
            base, other = str(pair.get("baseline")), str(pair.get("other"))
            causes = self.causes(base, other)
            pair["causes"] = None if causes is None else causes.to_json()
            for why in self.causes_by_kind(base, other):
                if why.kind in (pair.get("by_kind") or {}):
                    pair["by_kind"][why.kind]["causes"] = why.to_json()


def _add(a: _Arm, tb: RequestTable, rows: np.ndarray) -> None:
    c = tb.cols
    con = c["connect_ms"][rows]
    a.sent += int(rows.size)
    fresh = ~np.isnan(con)
    if fresh.any():
        a.setup.extend(con[fresh].astype(np.float64))
    keys = row_keys(c["rid"][rows])
    ttft, tpot = c["ttft_ms"][rows], c["tpot_ms"][rows]
    q, p = c["srv_queue_ms"][rows], c["srv_prefill_ms"][rows]
    m = ~np.isnan(ttft) & ~np.isnan(p)
    f32 = np.float32  # (the figures a request table holds are float32's worth)
    a.server.add(
        keys[m],
        {"ttft": ttft[m].astype(f32), "queue": q[m].astype(f32), "prefill": p[m].astype(f32)},
    )
    itl = c["srv_itl_ms"][rows]
    # tokens per step: 1 + accepted / drafting steps where the server said so; a plain
    # decode: one token a step
    sa, sn = c["spec_accepted_tokens"][rows], c["spec_drafts"][rows]
    tps = np.where((sn > 0) & ~np.isnan(sa), 1.0 + sa / np.where(sn > 0, sn, 1), 1.0)
    m = ~np.isnan(tpot)
    ts, te = c["t_sched"][rows], c["t_end"][rows]
    mid = ts / 2e9 + ttft / 2000.0 + te / 2e9  # between the first token and the end
    a.decode.add(
        keys[m],
        {
            "tpot": tpot[m].astype(f32),
            "itl": itl[m].astype(f32),
            "tps": tps[m].astype(f32),
            "step": (itl * tps)[m].astype(f32),
            "client_step": (tpot * tps)[m].astype(f32),
            "mid": mid[m].astype(f32),  # (8 ms apart at a day: samples are 1 s apart)
        },
    )


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def _ttft(a: _Arm, rtt: float | None, client: Quantiles) -> TtftSplit:
    net = 0.0 if rtt is None else rtt
    holds = () if rtt is not None else ("network",)
    if len(a.server):
        tt, q, p = (_f64(a.server.col(x)) for x in _SERVER)
        has_q = ~np.isnan(q)
        q0 = np.where(has_q, q, 0.0)
        rem = tt - net - q0 - p
        # a part larger than its whole, or parts that leave a remainder below −1 ms
        bad = (rem < -TOL_MS) | (q0 > tt + TOL_MS) | (p > tt + TOL_MS)
        ok = ~bad
        tt, q, p, rem, has_q = tt[ok], q[ok], p[ok], rem[ok], has_q[ok]
        split = TtftSplit(
            client=_med(tt),
            network=rtt,
            source="per-request",
            stat="p50",
            n=int(ok.sum()),
            mismatched=int(bad.sum()),
            front_holds=holds + (() if has_q.all() else ("queue",)),
            of=a.server.seen if a.server.sampled else 0,
        )
        if not split.mismatch and rem.size:
            split = dataclasses.replace(
                split,
                # (a queue reported of some requests only is not a part of all of them:
                # it stays in the remainder, which says it holds it)
                queue=_med(q) if has_q.all() else None,
                prefill=_med(p),
                front=float(np.median(np.maximum(rem, 0.0))),
            )
        return split
    h = a.hist
    mean = client.mean()
    if (h[1] > 0 or h[3] > 0) and mean is not None:
        qh = float(1000.0 * h[0] / h[1]) if h[1] > 0 else None
        ph = float(1000.0 * h[2] / h[3]) if h[3] > 0 else None
        remh = mean - net - (qh or 0.0) - (ph or 0.0)
        # means against a mean: a part over the whole, or a remainder below −1 ms, is a
        # mismatch of every request the means cover, and no part is given
        low = remh < -TOL_MS or (qh or 0.0) > mean + TOL_MS or (ph or 0.0) > mean + TOL_MS
        out = TtftSplit(
            client=mean,
            network=rtt,
            queue=None if low else qh,
            prefill=None if low else ph,
            front=None if low else max(remh, 0.0),
            source="histogram",
            stat="mean",
            n=0 if low else len(client),
            mismatched=len(client) if low else 0,
            front_holds=holds
            + (() if qh is not None else ("queue",))
            + (() if ph is not None else ("prefill",)),
        )
        return out
    return TtftSplit(client=client.median(), network=rtt, n=len(client))


def _tpot(a: _Arm, client: Quantiles) -> TpotSplit:
    itl = _f64(a.decode.col("itl"))
    has = ~np.isnan(itl)
    if has.any():
        tp, itl = _f64(a.decode.col("tpot"))[has], itl[has]
        # the server's time per token over the whole of it
        bad = itl > tp + np.maximum(TOL_MS, TPOT_TOL_SHARE * tp)
        tp, itl = tp[~bad], itl[~bad]
        out = TpotSplit(
            client=_med(tp),
            source="per-request",
            stat="p50",
            n=int(tp.size),
            of=a.decode.seen if a.decode.sampled else 0,
            mismatched=int(bad.sum()),
        )
        if out.mismatch or not tp.size:
            return out
        # (a stream's time within the tolerance below zero is rounding: 0, never negative)
        return dataclasses.replace(
            out, server_step=_med(itl), stream=_med(np.maximum(tp - itl, 0.0))
        )
    h = a.hist
    mean = client.mean()
    if h[5] > 0 and mean is not None:
        srv = 1000.0 * h[4] / h[5]
        if srv > mean + TOL_MS:
            return TpotSplit(mean, None, None, "histogram", "mean", 0, mismatched=len(client))
        return TpotSplit(mean, srv, max(mean - srv, 0.0), "histogram", "mean", len(client))
    return TpotSplit(client=client.median(), n=len(client))


def _batch(a: _Arm) -> tuple[BatchBin, ...]:
    if not len(a.run_t) or not len(a.decode):
        return ()
    st, sn = a.run_t.values, a.run_n.values
    order = np.argsort(st, kind="stable")
    st, sn = st[order], sn[order]
    mid, tpot = _f64(a.decode.col("mid")), _f64(a.decode.col("tpot"))
    i = np.searchsorted(st, mid, side="right") - 1
    j = np.clip(i, 0, st.size - 1)
    near = (i >= 0) & (np.abs(mid - st[j]) <= SAMPLE_GAP_S)
    if not near.any():
        return ()
    batch, tp = sn[j[near]], tpot[near]
    out = []
    for lo, hi in zip(_EDGES[:-1], _EDGES[1:], strict=False):
        m = (batch >= lo) & (batch < hi)
        if int(m.sum()) >= MIN_BIN:
            out.append(BatchBin(lo, hi - 1, float(np.median(tp[m])), int(m.sum())))
    return tuple(out)
