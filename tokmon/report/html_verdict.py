"""The top of the HTML report, what a reader sees first: the comparison's verdict as a
forest plot (the speed-up per task kind and combined, each with its interval, the
combined one marked partial where it covers part of the workload), then each arm's
headline figures as a table. Every string from the recording is escaped here."""

from __future__ import annotations

import math
from typing import Any

from tokmon.report.summary_text import fmt_ms, stratum_label
from tokmon.report.text import escape

# one colour per arm, in the order the summary lists them (the charts use the same)
ARM_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def arm_colour(i: int) -> str:
    return ARM_COLOURS[i % len(ARM_COLOURS)]


def _ratio(r: dict[str, Any] | None) -> tuple[float, float, float] | None:
    if not isinstance(r, dict):
        return None
    x, ci = r.get("ratio"), r.get("ci95") or [None, None]
    vals = (x, *ci[:2])
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in vals):
        return None
    return float(vals[0]), float(vals[1]), float(vals[2])


def _words(x: float, lo: float, hi: float, higher_better: bool) -> str:
    if lo <= 1.0 <= hi:
        return "no difference shown"
    better = (x > 1) == higher_better
    return "better" if better else "worse"


def verdict_sentence(c: dict[str, Any]) -> str:
    """One line: the other arm's decode speed against the baseline's, its interval, what
    it covers."""
    base, other = escape(str(c.get("baseline"))), escape(str(c.get("other")))
    d = c.get("decode_tokens_per_s") or {}
    r = _ratio(d)
    if r is None:
        return f"{other} / {base}: not enough requests in both arms to compare yet"
    x, lo, hi = r
    cover = (
        f"<b>partial</b>: {100 * float(d.get('coverage') or 0):.0f}% of the workload"
        if d.get("partial")
        else "the whole workload"
    )
    return (
        f"{other} / {base} decode speed <b>×{x:.2f}</b> [{lo:.2f}, {hi:.2f}] "
        f"({_words(x, lo, hi, True)}; 95% interval; {cover})"
    )


def forest(c: dict[str, Any], go: Any) -> Any | None:
    """The speed-up per task kind and combined, each a point with its interval, on a log
    axis with 1 (no change) marked."""
    rows: list[tuple[str, tuple[float, float, float], bool]] = []
    d = c.get("decode_tokens_per_s") or {}
    r = _ratio(d)
    if r is not None:
        label = f"combined ({'partial' if d.get('partial') else 'whole workload'})"
        rows.append((label, r, True))
    for kind, k in (c.get("by_kind") or {}).items():
        rk = _ratio(k.get("decode_tokens_per_s"))
        if rk is not None:
            n = k.get("n") or ["?", "?"]
            rows.append((f"{escape(str(kind))} ({n[0]} / {n[1]} req)", rk, False))
    if not rows:
        return None
    fig = go.Figure()
    for combined in (True, False):
        sel = [x for x in rows if x[2] == combined]
        if not sel:
            continue
        fig.add_trace(
            go.Scatter(
                x=[x[1][0] for x in sel],
                y=[x[0] for x in sel],
                mode="markers",
                marker={
                    "size": 14 if combined else 10,
                    "symbol": "diamond" if combined else "circle",
                    "color": "#222" if combined else "#1f77b4",
                },  # fmt: skip
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [x[1][2] - x[1][0] for x in sel],
                    "arrayminus": [x[1][0] - x[1][1] for x in sel],
                },
                name="combined" if combined else "per task kind",
                hovertemplate="%{y}: ×%{x:.3f}<extra></extra>",
            )
        )
    fig.add_vline(x=1.0, line_dash="dot", line_color="#888", annotation_text="no change")
    lo = min(x[1][1] for x in rows)
    hi = max(x[1][2] for x in rows)
    fig.update_layout(
        height=110 + 40 * len(rows),
        template="plotly_white",
        xaxis={
            "type": "log",
            "title": "decode speed ratio (log scale)",
            "range": [math.log10(min(lo, 1.0) / 1.1), math.log10(max(hi, 1.0) * 1.1)],
        },  # fmt: skip
        yaxis={"autorange": "reversed"},
        margin={"t": 20, "b": 50},
        showlegend=False,
    )
    return fig


