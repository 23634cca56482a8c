"""The HTML report: one self-contained file (plotly.js inlined, no network needed to open
it). Plotly because it is well kept, draws interactive time series with shaded spans and
labelled markers, and writes standalone HTML without a browser or a server."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tokmon.model.data.samples import GpuSample, ServerSample
from tokmon.model.data.samples import read as read_sample
from tokmon.model.judge.timesplit import MISMATCH_SHARE
from tokmon.recording.reader import Recording
from tokmon.report.html_verdict import arm_colour, verdict_html
from tokmon.report.text import escape, render_text
from tokmon.textsafe import dumps


def groups(keys: np.ndarray, idx: np.ndarray) -> dict[int, np.ndarray]:
    """Rows ``idx`` split by ``keys`` (one sort, not one pass per key)."""
    if idx.size == 0:
        return {}
    k = keys[idx]
    order = np.argsort(k, kind="stable")
    ks, starts = np.unique(k[order], return_index=True)
    return {int(key): part for key, part in zip(ks, np.split(idx[order], starts[1:]), strict=True)}


def resolution(end_s: float) -> float:
    """Seconds a chart point covers: one second up to 10 minutes, then as many as keep
    the run to about 600 points (a day: 2.4 minutes a point)."""
    return 1.0 if end_s <= 600 else float(math.ceil(end_s / 600))


def _series(rec: Recording, arms: list[str], width_s: float) -> dict[str, Any]:
    """Windowed series over the run, one point per window, per arm: tokens that arrived,
    the percentiles of the requests that ended in the window, the failures. A window in
    which an arm sent nothing is a gap in its line, never a zero."""
    end = rec.t_end if rec.t_end is not None else rec.last_t
    n = max(1, int(end / 1e9 // width_s) + 1)
    t = [(i + 1) * width_s for i in range(n)]
    tok = {a: np.zeros(n) for a in arms}
    for ts, arm, k in rec.ticks:
        i = int(ts / 1e9 // width_s)
        if 0 <= i < n and arm in tok:
            tok[arm][i] += k
    tb = rec.requests
    c = tb.cols
    win = np.minimum(n - 1, np.maximum(0, c["t_end"] / 1e9 // width_s)).astype(np.int64)
    ok = c["outcome"] == tb.code("outcome", "ok")
    # the windows each arm was sending in: from its requests' scheduled to ended times
    # (each request +1 where it begins, -1 after it ends; a window is covered where the
    # running sum is above 0: one pass in numpy, not one slice per request)
    sending: dict[str, np.ndarray] = {}
    per: dict[str, dict[str, Any]] = {}
    for a in arms:
        mine = c["arm"] == tb.code("arm", a)
        w0 = np.minimum(n - 1, np.maximum(0, c["t_sched"][mine] / 1e9 // width_s)).astype(np.int64)
        w1 = np.maximum(w0, win[mine])
        edges = np.bincount(w0, minlength=n + 1) - np.bincount(w1 + 1, minlength=n + 1)
        sending[a] = np.cumsum(edges)[:n] > 0
        by_win = groups(win, np.flatnonzero(mine & ok & tb.counted()))

        def pct(col: str, q: float, by_win: dict[int, np.ndarray] = by_win) -> list[float | None]:
            out: list[float | None] = [None] * n
            for i, rows in by_win.items():
                v = c[col][rows]
                v = v[~np.isnan(v)]
                if v.size:
                    out[i] = float(np.percentile(v, q))
            return out

        per[a] = {
            "ttft_p50": pct("ttft_ms", 50),
            "ttft_p95": pct("ttft_ms", 95),
            "tpot_p50": pct("tpot_ms", 50),
            "tpot_p95": pct("tpot_ms", 95),
            "errors": np.bincount(win[mine & ~ok], minlength=n).astype(float).tolist(),
        }
    # acceptance per server: a sample without a rate (its arm not running) is a gap in
    # the line, never a straight line drawn across the other arm's period
    acc: dict[str, tuple[list[float], list[float | None]]] = {}
    gpu_t, gpu = [], []
    for smp in rec.samples:
        r = read_sample(smp.src, smp.values)  # typed and checked: the file is untrusted
        ts = smp.t
        if isinstance(r, ServerSample):
            name = ", ".join(r.arms) if r.arms else "server"
            rate = r.acceptance_rate
            if rate is not None or name in acc:
                xs, ys = acc.setdefault(name, ([], []))
                xs.append(ts / 1e9)
                ys.append(None if rate is None else 100 * rate)
        if isinstance(r, GpuSample) and r.mem_used_gib is not None:
            gpu_t.append(ts / 1e9)
            gpu.append(r.mem_used_gib)
    # the last window holds only the run's end: divide by the time it covers
    widths = np.full(n, width_s)
    widths[-1] = max(1e-9, end / 1e9 - (n - 1) * width_s)
    t[-1] = end / 1e9
    for a in arms:
        rate = tok[a] / widths
        per[a]["tok_s"] = [float(x) if sending[a][i] else None for i, x in enumerate(rate)]
    return {"t": t, "arms": per, "acc": acc, "gpu_t": gpu_t, "gpu": gpu}


def _short(ev: Any) -> str:
    """An event's label on a chart: a few words."""
    d = ev.data
    if d.get("alert") == "change_point":
        pct = d.get("change_pct")
        metric = d.get("metric", "")
        return f"change {metric} {pct:+.0f}%" if isinstance(pct, (int, float)) else "change"
    text = str(ev.message)
    return text if len(text) <= 28 else text[:27] + "…"


