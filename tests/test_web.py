"""The dashboard away from the run's terminal: an attached view (what ``--web`` starts per
browser tab) draws the run and its keys act on it; and the real page in headless
Chromium, with a key sent through the page switching the run's arm."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeSource

from tokmon.model.data.commands import Switch
from tokmon.sources.remote import RemoteSource, ViewServer
from tokmon.ui.app import DashboardApp

PY = sys.executable


async def test_an_attached_view_draws_the_run_and_its_keys_act_on_it():
    src = FakeSource()
    server = ViewServer(src, interval=0.05)
    remote = RemoteSource(server.path)
    try:
        assert "stop" not in remote.commands  # q in a view detaches; the run goes on
        app = DashboardApp(remote)
        async with app.run_test(size=(100, 34)) as pilot:
            for _ in range(200):  # until the first snapshot arrived
                if remote.snapshot() is not None:
                    break
                await pilot.pause(0.02)
            assert remote.snapshot() is not None
            await pilot.pause(0.1)
            await pilot.press("s")
            assert src.arm == "spec"  # the command went to the run and back
            await pilot.press("p")
            assert src.paused
            await pilot.press("q")
            await pilot.pause(0.2)
        assert src.stopped is None
    finally:
        remote.close()
        server.close()
    assert not os.path.exists(server.path)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(
        "no Chromium here (Debian: apt-get install chromium; .ci/run installs it where the "
        "package registry answers)"
    )
    raise AssertionError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_dashboard_in_a_browser_and_a_key_through_the_page(make_sim, tmp_path):
    exe = chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    a, b = make_sim(), make_sim(spec=True)
    port = free_port()
    rec = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TOKMON_API_KEY")}
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "run", "--arm", f"base:url={a.url}", "--arm", f"spec:url={b.url}",
         "-c", "2", "--duration", "3m", "--headless", "--no-gpu", "--status-interval", "1h",
         "--web", f"127.0.0.1:{port}", "--web-control", "--record", str(rec)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    shot = tmp_path / "web.png"
    errors: list[str] = []
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "the dashboard in a browser" in line, line
        url = line[line.index("http://") :].strip()
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            deadline = time.monotonic() + 60
            while True:  # the web server may still be starting
                try:
                    page.goto(url, timeout=10_000)
                    break
                except sync_api.Error:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            # the page's terminal draws on a canvas: ready once a screenshot holds a
            # drawn dashboard (a blank page is a few KB)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                page.screenshot(path=str(shot))
                if shot.stat().st_size > 20_000:
                    break
                time.sleep(0.5)
            # Switch the arm through the page: focus the terminal's input (xterm.js's
            # helper textarea: a click on the dashboard may land on a panel and open it)
            # and press s, again every 5 s until the recording holds the switch (a press
            # taken before the app inside the page listened is lost: a quiet CI run waited
            # 90 s after one click and one press)
            deadline = time.monotonic() + 90
            switched = False
            pressed = 0.0
            while time.monotonic() < deadline and not switched:
                if time.monotonic() - pressed > 5.0:
                    page.focus("textarea.xterm-helper-textarea")
                    page.keyboard.press("s")
                    pressed = time.monotonic()
                time.sleep(0.2)
                text = rec.read_text() if rec.exists() else ""
                switched = any(
                    json.loads(x).get("kind") == "arm" for x in text.splitlines() if '"e"' in x
                )
            browser.close()
    finally:
        p.terminate()
        p.wait(30)
    assert switched, "the key sent through the page did not switch the arm"
    assert shot.stat().st_size > 20_000  # a drawn dashboard, not a blank page
    # textual-serve's page asks the internet for fonts (none here): those loads may fail
    assert not [e for e in errors if "Failed to load resource" not in e], errors


@pytest.mark.slow
def test_the_html_report_in_a_browser(make_sim, tmp_path):
    """A two-arm run's HTML report in Chromium: the verdict (the speed-up in words and as
    a forest plot) in the first viewport, each arm's own line in the charts, the
    environment once, and where the time goes."""
    exe = chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    a, b = make_sim(time_scale=4), make_sim(time_scale=4, spec=True)
    rec, html = tmp_path / "r.jsonl", tmp_path / "r.html"
    from helpers import tokmon

    r = tokmon("run", "--arm", f"plain:url={a.url}", "--arm", f"spec:url={b.url}",
               "--assign", "alternate", "-n", "40", "-c", "4", "--max-tokens", "32",
               "--headless", "--no-gpu", "--record", str(rec))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert tokmon("report", str(rec), "-F", "html", "-o", str(html)).returncode == 0
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(Path(html).as_uri())
        page.wait_for_selector(".plotly", timeout=30_000)
        n = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        names = page.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".flatMap(d => (d.data || []).map(t => t.name))"
        )
        verdict = page.evaluate(
            "(() => { const v = document.querySelector('#verdict .verdict');"
            " const r = v.getBoundingClientRect();"
            " return [v.textContent, r.top >= 0 && r.bottom <= window.innerHeight]; })()"
        )
        forest_top = page.evaluate(
            "document.querySelector('#verdict .js-plotly-plot').getBoundingClientRect().top"
        )
        envs = page.evaluate(
            "Array.from(document.querySelectorAll('h2')).filter(h => h.textContent === "
            "'Environment').length"
        )
        page.screenshot(path=str(tmp_path / "top.png"))
        browser.close()
    # the verdict, the time series (one figure of six charts) and the time split
    assert n == 3, names
    assert verdict[1] and "spec / plain decode speed ×" in verdict[0], verdict
    assert forest_top < 800, forest_top  # the forest plot starts in the first viewport
    for arm in ("plain", "spec"):
        assert {f"{arm} tokens/s", f"{arm} TTFT p50", f"{arm} TPOT p50"} <= set(names), names
    assert {"network", "front end", "queue", "prefill"} <= set(names), names
    assert envs == 1
    assert not errors, errors


def page_of(p: subprocess.Popen[str]) -> tuple[str, str, object]:
    """The page URL tokmon printed, its base, and the base's first answer (once the web
    server listens)."""
    import httpx

    assert p.stderr is not None
    line = p.stderr.readline()
    url = line[line.index("http://") :].strip()
    base = url.split("?", 1)[0]
    deadline = time.monotonic() + 30
    while True:
        try:
            return url, base, httpx.get(base, timeout=5)
        except httpx.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_off_loopback_the_page_needs_its_one_time_token(make_sim, tmp_path):
    """--web on a non-loopback address: refused without --web-allow-remote; with it, the
    URL printed once carries a token, and a request without it is refused."""
    import httpx
    from helpers import tokmon

    sim = make_sim(time_scale=4)
    rec = tmp_path / "r.jsonl"
    r = tokmon("run", "--url", sim.url, "-n", "4", "--headless", "--no-gpu", "--record", str(rec))
    assert r.returncode == 0, r.stderr
    refused = tokmon("replay", str(rec), "--web", "0.0.0.0:0")
    assert refused.returncode == 2 and "--web-allow-remote" in refused.stderr
    port = free_port()
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "replay", str(rec), "--web", f"0.0.0.0:{port}", "--web-allow-remote"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url, base, bare = page_of(p)
        assert "?token=" in url
        assert bare.status_code == 403
        ok = httpx.get(url, timeout=5)
        assert ok.status_code == 200 and "tokmon_token" in ok.headers.get("set-cookie", "")
        wrong = httpx.get(base + "?token=guess", timeout=5)
        assert wrong.status_code == 403
    finally:
        p.terminate()
        p.wait(30)


def test_the_web_view_refuses_other_sites_strangers_and_crowds(make_sim, tmp_path):
    """A WebSocket from another site's page is refused (it was accepted and took keys);
    a Host that is not this server's (DNS rebinding) is refused; the token is needed on
    loopback too and is on no command line; at most four viewers at a time."""
    import asyncio

    import aiohttp
    import httpx
    from helpers import tokmon

    from tokmon.ui.web import MAX_VIEWERS

    sim = make_sim(time_scale=4)
    rec = tmp_path / "r.jsonl"
    r = tokmon("run", "--url", sim.url, "-n", "4", "--headless", "--no-gpu", "--record", str(rec))
    assert r.returncode == 0, r.stderr
    port = free_port()
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "replay", str(rec), "--web", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url, base, bare = page_of(p)
        token = url.split("token=", 1)[1]
        assert bare.status_code == 403  # loopback too: the token
        ps = subprocess.run(["ps", "axww", "-o", "args"], capture_output=True, text=True).stdout
        assert token not in ps  # it went to the web server on a pipe
        rebound = httpx.get(url, headers={"Host": f"evil.example:{port}"}, timeout=5)
        assert rebound.status_code == 421
        cookies = {"tokmon_token": token}
        ws = f"ws://127.0.0.1:{port}/ws"

        async def socket(origin: str) -> int:
            async with aiohttp.ClientSession(cookies=cookies) as s:
                try:
                    async with s.ws_connect(ws, headers={"Origin": origin}) as c:
                        await c.close()
                        return 101
                except aiohttp.WSServerHandshakeError as e:
                    return e.status

        assert asyncio.run(socket("http://evil.example")) == 403

        async def crowd() -> list[int]:
            async with aiohttp.ClientSession(cookies=cookies) as s:
                opened, statuses = [], []
                for _ in range(MAX_VIEWERS + 1):
                    try:
                        c = await s.ws_connect(ws, headers={"Origin": f"http://127.0.0.1:{port}"})
                        opened.append(c)
                        statuses.append(101)
                    except aiohttp.WSServerHandshakeError as e:
                        statuses.append(e.status)
                for c in opened:
                    await c.close()
                return statuses

        assert asyncio.run(crowd()) == [101] * MAX_VIEWERS + [503]
    finally:
        p.terminate()
        p.wait(30)


async def test_a_read_only_view_cannot_act_on_the_run():
    """--web without --web-control: the view is told it has no commands, and a command
    it sends anyway is refused at the run."""
    src = FakeSource()
    server = ViewServer(src, interval=0.05, control=False)
    remote = RemoteSource(server.path)
    try:
        assert remote.commands == frozenset()
        remote._commands = frozenset({"switch"})  # a view that lies about what it may do
        assert remote.command(Switch()) == "read-only view (--web-control)"
        assert src.arm != "spec"
    finally:
        remote.close()
        server.close()


def test_an_attached_view_builds_no_foreign_object(tmp_path):
    """`tokmon view --attach` of a socket that sends a crafted frame: a pickle (it used
    to unpickle anything), a JSON frame naming a type that is not the model's, or one of
    the model's types with a field it does not declare: each refused, nothing runs."""
    import json
    import pickle
    import socket as s
    import struct
    import threading

    from tokmon.sources.frames import FrameError
    from tokmon.sources.remote import RemoteSource

    d = tmp_path / "v"
    d.mkdir(mode=0o700)
    path = str(d / "session.sock")
    srv = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    crafted = [
        (pickle.dumps(("hello", Evil())), "not a frame"),
        (json.dumps({"~t": ["hello", {"~": "os.system", "v": {}}]}).encode(), "refused: os.system"),
        (json.dumps({"~t": ["hello", {"~": "views.Cost", "v": {"__class__": 1}}]}).encode(),
         "Cost has no field __class__"),
        (b"[" * 100_000 + b"]" * 100_000, "not a frame"),
    ]  # fmt: skip

    def serve():
        for data, _ in crafted:
            c, _ = srv.accept()
            c.sendall(struct.pack("!I", len(data)) + data)
            time.sleep(0.2)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    for _, says in crafted:
        with pytest.raises(FrameError, match=says):
            RemoteSource(path)
    assert not marker.exists()
    srv.close()
    os.chmod(d, 0o755)  # a folder others can enter: not a socket to trust
    with pytest.raises(ConnectionError, match="open to other users"):
        RemoteSource(path)


