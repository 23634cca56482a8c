"""Shared by the tests that run tokmon as a user would: in a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import httpx

PY = sys.executable


def tokmon(*args: str, timeout: float = 120, env: dict[str, str] | None = None, text: bool = True):
    """Run ``python -m tokmon ARGS`` with no API key inherited from the machine
    (``text=False``: stdout and stderr as the raw bytes tokmon wrote)."""
    e = dict(os.environ)
    e.pop("OPENAI_API_KEY", None)
    e.pop("TOKMON_API_KEY", None)
    e.update(env or {})
    return subprocess.run(
        [PY, "-m", "tokmon", *args],
        capture_output=True,
        text=text,
        timeout=timeout,
        env=e,
        stdin=subprocess.DEVNULL,
    )


def wait_running(sim, n: int, timeout: float = 60.0) -> None:
    """Until the (scheduled) simulator has sent ``n`` first tokens, so that the run is under
    way with requests in flight: a condition, not a guess of how long a loaded machine
    takes to start tokmon."""
    deadline = time.monotonic() + timeout
    key = "tokmon_sim:schedule_lateness_seconds_count{"
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            text = httpx.get(sim.url.replace("/v1", "/metrics"), timeout=5).text
            for line in text.splitlines():
                if (
                    line.startswith(key)
                    and 'chunk="first"' in line
                    and float(line.split()[-1]) >= n
                ):
                    return
        time.sleep(0.05)
    raise AssertionError(f"the simulator never sent {n} first tokens")


def self_signed(tmp_path):
    """A certificate and key for 127.0.0.1 (openssl), or a skip where openssl is absent."""
    import shutil

    import pytest

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the TLS test")
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, crt
