"""``tokmon report`` and ``tokmon export``: a recording turned into figures worth sharing.

The summary is rebuilt from the recorded requests with the same code the live run used,
so ``--format json`` equals the live ``--summary-json``.
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass
from typing import Any

from tokmon.model.contract.eventlog import listed_events
from tokmon.model.data.table import REQUEST_KEYS
from tokmon.model.folding.fold import Fold
from tokmon.model.judge.analyses import DRIFT_ROWS
from tokmon.model.judge.changepoint import SPEAKS_AFTER_S
from tokmon.model.statistics.words import count
from tokmon.model.workloads.workload import describe_load
from tokmon.recording.play import (
    Folded,
    fold_report,
    held,
    settings_of,
    summary_of,
)
from tokmon.recording.reader import Recording
from tokmon.report.split_text import split_lines
from tokmon.report.summary_text import alert_lines, fmt_ms, summary_table, window_words
from tokmon.textsafe import clean_text, csv_cell, dumps

FORMATS = ("text", "md", "json", "csv", "html")


def longest_regime_s(starts: list[float], end_s: float) -> float:
    """The longest stretch the run held one setting (a regime starts at each change)."""
    bounds = [*starts, max(end_s, starts[-1])]
    return max(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def change_points(fold: Fold) -> dict[str, list[dict[str, Any]]]:
    """The step changes the run's own detector found (as live: the same fold)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for arm, cp in fold.change_points:
        out.setdefault(arm, []).append(
            {
                "metric": cp.metric,
                "t_s": cp.t,
                "found_s": cp.t_found,
                "before": cp.before,
                "after": cp.after,
                "change_pct": cp.change_pct,
            }
        )
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


def report_data(
    rec: Recording, target_rate: float | None = None, folded: Folded | None = None
) -> dict[str, Any]:
    """Every figure of a report. ``folded``: the recording already folded as it was read
    (``stream_report``: a long one is never held); else ``rec`` is folded whole."""
    folded = folded or fold_report(held(rec))
    rec, fold, an = folded.rec, folded.fold, folded.analyses
    w, end = folded.window, folded.end
    start = w.t_from if w is not None else 0

    def inside(t: float) -> bool:
        return w is None or start <= t <= end

    return {
        "summary": (summary := summary_of(rec, folded)),
        "capacity": capacity(rec, summary, target_rate),
        "segments": an.segments.table(rec.events, rec.arms, end, start),
        "drift": an.drift.figures(),
        "drift_limit": fold.settings.drift_alert_pct_h,
        "drift_late": an.drift.late,
        "change_points": change_points(fold),
        "longest_regime_s": longest_regime_s(fold.regimes, summary["duration_s"]),
        "jitter": an.jitter.figures(),
        "errors": an.errors.figures(),
        "missing_parts": list(rec.missing),
        "part": rec.part,
        "environment": environment_block(rec, summary),
        "truncated": rec.truncated,
        "cut_parts": list(rec.cut),
        "corrupt_lines": rec.corrupt,
        "lost_lines": rec.lost_lines,
        "paused": [g for g in rec.gaps if g.get("why") == "paused" and inside(g.get("to") or 0)],
        "sessions": rec.sessions,
        "events": [
            {"t_s": e.t / 1e9, "kind": e.kind, "message": e.message}
            for e in rec.events
            if inside(e.t)
        ],
    }


def arm_environments(rec: Recording, summary: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Each arm's server as it ran: (arm, its server in words, its environment record or
    None). A managed server's record is the one surveyed when it started (each arm its
    own, spec off and spec on); an arm with a URL has the record of that URL's server."""
    from tokmon.model.env.environment import ServerEnv

    by_url = {e.url: e for e in settings_of(rec).environment}
    managed = summary.get("managed_servers") or {}
    out = []
    for arm, a in (summary.get("arms") or {}).items():
        got = managed.get(arm)
        m: dict[str, Any] = got if isinstance(got, dict) else {}
        env = ServerEnv.from_json(m.get("env")) if m.get("env") else None
        if env is None:
            env = by_url.get(str(a.get("server") or "")) or (
                by_url.get(str((summary.get("target") or {}).get("url") or "")) if not m else None
            )
        out.append((str(arm), str(a.get("server") or ""), env))
    return out


