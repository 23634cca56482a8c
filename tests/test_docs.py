"""The README and docs/ hold: every relative link resolves (the file, and the heading an
anchor names), and the README's three examples run as written — against the simulator,
with their durations shortened and the simulator sped up (the only changes, listed in
``SHORTER``)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import PY

ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TOKMON_API_KEY")}
ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# what the test changes in the examples to make them short: nothing else
SHORTER = (("-d 1m", "-d 3s"), ("--alternate 30s", "--alternate 3s"),
           ("tokmon sim --port", "tokmon sim --time-scale 10 --port"))  # fmt: skip


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def examples() -> dict[str, list[str]]:
    """The README's examples by name: each shell block after an ``example:`` comment, its
    commands with their continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    out = {}
    for name, block in re.findall(r"<!-- example: (\w+) -->\s*```sh\n(.*?)```", text, re.S):
        out[name] = [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return out


def shorter(cmd: str) -> str:
    for a, b in SHORTER:
        cmd = cmd.replace(a, b)
    return cmd


def test_the_readme_has_its_three_examples():
    ex = examples()
    assert list(ex) == ["soak", "ab", "review"], ex
    for cmds in ex.values():
        assert all(c.startswith("tokmon ") for c in cmds), cmds


@pytest.mark.slow
async def test_the_readme_examples_run_as_written(tmp_path):
    from tokmon.sources.replay import ReplaySource
    from tokmon.ui.app import DashboardApp

    ex = examples()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sim = None
    try:
        for name in ("soak", "ab", "review"):
            for cmd in ex[name]:
                cmd = shorter(cmd).replace("8000", str(port))
                if cmd.endswith("&"):  # a server for the next commands
                    argv = shlex.split(cmd[:-1])
                    sim = subprocess.Popen([PY, "-m", "tokmon", *argv[1:]], cwd=tmp_path,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
                    for _ in range(100):
                        with socket.socket() as c:
                            if c.connect_ex(("127.0.0.1", port)) == 0:
                                break
                        time.sleep(0.1)
                    continue
                argv = shlex.split(cmd)[1:]
                if argv[0] == "replay":  # the dashboard, driven by its test pilot
                    src = ReplaySource(str(tmp_path / argv[1]))
                    src.start()
                    try:
                        app = DashboardApp(src)
                        async with app.run_test(size=(120, 40)) as pilot:
                            await pilot.press("e")
                            await pilot.pause(0.5)
                            snap = src.snapshot()
                            assert snap is not None and "default" in snap.arms
                    finally:
                        src.close()
                    continue
                r = subprocess.run([PY, "-m", "tokmon", *argv], cwd=tmp_path, capture_output=True,
                                   text=True, timeout=300, env=ENV)  # fmt: skip
                assert r.returncode == 0, (cmd, r.stderr[-2000:])
    finally:
        if sim is not None:
            sim.terminate()
            sim.wait(10)
    assert (tmp_path / "ab.html").stat().st_size > 0
    report = subprocess.run([PY, "-m", "tokmon", "report", "ab.jsonl.gz"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "decode, code" in report.stdout and "decode, creative" in report.stdout