def script_json(obj: object) -> str:
    """JSON to embed in a ``<script type="application/json">`` block: read back by
    ``JSON.parse(el.textContent)`` exactly. Not HTML-escaped (a script's text is not
    HTML: ``&quot;`` would stay); every ``<``, ``>`` and ``&`` is a JSON escape instead,
    so no ``</script>`` or ``<!--`` can end or bend the block."""
    text = dumps(obj)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _split_chart(summary: dict[str, Any], go: Any) -> str:
    """Where the time goes: each arm's TTFT as a stacked bar of its parts (network, front
    end, queue, prefill), and each ladder step's where the run had a ladder: the knee's
    cause (queueing or prefill) is the part that grows."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for arm, a in (summary.get("arms") or {}).items():
        # one bar per arm, always: an arm without a split says why in its label
        t = (a.get("time_split") or {}).get("ttft_ms") or {}
        why = (f"run, {t.get('stat')}" if t.get("source") and not _no_parts(t)
               else "no parts: a clock or definition mismatch" if t.get("source")
               else "no server figures")  # fmt: skip
        rows.append((f"{arm} ({why})", t))
    for st in (summary.get("ladder") or {}).get("steps") or []:
        t = (st.get("time_split") or {}).get("ttft_ms") or {}
        if t.get("source"):
            rows.append((f"{st.get('arm')} @ {st.get('value')} ({t.get('stat')})", t))
    if not any(t.get("source") for _, t in rows):
        return ""
    fig = go.Figure()
    for key, name in (("network", "network"), ("front", "front end"), ("queue", "queue"),
                      ("prefill", "prefill")):  # fmt: skip
        fig.add_trace(
            go.Bar(
                y=[escape(r[0]) for r in rows],
                x=[r[1].get(key) for r in rows],
                name=name,
                orientation="h",
                hovertemplate="%{y}: %{x:.1f} ms<extra>" + name + "</extra>",
            )
        )
    # sized to its rows (each bar 36 px), the legend whole in a row of its own below:
    # at a fixed 176 px the chart was a line, a bar missing, the legend cut to "prefill"
    fig.update_layout(
        barmode="stack",
        height=160 + 36 * len(rows),
        template="plotly_white",
        xaxis_title="TTFT (ms)",
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
        margin={"t": 20, "b": 110},
    )
    return "<h2>Where the time goes</h2>" + fig.to_html(include_plotlyjs=False, full_html=False)


def _no_parts(t: dict[str, Any]) -> bool:
    """A split whose requests mostly broke the part-and-whole rule: no part given."""
    bad, n = int(t.get("mismatched") or 0), int(t.get("n") or 0)
    return bad > MISMATCH_SHARE * (n + bad)


def _ladder_chart(lad: dict[str, Any] | None, go: Any, make_subplots: Any) -> str:
    """The throughput–latency curve of a ladder, one line per arm, the knee marked."""
    if not lad:
        return ""
    lf = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "TTFT p95 against output tokens/s",
            f"decode speed p50 against {lad['param']}",
        ),
    )
    for arm in dict.fromkeys(st["arm"] for st in lad["steps"]):
        sts = [st for st in lad["steps"] if st["arm"] == arm and st["tokens_per_s"]]
        lf.add_trace(
            go.Scatter(
                x=[st["tokens_per_s"] for st in sts],
                y=[st["ttft_p95"] for st in sts],
                mode="lines+markers+text",
                text=[escape(str(st["value"])) for st in sts],
                textposition="top center",
                name=f"{escape(arm)} TTFT p95",
            ),
            1,
            1,
        )
        lf.add_trace(
            go.Scatter(
                x=[str(st["value"]) for st in sts],
                y=[st["decode_p50"] for st in sts],
                mode="lines+markers",
                name=f"{escape(arm)} decode p50",
            ),
            1,
            2,
        )
        k = lad["knee"].get(arm)
        if k:
            lf.add_annotation(x=k["tokens_per_s"], y=k["ttft_p95"], text="knee", row=1, col=1)
    lf.update_layout(height=450, template="plotly_white")
    return "<h2>Ladder</h2>" + lf.to_html(include_plotlyjs=False, full_html=False)


def render_html(rec: Recording, data: dict[str, Any]) -> str:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:  # pragma: no cover - plotly is a dependency
        raise RuntimeError("the HTML report needs plotly: pip install plotly") from None
    summary = data["summary"]
    arms = list(summary.get("arms") or {})
    end_s = (rec.t_end if rec.t_end is not None else rec.last_t) / 1e9
    width = resolution(end_s)
    s = _series(rec, arms, width)
    verdict, used_js = verdict_html(summary, go, include_js=True)
    fig = make_subplots(
        rows=6,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
        subplot_titles=(
            "output tokens/s, per arm",
            "TTFT (ms): p50, p95 dashed",
            "TPOT (ms): p50, p95 dashed",
            "acceptance rate (%)",
            f"failed requests per {width:g} s",
            "GPU memory (GiB)",
        ),
    )
    for i, a in enumerate(arms):
        col, name, p = arm_colour(i), escape(a), s["arms"][a]
        line = {"color": col}
        dash = {"color": col, "dash": "dash"}
        fig.add_trace(go.Scatter(x=s["t"], y=p["tok_s"], name=f"{name} tokens/s", line=line,
                                 legendgroup=name, connectgaps=False), 1, 1)  # fmt: skip
        for row, key, label in ((2, "ttft", "TTFT"), (3, "tpot", "TPOT")):
            # (markers too: a window between two empty ones is a point, not a line)
            fig.add_trace(go.Scatter(x=s["t"], y=p[f"{key}_p50"], name=f"{name} {label} p50",
                                     line=line, legendgroup=name, connectgaps=False,
                                     mode="lines+markers", marker={"size": 4}), row, 1)  # fmt: skip
            fig.add_trace(go.Scatter(x=s["t"], y=p[f"{key}_p95"], name=f"{name} {label} p95",
                                     line=dash, legendgroup=name, connectgaps=False,
                                     mode="lines+markers", marker={"size": 3}), row, 1)  # fmt: skip
        fig.add_trace(go.Bar(x=s["t"], y=p["errors"], name=f"{name} failed",
                             marker_color=col, legendgroup=name), 5, 1)  # fmt: skip
    for name, (xs, ys) in s["acc"].items():
        fig.add_trace(
            go.Scatter(x=xs, y=ys, name=f"acceptance {escape(name)}", connectgaps=False), 4, 1
        )
    fig.add_trace(go.Scatter(x=s["gpu_t"], y=s["gpu"], name="GPU memory"), 6, 1)
    # A chart without data says so, on a 0-1 axis (not plotly's default -1 to 1).
    empty = {
        4: not any(y is not None for _, ys in s["acc"].values() for y in ys),
        5: not any(any(p["errors"]) for p in s["arms"].values()),
        6: not s["gpu"],
    }
    for row, none in empty.items():
        if none:
            fig.update_yaxes(range=[0, 1], row=row, col=1)
            fig.add_annotation(
                text="none" if row == 5 else "no data",
                xref=f"x{row} domain",
                yref=f"y{row} domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font={"color": "#888"},
            )
    palette = ["rgba(95,175,255,0.10)", "rgba(255,175,95,0.12)", "rgba(175,135,255,0.10)"]
    arms = sorted({seg["arm"] for seg in data["segments"]})
    for seg in data["segments"]:
        fig.add_vrect(
            x0=seg["start_s"],
            x1=seg["start_s"] + seg["duration_s"],
            line_width=0,
            fillcolor=palette[arms.index(seg["arm"]) % len(palette)],
            annotation_text=escape(seg["arm"]),
            annotation_position="top left",
        )
    end_s = max(s["t"][-1] if s["t"] else 0.0, 1.0)  # (where the labels go)
    # a managed server's restart (nothing sent): a grey span
    t0 = None
    for ev in rec.events:
        phase = ev.data.get("phase") if ev.kind == "server" else None
        if phase == "stopping":
            t0 = ev.t / 1e9
        elif phase in ("ready", "failed") and t0 is not None:
            fig.add_vrect(x0=t0, x1=ev.t / 1e9, line_width=0, fillcolor="rgba(128,128,128,0.25)")
            t0 = None
    for ev in rec.events:
        if ev.kind not in ("marker", "alert", "restart"):
            continue
        if ev.kind == "restart":  # a server's counters reset: a line, no label (they pile up)
            fig.add_vline(x=ev.t / 1e9, line_dash="dot", line_color="#999")
            continue
        # a change point is drawn where the change was, not where it was found
        at = ev.data.get("at_s") if ev.data.get("alert") == "change_point" else None
        x = float(at) if isinstance(at, (int, float)) else ev.t / 1e9
        label = escape(_short(ev))
        fig.add_vline(
            x=x,
            line_dash="dot",
            annotation_text=label,
            # the label stays inside the chart: to the left of a line in the run's
            # second half, to its right in the first
            annotation_position="top left" if x > end_s / 2 else "top right",
            annotation_font_size=10,
        )
    fig.update_layout(
        height=1400, showlegend=True, template="plotly_white", xaxis6_title="seconds since start"
    )
    chart = fig.to_html(include_plotlyjs=not used_js, full_html=False)
    chart += _ladder_chart(data["summary"].get("ladder"), go, make_subplots)
    chart += _split_chart(data["summary"], go)
    records = data["environment"].get("records") or ()
    arms = [a for a in data["environment"].get("arms") or [] if a[2] is not None]
    # the environment once: as its table where the recording has its record
    text = render_text(data, environment=not records)
    env = ""
    if len(arms) >= 2 and len({id(a[2]) for a in arms}) >= 2:
        from tokmon.report.environment import arm_env_html

        env = "<h2>Environment</h2>" + arm_env_html(arms)  # each arm's server
    elif records:
        from tokmon.report.environment import env_html

        env = "<h2>Environment</h2>" + env_html(records)
    title = f"tokmon report — {escape(rec.path)}"
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>body{{font-family:system-ui,sans-serif;margin:2em}}"
        "pre{background:#f6f6f6;padding:1em;overflow:auto;white-space:pre-wrap}"
        "table.env th{text-align:left;padding-right:1em;font-weight:normal;color:#555}"
        "table.arms{border-collapse:collapse}table.arms td,table.arms th{padding:.3em .8em;"
        "text-align:right;border-bottom:1px solid #ddd}table.arms td:first-child{text-align:left}"
        ".dot{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin-right:.4em}"
        ".verdict{font-size:1.25em}.note{color:#666;font-size:.9em}"
        "@media print{.js-plotly-plot{page-break-inside:avoid}body{margin:0}}</style></head><body>"
        f"<h1>{title}</h1>{verdict}<h2>Over time</h2>{chart}<h2>Figures</h2>"
        f"<pre>{escape(text)}</pre>{env}"
        f"<script type='application/json' id='tokmon-summary'>"
        f"{script_json(data['summary'])}</script></body></html>\n"
    )
