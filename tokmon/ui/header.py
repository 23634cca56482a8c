"""The dashboard's two header lines, made to fit the width: items are whole or absent,
never cut mid-word. Each item has a rank; where the line is too long, the item of the
highest rank steps to its shorter form or goes, so that what changes and what warns
(the clock, the arm, PAUSED, SERVER DOWN) stay and the context (the URL, the probes'
own figures) goes first. Pure: a Snapshot in, a Text out."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from tokmon.model.folding.snapshot import Snapshot
from tokmon.model.judge.storage import human_bytes
from tokmon.model.statistics.words import hms
from tokmon.model.workloads.workload import load_text
from tokmon.textsafe import clean_text

SEP = " · "
LAG_HOT_MS = 50  # a client this late against its schedule is the limit, not the server


@dataclass(frozen=True)
class Item:
    """One header item: its forms, longest first (each a list of (text, style) pieces),
    and its rank (0: always shown; higher ranks give way first)."""

    forms: tuple[tuple[tuple[str, str], ...], ...]
    rank: int = 0
    keep: bool = False  # shortened where the line is short, never dropped


def item(text: str, style: str = "", rank: int = 0, *shorter: str, keep: bool = False) -> Item:
    forms = ((text, style),), *(((s, style),) for s in shorter)
    return Item(tuple(forms), rank, keep)


def fit(lead: tuple[tuple[str, str], ...], items: list[Item], width: int) -> Text:
    """`lead` then the items joined by ' · ', each in the longest form that lets the line
    fit `width`; items of the highest rank shorten or go first (the later of equal rank
    first). A line that cannot fit even so ends in an ellipsis (the rank-0 items alone
    are longer than the width)."""
    form = [0] * len(items)  # index into forms; len(forms) means dropped

    def length() -> int:
        n = sum(len(t) for t, _ in lead)
        shown = [it.forms[f] for it, f in zip(items, form, strict=True) if f < len(it.forms)]
        return n + sum(sum(len(t) for t, _ in p) for p in shown) + len(SEP) * max(0, len(shown) - 1)

    while length() > width:
        can = [i for i, it in enumerate(items)
               if it.rank > 0 and form[i] < len(it.forms) - (1 if it.keep else 0)]  # fmt: skip
        if not can:
            break
        i = max(can, key=lambda j: (items[j].rank, j))
        form[i] += 1
    t = Text(no_wrap=True, overflow="ellipsis")
    for text, style in lead:
        t.append(text, style=style)
    first = True
    for it, f in zip(items, form, strict=True):
        if f >= len(it.forms):
            continue
        if not first:
            t.append(SEP)
        first = False
        for text, style in it.forms[f]:
            t.append(text, style=style)
    return t


def header_text(s: Snapshot, width: int) -> Text:
    """Both lines at `width` columns."""
    lead: tuple[tuple[str, str], ...] = ((" tokmon ", "bold reverse"), (" ", ""))
    one: list[Item] = []
    if s.replay is not None:
        state = "▶" if s.replay.get("playing") else "⏸"
        one.append(item(f"REPLAY {s.replay.get('speed', 1):g}× {state}"))
        if s.replay.get("from_s"):  # a window of the run: every figure begins there
            one.append(item(f"figures from {hms(s.replay['from_s'], hours=True)}", "bold"))
    one.append(item(hms(s.elapsed_s)))
    one.append(Item(((("arm ", ""), (clean_text(s.arm, False), "bold reverse")),)))
    one.append(item(load_text(s.mode, s.level)))
    model, target = clean_text(s.model, False), clean_text(s.target, False)
    one.append(item(f"{model} @ {target}", "bold", 3, model))

    two: list[Item] = [item(f"ok {s.ok} · failed {s.failed} · in flight {s.in_flight}")]
    two.append(item("● REC", "bold red") if s.recording else item("not recording", "dim", 4))
    if s.paused:
        two.append(item("PAUSED", "bold reverse"))
    lad = s.ladder
    if lad is not None and lad.running:
        when = "warming up" if lad.since_s < 0 else f"{lad.since_s:.0f} s measured"
        what = "capacity probe" if s.capacity else "ladder step"
        two.append(
            item(
                f"{what} {lad.step + 1}: {lad.param} {lad.value} ({when})",
                "bold",
                1,
                f"step {lad.step + 1}: {lad.param} {lad.value}",
            )
        )
    if s.warming_up:
        two.append(item("warming up", "italic"))
    if s.scenario:
        two.append(item(f"scenario {clean_text(s.scenario, False)}", "", 2))
    if s.restarting is not None:
        r = s.restarting
        two.append(
            item(
                f"RESTARTING {clean_text(r.arm, False)}: {r.phase} {r.since_s:.0f} s",
                "bold reverse",
            )
        )
    if s.insecure:
        two.append(item("TLS NOT VERIFIED", "bold reverse"))
    if s.done:
        two.append(item("finished (q to quit)", "bold", 1, "finished"))
    pr = s.probes
    if pr.self_cpu_pct is not None:
        # If tokmon itself is the bottleneck, it shows here, and then it never gives way.
        busy = pr.self_cpu_pct > 80 or s.loop_lag_ms > 20
        cpu = f"tokmon CPU {pr.self_cpu_pct:.0f}%"
        host = f" · host {pr.host_cpu_pct or 0:.0f}%"
        mem = "" if s.storage.rss_mib is None else f" · {s.storage.rss_mib:.0f} MiB"
        style = "bold reverse" if busy else "dim"
        # busy, it never goes but still shortens: at 80 columns "tokmon CPU 89%" alone
        # may be all there is room for beside the counts (a rank-0 item would be cut by an
        # ellipsis instead)
        shorter = (cpu + host, cpu) if busy else (cpu + host,)
        two.append(item(cpu + mem + host, style, 1 if busy else 3, *shorter, keep=busy))
    st = s.storage
    if st.warning:  # the disk is about to fill: shortened where it must be, never gone
        short = (
            f"DISK FULL IN {st.hours_left:.1f} h"
            if st.hours_left is not None
            else f"DISK {human_bytes(st.disk_free_bytes or 0)} LEFT"
        )
        two.append(item(st.warning, "bold reverse", 1, short, keep=True))
    if st.record_bytes is not None and s.recording:
        free = "" if st.disk_free_bytes is None else f" · {human_bytes(st.disk_free_bytes)} free"
        two.append(item(f"rec {human_bytes(st.record_bytes)}{free}", "dim", 2,
                        f"rec {human_bytes(st.record_bytes)}"))  # fmt: skip
    if pr.net_rtt_ms is not None:
        # the way to the server: if it moved, TTFT moved with it
        two.append(item(f"rtt {pr.net_rtt_ms:.1f} ms", "dim", 4))
    if s.loop_lag_ms > 20:
        two.append(item(f"loop lag {s.loop_lag_ms:.0f} ms", "bold reverse"))
    for arm, secs in s.down.items():
        two.append(item(f"SERVER DOWN ({clean_text(arm, False)}) {hms(secs)}", "bold reverse"))
    if s.send_lag_ms > LAG_HOT_MS:
        two.append(item(f"client lag {s.send_lag_ms:.0f} ms", "bold reverse"))
    out = fit(lead, one, width)
    out.append("\n")
    out.append_text(fit(((" ", ""),), two, width))
    return out
