"""A scripted, deterministic source for dashboard tests."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from tokmon.model.contract.history import Point
from tokmon.model.contract.views import ComparisonView, ProbeView, RatioView
from tokmon.model.data.commands import Command
from tokmon.model.data.records import Event
from tokmon.model.folding.snapshot import ArmView, Snapshot
from tokmon.model.judge.timesplit import SpeedupCauses, TimeSplit, TpotSplit, TtftSplit
from tokmon.model.statistics.stats import WindowStats


def window(arm: str = "", tok: float = 1200.0, ttft: float | None = 85.0) -> WindowStats:
    return WindowStats(
        t=0,
        width_s=10.0,
        arm=arm,
        tokens_per_s=tok,
        requests_per_s=3.2,
        ended=32,
        ok=31,
        failed=1,
        errors={"http_5xx": 1},
        ttft_p50=ttft,
        ttft_p95=None if ttft is None else ttft * 2.1,
        ttft_p99=None,
        tpot_p50=24.5,
        tpot_p95=27.0,
        decode_p50=40.8,
        goodput_per_s=None,
        tpot_cv=0.05,
        stalls=0,
        tokens_per_chunk=1.0,
        acceptance_rate=0.71,
        acceptance_length=3.1,
        acceptance_source="server counters",
    )


class FakeSource:
    """Hands out a fixed, scripted snapshot and records the commands it gets."""

    commands = frozenset({"switch", "pause", "level", "marker", "stop", "record", "check"})

    def __init__(
        self, seconds: int = 120, in_flight: int = 8, text: str = "", split: bool = False
    ) -> None:
        self.split = split  # a time split per arm, and the speed-up's causes
        self.calls: list[tuple[Any, ...]] = []
        self.arm = "baseline"
        self.paused = False
        self.level = 8.0
        self.recording: str | None = None
        self.stopped: bool | None = None
        self.in_flight = in_flight
        self.seconds = seconds
        self.text = text
        self._snap = self._make()

    def _make(self) -> Snapshot:
        pts = []
        for i in range(self.seconds):
            marks: tuple[str, ...] = ()
            if i == 60:
                marks = ("arm",)
            if i == 90:
                marks = ("marker",)
            pts.append(
                Point(
                    t=float(i),
                    tok_s=1000 + 300 * math.sin(i / 9),
                    ttft_p50=80 + (i % 7),
                    ttft_p95=150.0,
                    tpot_p50=25.0,
                    decode_p50=40 + (i % 5),
                    errors=1.0 if i % 17 == 0 else 0.0,
                    acc_rate=0.7 if i >= 60 else None,
                    gpu_util=None,
                    kv_pct=40 + i / 4,
                    queue=2.0,
                    marks=marks,
                )
            )
        events = (
            Event(t=0, kind="start", message="run started: concurrency 8 streams"),
            Event(t=60_000_000_000, kind="arm", message="arm → spec"),
            Event(t=90_000_000_000, kind="marker", message=self.text or "note"),
        )
        return Snapshot(
            t=self.seconds * 1_000_000_000,
            elapsed_s=float(self.seconds),
            target="http://127.0.0.1:8000/v1",
            model="sim-27b",
            arm=self.arm,
            arms=("baseline", "spec"),
            mode="concurrency",
            level=self.level,
            paused=self.paused,
            sent=400,
            ok=380,
            failed=12,
            in_flight=self.in_flight,
            warming_up=False,
            recording=self.recording,
            window=window(),
            arm_views=(
                ArmView("baseline", 200, 6, window("baseline", 800.0)),
                ArmView("spec", 180, 6, window("spec", 1600.0)),
            ),
            recent=tuple(pts),
            whole=tuple(pts),
            events=events,
            comparison=ComparisonView(
                baseline="baseline",
                other="spec",
                method="segments",
                decode=RatioView(2.31, 2.12, 2.5),
                tpot=RatioView(0.44, 0.4, 0.48),
                ttft=RatioView(1.02, 0.97, 1.08),
            ),
            probes=ProbeView(
                kv_pct=70.0, queue=2.0, running=8.0, engine="vllm", gpu_note="no NVML library"
            ),
            done=False,
            time_split=tuple(
                TimeSplit(
                    arm,
                    TtftSplit(80.0, 2.0, 30.0, 40.0, 8.0, "per-request", "p50", 150),
                    TpotSplit(25.0 / f, 22.0 / f, 3.0 / f, "per-request", "p50", 150),
                )
                for arm, f in (("baseline", 1.0), ("spec", 2.0))
            )
            if self.split
            else (),
            causes=SpeedupCauses(
                "baseline",
                "spec",
                (1.0, 2.9),
                (22.0, 27.5),
                (2.9, 2.8, 3.0),
                (0.8, 0.78, 0.82),
                "server",
                (150, 150),
            )  # fmt: skip
            if self.split
            else None,
        )

    def snapshot(self) -> Snapshot:
        return self._snap

    def command(self, cmd: Command) -> str | None:
        name, args = cmd.name, tuple(getattr(cmd, f.name) for f in fields(cmd))
        self.calls.append((name, *args))
        if name == "switch":
            self.arm = "spec" if self.arm == "baseline" else "baseline"
        elif name == "pause":
            self.paused = not self.paused
        elif name == "level":
            self.level += args[0]
        elif name == "record":
            self.recording = None if self.recording else "run.tokmon.jsonl"
        elif name == "stop":
            self.stopped = bool(args[0]) if args else False
            self.in_flight = 0
        self._snap = self._make()
        return f"{name} done"

    def close(self) -> None:
        pass
