"""Render the README's pictures of the dashboard: a real `tokmon demo` run, recorded,
replayed to its end and drawn at 80×24 and 200×50 (Textual's own SVG screenshot, turned
into PNG by headless Chromium).

    python scripts/screenshots.py [--seconds 60] [--out docs]

Needs Chromium from the distribution (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", default="docs")
    a = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rec = str(Path(tmp) / "demo.jsonl")
        subprocess.run(
            [sys.executable, "-m", "tokmon", "demo", "--headless", "--seed", "7",
             "--duration", f"{a.seconds}s", "--alternate", "15s", "--record", rec],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for w, h in ((80, 24), (200, 50)):
            svg = Path(tmp) / f"d{w}.svg"
            asyncio.run(shoot(rec, (w, h), svg))
            png = Path(a.out) / f"dashboard-{w}x{h}.png"
            subprocess.run(
                [exe, "--headless", "--no-sandbox", f"--screenshot={png.resolve()}",
                 f"--window-size={w * 10 + 20},{h * 22 + 60}", svg.resolve().as_uri()],
                check=True, capture_output=True,
            )  # fmt: skip
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
