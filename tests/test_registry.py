"""The reducer contract (#60): a judgment registered from this test module alone — no
other file touched — is fed the run's facts and seen in the live snapshot, in a replay of
its recording, in the summary JSON and in the text report; the registry's order follows
what each judgment reads, and a cycle is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tokmon.model.contract import registry
from tokmon.model.contract.registry import Block, Judgment, register
from tokmon.model.data.commands import End, Marker
from tokmon.model.data.table import RequestTable
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.workload import LengthDist
from tokmon.recording.reader import read_recording
from tokmon.recording.writer import Recorder
from tokmon.report.render import render
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.sources import frames
from tokmon.sources.live import LiveSession
from tokmon.sources.replay import ReplaySource


@dataclass(frozen=True, slots=True)
class ToyView:
    """What the toy shows: requests counted and markers seen, as a panel line."""

    requests: int
    markers: int

    def panel_lines(self) -> tuple[str, ...]:
        return (f"toy: {self.requests} requests, {self.markers} markers",)


class Toy(Judgment):
    name = "toy"

    def __init__(self, ctx: registry.Context) -> None:
        super().__init__(ctx)
        self.n = 0
        self.markers = 0

    def requests(self, tb: RequestTable) -> None:
        self.n += tb.n

    def event(self, ev: Any) -> None:
        self.markers += ev.kind == "marker"

    def view(self, now: int, reads: dict[str, Any]) -> ToyView:
        return ToyView(self.n, self.markers)

    def block(self, t_end: int, reads: dict[str, Any]) -> Block:
        return Block("toy", {"requests": self.n, "markers": self.markers},
                     (f"toy judgment: {self.n} requests, {self.markers} markers",))  # fmt: skip


class Twice(Judgment):
    """Reads the toy's view: a judgment built on another's."""

    name = "twice"
    reads = ("toy",)

    def view(self, now: int, reads: dict[str, Any]) -> Any:
        toy = reads.get("toy")
        return None if toy is None else ToyView(2 * toy.requests, toy.markers)


@pytest.fixture
def toys():
    register(Twice)  # (registered before the one it reads: the order is the reads')
    register(Toy)
    try:
        yield
    finally:
        registry.unregister("toy")
        registry.unregister("twice")


def test_a_judgment_registered_here_is_seen_live_replayed_summarised_and_reported(toys, tmp_path):
    with SimProcess(SimConfig(seed=2, schedule=(5.0, 1.0, 1), time_scale=8)) as sim:
        cfg = RunConfig(arms=(Arm("a", url=sim.url, model="sim-27b"),), concurrency=2,
                        requests=30, max_tokens=LengthDist("fixed", 4))  # fmt: skip
        path = str(tmp_path / "run.jsonl")
        s = LiveSession(cfg, target=sim.url, model="sim-27b", recorder=Recorder(path),
                        header={"settings": cfg.redacted()})  # fmt: skip
        s.start()
        s.command(Marker("a note"))
        assert s.wait(60)
        s.close()
    live = s.fold.snapshot
    assert live is not None
    assert live.judgment("toy") == ToyView(30, 1)
    assert live.judgment("twice") == ToyView(60, 1)  # it read the toy's view, in order
    summary = s.final or s.summary()
    assert {k: summary["toy"][k] for k in ("requests", "markers")} == {"requests": 30, "markers": 1}
    # an attached view carries it (frames decode the registered view types)
    assert frames.decode(frames.encode(live)).judgment("toy") == ToyView(30, 1)
    # a replay of the recording: the same view at its end
    rep = ReplaySource(path)
    rep.start()
    try:
        rep.command(End())
        snap = rep.snapshot()
        assert snap is not None and snap.judgment("toy") == ToyView(30, 1)
    finally:
        rep.close()
    # the text report says its lines; the JSON report holds its block
    rec = read_recording(path)
    assert "toy judgment: 30 requests, 1 markers" in render(rec, "text")
    assert '"requests": 30' in render(rec, "json").split('"toy"')[1]
    # the dashboard's panel shows its line
    from tokmon.ui.panels import compare_blocks

    lines = [ln.plain for b in compare_blocks(live, 80) for ln in b.lines]
    assert "toy: 30 requests, 1 markers" in lines


def test_the_order_follows_the_reads_and_a_cycle_is_refused():
    class A(Judgment):
        name = "a"
        reads = ("b",)

    class B(Judgment):
        name = "b"

    assert [c.name for c in registry.ordered([A, B])] == ["b", "a"]

    class C(Judgment):
        name = "b"
        reads = ("a",)

    with pytest.raises(ValueError, match="cycle: a → b → a"):
        registry.ordered([A, C])

    class D(Judgment):
        name = "d"
        reads = ("nobody",)

    with pytest.raises(ValueError, match="d reads nobody, which is not registered"):
        registry.ordered([D])


def test_an_attached_view_knows_every_judgment():
    """An attached view (``tokmon view``, ``--web``) decodes a session's frames without ever
    importing the fold: it must know every registered judgment's view all the same. (It
    knew one of six: a snapshot holding the client verdict could not be read, and the
    browser's dashboard stayed blank, without its keys — test_web failed on it, by turns.)"""
    import subprocess
    import sys

    def registered(module: str) -> str:
        code = (f"import {module}; from tokmon.model.contract import registry; "
                "print(','.join(sorted(registry.REGISTRY)))")  # fmt: skip
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    made = registered("tokmon.model.folding.fold")
    assert made.count(",") >= 5, made
    assert registered("tokmon.sources.remote") == made


