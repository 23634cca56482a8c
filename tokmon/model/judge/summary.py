"""The run summary (``--summary-json`` schema) and the A/B comparison, from totals.

Built from ``ArmTotals`` and the arms' active time, so a live run and ``tokmon report``
of its recording produce the same object from the same requests.
"""

from __future__ import annotations

from typing import Any

from tokmon import __version__
from tokmon.model.judge.slo import slo_verdict
from tokmon.model.statistics.sketch import Quantiles
from tokmon.model.statistics.stats import (
    MIN_SAMPLES,
    ArmTotals,
    ByStratum,
    Slo,
    Stratum,
    median_ci,
    pct_summary,
    ratio_ci_requests,
    ratio_ci_stratified,
)
from tokmon.model.workloads.questions import KIND_PREFIX

COMPARED = (
    ("decode_tokens_per_s", "by_decode"),
    ("tpot_ms", "by_tpot"),
    ("ttft_ms", "by_ttft"),
)
RATIO_KEYS = tuple(k for k, _ in COMPARED)


def arm_summary(
    t: ArmTotals,
    active_s: float,
    server_spec: dict[str, Any] | None,
    active_tokens: float | None = None,
    streams: float | None = None,
) -> dict[str, Any]:
    """One arm's figures. Its tokens/s is ``active_tokens`` (the tokens that arrived in
    its own spans) over ``active_s`` (those spans' seconds); where ``streams`` is fixed,
    the figure is checked against what they can make (``throughput_bound``)."""
    by = {k: v for k, v in t.by_outcome.items() if v}
    toks = float(t.output_tokens) if active_tokens is None else active_tokens
    tps = toks / active_s if active_s > 0 else 0.0
    out: dict[str, Any] = {
        "requests": {
            "ok": t.ok,
            "failed": t.failed,
            "by_outcome": by,
            "warmup": t.warmup,
            "settle": t.settle,
        },
        "output_tokens": t.output_tokens,
        # tokens that arrived while the arm was measured (its own time), and their rate
        "active_tokens": round(toks, 1),
        "output_tokens_per_s": tps,
        "requests_per_s": _counted_ok(t) / active_s if active_s > 0 else 0.0,
        "active_s": active_s,
        "ttft_ms": pct_summary(t.ttft),
        "tpot_ms": pct_summary(t.tpot),
        "e2e_ms": pct_summary(t.e2e),
        "send_lag_ms": pct_summary(t.send_lag),
        "decode_tokens_per_s": pct_summary(t.decode),
        "goodput_per_s": None,
        "acceptance_rate": None,
        "acceptance_length": None,
        "acceptance_source": None,
        "tokens_estimated": t.estimated > 0,
        "stalls": t.stalls,
        # ok requests left out of the duration figures because their timeline was
        # impossible (detail "clock: …" in the recording)
        "clock_excluded": t.clock,
        # ok requests that have a TTFT but no TPOT, and why (docs/METRICS.md)
        "tpot_left_out": {"one_token": t.tpot_one_token, "one_read": t.tpot_one_read},
        "prompt_tokens": prompt_summary(t),
        # each median's own 95% interval (its requests' sampling): what runs repeated are
        # held to (``model/judge/runs.py``)
        "p50_ci95": {
            k: [round(x, 4) for x in median_ci(q)]
            for k, q in (
                ("ttft_ms", t.ttft),
                ("tpot_ms", t.tpot),
                ("decode_tokens_per_s", t.decode),
            )
            if len(q)
        },
    }
    bound = throughput_bound(t, streams, active_s)
    if bound is not None:
        bound["holds"] = tps <= bound["tokens_per_s_max"]
        out["throughput_bound"] = bound
    if t.turns:
        out["by_turn"] = turn_summary(t)
    if len(t.ttft_cached) or len(t.ttft_uncached):
        # where the server says which requests found their prefix cached: TTFT of each
        out["ttft_ms_by_cache"] = {
            "cached": pct_summary(t.ttft_cached),
            "uncached": pct_summary(t.ttft_uncached),
        }
    if t.kinds:
        out["by_kind"] = {
            k: {
                "requests": kt.requests,
                "output_tokens": kt.output_tokens,
                "decode_tokens_per_s_p50": _p50(kt.decode),
                "ttft_ms_p50": _p50(kt.ttft),
                "acceptance_rate": kt.spec_accepted / kt.spec_draft if kt.spec_draft else None,
            }
            for k, kt in sorted(t.kinds.items())
        }
    if server_spec and server_spec.get("prefix_cache_hit_rate") is not None:
        # the server's own prefix-cache hit rate (prompt tokens found cached) for this arm
        out["prefix_cache_hit_rate"] = round(server_spec["prefix_cache_hit_rate"], 4)
    if server_spec and server_spec.get("acceptance_rate") is not None:
        out["acceptance_rate"] = server_spec["acceptance_rate"]
        out["acceptance_length"] = server_spec.get("acceptance_length")
        out["acceptance_source"] = server_spec.get("source", "server counters")
    elif t.spec_draft:
        out["acceptance_rate"] = t.spec_accepted / t.spec_draft
        if t.spec_drafts:
            out["acceptance_length"] = 1 + t.spec_accepted / t.spec_drafts
        out["acceptance_source"] = t.spec_source or "response"
    return out


