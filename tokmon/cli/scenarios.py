"""``--scenario``: the four kinds of service as bundles of existing options, kept as data
(``tokmon/scenarios/NAME.toml``, the same keys as a ``--config`` file). A scenario's values
come first on the command line, so a ``--config`` file and the user's own options win."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from tokmon.cli.parser import UsageError, config_argv

DIR = Path(__file__).resolve().parent.parent / "scenarios"
NAMES = ("chat", "serve", "batch", "code")


def load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario's description and headline, and the options it sets."""
    if name not in NAMES:
        raise UsageError(f"--scenario: expected one of {', '.join(NAMES)}, got {name!r}")
    data = tomllib.loads((DIR / f"{name}.toml").read_text(encoding="utf-8"))
    meta = data.pop("scenario", {})
    return meta, {k.replace("-", "_"): v for k, v in data.items()}


# an option the user gives sets aside the scenario's that it excludes (a --rate of
# yours over the scenario's --concurrency, a --ladder over its capacity search)
_SETS_ASIDE = {
    "rate": ("concurrency",),
    "concurrency": ("rate",),
    "ladder": ("find_capacity", "concurrency", "rate"),
    "requests": ("find_capacity",),
    "trace": ("concurrency", "rate", "mix", "turns", "find_capacity"),
    "replay_load": ("concurrency", "rate", "mix", "turns", "find_capacity"),
    "prompts": ("mix",),
    "conversations": ("mix", "turns"),
}


def scenario_argv(
    run_parser: argparse.ArgumentParser, name: str, given: list[str] | None = None
) -> list[str]:
    """The scenario as command-line words, checked as each option checks its value;
    what the user's own options (``given``) exclude is left out."""
    _, opts = load(name)
    words = {w.split("=", 1)[0] for w in (given or []) if w.startswith("-")}
    mine = {a.dest for a in run_parser._actions if set(a.option_strings) & words}
    drop = {d for m in mine for d in _SETS_ASIDE.get(m, ())}
    return config_argv(run_parser, {k: v for k, v in opts.items() if k not in drop},
                       f"scenario {name}")  # fmt: skip


def describe(name: str) -> str:
    """What ``--help-scenario`` prints: what the scenario is for and every option it sets."""
    meta, opts = load(name)
    lines = [f"--scenario {name}: {meta.get('description', '')}",
             f"headline: {meta.get('headline', '')}", "sets (your own options win):"]  # fmt: skip
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        lines.append(f"  {flag} {'' if v is True else v}".rstrip())
    return "\n".join(lines)


def headline(name: str | None, arms: int = 2) -> str:
    """The scenario's headline; where it needs more arms than the run has (a speed-up
    over one arm), it says so rather than promise a figure the run cannot give."""
    if not name:
        return ""
    info = load(name)[0]
    text = str(info.get("headline", ""))
    need = info.get("arms")
    if isinstance(need, int) and arms < need:
        text += (f" — which needs {need} arms (--arm A:… --arm B:…); with {arms} this run "
                 "gives each kind's own figures, not a speed-up")  # fmt: skip
    return text


def find(argv: list[str]) -> str | None:
    """The --scenario named on a command line (its last, as argparse would take it)."""
    got = None
    for i, a in enumerate(argv):
        if a == "--scenario" and i + 1 < len(argv):
            got = argv[i + 1]
        elif a.startswith("--scenario="):
            got = a.partition("=")[2]
    return got