def test_a_frame_is_the_snapshot_whole(tmp_path):
    """An attached view draws what the session holds: every snapshot of the recorded
    two-arm ladder, sent as a JSON frame, decodes equal to itself (tuples stay tuples,
    non-finite floats and non-string keys survive)."""
    from tokmon.recording.play import Player
    from tokmon.recording.reader import read_recording
    from tokmon.sources import frames

    p = Player(read_recording(str(Path(__file__).parent / "data" / "rec" / "ladder-ab.jsonl.gz")))
    seen = 0
    for t in range(0, p.end_t + 10**10, 10**10):
        p.play_until(min(t, p.end_t))
        snap = p.fold.snapshot
        if snap is not None:
            assert frames.decode(frames.encode(("snap", snap))) == ("snap", snap)
            seen += 1
    assert seen > 5
    odd = {"a": (1.5, float("inf")), (1, "k"): frozenset({2}), "n": [None, True]}
    back = frames.decode(frames.encode(odd))
    assert back == odd and isinstance(back["a"], tuple)


def test_every_type_a_snapshot_can_hold_is_one_a_frame_can_carry():
    """Walked from the Snapshot's own type hints: each dataclass it can hold, at any
    depth, is in the frames' fixed list (a new view left out once made an attached view
    draw a blank dashboard, and only a browser test saw it)."""
    import dataclasses
    import typing

    from tokmon.model.folding.snapshot import Snapshot
    from tokmon.sources import frames

    seen: set[type] = set()

    def walk(tp: object) -> None:
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if tp in seen:
                return
            seen.add(tp)
            for hint in typing.get_type_hints(tp).values():
                walk(hint)
        for arg in typing.get_args(tp):
            walk(arg)

    walk(Snapshot)
    assert len(seen) > 20
    missing = sorted(t.__qualname__ for t in seen if t not in frames._NAMES)
    assert not missing, missing


