"""The dashboard's panels as text: what each figure of a Snapshot reads as (the charts'
labels, the comparison, where the time goes, the events), folded to the rows there are.
Pure: a snapshot in, rich Text out — the app only places them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from tokmon.model.contract.history import Point, merge_all
from tokmon.model.data.records import EngineStatus
from tokmon.model.folding.snapshot import Snapshot
from tokmon.model.statistics.words import hms
from tokmon.report.split_text import arm_lines, causes_parts, wrap
from tokmon.report.summary_text import fmt_ms
from tokmon.textsafe import clean_text
from tokmon.ui.header import LAG_HOT_MS


@dataclass(frozen=True)
class Chart:
    """What one sparkline draws: its key (the labels'), title, a fixed range (None: it
    scales itself), whether high values warn, the scale's unit, the floor of a self-scaled
    range, and the history point's figure it draws."""

    key: str
    title: str
    fixed: tuple[float, float] | None
    warn: bool
    unit: str
    floor: float
    column: Callable[[Point], float | None]


def _pct(v: float | None) -> float | None:
    return None if v is None else 100 * v


CHARTS = (
    Chart("tok", "tokens/s", None, False, "", 0.0, lambda p: p.tok_s),
    Chart("decode", "decode", None, False, "", 0.0, lambda p: p.decode_p50),
    Chart("ttft", "TTFT", None, False, "ms", 0.0, lambda p: p.ttft_p50),
    Chart("accept", "accept", (0.0, 100.0), False, "%", 0.0, lambda p: _pct(p.acc_rate)),
    # the share of requests that failed in the window (not a count: one error in a
    # quiet minute must not fill the chart); its scale is at least 0-5%
    Chart("errors", "errors", None, True, "%", 5.0, lambda p: _pct(p.err_rate)),
    Chart("gpu", "GPU", (0.0, 100.0), False, "%", 0.0, lambda p: p.gpu_util),
    Chart("kv", "server", (0.0, 100.0), False, "%", 0.0, lambda p: p.kv_pct),
)


