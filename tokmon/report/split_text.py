"""Where the time goes, as lines of text: the dashboard's ``w`` panel and the reports'
section, from the summary's ``time_split`` (one shape for live and recorded runs).

Each arm's TTFT is a bar of its parts in the order a request meets them — network ░,
front end ▒, queue ▓, prefill █ — with each part's ms and share named, so the bar is
read without colour.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tokmon.model.judge.connection_judgment import CHURN_SHARE_INV
from tokmon.model.judge.timesplit import MISMATCH_SHARE
from tokmon.report.summary_text import fmt_ms
from tokmon.textsafe import clean_text

PARTS = (("network", "net", "░"), ("front", "front", "▒"), ("queue", "queue", "▓"),
         ("prefill", "prefill", "█"))  # fmt: skip


def ms(v: float | None) -> str:
    return "—" if v is None else f"{fmt_ms(v)} ms"


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def ttft_bar(t: dict[str, Any], width: int = 24) -> str:
    """The TTFT's parts as a bar ``width`` wide (each part at least one cell when it is
    over 0.5% of the TTFT); empty where there is no split."""
    client = _f(t.get("client"))
    vals = [(g, _f(t.get(k))) for k, _, g in PARTS]
    if not client or client <= 0 or all(v is None for _, v in vals):
        return ""
    cells = []
    for g, v in vals:
        if v is None or v <= 0:
            continue
        share = v / client
        n = max(1, round(share * width)) if share > 0.005 else 0
        cells.append(g * n)
    return "".join(cells)[: width + 3]


def _left_out(d: dict[str, Any], what: str) -> tuple[int, int, bool]:
    """(requests left out as mismatched, requests in all, whether that is over the share
    past which no part is given) of a split's ``d``."""
    bad, n = int(d.get("mismatched") or 0), int(d.get("n") or 0)
    return bad, n + bad, bad > MISMATCH_SHARE * (n + bad)


def mismatch_note(d: dict[str, Any], what: str) -> list[str]:
    """What a split left out, in pieces that wrap whole: ``3 of 120 requests left out:``
    ``server figures over the client's TTFT`` ``(a clock or definition mismatch)``;
    none where none was."""
    bad, total, _ = _left_out(d, what)
    if not bad:
        return []
    return [f"{bad} of {total} requests left out:", f"server figures over the client's {what}",
            "(a clock or definition mismatch)"]  # fmt: skip


def ttft_parts(t: dict[str, Any], glyphs: bool = True) -> list[str]:
    """``net 2.5 ms (3%)`` for each part given (after its bar's glyph); what the
    remainder holds besides. A part is never over its whole and never negative (the
    model's rule, ``timesplit``): where too many requests broke it, no part is given
    (``no parts``), and ``mismatch_note`` says why."""
    client = _f(t.get("client"))
    if _left_out(t, "TTFT")[2]:
        return ["no parts"]
    out = []
    for key, name, glyph in PARTS:
        v = _f(t.get(key))
        if v is None:
            if key != "front":
                out.append(f"{name} not reported")
            continue
        share = f" ({min(v / client, 1.0):.0%})" if client else ""
        label = name
        if key == "front" and t.get("front_holds"):
            label = "front+" + "+".join(str(h) for h in t["front_holds"])
        out.append(f"{glyph if glyphs else ''}{label} {ms(v)}{share}")
    return out


def setup_note(t: dict[str, Any]) -> list[str]:
    """A new connection's setup, which came before the send and is not in TTFT, where a
    fifth of the requests or more paid it (connections kept alive make it a start-up
    cost, which the way to the server's block says): ``before the send, not in TTFT:``
    ``connection setup p50 1.20 ms`` ``on 40 of 40 requests``."""
    st = t.get("setup")
    if not isinstance(st, dict):
        return []
    k, n = int(st.get("requests") or 0), int(st.get("of") or 0)
    if not k or k * CHURN_SHARE_INV < n:
        return []
    return ["before the send, not in TTFT:", f"connection setup p50 {ms(_f(st.get('p50')))}",
            f"on {k} of {n} requests"]  # fmt: skip


def _scope(t: dict[str, Any]) -> str:
    src = t.get("source")
    if not src:
        return "no server figures"
    return f"whole run {t.get('stat')} · {src} · {_req(t)}"


def _req(t: dict[str, Any]) -> str:
    """``1200 req``, or past the split's bound ``a sample of 16384 of 2100000 req``."""
    of = t.get("sampled_of")
    n = t.get("n") or 0
    return f"a sample of {n} of {of} req" if of else f"{n} req"


def arm_lines(name: str, sp: dict[str, Any], width: int = 58) -> list[str]:
    """One arm's split: its TTFT bar and parts, its TPOT split, TPOT by batch."""
    t = sp.get("ttft_ms") or {}
    p = sp.get("tpot_ms") or {}
    arm = clean_text(str(name), False)[:12]
    out = wrap([f"{arm} TTFT {ms(_f(t.get('client')))}", f"({_scope(t)})"], "", width, " ")
    bar = ttft_bar(t, max(8, min(40, width - 4)))
    if bar:
        out.append("  " + bar)
    if t.get("source"):
        out += wrap(ttft_parts(t), "  ", width)
        out += wrap(mismatch_note(t, "TTFT"), "  ", width, " ")
    out += wrap(setup_note(t), "  ", width, " ")
    if p.get("source"):
        note = mismatch_note(p, "TPOT")
        if _left_out(p, "TPOT")[2]:
            parts = [f"TPOT {ms(_f(p.get('client')))}: no split"]
        else:
            parts = [
                f"TPOT {ms(_f(p.get('client')))}: server {ms(_f(p.get('server_step')))}",
                f"stream {ms(_f(p.get('stream')))}",
                f"(whole run {p.get('stat')}, {p.get('source')}"
                + (f", {_req(p)})" if p.get("sampled_of") else ")"),
            ]
        out += wrap(parts, "  ", width)
        out += wrap(note, "  ", width, " ")
    bins = sp.get("batch_tpot") or []
    if bins:
        out += wrap([f"{b[0]}: {ms(_f(b[1]))} ({b[2]})" for b in bins],
                    "  TPOT p50 by batch (requests) ", width)  # fmt: skip
    return out