class Tenth(Judgment):
    """Raises one event, at the first tick after its tenth request."""

    name = "tenth"

    def __init__(self, ctx: registry.Context) -> None:
        super().__init__(ctx)
        self.n = self.heard = 0
        self.said = False

    def requests(self, tb: RequestTable) -> None:
        self.n += tb.n

    def event(self, ev: Any) -> None:
        self.heard += ev.kind == "tenth"

    def derive(self, now: int) -> list[tuple[str, str, dict[str, Any]]]:
        if self.n < 10 or self.said:
            return []
        self.said = True
        return [("tenth", f"tenth: {self.n} requests", {"n": self.n})]

    def view(self, now: int, reads: dict[str, Any]) -> ToyView:
        return ToyView(self.n, self.heard)


def test_a_judgments_event_is_raised_live_once_and_read_back_by_a_replay():
    """Synthetic facts through the registry, no server: the event a judgment derives is
    returned to be recorded and folded (the judgment hears it) after the tick's snapshot;
    a replay (derive off), fed the facts and the recorded event, holds it once."""
    import numpy as np

    from tokmon.model.data.facts import Requests, Tick
    from tokmon.model.folding.fold import Fold, FoldSettings
    from tokmon.sim.requests import synthetic_batch

    register(Tenth)
    try:
        live = Fold(FoldSettings(arms=("a", "b")), derive=True)
        rng = np.random.default_rng(1)
        facts: list[Any] = []
        for k in range(3):
            tb = synthetic_batch(live.vocab, 6 * k, 6, k * 10**9, rng, 0)
            facts += [Requests(tb), Tick((k + 1) * 10**9)]
        raised, recorded = [], []
        for f in facts:
            got = live.apply(f)
            raised += got
            recorded += [f, *got]  # (what a recording holds: the events after their tick)
            if isinstance(f, Tick) and got:
                assert live.snapshot is not None
                assert live.snapshot.judgment("tenth") == ToyView(12, 0)  # drawn before it
        assert [(e.kind, e.message, e.data) for e in raised] == [
            ("tenth", "tenth: 12 requests", {"n": 12})
        ]
        replay = Fold(FoldSettings(arms=("a", "b")), derive=False, vocab=live.vocab)
        for f in recorded:
            assert replay.apply(f) == []  # never raised twice
        for fold in (live, replay):
            assert [e.kind for e in fold.log.recent].count("tenth") == 1
            assert fold.judgments.views(3 * 10**9)["tenth"] == ToyView(18, 1)
    finally:
        registry.unregister("tenth")
