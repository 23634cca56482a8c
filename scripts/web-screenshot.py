"""Render docs/web-view.png: `tokmon demo --web` in headless Chromium (the README's picture).

    python scripts/web-screenshot.py [--out docs/web-view.png] [--seconds 25]

Needs Chromium from the distribution (apt-get install chromium) and playwright (the test
extras); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/web-view.png")
    ap.add_argument("--seconds", type=float, default=25.0, help="how long the demo runs first")
    a = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = subprocess.Popen(
        [sys.executable, "-m", "tokmon", "demo", "--headless", "--seed", "7", "--duration", "5m",
         "--alternate", "10s", "--web", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(a.seconds)  # a run with history to draw, both arms seen
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 860})
            page.goto(f"http://127.0.0.1:{port}/")
            time.sleep(8)  # the page's terminal connects and draws
            page.screenshot(path=a.out)
            browser.close()
    finally:
        demo.terminate()
        demo.wait(30)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
