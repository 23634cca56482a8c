"""The frozen state a source hands to a consumer (dashboard, headless printer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tokmon.model.contract.history import Point
from tokmon.model.contract.views import (
    ArmCost,
    ComparisonView,
    LadderView,
    Price,
    ProbeView,
    RestartView,
)
from tokmon.model.data.commands import Command
from tokmon.model.data.records import EngineStatus, Event
from tokmon.model.judge.alerts import Trend
from tokmon.model.judge.capacity import CapacityView
from tokmon.model.judge.crossover import Crossover
from tokmon.model.judge.quality import Accuracy, QualityDiff
from tokmon.model.judge.slo import SloVerdict
from tokmon.model.judge.storage import StorageView
from tokmon.model.judge.timesplit import SpeedupCauses, TimeSplit
from tokmon.model.statistics.stats import WindowStats


@dataclass(frozen=True, slots=True)
class ArmView:
    name: str
    ok: int
    failed: int
    window: WindowStats | None


@dataclass(frozen=True)
class Snapshot:
    t: int
    elapsed_s: float
    target: str
    model: str
    arm: str
    arms: tuple[str, ...]
    mode: str
    level: float
    paused: bool
    sent: int
    ok: int
    failed: int
    in_flight: int
    warming_up: bool
    recording: str | None
    window: WindowStats | None
    arm_views: tuple[ArmView, ...]
    recent: tuple[Point, ...]
    whole: tuple[Point, ...]
    events: tuple[Event, ...]
    comparison: ComparisonView | None
    probes: ProbeView = field(default_factory=ProbeView)
    done: bool = False
    loop_lag_ms: float = 0.0
    send_lag_ms: float = 0.0
    replay: dict[str, Any] | None = None  # position/speed when the source is a recording
    notice: str = ""
    insecure: bool = False
    output_check: dict[str, Any] | None = None
    down: dict[str, float] = field(default_factory=dict)  # arm -> seconds its server is down
    trends: dict[str, Trend] = field(default_factory=dict)  # %/h with its interval
    costs: dict[str, ArmCost] = field(default_factory=dict)  # per arm, live
    price: Price | None = None  # what the costs are based on (--gpu-hour-price)
    ladder: LadderView | None = None  # current step, progress and the steps so far
    restarting: RestartView | None = None  # a managed server restarting (arms take turns)
    workers: tuple[EngineStatus, ...] = ()  # each engine's latest status, by worker
    time_split: tuple[TimeSplit, ...] = ()  # where each arm's time goes
    causes: SpeedupCauses | None = None  # the A/B decode speed-up as its causes
    causes_by_kind: tuple[SpeedupCauses, ...] = ()  # the same per task kind (2+ kinds)
    quality: tuple[Accuracy, ...] = ()  # each arm's quality probes, answers checked
    quality_diff: QualityDiff | None = None  # the second arm's accuracy minus the first's
    capacity: tuple[CapacityView, ...] = ()  # --find-capacity: each arm's search so far
    # with --slo: each arm's share of its counted requests that met every SLO (whole run),
    # its interval and its verdict against the target
    slo: tuple[SloVerdict, ...] = ()
    crossovers: tuple[Crossover, ...] = ()  # where the A/B speed-up stops paying, by load
    # each registered judgment's view (``model/contract/registry.py``), by its name
    judgments: dict[str, Any] = field(default_factory=dict)
    scenario: str = ""  # --scenario: the kind of service the run stands for
    wall_start: float = 0.0  # the run's start, epoch seconds (the clock on the time axis)

    def judgment(self, name: str) -> Any:
        """A registered judgment's view (None: it has nothing to show yet)."""
        return self.judgments.get(name)

    @property
    def storage(self) -> StorageView:
        """tokmon's memory, the recording and the disk left (the ``storage`` judgment)."""
        v = self.judgments.get("storage")
        return v if isinstance(v, StorageView) else StorageView()

    @property
    def t_start(self) -> int:
        """When the run began, on the clock of ``t`` and of the events."""
        return self.t - int(self.elapsed_s * 1e9)


class Source(Protocol):
    """What the dashboard draws from: a live session, a recording replay, or a fake."""

    def snapshot(self) -> Snapshot | None: ...

    def command(self, cmd: Command) -> str | None:
        """Apply a user command; returns a short notice for the user, or None."""
        ...

    def close(self) -> None: ...

    @property
    def commands(self) -> frozenset[str]: ...
