"""Repeated runs as text: each figure's value in every run, its spread and its verdict;
two groups of runs as ratios with their intervals over runs."""

from __future__ import annotations

from typing import Any

from tokmon.model.judge.runs import FIGURES
from tokmon.textsafe import clean_text


def runs_text(data: dict[str, Any], names: list[str]) -> str:
    out = [f"{data['runs']} runs: " + " · ".join(clean_text(n, False) for n in names),
           "each figure per run, the mean with its 95% t interval over runs, the spread "
           "(CV, max−min over the mean)"]  # fmt: skip
    if data.get("left_out"):
        out.append("left out (cut short or ended by a failure, not compared): "
                   + "; ".join(clean_text(str(x), False) for x in data["left_out"]))  # fmt: skip
    for arm, a in data["arms"].items():
        out.append("")
        out.append(f"arm {clean_text(arm, False)}")
        for key, f in a["figures"].items():
            label = FIGURES[key][1]
            vals = " ".join(f"{v:.4g}" for v in f["values"])
            lo, hi = f["ci95"]
            out.append(
                f"  {label:<20} {vals}  mean {f['mean']:.4g} [{lo:.4g}, {hi:.4g}] "
                f"CV {100 * f['cv']:.1f}% span {f['span_pct']:.1f}%"
            )
        for f in a["figures"].values():
            out.append(f"  {f['verdict']}")
        changed = a.get("environment_changed") or []
        if changed:
            out.append("  the environment changed between runs: "
                       + "; ".join(clean_text(c, False) for c in changed))  # fmt: skip
        elif any(not f["reproduces"] for f in a["figures"].values()):
            out.append("  no environment field changed between runs (as the servers reported it)")
    return "\n".join(out) + "\n"


def groups_text(data: dict[str, Any], a: list[str], b: list[str]) -> str:
    na, nb = data["runs"]
    out = [
        f"B ({nb} runs: {' · '.join(clean_text(x, False) for x in b)}) against "
        f"A ({na} runs: {' · '.join(clean_text(x, False) for x in a)})",
        "ratio of the groups' geometric means, 95% Welch interval over runs (the unit of "
        "replication is the run); it differs where the interval excludes 1",
    ]
    for arm, figs in data["arms"].items():
        out.append("")
        out.append(f"arm {clean_text(arm, False)}")
        for key, r in figs.items():
            lo, hi = r["ci95"]
            verdict = "differs beyond the run-to-run spread" if r["differs"] else "within it"
            out.append(f"  {FIGURES[key][1]:<20} ×{r['ratio']:.3f} [{lo:.3f}, {hi:.3f}]  {verdict}")
    return "\n".join(out) + "\n"
