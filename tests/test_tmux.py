"""End to end in a real terminal multiplexer: tokmon demo in tmux, read the screen, press s."""

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10).stdout


def wait_for(session: str, needle: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if needle in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{needle!r} not on screen:\n{screen}")


def start_demo(cols: int, rows: int) -> str:
    """tokmon demo in a new tmux session of this size: the session's name."""
    session = f"tokmon-{uuid.uuid4().hex[:8]}"
    cmd = f"{sys.executable} -m tokmon demo --alternate off --time-scale 4"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), cmd],
        check=True,
        env=env,
        timeout=10,
    )
    return session


def test_demo_in_tmux_switches_arm():
    session = start_demo(100, 32)
    try:
        screen = wait_for(session, "arm baseline")
        assert "tokens/s" in screen and "TTFT" in screen
        wait_for(session, "tok/s")
        tmux("send-keys", "-t", session, "s")
        screen = wait_for(session, "arm spec")
        assert "arm → spec" in screen  # in the event log too
        tmux("send-keys", "-t", session, "q")
        time.sleep(0.5)
        tmux("send-keys", "-t", session, "y")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and session in tmux("list-sessions"):
            time.sleep(0.3)
        assert session not in tmux("list-sessions")  # tokmon exited, the session closed
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_at_80x24_every_chart_has_its_range_and_help_and_quit_show():
    """The smallest terminal a person uses over SSH: the footer still shows ? help and
    q quit, every chart says its range, and the quit question is whole."""
    session = start_demo(80, 24)
    try:
        screen = wait_for(session, "in flight 8")  # under way: q asks before it quits
        assert "? help" in screen and "q quit" in screen, screen
        # tokens/s, decode, TTFT, accept, errors, GPU, server: a range, or one line saying
        # why there is none (no GPU here); each once its first figures came (on a loaded
        # CI run the server's chart had no sample yet in the first second)
        deadline = time.monotonic() + 30
        while True:
            lines = screen.splitlines()
            charts = [ln for ln in lines if "┤" in ln or "n/a — " in ln]
            if len(charts) >= 7 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
            screen = tmux("capture-pane", "-p", "-t", session)
        assert len(charts) == 7, screen
        assert any("%┤" in ln and "errors" in ln for ln in lines), screen
        # every line whole (the header's items whole or absent), and the footer's keys
        # each with its label, the rest counted and in ?
        assert not [ln for ln in lines if ln.rstrip().endswith("…")], screen
        footer = [ln for ln in lines if ln.strip()][-1]
        assert footer.rstrip().endswith("keys in ?") and "s arm" in footer, screen
        tmux("send-keys", "-t", session, "q")
        screen = wait_for(session, "(y/n)")
        assert "requests are in flight. Stop sending, let them finish, and" in screen, screen
        assert "quit?  (y/n)" in screen, screen
        tmux("send-keys", "-t", session, "y")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and session in tmux("list-sessions"):
            time.sleep(0.3)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_a_dropped_terminal_ends_the_run_and_every_process_of_it():
    """SIGHUP (an SSH session that dropped; here, the tmux session killed): the run drains,
    the dashboard closes — nobody is left to press q — and tokmon and its simulators
    exit. (A dashboard left open on a closed terminal spun a core until it was killed.)"""
    import psutil

    session = start_demo(100, 32)
    procs: list[psutil.Process] = []
    try:
        wait_for(session, "in flight")
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
        assert any("tokmon" in " ".join(p.cmdline()) for p in procs)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    _gone, alive = psutil.wait_procs(procs, timeout=30)
    for p in alive:  # (not left running past the test, whatever it found)
        p.kill()
    assert not alive, [" ".join(p.cmdline()) for p in alive]
