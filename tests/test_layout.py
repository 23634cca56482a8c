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
        "multiprocessing", "threading", "subprocess", "os", "time", "pathlib", "secrets",
        "tokmon.inputs",
    },
    # what each inference engine is, as data: read by the model, the probes and the engine
    "engines": {
        "tokmon.model", "tokmon.engine", "tokmon.recording", "tokmon.probes", "tokmon.sources",
        "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.sim", "tokmon.inputs",
        "textual", "rich", "httpx", "psutil", "pynvml", "socket", "asyncio", "numpy",
        "multiprocessing", "threading", "subprocess", "os", "time", "pathlib",
    },
    # the measuring engine runs headless in its own process
    "engine": {
        "tokmon.sources", "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.recording",
        "tokmon.probes", "textual", "rich",
    },
    # (where the stamps come from, for the header: tokmon.stamps, not the engine's client)
    "recording": {"tokmon.sources", "tokmon.ui", "tokmon.report", "tokmon.cli", "tokmon.engine",
                  "textual", "rich"},
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


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        name = f.relative_to(ROOT.parent).with_suffix("").as_posix().replace("/", ".")
        out[name.removesuffix(".__init__")] = f
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """Each tokmon module's imports of other tokmon modules (those inside functions too),
    and every private name imported from another module (a name with a leading underscore
    is its module's own: the conductor and the fleet reached the session's through
    ``Stage``, which now names only public ones)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    private = []
    for name, f in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.startswith("tokmon"):
                    continue
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{name} imports {node.module}.{a.name}")
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph, private


def test_no_import_cycle():
    """A cycle hidden by an import inside a function is still a cycle: the two modules
    are one room. (cli.run ↔ cli.webview and report.text ↔ report.html were.)"""
    graph, _ = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_private_name_crosses_a_module():
    _, private = _graph()
    assert not private, private


MAX_METHODS = 20  # a class with more holds more than one thing
MAX_LINES = 150  # a function longer than this does more than one thing


def _is_record(cls: ast.ClassDef) -> bool:
    """A record (a dataclass or a NamedTuple): its methods are views of its fields."""
    decos = {ast.unparse(d).split("(")[0] for d in cls.decorator_list}
    return bool(decos & {"dataclass", "dataclasses.dataclass"}) or any(
        ast.unparse(b) == "NamedTuple" for b in cls.bases
    )


def test_no_class_holds_too_much_and_no_function_is_too_long():
    """The census of #60: no class in tokmon over 20 methods (records aside), no
    function over 150 lines."""
    big, long = [], []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        name = path.relative_to(ROOT.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not _is_record(node):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if n > MAX_METHODS:
                    big.append(f"{name}:{node.name} has {n} methods")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{name}:{node.name} is {lines} lines")
    assert not big and not long, big + long


# The model's rooms, lowest first: each may import only the rooms before it (the facts
# lean on nothing; the fold, at the top, on every room). docs/ARCHITECTURE.md shows them.
ROOMS = ("data", "statistics", "env", "workloads", "contract", "judge", "folding")


def test_the_models_rooms_are_layered():
    model = ROOT / "model"
    assert sorted(p.name for p in model.iterdir() if (p / "__init__.py").exists()) == sorted(ROOMS)
    assert [p.name for p in model.glob("*.py")] == ["__init__.py"]  # every module in a room
    wrong = []
    for room in ROOMS:
        below = set(ROOMS[: ROOMS.index(room)])
        for path in sorted((model / room).rglob("*.py")):
            for name in imports(path):
                parts = name.split(".")
                inside = parts[:2] == ["tokmon", "model"] and len(parts) > 2
                if inside and parts[2] != room and parts[2] not in below:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, wrong