def chart_labels(s: Snapshot) -> dict[str, tuple[str, str]]:
    w = s.window
    if w is None:
        return {}
    arms = (
        " · ".join(
            f"{v.name} {v.window.tokens_per_s:,.0f}" for v in s.arm_views if v.window is not None
        )
        if len(s.arm_views) > 1
        else f"{w.requests_per_s:.2f} req/s"
    )
    err_cls = (
        " ".join(f"{k.replace('http_', '')} {v}" for k, v in sorted(w.errors.items())) or "none"
    )
    acc1, acc2 = "n/a", "no acceptance source"
    if w.acceptance_rate is not None:
        acc1 = f"{w.acceptance_rate:.0%}"
        if w.acceptance_length is not None:
            acc1 += f" · len {w.acceptance_length:.2f}"
        acc2 = f"from {w.acceptance_source}"
    elif w.tokens_per_chunk is not None and w.tokens_per_chunk > 1.05:
        acc1 = f"~{w.tokens_per_chunk:.2f} tok/chunk"
        acc2 = "estimate from chunks"
    pr = s.probes
    gpu1 = "n/a" if pr.gpu_util is None else f"util {pr.gpu_util:.0f}%"
    if pr.gpu_mem_used_gib is not None:
        gpu1 += f" · {pr.gpu_mem_used_gib:.1f} GiB"
    gpu2 = (
        pr.gpu_note or "no GPU probe"
        if pr.gpu_util is None
        else (
            f"{pr.gpu_power_w:.0f} W · {pr.gpu_temp_c or 0:.0f}°C"
            if pr.gpu_power_w is not None
            else ""
        )
    )
    kv1 = "n/a" if pr.kv_pct is None else f"KV {pr.kv_pct:.0f}%"
    if pr.queue is not None:
        kv1 += f" · queue {pr.queue:.0f}"
    kv2 = (
        pr.server_note or "no server metrics"
        if pr.kv_pct is None
        else (f"running {pr.running or 0:.0f} · {pr.engine or ''}")
    )
    if pr.prefix_hit_pct is not None:  # the prefix cache at work (or not)
        kv2 = f"prefix hit {pr.prefix_hit_pct:.0f}% · " + kv2
    # while the arms take turns, a window can hold both: its latencies then mix them,
    # and say so (they read as the arm in force's)
    ended = [v.name for v in s.arm_views if v.window is not None and v.window.ended]
    rv = s.judgment("reasoning")
    ar = rv.of(s.arm) if rv is not None else None
    answer = ar.ttfa_p50 if ar is not None else None
    mix = f"{len(ended)} arms · " if len(ended) > 1 else ""
    out = {
        "tok": (f"{w.tokens_per_s:,.0f} tok/s", arms),
        "decode": (
            f"p50 {_num(w.decode_p50)} tok/s",
            f"{mix}TPOT p50 {fmt_ms(w.tpot_p50)} p95 {fmt_ms(w.tpot_p95)}"
            + ("" if w.tpot_cv is None else f" cv {w.tpot_cv:.2f}"),
        ),
        "ttft": (
            f"p50 {fmt_ms(w.ttft_p50)} ms",
            f"{mix}p95 {fmt_ms(w.ttft_p95)} p99 {fmt_ms(w.ttft_p99)} ms",
        )
        if answer is None
        else (  # a reasoning model: the answer's wait beside the first token's
            f"p50 {fmt_ms(w.ttft_p50)} ms · answer {fmt_ms(answer)}",
            f"{mix}(answer: run p50, after the thinking) p95 {fmt_ms(w.ttft_p95)} ms",
        ),
        "accept": (acc1, acc2),
        # the window's share, then the run's count: "0/13" beside the header's
        # "failed 1" read as a contradiction until each said what it covers
        "errors": (
            f"{w.failed}/{w.ended} ({(w.failed / w.ended if w.ended else 0):.1%})"
            f" last {w.width_s:.0f} s",
            err_cls + (f" · stalls {w.stalls}" if w.stalls else "") + f" · run: {s.failed} failed",
        ),
        "gpu": (gpu1, gpu2),
        "kv": (kv1, kv2),
    }
    # The running trend (Sen's slope, %/h) once there is enough data, beside line 1.
    for key, metric in (
        ("tok", "tok_s"),
        ("decode", "tpot_p50"),
        ("ttft", "ttft_p95"),
        ("errors", "err_rate"),
        ("gpu", "gpu_mem_pct"),
        ("kv", "kv_pct"),
    ):
        tr = s.trends.get(metric)
        if tr is not None and key in out:
            l1, l2 = out[key]
            if tr.known:  # narrow enough to tell a drift that matters from none
                sig = "*" if tr.significant else ""
                out[key] = (f"{l1} {tr.pct_per_hour:+.1f}%/h{sig}", l2)
            else:
                out[key] = (f"{l1} · drift: too short to tell", l2)
    return out


def split_blocks(
    s: Snapshot,
    width: int,
    title: str = "where the time goes (w: back to the comparison)",
) -> list[Block]:
    """`w` (or beside the comparison on wide screens): where each arm's time goes
    (its TTFT in parts, its TPOT split, TPOT by batch) and the A/B speed-up as its
    causes."""
    out = [Block((Text(title, style="bold"),))]
    for sp in s.time_split:
        lines = arm_lines(sp.arm, sp.to_json(), width)
        out.append(Block(tuple(Text(x) for x in lines), fold=2 if sp.arm != s.arm else 0,
                         name=f"{sp.arm} split"))  # fmt: skip
    if not s.time_split:
        out.append(Block((Text("no requests yet", style="dim"),)))
    lines = causes_lines(s, width)
    if lines:
        out.append(Block(tuple(Text(x) for x in lines), fold=3, name="causes"))
    return out


def causes_lines(s: Snapshot, width: int) -> list[str]:
    """The decode speed-up as its causes: per task kind where the mix has several
    (pooled medians over code and free text are neither's causes), else the whole."""
    cmp = s.comparison
    if s.causes_by_kind:
        ratios = {k.kind: k.ratio for k in cmp.by_kind} if cmp is not None else {}
        lines = ["decode speed-up's causes by task kind (whole run):"]
        for c in s.causes_by_kind:
            r = ratios.get(c.kind)
            lines += wrap(causes_parts(c.to_json(), None if r is None else r.ratio),
                          "  ", width, " ")  # fmt: skip
        return lines
    if s.causes is None:
        return []
    dec = cmp.decode if cmp is not None else None
    return wrap(causes_parts(s.causes.to_json(), None if dec is None else dec.ratio),
                "", width, " ")  # fmt: skip


