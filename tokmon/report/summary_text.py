"""The run summary as text: the closing table of a headless run and the summary section
of every text report (the model makes the figures; this lays them out)."""

from __future__ import annotations

from typing import Any

from tokmon.model.judge.storage import human_bytes
from tokmon.model.judge.summary import RATIO_KEYS, describe_output_check
from tokmon.model.statistics.stats import MIN_SAMPLES
from tokmon.model.statistics.words import count, hms
from tokmon.textsafe import clean_text


def fmt_ms(v: float | None) -> str:
    if v is not None and abs(v) < 0.05:
        v = 0.0  # (a difference that rounds to nothing is 0.0, never "-0.0")
    return "—" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def alert_lines(alerts: list[dict[str, Any]]) -> list[str]:
    """The alerts of a summary, one line each: when, then what."""
    return [f"{a.get('t_s', 0):>8.1f} s  {a.get('message', '')}" for a in alerts]


def summary_table(summary: dict[str, Any]) -> str:
    """A plain-text table of the summary (stdout of a headless run)."""
    lines = arms_table(summary)
    servers = {n: a.get("server") for n, a in summary["arms"].items() if a.get("server")}
    where = summary["target"].get("url", "")
    if len(set(servers.values())) > 1:  # each arm its own server: name them all
        where = " · ".join(f"{n} @ {v}" for n, v in servers.items())
    elif servers:
        where = next(iter(servers.values()))
    out = [
        f"tokmon {summary['tokmon_version']} · {where} · "
        f"model {summary['target'].get('model', '')} · {summary['duration_s']:.1f} s"
        + window_words(summary.get("window")),
        "times in ms, decode in tokens/s per request; warm-up excluded",
        *lines,
    ]
    out += slo_lines(summary)
    warm = [(n, a["requests"].get("warmup") or 0) for n, a in summary["arms"].items()]
    if any(w for _, w in warm):  # (ok counts every request; the figures leave these out)
        out.append("warm-up, counted in ok and left out of every figure: "
                   + " · ".join(f"{clean_text(n, False)} {w}" for n, w in warm if w))  # fmt: skip
    st = summary.get("storage") or {}
    if st.get("rss_mib_max") is not None:  # what a soak cost the machine tokmon ran on
        rec = st.get("record_bytes")
        rate = st.get("record_growth_bytes_per_s")
        out.append(f"tokmon held at most {st['rss_mib_max']:.0f} MiB"
                   + ("" if rec is None else f" · the recording {human_bytes(rec)}")
                   + ("" if not rate else f", growing {human_bytes(rate)}/s"))  # fmt: skip
    out += judgment_lines(summary)
    sc = summary.get("scenario")
    if sc:  # which kind of service the run stands for, and what to read first
        verdict = (summary.get("slo") or {}).get("text")
        out.insert(1, f"scenario {clean_text(str(sc.get('name')), False)}: the headline is "
                      f"{clean_text(str(sc.get('headline')), False)}"
                      + (f" — {clean_text(str(verdict), False)}" if verdict else ""))  # fmt: skip
    out += arm_lines(summary)
    out += comparison_lines(summary.get("comparison"))
    searched = summary.get("capacity_search") or {}
    out += ladder_lines(summary.get("ladder"), searched)
    out += capacity_lines(searched)
    out += quality_lines(summary.get("quality"))
    oc = summary.get("output_check")
    if oc:
        out.append("output check: " + describe_output_check(oc))
    return "\n".join(out)


def arms_table(summary: dict[str, Any]) -> list[str]:
    """The arms' table: a row an arm, its columns as wide as their widest cell."""
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
    return lines


def arm_lines(summary: dict[str, Any]) -> list[str]:
    """Each arm's notes under the table: failures, estimated counts, the throughput
    bound, TPOT left out, prompt tokens, turns, send lag, cache, impossible timelines,
    kinds."""
    out: list[str] = []
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
                f"{name}: no TPOT for {count(left.get('one_token', 0), 'one-token answer')} and "
                f"{count(left.get('one_read', 0), 'answer')} that arrived in one read"
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
                f"{name}: {count(a['clock_excluded'], 'request')} with an impossible timeline left "
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
    return out


