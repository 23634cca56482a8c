"""``tokmon report`` and ``tokmon export``: a recording turned into figures worth sharing.

The summary is rebuilt from the recorded requests with the same code the live run used,
so ``--format json`` equals the live ``--summary-json``.
"""

from __future__ import annotations

import csv
import html
import io
import json
from typing import Any

import numpy as np

from tokmon.core.drift import drift
from tokmon.core.recording import REQUEST_KEYS, Recording, recording_summary
from tokmon.core.summary import fmt_ms, summary_table
from tokmon.core.textsafe import clean_text

FORMATS = ("text", "md", "json", "csv", "html")


def segments(rec: Recording) -> list[dict[str, Any]]:
    """Per-segment figures (a segment: a stretch during which one arm was active)."""
    s = rec.header.get("settings") or {}
    arms = [a["name"] for a in s.get("arms", [])] or ["default"]
    bounds: list[tuple[int, str, int]] = [(0, arms[0], 0)]
    for ev in rec.events:
        if ev.kind == "arm" and isinstance(ev.data.get("arm"), str):
            bounds.append((len(bounds), str(ev.data["arm"]), ev.t))
    end = rec.t_end if rec.t_end is not None else rec.last_t
    out = []
    by_seg: dict[int, list[Any]] = {}
    for r in rec.records:
        by_seg.setdefault(r.segment, []).append(r)
    for i, (seg, arm, t0) in enumerate(bounds):
        t1 = bounds[i + 1][2] if i + 1 < len(bounds) else end
        rs = [r for r in by_seg.get(seg, []) if r.counted]
        ok = [r for r in rs if r.ok]
        dec = [r.decode_tps for r in ok if r.decode_tps is not None]
        ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
        out.append(
            {
                "segment": seg,
                "arm": arm,
                "start_s": t0 / 1e9,
                "duration_s": (t1 - t0) / 1e9,
                "ok": len(ok),
                "failed": len(rs) - len(ok),
                "decode_p50": float(np.median(dec)) if dec else None,
                "ttft_p50": float(np.median(ttft)) if ttft else None,
            }
        )
    return out


def counted_ok_by_arm(rec: Recording) -> dict[str, list[Any]]:
    """The requests every whole-run figure is made of: ok, not warm-up, not settling."""
    by_arm: dict[str, list[Any]] = {}
    for r in rec.records:
        if r.ok and r.counted:
            by_arm.setdefault(r.arm, []).append(r)
    return by_arm


def drifts(rec: Recording) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for arm, rs in counted_ok_by_arm(rec).items():
        t = np.array([r.t_end / 1e9 for r in rs])
        d: dict[str, Any] = {}
        for key, attr in (
            ("decode_tokens_per_s", "decode_tps"),
            ("ttft_ms", "ttft_ms"),
            ("tpot_ms", "tpot_ms"),
        ):
            sel = [
                (ti, getattr(r, attr))
                for ti, r in zip(t, rs, strict=True)
                if getattr(r, attr) is not None
            ]
            if sel:
                a = np.array(sel)
                d[key] = drift(a[:, 0], a[:, 1])
        out[arm] = d
    return out


