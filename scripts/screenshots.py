"""Render the README's pictures: the dashboard of a real `tokmon demo` run, recorded,
replayed to its end and drawn at 80×24 and 200×50 (Textual's own SVG screenshot, turned
into PNG by headless Chromium); and `tokmon demo --web` as the browser shows it.

    python scripts/screenshots.py [--seconds 50] [--out docs]

Needs Chromium from the distribution (apt-get install chromium) and playwright (the test
extras); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


async def shoot(rec: str, size: tuple[int, int], svg: Path) -> None:
    from tokmon.sources.replay import ReplaySource
    from tokmon.ui.app import DashboardApp

    src = ReplaySource(rec)
    src.start()
    try:
        src.command("end")
        app = DashboardApp(src)
        async with app.run_test(size=size) as pilot:
            await pilot.pause(1.0)
            app.save_screenshot(str(svg))
    finally:
        src.close()


def demo(*extra: str) -> list[str]:
    return [sys.executable, "-m", "tokmon", "demo", "--headless", "--seed", "7", *extra]


def terminal(exe: str, out: Path, seconds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rec = str(Path(tmp) / "demo.jsonl")
        subprocess.run(
            demo("--duration", f"{seconds}s", "--alternate", "15s", "--record", rec),
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for w, h in ((80, 24), (200, 50)):
            svg = Path(tmp) / f"d{w}.svg"
            asyncio.run(shoot(rec, (w, h), svg))
            png = out / f"dashboard-{w}x{h}.png"
            subprocess.run(
                [exe, "--headless", "--no-sandbox", f"--screenshot={png.resolve()}",
                 f"--window-size={w * 10 + 20},{h * 22 + 60}", svg.resolve().as_uri()],
                check=True, capture_output=True,
            )  # fmt: skip
            print(f"wrote {png}")


def browser(exe: str, out: Path, seconds: int) -> None:
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        demo("--duration", "5m", "--alternate", "10s", "--web", f"127.0.0.1:{port}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        url = ""
        while not url:  # the page's URL, with its one-time token, as tokmon prints it
            line = proc.stderr.readline()
            if not line:
                raise SystemExit("tokmon demo --web printed no URL")
            if "the dashboard in a browser:" in line:
                url = line[line.index("http://") :].strip()
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
        time.sleep(seconds)  # a run with history to draw, both arms seen
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1500, "height": 860})
            page.goto(url)
            time.sleep(8)  # the page's terminal connects and draws
            page.screenshot(path=str(out / "web-view.png"))
            b.close()
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"wrote {out / 'web-view.png'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=50, help="how long the demo runs first")
    ap.add_argument("--out", default="docs")
    a = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 2
    terminal(exe, Path(a.out), a.seconds)
    browser(exe, Path(a.out), a.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