def comparison_lines(comp: Any) -> list[str]:
    """The A/B: each figure's ratio of medians with its interval, PARTIAL where it
    covers part of the workload, and decode per kind."""
    out: list[str] = []
    for c in [comp] if isinstance(comp, dict) else comp or []:
        strata = max((v or {}).get("strata", 1) for v in (c.get(k) for k in RATIO_KEYS))
        how = f", per stratum over {strata} (kind × step), weighted" if strata > 1 else ""
        out.append(
            f"{c['other']} vs {c['baseline']} (ratio of medians{how}, 95% CI by {c['method']}):"
        )
        for key in RATIO_KEYS:
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
                    f"{v.get('needed', MIN_SAMPLES)} in each arm needed)"
                    if d is None
                    else f"×{d['ratio']:.3f}  [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]"
                )
            )
    return out


def ladder_lines(lad: dict[str, Any] | None, searched: dict[str, Any]) -> list[str]:
    """A ladder's (or a capacity search's) steps, knees, speed-ups and crossovers."""
    out: list[str] = []
    if lad:
        what = "capacity probes" if searched else "ladder"
        out.append(f"{what} over {lad['param']} (after each step's warm-up):")
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
            out.append(f"  speed-up {clean_text(str(sp['other']), False)}/"
                       f"{clean_text(str(sp['baseline']), False)} at {lad['param']} "
                       f"{sp['value']}: {step_ratio_text(sp['decode_ratio'])}")  # fmt: skip
        for cr in lad.get("crossover") or []:
            out.append(f"  crossover: {clean_text(str(cr.get('text')), False)}")
        if lad.get("stopped_early"):
            out.append(f"  ladder stopped early: {lad['stopped_early']}")
    return out


def judgment_lines(summary: dict[str, Any]) -> list[str]:
    """Every registered judgment's lines (``model/contract/registry.py``: a summary block with a
    title and its lines), in the summary's order."""
    out: list[str] = []
    for v in summary.values():
        if isinstance(v, dict) and isinstance(v.get("lines"), list) and "title" in v:
            out += [clean_text(str(x), False) for x in v["lines"]]
    return out


def slo_lines(summary: dict[str, Any]) -> list[str]:
    """The SLO verdict in words (``--slo``): the whole run's share against the target,
    then each arm's where there are several."""
    whole = summary.get("slo")
    if not isinstance(whole, dict) or not whole.get("text"):
        return []
    out = [f"SLO {clean_text(str(whole['text']), False)} (whole run, every arm)"]
    arms = [(n, a.get("slo")) for n, a in summary["arms"].items() if isinstance(a.get("slo"), dict)]
    if len(arms) > 1:
        for name, v in arms:
            lo, hi = v.get("ci95") or [0.0, 1.0]
            share = v.get("fraction")
            out.append(f"  {clean_text(name, False)}: "
                       + ("no request counted" if share is None else
                          f"{100 * share:.1f}% of {v.get('counted'):,} [{100 * lo:.1f}%, "
                          f"{100 * hi:.1f}%] — {v.get('verdict')}"))  # fmt: skip
    return out


def step_ratio_text(r: dict[str, Any] | None) -> str:
    """A load's combined decode speed-up: ``×1.27 [1.19, 1.35] over code and creative
    (mix-weighted)``, or partial with what it lacks."""
    if r is None:
        return "not enough data"
    out = f"×{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
    kinds = [clean_text(str(k), False) for k in r.get("kinds") or []]
    if kinds:
        out += f" over {', '.join(kinds[:-1])} and {kinds[-1]} (by kind, mix-weighted)"
    if r.get("partial"):
        lack = ", ".join(f"{clean_text(str(m.get('kind')), False)} {m['n'][0]}/{m['n'][1]}"
                         for m in r.get("missing") or [])  # fmt: skip
        out += (f"; PARTIAL: {r.get('coverage', 0):.0%} of the workload "
                f"(too few requests: {lack}; {MIN_SAMPLES} in each arm needed)")  # fmt: skip
    return out