def compare_blocks(s: Snapshot, width: int = 58, split: bool = False) -> list[Block]:
    """The comparison panel: the arms, the ladder, the A/B ratios, cost and outputs,
    each block with how readily it folds when rows are short."""
    if split:
        return split_blocks(s, width)
    # The counts are the run's and the figures the window's: a line above the
    # columns says so, first to fold where rows are short (the help says it too).
    win = f"last {s.window.width_s:.0f} s" if s.window is not None else "window"
    out: list[Block] = [
        Block((Text(f"{'':9}{'whole run':^10}{win:^18}", style="dim"),), fold=5,
              name="column scopes"),
        Block((Text(f"{'arm':<9}{'ok':>5} {'err':>4} {'tok/s':>6}{'dec':>6}{'TTFT':>6}",
                    style="bold"),)),
    ]  # fmt: skip
    for v in s.arm_views:
        w = v.window
        mark = "▶" if v.name == s.arm else " "
        # counts keep their width (1.2k, 34k, 5.6M) and a space between: they never merge
        line = f"{mark}{clean_text(v.name, False)[:8]:<8}{_count(v.ok):>5} {_count(v.failed):>4} "
        if w is not None:
            line += f"{w.tokens_per_s:>6.0f}{_num(w.decode_p50):>6}{fmt_ms(w.ttft_p50):>6}"
        out.append(Block((Text(line),)))
        if w is not None:
            # The rest of each arm's window: TPOT, TTFT p95, error rate, acceptance.
            acc = "n/a" if w.acceptance_rate is None else f"{w.acceptance_rate:.0%}"
            err = f"{w.failed / w.ended:.1%}" if w.ended else "—"
            detail = (f"  TPOT {fmt_ms(w.tpot_p50)} · p95 TTFT {fmt_ms(w.ttft_p95)} · "
                      f"err {err} · acc {acc}")  # fmt: skip
            out.append(Block((Text(detail, style="dim"),), fold=4, name="arm details"))
    for name, view in s.judgments.items():  # each registered judgment's lines, if it has any
        lines = getattr(view, "panel_lines", None)
        said = [clean_text(str(x), False) for x in lines()] if callable(lines) else []
        if said:
            # wrapped between words, never cut; the first to fold where rows are short
            # (the figures of the run are the arms'; these are its judgments' details)
            fitted = [y for x in said for y in wrap(x.split(), " " * (len(x) - len(x.lstrip())),
                                                     width, " ")]  # fmt: skip
            out.append(Block(tuple(Text(x) for x in fitted), fold=6,
                             name=str(getattr(view, "title", "")) or name))  # fmt: skip
    if s.slo:  # the SLO verdict, where a user looks: per arm, against the target, live
        head = f"SLO {s.slo[0].terms} (whole run, {s.slo[0].target:.0%} target):"
        parts = [f"{clean_text(v.arm, False)[:8]} {v.text(terms=False)}" for v in s.slo]
        miss = any(v.meets is False for v in s.slo)
        out.append(Block(tuple(Text(x, style="bold red" if miss and i == 0 else "")
                               for i, x in enumerate(wrap(parts, head + " ", width))),
                         name="slo"))  # fmt: skip
    for cv in s.capacity:  # --find-capacity: the bracket narrowing, probe by probe
        probing = (
            ""
            if cv.done
            else f" · probing {s.level:g}" + (f": {cv.progress}" if cv.progress else "")
        )
        marks = " ".join(f"{p.level:g}{'✓' if p.verdict == 'pass' else '✗'}"
                         for p in cv.probes)  # fmt: skip
        lines = [Text(f"{clean_text(cv.arm, False)[:10]}: {cv.text}{probing}", style="bold")]
        lines += kind_lines(marks.split(" ") if marks else [], "  probes ", width)
        out.append(Block(tuple(lines)))
    lad = s.ladder
    if lad is not None and lad.done:
        # The curve, point by point: throughput against latency at each step.
        rows = [Text(f"ladder {lad.param}: tok/s TTFT95  dec  KV", style="bold")]
        for f in lad.done:
            k = lad.knee_of(f.arm)
            mark = " ← knee" if k is not None and k.step == f.step else ""
            arm = f" {f.arm[:6]}" if len(s.arms) > 1 else ""
            kv = "—" if f.kv_max_pct is None else f"{f.kv_max_pct:.0f}%"
            rows.append(Text(f"  {f.value:>6}{arm} {(f.tokens_per_s or 0):>7.0f} "
                             f"{fmt_ms(f.ttft_p95):>6} {_num(f.decode_p50):>5} {kv:>4}{mark}"))  # fmt: skip
        out.append(Block(tuple(rows), fold=2, name="ladder", shrinks=True))
    c = s.comparison
    if c is not None:
        lines = [Text(f"{c.other[:8]}/{c.baseline[:8]} ratio [95% CI] by {c.method}",
                      style="bold")]  # fmt: skip
        for r, name in ((c.decode, "decode"), (c.tpot, "TPOT"), (c.ttft, "TTFT")):
            if r is None:
                lines.append(Text(f"  {name:<7}collecting data", style="dim"))
            else:
                t = Text(f"  {name:<7}×{r.ratio:.2f} [{r.lo:.2f}, {r.hi:.2f}]",
                         style="bold" if r.significant and not r.partial else "")  # fmt: skip
                if r.partial:
                    # part of the workload: said, never passed off as the whole
                    t.append(f" partial {r.coverage:.0%} of mix", style="bold yellow")
                elif not r.significant:
                    t.append(" n.s.", style="dim")
                lines.append(t)
        part = next((r for r in (c.decode, c.tpot, c.ttft) if r is not None and r.partial), None)
        if part is not None:
            lines.extend(kind_lines([f"{m}" for m in part.missing], "  collecting: ", width))
        if c.by_kind and (len(c.by_kind) > 1 or any(k.ratio is None for k in c.by_kind)):
            # always beside the headline: folds to lines of its own, never away
            lines.extend(kind_lines([k.text() for k in c.by_kind], "decode by kind: ", width))
        out.append(Block(tuple(lines)))
        cross = [x for cr in s.crossovers for x in wrap(cr.text().split(" "), "", width, " ")]
        if cross:  # where the speed-up stops paying, by load (and by kind)
            out.append(Block(tuple(Text(x) for x in cross), fold=2, name="crossover"))
        why = causes_lines(s, width)
        if why:  # the speed-up as its causes (w: the whole split)
            out.append(Block(tuple(Text(x) for x in why), fold=2, name="causes (w)"))
    elif len(s.arms) < 2:
        out.append(Block((Text("one arm: add --arm to compare", style="dim"),), fold=3))
    if any(
        a.cost.cost_per_mtok is not None or a.cost.joules_per_token is not None
        for a in s.costs.values()
    ):
        parts = []
        for name, a in s.costs.items():
            bits = []
            if a.cost.cost_per_mtok is not None:
                bits.append(f"{a.cost.cost_per_mtok:.2f}/Mtok")
            if a.cost.joules_per_token is not None:
                bits.append(f"{a.cost.joules_per_token:.2f} J/tok")
            parts.append(f"{name[:8]} " + (" ".join(bits) if bits else "—"))
        basis = f" at {s.price.text()}" if s.price is not None else ""
        out.append(Block((Text(f"cost{basis} (whole run)"), Text("  " + " · ".join(parts))),
                         fold=1, name="cost"))  # fmt: skip
        for name, a in s.costs.items():
            kc = [(k, v.cost_per_mtok) for k, v in a.by_kind if v.cost_per_mtok]
            if len(kc) > 1:  # what each kind of task costs: code is cheap with a draft
                rows = kind_lines([f"{k} {v:.2f}" for k, v in kc],
                                   f"  {name[:8]} by kind (/Mtok): ", width)  # fmt: skip
                out.append(Block(tuple(Text(r.plain, style="dim") for r in rows),
                                 fold=3, name="cost by kind"))  # fmt: skip
    if s.quality:  # beside speed: whether the answers are still right
        parts = [f"{clean_text(a.arm, False)[:8]} {a.text()}" for a in s.quality]
        qlines = [Text(x) for x in wrap(parts, "quality (answers checked, whole run): ", width)]
        d = s.quality_diff
        if d is not None:
            qlines.append(Text(f"  quality cost: {clean_text(d.text(), False)}",
                               style="bold red" if d.verdict == "worse" else ""))  # fmt: skip
        out.append(Block(tuple(qlines), fold=1, name="quality"))
    oc = s.output_check
    if oc is not None:
        lines = []
        for name, r in oc["arms"].items():
            if r["identical_share"] is None:
                lines.append(Text(f"outputs {name[:8]}: none compared", style="dim"))
            else:
                t = Text(f"outputs {name[:8]}: {r['identical']}/{r['compared']} identical")
                if r["first_divergence_median"] is not None:
                    t.append(f", diverge ~char {r['first_divergence_median']:.0f}", style="dim")
                lines.append(t)
        out.append(Block(tuple(lines), fold=2, name="outputs"))
    if len(s.workers) > 1:
        out.append(Block(tuple(worker_line(w) for w in s.workers), fold=3, name="workers"))
    return out