def test_a_view_with_control_acts_through_typed_commands_and_a_crafted_one_is_refused():
    """--web-control: a view's key is a typed command that reaches the run as it was
    sent; one whose fields a crafted frame filled with the wrong types is refused with a
    line (it reaches no handler), and the run goes on."""
    import struct

    from tokmon.model.data.commands import ChangeLevel, CommandError, Seek, checked
    from tokmon.sources import frames

    src = FakeSource()
    server = ViewServer(src, interval=0.05, control=True)
    remote = RemoteSource(server.path)
    try:
        assert remote.command(Switch()) == "switch done" and src.arm == "spec"
        assert remote.command(ChangeLevel(-1)) == "level done"
        assert src.calls[-1] == ("level", -1, None)
        crafted = frames.encode(("cmd", 99, ChangeLevel(1)))
        crafted = crafted.replace(b'"sign":1', b'"sign":"lots"')
        with remote._wlock:
            remote.sock.sendall(struct.pack(">I", len(crafted)) + crafted)
        with remote._cv:
            remote._cv.wait_for(lambda: 99 in remote._replies, timeout=5.0)
        notice = remote._replies.pop(99)
        assert notice is not None and notice.startswith("command refused: level: sign"), notice
        assert src.calls[-1] == ("level", -1, None)  # nothing reached the run
        assert remote.command(Seek(5)) == "not available here: seek"  # a replay's key
    finally:
        remote.close()
        server.close()
    with pytest.raises(CommandError):
        Seek("5")  # type: ignore[arg-type]
    with pytest.raises(CommandError):
        ChangeLevel(True)
    with pytest.raises(CommandError):
        checked(("cmd", "level"))