def other_ratios(c: dict[str, Any]) -> str:
    """TTFT and TPOT (lower is better) as words beside the plot."""
    out = []
    for key, name in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
        r = _ratio(c.get(key))
        if r is not None:
            x, lo, hi = r
            out.append(f"{name} ×{x:.3f} [{lo:.3f}, {hi:.3f}] ({_words(x, lo, hi, False)})")
    return " · ".join(out)


def _answers(qa: dict[str, Any] | None) -> str:
    if not qa:
        return "—"
    lo, hi = qa.get("ci95") or [0.0, 1.0]
    return f"{qa.get('correct')}/{qa.get('n')} [{lo:.0%}, {hi:.0%}]"


def arms_table(summary: dict[str, Any]) -> str:
    """Each arm's headline figures (whole run, warm-up excluded), one row an arm."""
    head = ("arm", "ok", "failed", "output tok/s", "TTFT p50", "TTFT p95", "TPOT p50",
            "decode p50", "acceptance", "answers correct")  # fmt: skip
    q = (summary.get("quality") or {}).get("arms") or {}
    rows = []
    for i, (name, a) in enumerate((summary.get("arms") or {}).items()):
        req = a.get("requests") or {}
        acc = a.get("acceptance_rate")
        dec = (a.get("decode_tokens_per_s") or {}).get("p50")
        qa = q.get(name)
        rows.append(
            f"<tr><td><span class='dot' style='background:{arm_colour(i)}'></span>"
            f"{escape(str(name))}</td><td>{req.get('ok', 0)}</td><td>{req.get('failed', 0)}</td>"
            f"<td>{float(a.get('output_tokens_per_s') or 0):.1f}</td>"
            f"<td>{fmt_ms((a.get('ttft_ms') or {}).get('p50'))} ms</td>"
            f"<td>{fmt_ms((a.get('ttft_ms') or {}).get('p95'))} ms</td>"
            f"<td>{fmt_ms((a.get('tpot_ms') or {}).get('p50'))} ms</td>"
            f"<td>{'—' if dec is None else f'{dec:.1f} tok/s'}</td>"
            f"<td>{'n/a' if acc is None else f'{acc:.0%}'}</td>"
            f"<td>{_answers(qa)}</td></tr>"
        )
    return (
        "<table class='arms'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
        + "".join(rows) + "</table>"
        "<p class='note'>whole run; ok and failed count every request, the other figures "
        "leave warm-up out; times are medians (p50) and tails (p95) over requests</p>"
    )  # fmt: skip


def verdict_html(summary: dict[str, Any], go: Any, include_js: bool) -> tuple[str, bool]:
    """The verdict section; returns it and whether it carried plotly.js."""
    comp = summary.get("comparison")
    # (two arms: one comparison; three or more: each arm against the first, a list)
    pairs = [c for c in (comp if isinstance(comp, list) else [comp]) if isinstance(c, dict)]
    parts = ["<section id='verdict'>"]
    used_js = False
    if pairs:
        parts.append("<h2>Verdict</h2>")
    for c in pairs:
        parts.append(f"<p class='verdict'>{verdict_sentence(c)}</p>")
        fig = forest(c, go)
        if fig is not None:
            parts.append(fig.to_html(include_plotlyjs=include_js and not used_js, full_html=False))
            used_js = used_js or include_js
        more = other_ratios(c)
        if more:
            parts.append(f"<p>{more}</p>")
        d = c.get("decode_tokens_per_s") or {}
        missing = d.get("missing") or []
        if d.get("partial") and missing:
            names = " · ".join(escape(stratum_label(m)) for m in missing if isinstance(m, dict))
            parts.append(f"<p class='note'>still collecting: {names}</p>")
    slo = summary.get("slo")
    if isinstance(slo, dict) and slo.get("text"):  # the SLO verdict in words, beside it
        parts.append(f"<p class='verdict'>SLO {escape(str(slo['text']))} (whole run)</p>")
    parts.append("<h2>Arms</h2>" + arms_table(summary))
    parts.append("</section>")
    return "".join(parts), used_js