def events_text(s: Snapshot, room: int = 6) -> Text:
    """The latest ``room`` events under the title; with no room under it (80×24, the
    comparison taking every row), the latest beside the title, never the title alone."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if room <= 0:
        t.append("events ", style="bold")
        if s.events:
            ev = s.events[-1]
            t.append(f"(latest) {hms((ev.t - s.t_start) / 1e9)} ", style="dim")
            t.append(clean_text(ev.message, keep_newlines=False))
        return t
    t.append("events\n", style="bold")
    for ev in list(s.events)[-room:]:
        t.append(f"{hms((ev.t - s.t_start) / 1e9):>8} ", style="dim")
        style = "bold" if ev.kind in ("arm", "alert", "restart") else ""
        t.append(clean_text(ev.message, keep_newlines=False) + "\n", style=style)
    return t


def kind_lines(parts: list[str], head: str, width: int = 58) -> list[Text]:
    """The per-kind figures, as many to a line as fit ``width`` (the narrowest panel),
    each whole: a long list wraps between figures, never inside one."""
    out: list[str] = []
    cur = head
    for p in parts:
        sep = "" if cur in (head, "  ") else " · "
        if len(cur) + len(sep) + len(p) > width and cur not in (head, "  "):
            out.append(cur)
            cur, sep = "  ", ""
        cur += sep + p
    out.append(cur)
    return [Text(line) for line in out]


def worker_line(w: EngineStatus) -> Text:
    """One load generator: where it runs, its streams, its send lag and CPU — loud when
    it is the limit (lag over 50 ms, CPU over 90% of a core), so that an overloaded
    client is never read as a slow server."""
    t = Text(f"worker {w.worker} {clean_text(w.host, False)[:16]} · {w.in_flight} in flight · ")
    hot = "bold reverse"
    t.append(f"lag {w.send_lag_ms:.1f} ms", style=hot if w.send_lag_ms > LAG_HOT_MS else "")
    t.append(" · ")
    t.append(f"CPU {w.cpu_pct:.0f}%", style=hot if w.cpu_pct > 90 else "")
    return t


@dataclass(frozen=True)
class Block:
    """Lines of the comparison panel, and how readily they fold away when rows are short
    (0: never; the highest first). A block that shrinks loses its oldest lines first,
    keeping its title (the ladder's latest steps are the ones being watched)."""

    lines: tuple[Text, ...]
    fold: int = 0
    name: str = ""
    shrinks: bool = False


def fit_blocks(blocks: list[Block], room: int, width: int = 10_000) -> Text:
    """The blocks in their order within ``room`` lines; what had to fold is named on the
    last line with the key that shows it (``b``: the panels over the whole screen)."""
    blocks = list(blocks)
    hidden: list[str] = []

    def over() -> bool:
        return sum(len(b.lines) for b in blocks) + (1 if hidden else 0) > room

    while over():
        folding = [i for i, b in enumerate(blocks) if b.fold > 0]
        if not folding:
            break
        i = max(folding, key=lambda j: (blocks[j].fold, j))
        b = blocks[i]
        if b.shrinks and len(b.lines) > 3:  # its title and two lines at least
            blocks[i] = dataclasses.replace(b, lines=(b.lines[0], *b.lines[2:]))
            hidden.append(f"earlier {b.name}")
            continue
        del blocks[i]
        if b.name and b.name not in hidden:
            hidden.append(b.name)
    t = Text(no_wrap=True, overflow="ellipsis")
    for b in blocks:
        for line in b.lines:
            t.append_text(line)
            t.append("\n")
    if hidden:
        t.append(more_line(list(dict.fromkeys(hidden)), width), style="dim")
    return t


def more_line(names: list[str], width: int) -> str:
    """``more (cost, ladder): b`` within ``width``: the names that do not fit are counted
    (``+2``), so the key that shows them is never cut."""
    for k in range(len(names), 0, -1):
        rest = len(names) - k
        line = f"more ({', '.join(names[:k])}{f', +{rest}' if rest else ''}): b"
        if len(line) <= width:
            return line
    return f"more ({len(names)}): b"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


# The time views `z` cycles through: the recent minutes (a column a second), the last
# hour (every second of it, merged to the width), the last day (the whole run's points
# of it) and the whole run.
VIEWS = ("recent", "hour", "day", "whole")
DAY_S = 86_400.0


def view_points(snap: Snapshot, view: str, width: int) -> list[Point]:
    """The points a time view draws (before they are merged to the width)."""
    if view == "recent":
        return list(snap.recent)[-width:]
    if view == "hour":
        return list(snap.recent)  # (the last 3,600 seconds, one point each)
    pts = list(snap.whole)
    if view == "day" and pts:
        end = pts[-1].t + pts[-1].span
        pts = [p for p in pts if p.t + p.span > end - DAY_S]
    return pts


def chart_columns(snap: Snapshot, view: str, width: int) -> tuple[list[Point], float]:
    """The points to draw in ``view``, one a column, and the seconds each column stands
    for."""
    pts = view_points(snap, view, width)
    span = pts[0].span if pts else 1.0
    if 0 < len(pts) < width and width > 0:
        # a short run fills the width: each point drawn over as many columns as fit
        # (its marks on the first), so a wide chart is never mostly empty; the axis
        # label says how long is shown
        k = width // len(pts)
        if k >= 2:
            quiet = [dataclasses.replace(p, marks=()) for p in pts]
            return [
                q for p, blank in zip(pts, quiet, strict=True) for q in (p, *[blank] * (k - 1))
            ], span / k
        return pts, span
    if len(pts) <= width or width <= 0:
        return pts, span
    group = -(-len(pts) // width)
    return [merge_all(pts[i : i + group]) for i in range(0, len(pts), group)], span * group


def axis_label(view: str, pts: list[Point], per_col: float, wall_start: float) -> str:
    """What the time axis shows: the view and its span (the hour and the day from one
    clock time to another, this machine's zone), and the seconds a column stands for."""
    scale = _scale(per_col)
    span = pts[-1].t - pts[0].t + pts[-1].span if pts else 0
    if view in ("hour", "day") and pts and wall_start > 0:
        a, b = wall_start + pts[0].t, wall_start + pts[-1].t + pts[-1].span
        fmt = "%H:%M" if b - a >= 120 else "%H:%M:%S"
        when = f"{time.strftime(fmt, time.localtime(a))}–{time.strftime(fmt, time.localtime(b))}"
        return f"{view} {when}" + (f" · {scale}" if scale else "")
    name = {"recent": "recent", "hour": "last hour", "day": "last day"}.get(view, "whole run")
    # a length of time, never a clock's reading ("recent · 01:20 shown" read as a time)
    return f"{name} · {span_words(span)}" + (f" · {scale}" if scale else " shown")


def span_words(s: float) -> str:
    """A stretch of time in words: ``80 s``, ``12 min``, ``24 h``, ``1 h 30 min``."""
    s = max(0.0, s)
    if s < 120:
        return f"{s:.0f} s"
    m = round(s / 60)
    if m < 120:
        return f"{m} min"
    h, m = divmod(m, 60)
    return f"{h} h" + (f" {m} min" if m else "")


def _scale(seconds_per_column: float) -> str:
    """The time axis's scale where it is not one column a second (the help's promise)."""
    c = seconds_per_column
    if abs(c - 1.0) < 1e-9:
        return ""
    if c < 1:
        return f"{round(1 / c)} cols/s"
    return f"{c:.0f} s/col" if c < 120 else f"{c / 60:.0f} min/col"


def _count(n: int) -> str:
    """A count in at most four characters."""
    if n < 10_000:
        return str(n)
    for div, unit in ((1_000, "k"), (1_000_000, "M"), (1_000_000_000, "G")):
        v = n / div
        if v < 9.95:
            return f"{v:.1f}{unit}"
        if v < 999.5:
            return f"{v:.0f}{unit}"
    return "many"
