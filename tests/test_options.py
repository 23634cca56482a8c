"""Every option once: the table in ``cli/options.py`` makes the parser, the keys a
--config file may set, and the typed ``RunOptions`` the run reads — these tests hold the
three together."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tokmon.cli.options import RUN_OPTIONS, RunOptions
from tokmon.cli.parser import build_parser

CLI = Path(__file__).resolve().parent.parent / "tokmon" / "cli"


def test_the_typed_options_are_the_table_field_for_option_and_type_for_type():
    fields = {f.name: f.type for f in dataclasses.fields(RunOptions)}
    assert sorted(fields) == sorted(o.dest for o in RUN_OPTIONS)  # field for option
    wrong = {o.dest: (fields[o.dest], o.kind) for o in RUN_OPTIONS if fields[o.dest] != o.kind}
    assert not wrong


def test_a_parsed_command_line_becomes_typed_options_every_default_included():
    ns = build_parser().parse_args(["run", "--url", "http://127.0.0.1:9/v1", "-c", "3",
                                    "--header", "a:b", "--header", "c:d", "--headless"])  # fmt: skip
    o = RunOptions.of(ns)
    assert o.concurrency == 3 and o.header == ("a:b", "c:d") and o.headless is True
    assert o.arm == () and o.fps == 4.0 and o.window == "10s" and o.rate is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.rate = 2.0  # type: ignore[misc]
    # a namespace made by hand (the demo's) is checked as argparse would have
    ns.concurrency = "3"
    with pytest.raises(TypeError, match="--concurrency: expected int"):
        RunOptions.of(ns)
    ns.concurrency, ns.headless = 3, None
    with pytest.raises(TypeError, match="--headless: expected bool"):
        RunOptions.of(ns)


@pytest.mark.parametrize("name", ["run.py", "plan.py", "given.py", "repeat.py"])
def test_the_run_reads_its_options_from_the_typed_object_only(name):
    """No argparse namespace reaches the run's modules (no ``getattr(args, …)``)."""
    tree = ast.parse((CLI / name).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "getattr"
             and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "args"]  # fmt: skip
    assert "argparse" not in names and not calls