def throughput_bound(t: ArmTotals, streams: float | None, active_s: float) -> dict[str, Any] | None:
    """What ``streams`` can make at most: a stream delivers one request at a time, each
    no faster than its output tokens over its whole time (p99 of the arm's requests), so
    the arm's tokens/s cannot exceed streams × that (plus one 250 ms bucket of it, the
    counting's resolution). A figure over it is a counting error, flagged where the
    figure is made."""
    if not streams or streams <= 0 or len(t.rate) < MIN_SAMPLES or active_s <= 0:
        return None
    p99 = t.rate.quantiles([99])[0]
    limit = streams * p99 * (1 + 0.25 / active_s)
    return {
        "streams": streams,
        "request_rate_p99": round(p99, 3),
        "tokens_per_s_max": round(limit, 3),
    }


def turn_summary(t: ArmTotals) -> dict[str, dict[str, Any]]:
    """Per turn of the conversations: how many, and the medians of TTFT, the prompt
    tokens the server counted (the history grows) and decode speed."""
    return {
        str(k): {
            "requests": tt.requests,
            "ttft_ms_p50": _p50(tt.ttft),
            "prompt_tokens_p50": _p50(tt.prompt),
            "decode_tokens_per_s_p50": _p50(tt.decode),
        }
        for k, tt in sorted(t.turns.items())
    }


def prompt_summary(t: ArmTotals) -> dict[str, Any] | None:
    """Prompt tokens as the server counted them (``usage.prompt_tokens``), and against
    what each synthetic prompt was built to have: the workload's length is a measured
    fact, not an assumption."""
    p = t.prompt
    if not len(p.counted):
        return None
    out: dict[str, Any] = {
        "p50": _p50(p.counted),
        "min": int(p.counted.lo),
        "max": int(p.counted.hi),
    }
    if n := len(p.asked):
        # (of the requests built to a length: a conversation's later turns are not)
        out["asked_requests"] = n
        out["asked_p50"] = _p50(p.asked)
        out["counted_p50"] = _p50(p.counted_asked)
        out["off_tokens"] = {"p50": _p50(p.off), "min": int(p.off.lo), "max": int(p.off.hi)}
        out["exact_share"] = round(p.exact / n, 4)
    return out


def _p50(v: Quantiles) -> float | None:
    m = v.median()
    return None if m is None else round(m, 4)


def _counted_ok(t: ArmTotals) -> int:
    return len(t.e2e)


