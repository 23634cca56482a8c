"""Replay = live: a recorded run played back shows, at every instant the live dashboard
was drawn, exactly the Snapshot the live run showed, and its report is the live summary.

The live session and the replay fold the same facts in the same order through the same
fold; these tests hold that promise for a run with everything in it (two arms, a ladder or
alternation, a marker, a pause, failures from the server, GPU/host/server probes).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest
from fake_nvml import make

from tokmon.model.data.commands import Command, Marker, TogglePause
from tokmon.model.folding.snapshot import Snapshot
from tokmon.model.judge.capacity import CapacityPlan
from tokmon.model.judge.ladder import parse_ladder
from tokmon.model.statistics.stats import Slo
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.workload import LengthDist
from tokmon.probes.gpu import NvmlProbe
from tokmon.probes.host import HostProbe
from tokmon.probes.server import ServerMetricsProbe, metrics_url_for
from tokmon.recording.play import Player, summary_of
from tokmon.recording.reader import read_recording
from tokmon.recording.writer import Recorder
from tokmon.sim.faults import Faults
from tokmon.sources.live import LiveSession
from tokmon.sources.replay import ReplaySource
from tokmon.textsafe import dumps


def differ(a, b, where: str = "") -> str | None:
    """Where two figures first differ (a dataclass, tuple or dict walked), else None."""
    if is_dataclass(a) and type(a) is type(b):
        for f in fields(a):
            d = differ(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
            if d:
                return d
        return None
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = differ(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            d = differ(a[k], b[k], f"{where}[{k!r}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


class Fixed:
    """A source that shows one snapshot (the live run's, as it was drawn)."""

    commands = frozenset({"switch", "pause", "level", "marker", "stop", "record"})

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap

    def command(self, cmd: Command) -> None:
        return None

    def close(self) -> None:
        pass


async def panels(source, size=(160, 48)) -> dict[str, str]:
    """What each panel of the dashboard shows, as text (the header without the words
    that say which source it is), and the compare panel with `w` pressed (the split)."""
    from tokmon.ui.app import DashboardApp
    from tokmon.ui.widgets import InfoPanel, MetricSpark

    app = DashboardApp(source)
    async with app.run_test(size=size) as pilot:
        for _ in range(3):  # (the first draw may come before the layout is known)
            await pilot.pause()
            app.draw()
        await pilot.pause()
        out: dict[str, str] = {}
        for w in app.screen.query(InfoPanel):
            out[w.id or "?"] = str(w.render())
        await pilot.press("w")
        await pilot.pause()
        out["split"] = str(app.screen.query_one("#compare", InfoPanel).render())
        for m in app.screen.query(MetricSpark):
            out[m.id or "?"] = f"{m._label_text} {m.spark.values}"
    head = re.sub(r" REPLAY \S+ \S+ ·", "", out["header"])
    out["header"] = re.sub(r"finished \(q to quit\)", "", head)
    return out


def run_live(sim, tmp_path, plan: str) -> tuple[LiveSession, list[Snapshot], str]:
    arms = (Arm("plain", url=sim.url, model="sim-27b"), Arm("spec", url=sim.url, model="sim-27b"))
    cfg = RunConfig(
        arms=arms,
        concurrency=3,
        duration_s=None if plan in ("ladder", "capacity") else 7.0,
        alternate_s=1.5 if plan == "alternate" else None,
        max_tokens=LengthDist("fixed", 16),
        # every kind of request today's models take: each judgment's figures replay too
        mix=(("chat", 0.4), ("guided", 0.2), ("tools", 0.2), ("image", 0.2)),
        image_sizes=(64, 128),
    )
    ladder: Any = parse_ladder("concurrency=1,3", 1.8, 0.4, None) if plan == "ladder" else None
    if plan == "capacity":  # a search that passes 1 and 2 streams and stops at its limit, 4
        ladder = CapacityPlan("concurrency", goodput=0.5, slo="ttft=1000", limit=4,
                              min_s=0.6, max_s=1.5, warm_s=0.2)  # fmt: skip
    probes = [
        HostProbe(0.5),
        NvmlProbe(0.5, nvml=make(n=1, power_mw=300_000)),
        ServerMetricsProbe(metrics_url_for(sim.url), ("plain", "spec"), interval=0.5),
    ]
    path = str(tmp_path / "run.jsonl")
    s = LiveSession(
        cfg,
        target=sim.url,
        model="sim-27b",
        window_s=2.0,
        recorder=Recorder(path),
        header={"settings": cfg.redacted()},
        probes=probes,
        gpu_hour_price=2.0,
        ladder=ladder,
        slo=Slo(ttft_ms=1000.0) if plan == "capacity" else None,
    )
    snaps: list[Snapshot] = []
    tick = s.intake.tick

    def keep(now: int, final: bool = False) -> None:  # every snapshot the dashboard got
        tick(now, final)
        snaps.append(s.fold.snapshot)

    s.intake.tick = keep  # type: ignore[method-assign]

    def ticks(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(snaps) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    s.start()
    try:
        ticks(2)
        s.command(Marker("before the pause"))
        s.command(TogglePause())
        ticks(len(snaps) + 1)
        s.command(TogglePause())
        assert s.wait(60)
    finally:
        s.close()
    return s, snaps, path


@pytest.mark.slow
@pytest.mark.parametrize("plan", ["ladder", "alternate", "capacity"])
def test_a_replay_shows_at_every_tick_what_the_live_run_showed(make_sim, tmp_path, plan):
    sim = make_sim(
        schedule=(2.0, 1.0, 1), faults=Faults(http_500=0.2), seed=4, request_metrics=True,
        schedule_queue_ms=0.5, reasoning=6,  # (a reasoning model: its figures replay too)
    )  # fmt: skip
    s, snaps, path = run_live(sim, tmp_path, plan)
    rec = read_recording(path)
    assert rec.clocked and not rec.truncated and rec.corrupt == 0
    kinds = {e.kind for e in rec.events}
    assert {"marker", "pause", "arm"} <= kinds and "errors" in kinds  # a burst was raised
    if plan in ("ladder", "capacity"):
        assert {"step", "ladder"} <= kinds
    assert len(snaps) >= 6
    player = Player(rec)
    checked = 0
    for live in snaps:
        player.play_until(live.t)
        got = player.fold.snapshot
        assert got is not None and got.t == live.t
        d = differ(got, replace(live, recording=None))  # names the first figure that differs
        assert d is None, f"at {live.t / 1e9:.3f} s: replay{d}"
        checked += 1
    assert checked == len(snaps)
    last = snaps[-1]
    assert last.done and last.ok > 0 and last.failed > 0
    # where the time goes, from each request's own figures, the same in the replay
    assert {sp.ttft.source for sp in last.time_split} == {"per-request"}
    assert last.probes.gpu_power_w == 300.0 and last.probes.kv_pct is not None
    # the registered judgments replay too: each kind's, the failures' words
    for name in ("reasoning", "structured", "images", "usage", "connection", "errors"):
        assert last.judgment(name) is not None, name
    if plan == "capacity":  # each arm searched in turn, the same verdict in the replay
        assert [(c.arm, c.done) for c in last.capacity] == [("plain", True), ("spec", True)]
        assert all([p.level for p in c.probes] == [1, 2, 4] for c in last.capacity)
    if plan == "ladder":
        assert last.ladder is not None and len(last.ladder.done) == 4  # 2 steps × 2 arms
        assert last.level == 3.0
    if plan == "ladder":
        # every panel of the live dashboard shows in the replay, the ladder table included
        src = ReplaySource(path)
        src.seek_to(src.end_t)
        live_view = asyncio.run(panels(Fixed(replace(last, recording=None))))
        replay_view = asyncio.run(panels(src))
        assert "ladder concurrency" in live_view["compare"]
        assert "where the time goes" in live_view["split"] and "▓queue" in live_view["split"]
        assert replay_view == live_view
    # the report of the recording is the live summary, exactly (as JSON, as written)
    live_summary = json.loads(dumps(s.final))
    assert json.loads(dumps(summary_of(rec))) == live_summary
    assert json.loads(dumps(rec.summary)) == live_summary