def kind_line(kind: str, sp: dict[str, Any]) -> str:
    """One task kind's split on one line: its TTFT parts and its TPOT split."""
    t = sp.get("ttft_ms") or {}
    p = sp.get("tpot_ms") or {}
    head = f"  {clean_text(str(kind), False)[:14]}: TTFT {ms(_f(t.get('client')))}"
    parts = ttft_parts(t, glyphs=False) if t.get("source") else []
    tail = f" · TPOT {ms(_f(p.get('client')))}"
    if p.get("source"):
        tail += f" (server {ms(_f(p.get('server_step')))})"
    if parts == ["no parts"]:
        return head + " · no parts: " + " ".join(mismatch_note(t, "TTFT")) + tail + f" · {_req(t)}"
    return head + (" = " + " + ".join(parts) if parts else "") + tail + f" · {_req(t)}"


def causes_parts(c: dict[str, Any] | None, measured: float | None = None) -> list[str]:
    """``spec/plain decode ×1.90``, ``= 2.60 tok/step [2.5, 2.7]``, ``× 0.73 step speed
    [0.71, 0.75] (server steps)``: the speed-up as its causes, in pieces that wrap whole."""
    if not c:
        return []
    tr, sr = c.get("tokens_per_step_ratio") or [], c.get("step_speed_ratio") or []
    if len(tr) != 3 or len(sr) != 3 or None in tr or None in sr:
        return []
    other = clean_text(str(c.get("other")), False)[:8]
    base = clean_text(str(c.get("base")), False)[:8]
    head = (
        f"×{measured:.2f}" if measured is not None else f"×{c.get('predicted_ratio'):.2f} predicted"
    )
    kind = clean_text(str(c.get("kind") or ""), False)[:14]
    return [
        f"{kind}: {head}" if kind else f"{other}/{base} decode {head} (whole run)",
        f"= {tr[0]:.2f} tok/step [{tr[1]:.2f}, {tr[2]:.2f}]",
        f"× {sr[0]:.2f} step speed [{sr[1]:.2f}, {sr[2]:.2f}] ({c.get('step_source')} steps)",
    ]


def causes_line(c: dict[str, Any] | None, measured: float | None = None) -> str | None:
    parts = causes_parts(c, measured)
    return " ".join(parts) if parts else None


def wrap(parts: Iterable[str], head: str, width: int, joiner: str = " · ") -> list[str]:
    """Parts joined by ``joiner``, as many to a line as fit; a part is never cut; no parts,
    no line (a note with nothing to say is not a blank row)."""
    out: list[str] = []
    cur = head
    parts = list(parts)
    if not parts:
        return out
    for p in parts:
        sep = "" if cur in (head, "  ") else joiner
        if len(cur) + len(sep) + len(p) > width and cur not in (head, "  "):
            out.append(cur)
            cur, sep = "  ", ""
        elif len(cur) + len(p) > width and cur == head and head.strip():
            # a head and its first part too long for one line: the head alone (the line
            # was cut at the width: "… correct [9…")
            out.append(head.rstrip())
            cur = "  "
        cur += sep + p
    out.append(cur)
    return out


def split_lines(summary: dict[str, Any], width: int = 72) -> list[str]:
    """The report's section: every arm's split, and the speed-up's causes."""
    out: list[str] = []
    for name, a in (summary.get("arms") or {}).items():
        sp = a.get("time_split")
        if sp:
            out += arm_lines(name, sp, width)
        kinds = [(k, v["time_split"]) for k, v in (a.get("by_kind") or {}).items()
                 if isinstance(v, dict) and v.get("time_split")]  # fmt: skip
        if kinds:
            out.append(f"  by task kind (whole run p50, {clean_text(str(name), False)[:12]}):")
            out += [kind_line(k, v) for k, v in kinds]
    # (two arms: one comparison; three or more: each arm against the first, a list)
    cmps = summary.get("comparison") or {}
    many = isinstance(cmps, list)
    for cmp in cmps if many else [cmps]:
        if not isinstance(cmp, dict):
            continue
        dec = (cmp.get("decode_tokens_per_s") or {}).get("ratio")
        why_kind = by_kind_causes(cmp, width, pair=many)
        # over a mix of kinds the pooled medians are not the speed-up's causes (a median
        # of tokens per step over code and free text is neither): the causes per kind
        out += why_kind or wrap(causes_parts(cmp.get("causes"), _f(dec)), "", width, " ")
    return [x for x in out if x]


def by_kind_causes(cmp: dict[str, Any], width: int, pair: bool = False) -> list[str]:
    """The speed-up's causes per task kind, each with its own measured ratio (``pair``:
    of which arm against which, where the run compared several)."""
    out: list[str] = []
    for v in (cmp.get("by_kind") or {}).values():
        if not isinstance(v, dict) or not v.get("causes"):
            continue
        dec = (v.get("decode_tokens_per_s") or {}).get("ratio")
        out += wrap(causes_parts(v["causes"], _f(dec)), "  ", width, " ")
    if out:
        who = ""
        if pair:
            other = clean_text(str(cmp.get("other")), False)[:12]
            who = f" of {other}/{clean_text(str(cmp.get('baseline')), False)[:12]}"
        out.insert(0, f"  the decode speed-up's causes{who} by task kind (whole run):")
    return out