def window_medians(rs: list[Any], attr: str, width_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-window medians of a per-request figure, by end time."""
    pts: dict[int, list[float]] = {}
    for r in rs:
        v = getattr(r, attr)
        if v is not None:
            pts.setdefault(int(r.t_end / 1e9 // width_s), []).append(v)
    keys = sorted(pts)
    return (
        np.array([(k + 1) * width_s for k in keys]),
        np.array([float(np.median(pts[k])) for k in keys]),
    )


def change_points(rec: Recording, width_s: float = 10.0) -> dict[str, list[dict[str, Any]]]:
    """Step changes in decode speed and TTFT per arm (Page–Hinkley on window medians)."""
    from tokmon.core.changepoint import cusum

    out: dict[str, list[dict[str, Any]]] = {}
    for arm, rs in counted_ok_by_arm(rec).items():
        found = []
        for key, attr in (("decode_tokens_per_s", "decode_tps"), ("ttft_ms", "ttft_ms")):
            t, m = window_medians(rs, attr, width_s)
            for c in cusum(t, m):
                found.append(
                    {
                        "metric": key,
                        "t_s": c.t,
                        "before": c.before,
                        "after": c.after,
                        "change_pct": c.change_pct,
                    }
                )
        out[arm] = found
    return out


def jitter(rec: Recording) -> dict[str, dict[str, Any]]:
    """Spread of TPOT (p99/p50, coefficient of variation) and of chunk gaps, per arm."""
    out: dict[str, dict[str, Any]] = {}
    for arm, rs in counted_ok_by_arm(rec).items():
        tp = np.array([r.tpot_ms for r in rs if r.tpot_ms is not None])
        d: dict[str, Any] = {"stalls": sum(r.stalls for r in rs)}
        if tp.size >= 2:
            d["tpot_p99_over_p50"] = float(np.percentile(tp, 99) / np.median(tp))
            d["tpot_cv"] = float(tp.std() / tp.mean())
        gaps = [np.frombuffer(r.gaps, dtype="<f4") for r in rs if r.gaps]
        if gaps:
            g = np.concatenate(gaps)
            d["gap_p50_ms"] = float(np.median(g))
            d["gap_p99_over_p50"] = float(np.percentile(g, 99) / np.median(g))
        mg = [r.max_gap_ms for r in rs if r.max_gap_ms is not None]
        if mg:
            d["max_gap_ms"] = float(max(mg))
        out[arm] = d
    return out


def errors_by_class(rec: Recording) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in rec.records:
        if not r.ok:
            d = out.setdefault(r.arm, {})
            d[r.outcome] = d.get(r.outcome, 0) + 1
    return out


def capacity(rec: Recording, summary: dict[str, Any], target_rate: float | None) -> dict[str, Any]:
    """Requests/s one GPU sustains within the SLOs (goodput), and GPUs for a target load."""
    import math

    gpus = (
        (rec.header.get("cost") or {}).get("gpus")
        or len((rec.header.get("gpu") or {}).get("gpus") or [])
        or 1
    )
    out = {}
    for arm, a in summary["arms"].items():
        g = a.get("goodput_per_s")
        if g is None:
            continue
        per_gpu = g / gpus
        out[arm] = {
            "per_gpu": per_gpu,
            "gpus": gpus,
            "target_rate": target_rate,
            "needed": (math.ceil(target_rate / per_gpu) if target_rate and per_gpu > 0 else None),
        }
    return out


def report_data(rec: Recording, target_rate: float | None = None) -> dict[str, Any]:
    return {
        "summary": (summary := recording_summary(rec)),
        "capacity": capacity(rec, summary, target_rate),
        "segments": segments(rec),
        "drift": drifts(rec),
        "change_points": change_points(rec),
        "jitter": jitter(rec),
        "errors": errors_by_class(rec),
        "environment": environment_block(rec),
        "truncated": rec.truncated,
        "corrupt_lines": rec.corrupt,
        "events": [{"t_s": e.t / 1e9, "kind": e.kind, "message": e.message} for e in rec.events],
    }


def environment_block(rec: Recording) -> dict[str, Any]:
    h = rec.header
    servers = {}
    for url, v in (h.get("servers") or {}).items():
        models = [
            m.get("id") for m in (v.get("models") or {}).get("data", []) if isinstance(m, dict)
        ]
        servers[url] = {"models": models, "version": v.get("version")}
    return {
        "tokmon": h.get("tokmon_version"),
        "started_at": h.get("started_at"),
        "host": h.get("host"),
        "gpu": h.get("gpu"),
        "servers": servers,
        "command": " ".join(h.get("command") or []),
    }


def render(rec: Recording, fmt: str, target_rate: float | None = None) -> str:
    if fmt == "json":
        return json.dumps(recording_summary(rec), indent=2) + "\n"
    if fmt == "csv":
        return export_csv(rec)
    data = report_data(rec, target_rate)
    if fmt == "html":
        from tokmon.report_html import render_html

        return render_html(rec, data)
    return render_text(data, md=(fmt == "md"))


def render_text(data: dict[str, Any], md: bool = False) -> str:
    out: list[str] = []
    h = "## " if md else ""
    fence = ["```"] if md else []
    if data["truncated"]:
        out.append(
            "NOTE: the recording was cut (the writer stopped before its end); "
            "figures cover what was written."
        )
    if data["corrupt_lines"]:
        out.append(f"NOTE: {data['corrupt_lines']} corrupt line(s) were skipped.")
    out += [h + "Summary", *fence, summary_table(data["summary"]), *fence, ""]
    out += [
        h + "Segments",
        *fence,
        f"{'seg':>4} {'arm':<10} {'start':>8} {'dur s':>7} {'ok':>6} {'fail':>5} {'dec p50':>8} {'TTFT p50':>9}",
    ]
    for s in data["segments"]:
        out.append(
            f"{s['segment']:>4} {clean_text(s['arm'], False)[:10]:<10} {s['start_s']:>8.1f} "
            f"{s['duration_s']:>7.1f} {s['ok']:>6} {s['failed']:>5} "
            f"{'—' if s['decode_p50'] is None else format(s['decode_p50'], '.1f'):>8} "
            f"{fmt_ms(s['ttft_p50']):>9}"
        )
    out += [*fence, "", h + "Drift (Theil–Sen slope, % of median per hour, 95% CI)", *fence]
    for arm, d in data["drift"].items():
        for key, v in d.items():
            if v is None:
                out.append(f"{arm:<10} {key:<20} not enough data")
            else:
                lo, hi = v["ci95"]
                out.append(
                    f"{arm:<10} {key:<20} {v['pct_per_hour']:+8.2f} %/h  [{lo:+.2f}, {hi:+.2f}]"
                )
    out += [*fence, "", h + "Change points (Page–Hinkley on 10 s window medians)", *fence]
    cps = [(arm, c) for arm, cs in data["change_points"].items() for c in cs]
    if not cps:
        out.append("none")
    for arm, c in cps:
        out.append(
            f"{arm:<10} {c['metric']:<20} at {c['t_s']:>7.0f} s  {c['before']:.2f} → "
            f"{c['after']:.2f} ({c['change_pct']:+.1f}%)"
        )
    out += [*fence, "", h + "Jitter and stalls", *fence]
    for arm, j in data["jitter"].items():
        parts = [f"stalls {j['stalls']}"]
        if "tpot_cv" in j:
            parts.append(f"TPOT p99/p50 {j['tpot_p99_over_p50']:.2f} · CV {j['tpot_cv']:.3f}")
        if "gap_p99_over_p50" in j:
            parts.append(
                f"chunk gap p50 {j['gap_p50_ms']:.1f} ms · p99/p50 {j['gap_p99_over_p50']:.2f}"
            )
        if "max_gap_ms" in j:
            parts.append(f"longest gap {j['max_gap_ms']:.0f} ms")
        out.append(f"{arm:<10} " + " · ".join(parts))
    cap = data.get("capacity") or {}
    if cap:
        out += [*fence, "", h + "Capacity under the SLOs", *fence]
        for arm, c in cap.items():
            line = (
                f"{arm:<10} {c['per_gpu']:.2f} req/s per GPU meet the SLOs "
                f"({c['gpus']} GPU{'s' if c['gpus'] != 1 else ''} measured)"
            )
            if c.get("needed") is not None:
                line += f" · {c['target_rate']:g} req/s needs {c['needed']} GPUs"
            out.append(line)
    out += [*fence, "", h + "Errors by class", *fence]
    if not data["errors"]:
        out.append("none")
    for arm, d in data["errors"].items():
        out.append(f"{arm}: " + ", ".join(f"{k} {v}" for k, v in sorted(d.items())))
    out += [*fence, "", h + "Environment", *fence]
    env = data["environment"]
    host = env.get("host") or {}
    out.append(f"tokmon {env.get('tokmon')} · started {env.get('started_at')}")
    out.append(
        f"host {host.get('hostname')} · {host.get('cpu')} · {host.get('cores')} cores · "
        f"{(host.get('mem_gib') or 0):.0f} GiB · Python {host.get('python')}"
    )
    gpu = env.get("gpu") or {}
    out.append(
        "GPU "
        + (
            ", ".join(gpu.get("gpus", [])) + f" · driver {gpu.get('driver')}"
            if gpu.get("gpus")
            else "none recorded"
        )
    )
    for url, v in env.get("servers", {}).items():
        out.append(
            f"server {url} · models {', '.join(map(str, v['models']))} · version {v.get('version') or 'unknown'}"
        )
    out.append(f"command: {clean_text(env.get('command') or '', False)}")
    out += [*fence]
    return "\n".join(out) + "\n"


def export_csv(rec: Recording) -> str:
    cols = [k for k in REQUEST_KEYS if k != "gaps"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rec.records:
        w.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in cols])
    return buf.getvalue()


def escape(s: str) -> str:
    return html.escape(clean_text(s))


def compare_recordings(a: Recording, b: Recording, fmt: str) -> str:
    """Two recordings side by side: the first arm of ``b`` against the first arm of ``a``."""
    from tokmon.core.aggregate import Aggregator
    from tokmon.core.summary import compare

    tots = []
    for rec in (a, b):
        s = rec.header.get("settings") or {}
        arms = [x["name"] for x in s.get("arms", [])] or ["default"]
        agg = Aggregator(arms)
        agg.add_records(rec.records)
        tots.append(agg.totals[arms[0]])
    tots[0].name = f"{a.path}:{tots[0].name}"
    tots[1].name = f"{b.path}:{tots[1].name}"
    comp = compare(tots[0], tots[1], 0)
    sa, sb = recording_summary(a), recording_summary(b)
    if fmt == "json":
        return json.dumps({"a": sa, "b": sb, "comparison": comp}, indent=2) + "\n"
    lines = [
        "A: " + a.path,
        summary_table(sa),
        "",
        "B: " + b.path,
        summary_table(sb),
        "",
        "B vs A (ratio of medians, 95% CI over requests):",
    ]
    for key in ("decode_tokens_per_s", "tpot_ms", "ttft_ms"):
        v = comp.get(key)
        lines.append(
            f"  {key:<20} "
            + (
                "not enough data"
                if v is None
                else f"×{v['ratio']:.3f}  [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]"
            )
        )
    return "\n".join(lines) + "\n"