def environment_block(rec: Recording, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    h = rec.header
    servers = {}
    for url, v in (h.get("servers") or {}).items():
        if not isinstance(v, dict):
            continue
        data = (v.get("models") or {}).get("data") if isinstance(v.get("models"), dict) else None
        models = [m.get("id") for m in data or [] if isinstance(m, dict)]
        servers[url] = {"models": models, "version": v.get("version")}
    return {
        "tokmon": h.get("tokmon_version"),
        "started_at": h.get("started_at"),
        "host": h.get("host") if isinstance(h.get("host"), dict) else {},
        "gpu": h.get("gpu") if isinstance(h.get("gpu"), dict) else {},
        "servers": servers,
        "records": settings_of(rec).environment,
        "arms": arm_environments(rec, summary) if summary is not None else [],
        "command": " ".join(map(str, h.get("command") or [])),
        "load": load_of(h),
    }


def load_of(h: dict[str, Any]) -> str:
    """The load in one line, from the header's settings (and a ladder's steps, which only
    the command line names)."""
    if not isinstance(h.get("settings"), dict):
        return ""
    line = describe_load(h["settings"])
    cmd = [str(c) for c in h.get("command") or []]
    for i, c in enumerate(cmd):
        if c.startswith("--ladder="):
            line += f" · ladder {c.split('=', 1)[1]}"
        elif c == "--ladder" and i + 1 < len(cmd):
            line += f" · ladder {cmd[i + 1]}"
    return line


def environment_lines(env: dict[str, Any], md: bool = False) -> list[str]:
    """The machine tokmon ran on, then each server's record (what it runs, the way to
    it, what it allows)."""
    from tokmon.report.environment import arm_env_lines, env_lines

    host = env.get("host") or {}
    out = [f"tokmon {env.get('tokmon')} · started {env.get('started_at')}"]
    out.append(
        f"client {host.get('hostname')} · {host.get('cpu')} · {host.get('cores')} cores · "
        f"{(host.get('mem_gib') or 0):.0f} GiB · Python {host.get('python')}"
    )
    gpu = env.get("gpu") or {}
    gpus = gpu.get("gpus") if isinstance(gpu.get("gpus"), list) else []
    out.append(
        "GPU "
        + (
            ", ".join(map(str, gpus)) + f" · driver {gpu.get('driver')}"
            if gpus
            else "none recorded"
        )
    )
    records = env.get("records") or ()
    arms = [a for a in env.get("arms") or [] if a[2] is not None]
    if len(arms) >= 2 and len({id(a[2]) for a in arms}) >= 2:
        # each arm's server (spec off and spec on): what differs first, then each whole
        out += ([""] if md else []) + arm_env_lines(arms, "md" if md else "text")
    elif records:
        out += ([""] if md else []) + env_lines(records, "md" if md else "text")
    else:
        for url, v in env.get("servers", {}).items():
            out.append(
                f"server {url} · models {', '.join(map(str, v['models']))} · "
                f"version {v.get('version') or 'unknown'}"
            )
    out.append(f"command: {clean_text(env.get('command') or '', False)}")
    if env.get("load"):
        out.append(f"load: {clean_text(env['load'], False)}")
    return out


def render_text(data: dict[str, Any], md: bool = False, environment: bool = True) -> str:
    out: list[str] = []
    h = "## " if md else ""
    fence = ["```"] if md else []
    out += note_lines(data)
    env = data["environment"]
    if environment and env.get("records") and md:
        out += [h + "Environment", "", *environment_lines(env, md=True), ""]
    elif environment:  # (the HTML report shows it once, as a table of its own)
        out += [h + "Environment", *fence, *environment_lines(env), *fence, ""]
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
    out += [
        *fence,
        "",
        h + "Drift per regime (Theil–Sen slope, % of median per hour, 95% CI)",
        *fence,
    ]
    out += drift_lines(data)
    out += [*fence, "", h + "Alerts raised during the run (as in the JSON summary)", *fence]
    alerts = data["summary"].get("alerts") or []
    if not alerts:
        out.append("none")
    out += alert_lines(alerts)
    out += [*fence, "", h + "Events (markers, pauses, load, arms, servers, alerts)", *fence]
    out += event_lines(data["summary"].get("events") or [])
    out += [
        *fence,
        "",
        h + "Change points (CUSUM on per-second request figures, within each regime)",
        *fence,
    ]
    cps = [(arm, c) for arm, cs in data["change_points"].items() for c in cs]
    if not cps and data["longest_regime_s"] < SPEAKS_AFTER_S:
        out.append(
            f"not watched: the detector speaks {SPEAKS_AFTER_S:.0f} s into a regime, and the "
            f"longest here lasted {data['longest_regime_s']:.0f} s"
        )
    elif not cps:
        out.append("none")
    for arm, c in cps:
        out.append(
            f"{arm:<10} {c['metric']:<20} from {c['t_s']:>7.0f} s (found {c['found_s']:.0f} s)  "
            f"{c['before']:.2f} → {c['after']:.2f} ({c['change_pct']:+.1f}%)"
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
    split = split_lines(data["summary"])
    if split:
        out += [*fence, "", h + "Where the time goes (TTFT and TPOT split, per arm)", *fence]
        out += split
    net = data["summary"].get("network") or {}
    if net:
        out += [*fence, "", h + "Network during the run", *fence]
        for url, n in net.items():
            r = n.get("rtt_ms") or {}
            share = ", ".join(
                f"{clean_text(a, False)} {100 * v:.1f}%"
                for a, v in (n.get("ttft_share") or {}).items()
            )
            out.append(
                f"{clean_text(url, False)}: round trip p50 {fmt_ms(r.get('p50'))} "
                f"(min {fmt_ms(r.get('min'))}, max {fmt_ms(r.get('max'))}, {n.get('samples')} samples)"
                + (f" · share of TTFT p50: {share}" if share else "")
            )
    out += [*fence]
    return "\n".join(out) + "\n"


def note_lines(data: dict[str, Any]) -> list[str]:
    """What a reader must know before the figures: a cut or corrupt recording, lines
    lost, pauses, missing parts, a part or a window read alone, late requests."""
    out: list[str] = []
    if data["truncated"]:
        cut = data.get("cut_parts") or []
        out.append(
            ("NOTE: the recording was cut (the writer stopped before its end); "
             if not cut else f"NOTE: {', '.join(clean_text(c, False) for c in cut)} "
             "of this rotated run " + ("was" if len(cut) == 1 else "were") + " cut; ")
            + "figures cover what was written."
        )  # fmt: skip
    if data["corrupt_lines"]:
        n = data["corrupt_lines"]
        out.append(f"NOTE: {count(n, 'corrupt line')} {'was' if n == 1 else 'were'} skipped.")
    if data.get("lost_lines"):
        out.append(
            f"NOTE: {count(data['lost_lines'], 'line')} of this run could not be written (the disk "
            "was full); the live summary counted them, this report cannot."
        )
    for g in data.get("paused") or []:
        out.append(f"NOTE: recording paused from {g['from'] / 1e9:.1f} s to {g['to'] / 1e9:.1f} s.")
    for m in data.get("missing_parts") or []:
        out.append(f"NOTE: a part of this rotated run is missing: {clean_text(m, False)}; "
                   "the figures cover the parts read.")  # fmt: skip
    if data.get("part"):
        out.append(
            f"NOTE: part {data['part']} of a rotated run, read alone: the figures cover this "
            "part, from the instant it began (report the first part to read the whole run)."
        )
    elif data["summary"].get("window"):
        out.append(
            "NOTE: the figures cover a window of the run"
            f"{window_words(data['summary']['window'])}: the requests sent and ended in it, "
            "the tokens that arrived in it."
        )
    late = sum(s.get("late", 0) for s in data["segments"]) + data.get("drift_late", 0)
    if late:
        out.append(
            f"NOTE: {count(late, 'request')} ended after its segment or regime was settled: "
            "counted, left out of that segment's medians and drift."
        )
    if data.get("sessions", 1) > 1:
        out.append(
            f"NOTE: this file holds {data['sessions']} sessions (--append); this is the last."
        )
    return out


def drift_lines(data: dict[str, Any]) -> list[str]:
    """Drift per arm and regime, each figure with its interval."""
    out: list[str] = []
    # only the figures a regime was long enough to give; the rest in one line (a short
    # run printed two dozen "too short to tell" lines, one per arm, regime and figure)
    unknown = 0
    for arm, regimes in data["drift"].items():
        for rg in regimes:
            where = f"{rg['from_s']:.0f}–{rg['to_s']:.0f} s"
            for key, v in rg["drift"].items():
                if v is None:
                    unknown += 1
                    continue
                lo, hi = v["ci95"]
                out.append(
                    f"{clean_text(arm, False):<10} {where:<14} {key:<20} "
                    f"{v['pct_per_hour']:+8.2f} %/h  [{lo:+.2f}, {hi:+.2f}]"
                    + (
                        f"  (a sample of {DRIFT_ROWS:,} of {rg['sampled']:,} req)"
                        if rg.get("sampled")
                        else ""
                    )  # fmt: skip
                )
    if unknown:
        longest = data.get("longest_regime_s") or 0.0
        out.append(
            ("drift: too short to tell in every regime" if not out
             else f"drift: {unknown} more figure{'s' if unknown != 1 else ''} too short to tell")
            + f" (an interval must tell ±{data.get('drift_limit', 5):g} %/h from none: about "
            f"10 minutes of a steady server; the longest regime lasted {longest:.0f} s)"
        )  # fmt: skip
    return out


def event_lines(events: list[dict[str, Any]]) -> list[str]:
    """The summary's events, one line each: when, what kind, what it said."""
    if not events:
        return ["none"]
    return [
        f"{e.get('t_s', 0):>8.1f} s  {clean_text(str(e.get('kind', '')), False):<9} "
        f"{clean_text(str(e.get('message', '')), False)}"
        for e in events
    ]


EVENT_COLUMNS = ("t_s", "kind", "message", "arm")


def export_events_csv(rec: Recording) -> str:
    """The run's events as CSV (``NAME-events.csv`` beside the requests' ``NAME.csv``):
    the summary's list, taken from the recording without folding it again."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(EVENT_COLUMNS)
    for e in listed_events(rec.events):
        w.writerow([csv_cell(e.get(k)) for k in EVENT_COLUMNS])
    return buf.getvalue()


def export_columns(rec: Recording) -> dict[str, list[Any]]:
    """Every request's fields (without chunk gaps), one list per field, None where a
    figure is missing: for CSV and Parquet."""
    return {name: rec.requests.values(name) for name in REQUEST_KEYS if name != "gaps"}


def export_csv(rec: Recording) -> str:
    cols = export_columns(rec)
    buf = io.StringIO()
    w = csv.writer(buf)  # writes None as an empty field
    w.writerow(list(cols))
    w.writerows([csv_cell(v) for v in row] for row in zip(*cols.values(), strict=True))
    return buf.getvalue()


def escape(s: str) -> str:
    return html.escape(clean_text(s))


@dataclass(frozen=True)
class ArmPair:
    """An arm of run A against an arm of run B."""

    a: str
    b: str

    def label(self) -> str:
        return f"B:{self.b} vs A:{self.a}"


def pair_arms(
    arms_a: list[str], arms_b: list[str], mapping: list[str] | None = None
) -> tuple[list[ArmPair], str]:
    """Which arms of two runs compare, and how they were paired (one line): by ``--map
    a=b``, by name, or -- one arm each -- with each other. None pair: the line says why.
    Raises ValueError (one line) for a --map that names an arm a run does not have."""
    if mapping:
        pairs = []
        for m in mapping:
            a, eq, b = m.partition("=")
            a, b = a.strip(), b.strip()
            if not eq or not a or not b:
                raise ValueError(f"--map {m!r}: give A=B (an arm of each run)")
            if a not in arms_a:
                raise ValueError(f"--map: run A has no arm {a!r} (it has {', '.join(arms_a)})")
            if b not in arms_b:
                raise ValueError(f"--map: run B has no arm {b!r} (it has {', '.join(arms_b)})")
            pairs.append(ArmPair(a, b))
        return pairs, "arms paired by --map: " + ", ".join(f"A:{p.a} = B:{p.b}" for p in pairs)
    same = [ArmPair(n, n) for n in arms_a if n in arms_b]
    if same:
        return same, "arms paired by name: " + ", ".join(p.a for p in same)
    if len(arms_a) == 1 and len(arms_b) == 1:
        return [ArmPair(arms_a[0], arms_b[0])], (
            f"one arm each: A:{arms_a[0]} paired with B:{arms_b[0]} (their names differ)"
        )
    return [], (
        f"no arm pairs: A has {', '.join(arms_a)}, B has {', '.join(arms_b)}; "
        "name the pairs with --map A=B"
    )


def _env_of(fold: Fold, arm: str) -> list[Any]:
    """The environment record of ``arm``'s server (by its URL), else the run's first."""
    st = fold.settings
    url = st.server_of(arm)
    found = [e for e in st.environment if e.url == url]
    return found or list(st.environment[:1])


def compare_recordings(
    a: Recording, b: Recording, fmt: str, mapping: list[str] | None = None
) -> str:
    """Two recordings side by side, arm by arm (``pair_arms``): each pair's ratios of
    medians B/A with their intervals, named by run and arm, and its servers'
    environments."""
    from tokmon.model.judge.summary import RATIO_KEYS, compare
    from tokmon.report.environment import compare_lines, compare_rows, machine_rows

    pairs, how = pair_arms(list(a.arms), list(b.arms), mapping)
    ra, rb = fold_report(held(a)), fold_report(held(b))
    fa, fb = ra.fold, rb.fold
    weights = fa.settings.kind_weights
    kw = dict(weights) if weights and weights == fb.settings.kind_weights else None
    comps = [(p, compare(fa.totals[p.a], fb.totals[p.b], 0, kw)) for p in pairs]
    sa, sb = summary_of(a, ra), summary_of(b, rb)
    machines = (machine_rows(a.header), machine_rows(b.header))
    envs: list[tuple[ArmPair | None, list[Any], list[Any]]] = [
        (p, _env_of(fa, p.a), _env_of(fb, p.b)) for p in pairs
    ] or [(None, _env_of(fa, a.arms[0]), _env_of(fb, b.arms[0]))]
    keys = RATIO_KEYS

    def ratio_text(v: dict[str, Any] | None, digits: int = 3) -> str:
        if v is None:
            return "not enough data"
        lo, hi = v["ci95"]
        t = f"×{v['ratio']:.{digits}f}  [{lo:.{digits}f}, {hi:.{digits}f}]"
        if v.get("partial"):
            t += f"  PARTIAL: {v.get('coverage', 0):.0%} of the workload"
        return t

    if fmt == "json":
        out_pairs = []
        for (p, comp), (_, ea, eb) in zip(comps, envs, strict=False):
            rows, _ = compare_rows(ea, eb, machines)
            out_pairs.append(
                {
                    "a_arm": p.a,
                    "b_arm": p.b,
                    "comparison": comp,
                    "environment_differences": [
                        {"field": k, "a": va, "b": vb} for k, va, vb, d in rows if d
                    ],
                }
            )
        doc: dict[str, Any] = {"a": sa, "b": sb, "pairing": how, "pairs": out_pairs}
        if len(out_pairs) == 1:  # one pair: its figures at the top too, as before pairs
            doc["comparison"] = out_pairs[0]["comparison"]
            doc["environment_differences"] = out_pairs[0]["environment_differences"]
        return dumps(doc, indent=2) + "\n"
    if fmt == "csv":
        # one row per figure and pair: A, B, and B/A with its interval; then the environment
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["section", "a_arm", "b_arm", "field", "a", "b", "ratio_b_over_a",
                    "ci95_lo", "ci95_hi", "coverage"])  # fmt: skip
        for p, comp in comps:
            arm_a, arm_b = sa["arms"][p.a], sb["arms"][p.b]
            for key in keys:
                v = comp.get(key)
                w.writerow(
                    [csv_cell(x) for x in (
                        "figure", p.a, p.b, f"{key} p50", arm_a[key]["p50"], arm_b[key]["p50"],
                        None if v is None else v["ratio"],
                        None if v is None else v["ci95"][0],
                        None if v is None else v["ci95"][1],
                        None if v is None else v.get("coverage"),
                    )]
                )  # fmt: skip
            for key in ("output_tokens_per_s", "requests_per_s"):
                w.writerow([csv_cell(x) for x in ("figure", p.a, p.b, key, arm_a[key], arm_b[key])])
        for p2, ea, eb in envs:
            rows, _ = compare_rows(ea, eb, machines)
            for k, va, vb, d in rows:
                w.writerow(
                    [csv_cell(x) for x in ("environment" + (" (differs)" if d else ""),
                     p2.a if p2 else "", p2.b if p2 else "", k, va, vb)]
                )  # fmt: skip
        if not pairs:
            w.writerow([csv_cell(x) for x in ("note", "", "", "pairing", how)])
        return buf.getvalue()
    if fmt == "html":
        parts = [f"<p>{escape(how)}</p>"]
        for p, comp in comps:
            figs = "".join(
                f"<tr><th>{escape(key)}</th><td>{escape(ratio_text(comp.get(key)))}</td></tr>"
                for key in keys
            )
            parts.append(
                f"<h2>{escape(p.label())} (ratio of medians, 95% CI over requests)</h2>"
                f"<table>{figs}</table>"
            )
        for p2, ea, eb in envs:
            env_rows, n_diff = compare_lines(ea, eb, "html", machines)
            who = f" of A:{p2.a} and B:{p2.b}" if p2 else ""
            parts.append(
                f"<h2>Environment{escape(who)} ({n_diff} difference"
                f"{'s' if n_diff != 1 else ''}, highlighted)</h2>" + "".join(env_rows)
            )
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>tokmon comparison</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:2em}pre{background:#f6f6f6;"
            "padding:1em}tr.differs{background:#fff3cd}th{text-align:left;padding-right:1em}"
            "</style></head><body>"
            f"<h1>tokmon comparison</h1><p>A: {escape(a.path)}<br>B: {escape(b.path)}</p>"
            + "".join(parts)
            + f"<h2>A</h2><pre>{escape(summary_table(sa))}</pre>"
            f"<h2>B</h2><pre>{escape(summary_table(sb))}</pre></body></html>\n"
        )
    lines = ["A: " + a.path, "B: " + b.path, how, ""]
    for p2, ea, eb in envs:
        env, n_diff = compare_lines(ea, eb, "md" if fmt == "md" else "text", machines)
        who = f" of A:{p2.a} and B:{p2.b}" if p2 else ""
        lines += [
            f"Environment{who} ({n_diff} difference{'s' if n_diff != 1 else ''}, marked ≠):"
            if n_diff or ea or eb
            else "Environment: no server records in these files",
            *env,
            "",
        ]
    lines += ["A: " + a.path, summary_table(sa), "", "B: " + b.path, summary_table(sb), ""]
    for p, comp in comps:
        lines.append(f"{p.label()} (ratio of medians, 95% CI over requests):")
        for key in keys:
            lines.append(f"  {key:<20} " + ratio_text(comp.get(key)))
        for k, v in (comp.get("by_kind") or {}).items():
            lines.append(f"  decode, {k:<13} " + ratio_text(v.get("decode_tokens_per_s")))
    if not pairs:
        lines.append(how)
    return "\n".join(lines) + "\n"