def quality_lines(q: dict[str, Any] | None) -> list[str]:
    """Each arm's answers checked (quality probes), per task, and the difference between
    the first two arms with its interval: a quality cost where it lies below 0."""
    if not q:
        return []
    out = ["quality probes (answers checked, whole run; 95% Wilson intervals):"]
    for arm, a in (q.get("arms") or {}).items():
        lo, hi = a.get("ci95") or [0.0, 1.0]
        tasks = " · ".join(
            f"{clean_text(str(t), False)} {v.get('correct')}/{v.get('n')}"
            for t, v in (a.get("by_task") or {}).items()
        )
        unjudged = a.get("unjudged") or 0
        out.append(f"  {clean_text(str(arm), False)}: {a.get('correct')}/{a.get('n')} correct "
                   f"[{lo:.0%}, {hi:.0%}]" + (f", {unjudged} unjudged" if unjudged else "")
                   + (f" ({tasks})" if tasks else ""))  # fmt: skip
    d = q.get("difference")
    if d:
        lo, hi = d.get("ci95") or [0.0, 0.0]
        out.append(
            f"  quality cost {clean_text(str(d.get('other')), False)} − "
            f"{clean_text(str(d.get('base')), False)}: {100 * d.get('diff', 0):+.1f} points "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}]: {d.get('verdict')}"
        )
    return out


def capacity_lines(searched: dict[str, Any]) -> list[str]:
    """Each arm's capacity search: the load it holds under the SLO, why the next level
    failed, and every probe in the order it ran (✓ passed, ✗ failed, ~ by its point)."""
    out = []
    for arm, r in searched.items():
        param, unit = r.get("param"), "streams" if r.get("param") == "concurrency" else "req/s"
        cap, fail = r.get("capacity"), r.get("fails_at")
        head = f"capacity ({clean_text(str(arm), False)}, {param}, {r.get('slo')} for "
        head += f"{(r.get('goodput_target') or 0):.0%} of requests): "
        if cap is None:
            head += "none found" + (f" ({fail:g} {unit} fails)" if fail is not None else "")
        else:
            head += f"{cap:g} {unit}"
            if fail is not None:
                head += f"; {fail:g} fails" + (
                    f" ({r['why_next_fails']})" if r.get("why_next_fails") else ""
                )
        if r.get("stopped"):
            head += f"; {r['stopped']}"
        if not r.get("done"):
            head += " (search not finished)"
        at = r.get("at_capacity") or {}
        if at.get("ci95"):
            lo, hi = at["ci95"]
            head += f"; goodput there {at.get('met_slo')}/{at.get('requests')} [{lo:.1%}, {hi:.1%}]"
        out.append(head)
        sv = r.get("serves") or {}
        if sv.get("tokens_per_s") is not None:
            cost = sv.get("cost_per_million_tokens")
            out.append(
                f"  there it serves {sv['tokens_per_s']:.1f} tok/s"
                + ("" if cost is None else f" at {cost:.3g}/Mtok")
                + f", TTFT p95 {fmt_ms(sv.get('ttft_p95'))} ms, TPOT p50 {fmt_ms(sv.get('tpot_p50'))} ms"
            )
        rt = r.get("ratio_to")
        if rt:
            lo, hi = rt.get("bracket") or [None, None]
            out.append(
                f"  capacity {clean_text(str(arm), False)}/{clean_text(str(rt['baseline']), False)}"
                f" ×{rt['ratio']:.2f} (the searches' brackets allow "
                f"{'—' if lo is None else format(lo, '.2f')} to {'—' if hi is None else format(hi, '.2f')})"
            )
        marks = []
        for p in r.get("probes") or []:
            sign = "✓" if p.get("verdict") == "pass" else "✗"
            marks.append(f"{p.get('level'):g}{sign}{'~' if p.get('by_point') else ''}")
        out.append(f"  probes: {' '.join(marks)} ({r.get('probe_seconds', 0):.1f} probe-s)")
    return out


def stratum_label(m: dict[str, Any]) -> str:
    """A stratum the comparison could not combine: its kind (and step), and its counts."""
    n = m.get("n") or [0, 0]
    step = m.get("step")
    name = str(m.get("kind") or "(no kind)")
    if isinstance(step, int) and step >= 0:
        name += f" at step {step + 1}"
    return f"{name} ({n[0]} and {n[1]} requests; {MIN_SAMPLES} in each arm needed)"


def window_words(w: Any) -> str:
    """A report of a stretch of a run says which (the times from the run's start)."""
    if not isinstance(w, dict):
        return ""
    return f" from {_clock(w['from_s'])} to {_clock(w['to_s'])} into the run"


def _clock(s: float) -> str:
    """Seconds into a run as h:mm:ss, and the tenth where the edge is not on a second."""
    tenths = round(s * 10)
    return hms(tenths // 10, hours=True) + (f".{tenths % 10}" if tenths % 10 else "")