def compare(
    base: ArmTotals,
    other: ArmTotals,
    alternations: int,
    kind_weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Ratios of medians other/base with 95% intervals, stratified by kind × ladder step.

    Over segments once the arms have alternated at least twice (so that a drift during
    the run does not pass for an effect), else over requests. The strata are combined
    with ``kind_weights`` (the mix the workload was built with) where given. A stratum of
    the workload without enough requests in both arms is named, never dropped: the
    combined figure then says it is ``partial`` and which share of the workload it holds.
    """
    method = "segments" if alternations >= 2 else "requests"
    out: dict[str, Any] = {"baseline": base.name, "other": other.name, "method": method}
    # one numbering of strata for both arms, with the mix's kinds no request reached yet
    keys = list(dict.fromkeys([*base.strata, *other.strata]))
    steps = sorted({step for _, step in keys}) or [-1]
    seen_kinds = {kind for kind, _ in keys}
    for kind in kind_weights or {}:
        if kind not in seen_kinds:
            keys.extend((kind, step) for step in steps)
    # quality probes load the server like any request, but they are not the workload
    # being compared: their strata are left out of the speed-up (their answers are judged
    # in ``quality``), so they neither dilute it nor make it partial
    # requests of a ladder run sent outside its steps (before the first began: the
    # steps' edges) were measured at no step's load: not a stratum either (they made a
    # finished ladder "partial" over strata of 3 and 0 requests)
    ladder = any(step >= 0 for _, step in keys)
    probes = [i for i, (kind, step) in enumerate(keys)
              if kind.startswith(KIND_PREFIX) or (ladder and step < 0)]  # fmt: skip
    expected = tuple(i for i in range(len(keys)) if i not in probes)
    weights = _stratum_weights(keys, base, other, kind_weights)
    shared = {key: i for i, key in enumerate(keys)}
    for key, attr in COMPARED:
        res = ratio_ci_stratified(
            _strata(getattr(base, attr), base.strata, shared, probes),
            _strata(getattr(other, attr), other.strata, shared, probes),
            segments=method == "segments",
            weights=weights,
            expected=expected,
        )
        if res is not None and res.method != method:
            out["method"] = res.method  # too few segments: the interval is by requests
        out[key] = (
            None
            if res is None
            else {
                "ratio": res.ratio,
                "ci95": [res.lo, res.hi],
                "strata": res.strata,
                # the share of the workload's weight the figure holds (1: all of it)
                "coverage": round(res.coverage, 4),
                "partial": res.partial,
                "missing": [
                    {"kind": keys[sid][0], "step": keys[sid][1], "n": [na, nb]}
                    for sid, na, nb in res.missing
                ],
            }
        )
    kinds = sorted(
        k for k in set(base.kinds) | set(other.kinds) | set(kind_weights or ())
        if not k.startswith(KIND_PREFIX)
    )  # fmt: skip
    if kinds:
        # The speed-up per kind of task: speculative decoding's gain is conditional.
        # Every kind of the workload is listed, with its requests in each arm, so that
        # one still collecting is seen as such (``needed`` values in each arm).
        out["by_kind"] = {}
        for k in kinds:
            a = base.kinds[k].decode if k in base.kinds else Quantiles()
            b = other.kinds[k].decode if k in other.kinds else Quantiles()
            r = ratio_ci_requests(a, b) if len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES else None
            out["by_kind"][k] = {
                "decode_tokens_per_s": None if r is None else {"ratio": r[0], "ci95": [r[1], r[2]]},
                "n": [len(a), len(b)],
                "needed": MIN_SAMPLES,
            }
    return out


def _stratum_weights(
    keys: list[tuple[str, int]],
    base: ArmTotals,
    other: ArmTotals,
    kind_weights: dict[str, float] | None,
) -> dict[int, float] | None:
    """Stratum weight = the kind's share in the mix × the step's share of that kind's
    requests (steps of a ladder weigh as the requests they held; a kind no request has
    reached yet shares its weight evenly among its steps)."""
    if not kind_weights:
        return None
    per_key: dict[tuple[str, int], int] = {}
    for t in (base, other):
        for key, sid in t.strata.items():
            per_key[key] = per_key.get(key, 0) + t.by_decode.count(sid)
    per_kind: dict[str, int] = {}
    steps_of: dict[str, int] = {}
    for kind, _ in keys:
        steps_of[kind] = steps_of.get(kind, 0) + 1
    for (kind, _), n in per_key.items():
        per_kind[kind] = per_kind.get(kind, 0) + n
    out: dict[int, float] = {}
    for i, (kind, step) in enumerate(keys):
        w = kind_weights.get(kind, 0.0)
        if per_kind.get(kind):
            out[i] = w * per_key.get((kind, step), 0) / per_kind[kind]
        else:
            out[i] = w / steps_of[kind]
    return out


def _strata(
    by: ByStratum,
    own: dict[tuple[str, int], int],
    shared: dict[tuple[str, int], int],
    left_out: list[int],
) -> dict[int, Stratum]:
    """One arm's strata under the shared numbering of both arms, less ``left_out``."""
    out = {}
    for key, sid in own.items():
        i = shared[key]
        if i not in left_out and by.count(sid):
            out[i] = by.stratum(sid)
    return out


def slo_counted(t: ArmTotals) -> int:
    """Requests an SLO share is over: every one sent, less warm-up and settle."""
    return t.sent - t.warmup - t.settle


def slo_share(met: int, counted: int) -> float | None:
    """The one SLO share: requests that met every SLO over those counted."""
    return met / counted if counted > 0 else None


def build_summary(
    *,
    started_at: str,
    duration_s: float,
    target: dict[str, str],
    totals: dict[str, ArmTotals],
    active_s: dict[str, float],
    alternations: int,
    active_tokens: dict[str, float] | None = None,
    streams: float | None = None,
    server_spec: dict[str, dict[str, Any]] | None = None,
    slo: Slo | None = None,
    kind_weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    arms = {}
    for name, t in totals.items():
        s = arm_summary(
            t,
            active_s.get(name, 0.0),
            (server_spec or {}).get(name),
            None if active_tokens is None else active_tokens.get(name, 0.0),
            streams,
        )
        if slo is not None:
            s["goodput_per_s"] = t.good / active_s[name] if active_s.get(name) else 0.0
            s["slo_met"] = t.good
            s["slo_fraction"] = slo_share(t.good, slo_counted(t))
            s["slo"] = slo_verdict(name, t.good, slo_counted(t), slo).to_json()
        arms[name] = s
    summary: dict[str, Any] = {
        "tokmon_version": __version__,
        "started_at": started_at,
        "duration_s": duration_s,
        "target": target,
        "arms": arms,
    }
    if slo is not None:
        # the whole run's share (every arm's counted requests): what --fail-on-slo gates,
        # and its verdict in words against the target
        met = sum(t.good for t in totals.values())
        counted = sum(slo_counted(t) for t in totals.values())
        summary["slo"] = slo_verdict("", met, counted, slo).to_json()
    names = list(totals)
    if len(names) >= 2:
        comps = [
            compare(totals[names[0]], totals[n], alternations, kind_weights) for n in names[1:]
        ]
        summary["comparison"] = comps[0] if len(comps) == 1 else comps
    return summary


def alerts_from_events(events: list[Any], t0: int) -> list[dict[str, Any]]:
    """The summary's alert list (the same from a live run and from its recording)."""
    return [
        {
            "t_s": round((e.t - t0) / 1e9, 3),
            "message": e.message,
            **{k: v for k, v in e.data.items() if isinstance(v, (str, int, float, list))},
        }
        for e in events
        if e.kind == "alert"
    ]


def describe_output_check(result: dict[str, Any]) -> str:
    parts = []
    for name, r in result["arms"].items():
        if r["identical_share"] is None:
            parts.append(f"{name}: no outputs to compare ({r['failed']} failed)")
            continue
        s = f"{name} vs {result['baseline']}: {r['identical']}/{r['compared']} greedy outputs identical"
        if r["first_divergence_median"] is not None:
            s += f", others diverge at char ~{r['first_divergence_median']:.0f}"
        parts.append(s)
    return "; ".join(parts)
