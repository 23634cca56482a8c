"""The package layout is the architecture: each part imports only the parts below it.

Checked on the source (every ``import``, also those inside functions), so a lazy import
cannot slip past as it would past a ``sys.modules`` check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tokmon"

# part -> what it may never import (tokmon parts and outside packages)
FORBIDDEN = {
    # the pure model: facts in, figures out; no I/O, no processes, no UI
    "model": {
        "tokmon.engine", "tokmon.recording", "tokmon.probes", "tokmon.sources",
        "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.sim",
        "textual", "rich", "httpx", "psutil", "pynvml", "socket", "asyncio",
        "multiprocessing", "threading", "subprocess",
    },
    # the measuring engine runs headless in its own process
    "engine": {
        "tokmon.sources", "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.recording",
        "tokmon.probes", "textual", "rich",
    },
    "recording": {"tokmon.sources", "tokmon.ui", "tokmon.report", "tokmon.cli", "textual", "rich"},
    "probes": {"tokmon.sources", "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.engine",
               "textual", "rich"},
    "sources": {"tokmon.ui", "tokmon.report", "tokmon.cli", "textual", "rich"},
    "report": {"tokmon.ui", "tokmon.cli", "tokmon.sources.live", "textual"},
    "ui": {"tokmon.cli", "tokmon.engine", "tokmon.recording", "tokmon.probes"},
    "sim": {"tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.sources", "textual"},
}  # fmt: skip


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_each_part_imports_only_what_is_below_it(part):
    files = sorted((ROOT / part).rglob("*.py"))
    assert files, f"tokmon/{part} is empty"
    bad = []
    for f in files:
        for name in imports(f):
            for banned in FORBIDDEN[part]:
                if name == banned or name.startswith(banned + "."):
                    bad.append(f"{f.relative_to(ROOT.parent)} imports {name}")
    assert not bad, "\n".join(bad)
