"""Managed servers as the run restarts them (arms taking turns on one GPU): each one's
starts, time to ready and to stop, its environment, and the restart in progress — a
reducer of ``server`` events.
"""

from __future__ import annotations

from typing import Any

from tokmon.model.data.coerce import number
from tokmon.model.data.records import Event
from tokmon.model.env.environment import ServerEnv
from tokmon.model.env.redact import short_command


class ManagedServers:
    def __init__(self) -> None:
        self.restarting: tuple[str, str, int] | None = None  # (arm, phase, since)
        self.servers: dict[str, dict[str, Any]] = {}

    def event(self, ev: Event) -> bool | None:
        """A managed server stopping, starting, ready or failed. Returns whether nothing
        is sent from the event on (a restart is idle time: True as it begins, False as it
        ends; None: neither)."""
        d = ev.data
        arm = d.get("arm")
        phase = d.get("phase")
        if not isinstance(arm, str) or not isinstance(phase, str):
            return None
        idle = None
        if phase in ("stopping", "starting"):
            idle = True
            self.restarting = (arm, phase, ev.t)
        elif phase in ("ready", "failed"):
            idle = False
            self.restarting = None
        ms = self.servers.setdefault(arm, {"starts": 0, "ready_s": [], "stop_s": []})
        if phase == "ready":
            ms["starts"] += 1
            r = number(d.get("ready_s"))
            if r is not None and 0 <= r < 1e6:
                ms["ready_s"].append(round(r, 3))
            cmd = d.get("command")
            if isinstance(cmd, list):
                ms["command"] = [str(x) for x in cmd[:200]]
            env = ServerEnv.from_json(d.get("env"))
            if env is not None:
                ms["env"] = env.to_json(raw=False)
        elif phase == "stopped":
            r = number(d.get("stop_s"))
            if r is not None and 0 <= r < 1e6:
                ms["stop_s"].append(round(r, 3))
        elif phase == "failed":
            ms["failed"] = ms.get("failed", 0) + 1
        return idle

    def shown(self, arm: str) -> str | None:
        """The arm's server as run (``serve: tokmon sim --port 38959 --spec on``, its port
        filled, redacted), once it has started; None before, or for an arm with a URL."""
        cmd = self.servers.get(arm, {}).get("command")
        return f"serve: {short_command(cmd, words=12)}" if cmd else None

    def to_json(self) -> dict[str, Any]:
        return {a: dict(m) for a, m in self.servers.items()}
