"""The room a long run needs: tokmon's own memory, the recording's size and the disk left
beside it, and a warning before the disk fills.

A reducer of the fold: it takes the host probe's samples (tokmon's memory, the
recording's size, the disk free) and keeps only the last ten minutes of the
recording's size, so its memory does not grow with the run. The warning is an event,
made where the figure is made, once per crossing (and again only after the room came
back), so a days-long soak does not fill its own event log with it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from tokmon.model.contract.registry import Block, Context, Judgment, Raised, register
from tokmon.model.data.samples import HostSample

GROWTH_WINDOW_NS = 600_000_000_000  # the recording's growth is read over ten minutes
GROWTH_MIN_NS = 30_000_000_000  # and only once it has grown for half a minute
WARN_HOURS = 2.0  # warn when the disk fills within this many hours at the current growth
WARN_FREE_BYTES = 1 << 30  # or when less than this is left, whatever the growth


@dataclass(frozen=True, slots=True)
class StorageView:
    """The latest figures (None: not measured; no recording, no record size)."""

    rss_mib: float | None = None  # tokmon's processes together
    rss_max_mib: float | None = None  # the most they held at any sample
    record_bytes: int | None = None
    disk_free_bytes: int | None = None
    growth_bytes_per_s: float | None = None  # the recording's, over the last ten minutes
    hours_left: float | None = None  # disk free / growth
    warning: str = ""  # set while the disk is about to fill


def human_bytes(n: float) -> str:
    """1.2 GB, 340 MB, 12 kB: decimal units, as `df -H` and the recording size in docs."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


@register
class StorageReducer(Judgment):
    """A registered judgment (``model/contract/registry.py``), named ``storage``: its view
    is the snapshot's ``storage``, its block the summary's (figures only: the closing text
    says them in its own line), its warning a ``disk`` event."""

    name = "storage"

    def __init__(self, ctx: Context | None = None) -> None:
        super().__init__(Context(None, ()) if ctx is None else ctx)
        self.rss: float | None = None
        self.rss_max: float | None = None
        self.free: int | None = None
        self.size: int | None = None
        self.sizes: deque[tuple[int, int]] = deque()  # (t, record bytes), last ten minutes
        self.warned = False
        self.pending: list[tuple[str, dict[str, Any]]] = []  # warnings not yet said

    def sample(self, t: int, host: Any) -> None:
        if not isinstance(host, HostSample):
            return  # (the host probe's samples only)
        rss = host.self_rss_mib
        if rss is not None:
            self.rss = rss
            self.rss_max = rss if self.rss_max is None else max(self.rss_max, rss)
        if host.disk_free_bytes is not None:
            self.free = int(host.disk_free_bytes)
        size = host.record_bytes
        if size is None:
            return
        if self.sizes and (size < self.sizes[-1][1] or t < self.sizes[-1][0]):
            self.sizes.clear()  # a new file (or a clock that went back): growth anew
        self.size = int(size)
        self.sizes.append((t, int(size)))
        while self.sizes and t - self.sizes[0][0] > GROWTH_WINDOW_NS:
            self.sizes.popleft()
        self._check()

    def growth(self) -> float | None:
        if len(self.sizes) < 2:
            return None
        (t0, b0), (t1, b1) = self.sizes[0], self.sizes[-1]
        return (b1 - b0) / ((t1 - t0) / 1e9) if t1 - t0 >= GROWTH_MIN_NS else None

    def hours_left(self) -> float | None:
        g = self.growth()
        if g is None or g <= 0 or self.free is None:
            return None
        return self.free / g / 3600

    def warning(self) -> str:
        if self.free is None or self.size is None:
            return ""
        left = self.hours_left()
        if self.free < WARN_FREE_BYTES or (left is not None and left < WARN_HOURS):
            when = f", full in about {left:.1f} h" if left is not None else ""
            rate = self.growth()
            at = f" at {human_bytes(rate)}/s" if rate and left is not None else ""
            return f"disk: {human_bytes(self.free)} left beside the recording{when}{at}"
        return ""

    def _check(self) -> None:
        text = self.warning()
        if text and not self.warned:
            data = {"free_bytes": self.free, "hours_left": self.hours_left()}
            self.pending.append((text, data))
        self.warned = bool(text)

    def take_warnings(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.pending = self.pending, []
        return out

    def derive(self, now: int) -> list[Raised]:
        return [("disk", text, data) for text, data in self.take_warnings()]  # once each

    def view(self, now: int = 0, reads: dict[str, Any] | None = None) -> StorageView:
        return StorageView(
            rss_mib=self.rss,
            rss_max_mib=self.rss_max,
            record_bytes=self.size,
            disk_free_bytes=self.free,
            growth_bytes_per_s=self.growth(),
            hours_left=self.hours_left(),
            warning=self.warning(),
        )

    def to_json(self) -> dict[str, Any]:
        g = self.growth()
        return {
            "rss_mib_last": None if self.rss is None else round(self.rss, 1),
            "rss_mib_max": None if self.rss_max is None else round(self.rss_max, 1),
            "record_bytes": self.size,
            "record_growth_bytes_per_s": None if g is None else round(g, 1),
            "disk_free_bytes": self.free,
        }

    def block(self, t_end: int, reads: dict[str, Any]) -> Block:
        return Block(self.name, self.to_json())
