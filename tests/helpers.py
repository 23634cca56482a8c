"""Shared by the tests that run tokmon as a user would: in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

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
