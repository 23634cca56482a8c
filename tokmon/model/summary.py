"""The run summary (``--summary-json`` schema) and the A/B comparison, from totals.

Built from ``ArmTotals`` and the arms' active time, so a live run and ``tokmon report``
of its recording produce the same object from the same requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokmon import __version__
from tokmon.model.stats import (
    MIN_SAMPLES,
    ArmTotals,
    pct_summary,
    ratio_ci_requests,
    ratio_ci_stratified,
)

COMPARED = (
    ("decode_tokens_per_s", "decode", "seg_decode"),
    ("tpot_ms", "tpot", "seg_tpot"),
    ("ttft_ms", "ttft", "seg_ttft"),
)
_RATIO_KEYS = tuple(k for k, _, _ in COMPARED)


def arm_summary(
    t: ArmTotals,
    active_s: float,
    server_spec: dict[str, Any] | None,
    active_tokens: float | None = None,
    streams: float | None = None,
) -> dict[str, Any]:
    """One arm's figures. Its tokens/s is ``active_tokens`` (the tokens that arrived in
    its own spans) over ``active_s`` (those spans' seconds); where ``streams`` is fixed,
    the figure is checked against what they can make (streams × p99 decode speed)."""
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
        "ttft_ms": pct_summary(t.ttft.values),
        "tpot_ms": pct_summary(t.tpot.values),
        "e2e_ms": pct_summary(t.e2e.values),
        "send_lag_ms": pct_summary(t.send_lag.values),
        "decode_tokens_per_s": pct_summary(t.decode.values),
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
    }
    bound = throughput_bound(t, streams, active_s)
    if bound is not None:
        bound["holds"] = tps <= bound["tokens_per_s_max"]
        out["throughput_bound"] = bound
    if t.turn.values.size:
        out["by_turn"] = turn_summary(t)
    if t.ttft_cached.values.size or t.ttft_uncached.values.size:
        # where the server says which requests found their prefix cached: TTFT of each
        out["ttft_ms_by_cache"] = {
            "cached": pct_summary(t.ttft_cached.values),
            "uncached": pct_summary(t.ttft_uncached.values),
        }
    if t.kinds:
        out["by_kind"] = {
            k: {
                "requests": kt.requests,
                "output_tokens": kt.output_tokens,
                "decode_tokens_per_s_p50": _p50(kt.decode.values),
                "ttft_ms_p50": _p50(kt.ttft.values),
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
    rate = t.rate.values
    if not streams or streams <= 0 or rate.size < MIN_SAMPLES or active_s <= 0:
        return None
    p99 = float(np.percentile(rate, 99))
    limit = streams * p99 * (1 + 0.25 / active_s)
    return {
        "streams": streams,
        "request_rate_p99": round(p99, 3),
        "tokens_per_s_max": round(limit, 3),
    }


def turn_summary(t: ArmTotals) -> dict[str, dict[str, Any]]:
    """Per turn of the conversations: how many, and the medians of TTFT, the prompt
    tokens the server counted (the history grows) and decode speed."""
    turn = t.turn.values
    out: dict[str, dict[str, Any]] = {}
    for k in np.unique(turn).astype(int).tolist():
        m = turn == k

        def med(v: np.ndarray, m: np.ndarray = m) -> float | None:
            x = v[m]
            return _p50(x[~np.isnan(x)])

        out[str(k)] = {
            "requests": int(m.sum()),
            "ttft_ms_p50": med(t.turn_ttft.values),
            "prompt_tokens_p50": med(t.turn_prompt.values),
            "decode_tokens_per_s_p50": med(t.turn_decode.values),
        }
    return out


def prompt_summary(t: ArmTotals) -> dict[str, Any] | None:
    """Prompt tokens as the server counted them (``usage.prompt_tokens``), and against
    what each synthetic prompt was built to have: the workload's length is a measured
    fact, not an assumption."""
    pt = t.prompt.values
    if not pt.size:
        return None
    out: dict[str, Any] = {"p50": _p50(pt), "min": int(pt.min()), "max": int(pt.max())}
    asked = t.prompt_asked.values
    m = ~np.isnan(asked)
    if m.any():
        # (of the requests built to a length: a conversation's later turns are not)
        off = pt[m] - asked[m]
        out["asked_requests"] = int(m.sum())
        out["asked_p50"] = _p50(asked[m])
        out["counted_p50"] = _p50(pt[m])
        out["off_tokens"] = {"p50": _p50(off), "min": int(off.min()), "max": int(off.max())}
        out["exact_share"] = round(float(np.mean(off == 0)), 4)
    return out


def _p50(v: np.ndarray) -> float | None:
    return round(float(np.median(v.astype(np.float64))), 4) if v.size else None


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
    expected = tuple(range(len(keys)))
    weights = _stratum_weights(keys, base, other, kind_weights)
    for key, attr, seg_attr in COMPARED:
        st_attr = "st_" + attr
        a_st = _renumber(getattr(base, st_attr).values, base.strata, keys)
        b_st = _renumber(getattr(other, st_attr).values, other.strata, keys)
        res = ratio_ci_stratified(
            getattr(base, attr).values,
            getattr(base, seg_attr).values,
            a_st,
            getattr(other, attr).values,
            getattr(other, seg_attr).values,
            b_st,
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
    kinds = sorted(set(base.kinds) | set(other.kinds) | set(kind_weights or ()))
    if kinds:
        # The speed-up per kind of task: speculative decoding's gain is conditional.
        # Every kind of the workload is listed, with its requests in each arm, so that
        # one still collecting is seen as such (``needed`` values in each arm).
        out["by_kind"] = {}
        for k in kinds:
            a = base.kinds[k].decode.values if k in base.kinds else np.empty(0)
            b = other.kinds[k].decode.values if k in other.kinds else np.empty(0)
            r = ratio_ci_requests(a, b) if a.size >= MIN_SAMPLES and b.size >= MIN_SAMPLES else None
            out["by_kind"][k] = {
                "decode_tokens_per_s": None if r is None else {"ratio": r[0], "ci95": [r[1], r[2]]},
                "n": [int(a.size), int(b.size)],
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
            per_key[key] = per_key.get(key, 0) + int((t.st_decode.values == sid).sum())
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


def _renumber(st: np.ndarray, own: dict[tuple[str, int], int], keys: list[Any]) -> np.ndarray:
    """Stratum ids of one arm's numbering in the shared numbering ``keys``."""
    if st.size == 0:
        return st.astype(np.float64)
    lut = np.zeros(max(own.values(), default=0) + 1)
    for key, sid in own.items():
        lut[sid] = keys.index(key)
    return lut[st.astype(np.int64)]


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
    slo_good: bool = False,
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
        if slo_good:
            s["goodput_per_s"] = t.good / active_s[name] if active_s.get(name) else 0.0
            s["slo_met"] = t.good
            s["slo_fraction"] = slo_share(t.good, slo_counted(t))
        arms[name] = s
    summary: dict[str, Any] = {
        "tokmon_version": __version__,
        "started_at": started_at,
        "duration_s": duration_s,
        "target": target,
        "arms": arms,
    }
    if slo_good:
        # the whole run's share (every arm's counted requests): what --fail-on-slo gates
        met = sum(t.good for t in totals.values())
        counted = sum(slo_counted(t) for t in totals.values())
        summary["slo"] = {"met": met, "counted": counted, "fraction": slo_share(met, counted)}
    names = list(totals)
    if len(names) >= 2:
        comps = [
            compare(totals[names[0]], totals[n], alternations, kind_weights) for n in names[1:]
        ]
        summary["comparison"] = comps[0] if len(comps) == 1 else comps
    return summary


def fmt_ms(v: float | None) -> str:
    return "—" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def alert_lines(alerts: list[dict[str, Any]]) -> list[str]:
    """The alerts of a summary, one line each: when, then what."""
    return [f"{a.get('t_s', 0):>8.1f} s  {a.get('message', '')}" for a in alerts]


def summary_table(summary: dict[str, Any]) -> str:
    """A plain-text table of the summary (stdout of a headless run)."""
    rows = [
        (
            "arm",
            "ok",
            "fail",
            "tok/s",
            "req/s",
            "TTFT p50",
            "TTFT p95",
            "TPOT p50",
            "TPOT p99",
            "dec p50",
            "accept",
        )
    ]
    for name, a in summary["arms"].items():
        acc = a.get("acceptance_rate")
        rows.append(
            (
                name,
                str(a["requests"]["ok"]),
                str(a["requests"]["failed"]),
                f"{a['output_tokens_per_s']:.1f}",
                f"{a['requests_per_s']:.2f}",
                fmt_ms(a["ttft_ms"]["p50"]),
                fmt_ms(a["ttft_ms"]["p95"]),
                fmt_ms(a["tpot_ms"]["p50"]),
                fmt_ms(a["tpot_ms"]["p99"]),
                "—"
                if a["decode_tokens_per_s"]["p50"] is None
                else f"{a['decode_tokens_per_s']['p50']:.1f}",
                "n/a" if acc is None else f"{acc:.0%}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    # two spaces between columns, one where that would pass 80 columns (a terminal)
    sep = "  " if sum(widths) + 2 * (len(widths) - 1) <= 80 else " "
    lines = [
        sep.join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, sep.join("─" * w for w in widths))
    servers = {n: a.get("server") for n, a in summary["arms"].items() if a.get("server")}
    where = summary["target"].get("url", "")
    if len(set(servers.values())) > 1:  # each arm its own server: name them all
        where = " · ".join(f"{n} @ {v}" for n, v in servers.items())
    elif servers:
        where = next(iter(servers.values()))
    out = [
        f"tokmon {summary['tokmon_version']} · {where} · "
        f"model {summary['target'].get('model', '')} · {summary['duration_s']:.1f} s",
        "times in ms, decode in tokens/s per request; warm-up excluded",
        *lines,
    ]
    for name, a in summary["arms"].items():
        by = a["requests"]["by_outcome"]
        fails = {k: v for k, v in by.items() if k != "ok"}
        if fails:
            out.append(
                f"{name} failures: " + ", ".join(f"{k} {v}" for k, v in sorted(fails.items()))
            )
        if a.get("tokens_estimated"):
            out.append(f"{name}: token counts estimated (server sent no usage)")
        tb = a.get("throughput_bound") or {}
        if tb and not tb.get("holds", True):
            out.append(
                f"{name}: {a['output_tokens_per_s']:.1f} tok/s is more than "
                f"{tb['streams']:g} streams at p99 {tb['request_rate_p99']:.1f} tok/s a request can "
                "make: a counting error, please report it"
            )
        left = a.get("tpot_left_out") or {}
        if left.get("one_token") or left.get("one_read"):
            out.append(
                f"{name}: no TPOT for {left.get('one_token', 0)} one-token answer(s) and "
                f"{left.get('one_read', 0)} answer(s) that arrived in one read"
            )
        pt = a.get("prompt_tokens")
        if pt and pt.get("asked_p50") is not None:
            off = pt["off_tokens"]
            out.append(
                f"{name} prompt tokens: asked p50 {pt['asked_p50']:.0f}, server counted p50 "
                f"{pt['counted_p50']:.0f}; off by {off['min']:+d} to {off['max']:+d}, exact "
                f"in {pt['exact_share']:.0%} of {pt['asked_requests']}"
                + (
                    ""
                    if pt["asked_requests"] == a["requests"]["ok"] - a["requests"]["warmup"]
                    else f" (all requests: p50 {pt['p50']:.0f}, {pt['min']}–{pt['max']})"
                )
            )
        if a.get("by_turn"):
            out.append(
                f"{name} by turn: "
                + " · ".join(
                    f"{k}: {v['requests']} req, TTFT p50 {fmt_ms(v['ttft_ms_p50'])}, "
                    f"prompt {v['prompt_tokens_p50'] or 0:.0f}"
                    for k, v in list(a["by_turn"].items())[:8]
                )
            )
        lag = a.get("send_lag_ms") or {}
        if lag.get("count"):
            # the client's own delay: a generator that falls behind its schedule shows
            # here, never as a slower server
            out.append(
                f"{name} send lag (scheduled → sent): p50 {fmt_ms(lag['p50'])} p99 "
                f"{fmt_ms(lag['p99'])} max {fmt_ms(lag['max'])} ms"
            )
        if a.get("prefix_cache_hit_rate") is not None:
            out.append(
                f"{name}: prefix cache hit {a['prefix_cache_hit_rate']:.1%} of prompt tokens "
                "(the server's counters)"
            )
        if a.get("clock_excluded"):
            out.append(
                f"{name}: {a['clock_excluded']} request(s) with an impossible timeline left "
                "out of every duration (detail 'clock: …' in the recording)"
            )
    for name, a in summary["arms"].items():
        bk = a.get("by_kind")
        if bk and len(bk) > 1:
            out.append(
                f"{name} by kind: "
                + " · ".join(
                    f"{k} {v['requests']} req, dec p50 "
                    + (
                        "—"
                        if v["decode_tokens_per_s_p50"] is None
                        else f"{v['decode_tokens_per_s_p50']:.1f}"
                    )
                    + (
                        ""
                        if v["acceptance_rate"] is None
                        else f", accept {v['acceptance_rate']:.0%}"
                    )
                    + (
                        ""
                        if v.get("cost_per_million_tokens") is None
                        else f", {v['cost_per_million_tokens']:.2f}/Mtok"
                    )
                    for k, v in bk.items()
                )
            )
    comp = summary.get("comparison")
    for c in [comp] if isinstance(comp, dict) else comp or []:
        strata = max((v or {}).get("strata", 1) for v in (c.get(k) for k in _RATIO_KEYS))
        how = f", per stratum over {strata} (kind × step), weighted" if strata > 1 else ""
        out.append(
            f"{c['other']} vs {c['baseline']} (ratio of medians{how}, 95% CI by {c['method']}):"
        )
        for key in _RATIO_KEYS:
            v = c.get(key)
            if v is None:
                out.append(f"  {key:<20} not enough data")
            else:
                lo, hi = v["ci95"]
                line = f"  {key:<20} ×{v['ratio']:.3f}  [{lo:.3f}, {hi:.3f}]"
                if v.get("partial"):
                    # part of the workload: it says which part, never passes for the whole
                    names = ", ".join(stratum_label(m) for m in v.get("missing") or ())
                    line += (
                        f"  PARTIAL: {v.get('coverage', 0):.0%} of the workload "
                        f"(not enough requests: {names})"
                    )
                out.append(line)
        for k, v in (c.get("by_kind") or {}).items():
            d = v["decode_tokens_per_s"]
            n = v.get("n") or [0, 0]
            out.append(
                f"  decode, {k:<13} "
                + (
                    f"not enough data ({n[0]} and {n[1]} requests; "
                    f"{v.get('needed', 10)} in each arm needed)"
                    if d is None
                    else f"×{d['ratio']:.3f}  [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]"
                )
            )
    lad = summary.get("ladder")
    if lad:
        out.append(f"ladder over {lad['param']} (after each step's warm-up):")
        out.append(
            f"  {'step':>4} {'value':>7} {'arm':<10} {'tok/s':>8} {'TTFT p50':>9} "
            f"{'TTFT p95':>9} {'dec p50':>8} {'err':>6} {'KV max':>7}"
        )
        for st in lad["steps"]:
            out.append(
                f"  {st['step'] + 1:>4} {st['value']:>7} {st['arm'][:10]:<10} "
                f"{(st['tokens_per_s'] or 0):>8.1f} {fmt_ms(st['ttft_p50']):>9} "
                f"{fmt_ms(st['ttft_p95']):>9} "
                f"{'—' if st['decode_p50'] is None else format(st['decode_p50'], '.1f'):>8} "
                f"{'—' if st['error_rate'] is None else format(st['error_rate'], '.1%'):>6} "
                f"{'—' if st['kv_max_pct'] is None else format(st['kv_max_pct'], '.0f') + '%':>7}"
            )
        for arm, k in lad["knee"].items():
            out.append(
                f"  knee ({arm}): "
                + (
                    "none within the ladder"
                    if k is None
                    else f"{lad['param']} {k['value']} — {k['tokens_per_s']:.0f} tok/s, "
                    f"TTFT p95 {fmt_ms(k['ttft_p95'])} ms; beyond it latency takes off"
                )
            )
        for sp in lad.get("speedup", []):
            r = sp["decode_ratio"]
            out.append(
                f"  speed-up {sp['other']}/{sp['baseline']} at {lad['param']} {sp['value']}: "
                + (
                    "not enough data"
                    if r is None
                    else f"×{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
                )
            )
        if lad.get("stopped_early"):
            out.append(f"  ladder stopped early: {lad['stopped_early']}")
    oc = summary.get("output_check")
    if oc:
        out.append("output check: " + describe_output_check(oc))
    return "\n".join(out)


def stratum_label(m: dict[str, Any]) -> str:
    """A stratum the comparison could not combine: its kind (and step), and its counts."""
    n = m.get("n") or [0, 0]
    step = m.get("step")
    name = str(m.get("kind") or "(no kind)")
    if isinstance(step, int) and step >= 0:
        name += f" at step {step + 1}"
    return f"{name} {n[0]}/{n[1]}"


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
