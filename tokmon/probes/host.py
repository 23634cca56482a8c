"""The host and tokmon itself, through psutil: if tokmon is the bottleneck, it shows."""

from __future__ import annotations

import os
import shutil
from typing import Any

import psutil

from tokmon.probes.base import Sampler
from tokmon.recording.parts import run_bytes


def _ours(p: psutil.Process) -> bool:
    """A child in tokmon's own session (a server it started has a session of its own)."""
    try:
        return os.getsid(p.pid) == os.getsid(0)
    except OSError:
        return False


class HostProbe(Sampler):
    name = "host"

    def __init__(self, interval: float = 1.0, record: str | None = None) -> None:
        super().__init__(interval)
        self.me = psutil.Process(os.getpid())
        # the recording's path: its size and the disk left beside it (a soak of days
        # must see the disk filling before it is full)
        self.record = record
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(None)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host_cpu_pct": psutil.cpu_percent(None),
            "host_mem_pct": psutil.virtual_memory().percent,
        }
        # tokmon's own processes: this one and its engine workers (CPU % of one core).
        # The servers it starts (serve= arms, the demo's simulators) run in sessions of
        # their own: they are what is measured, and are left out.
        cpu = 0.0
        rss = 0
        try:
            procs = [self.me] + [p for p in self.me.children(recursive=True) if _ours(p)]
        except psutil.Error:
            procs = [self.me]
        per: dict[str, float] = {}
        for p in procs:
            q = self._procs.get(p.pid)
            if q is None:
                q = self._procs[p.pid] = p
                try:
                    q.cpu_percent(None)
                except psutil.Error:
                    continue
                continue
            try:
                c = q.cpu_percent(None)
                r = q.memory_info().rss
                name = q.name()
            except psutil.Error:
                continue
            cpu += c
            rss += r
            per[f"{name}:{q.pid}"] = c
        out["self_cpu_pct"] = cpu
        out["self_rss_mib"] = rss / 2**20
        out["self_procs"] = per
        if self.record is not None:
            if os.path.exists(self.record):  # (else not written yet, or moved away)
                out["record_bytes"] = run_bytes(self.record)  # every part of a rotated one
            try:
                folder = os.path.dirname(os.path.abspath(self.record))
                out["disk_free_bytes"] = shutil.disk_usage(folder).free
            except OSError:
                pass
        return out
