"""Small widgets, each named for what it shows. They hold plain data and redraw only
when that data changed (STYLE.md: drawing cost)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.dom import DOMNode
from textual.events import Click
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tokmon.textsafe import clean_text, visible

BLOCKS = " ▁▂▃▄▅▆▇█"


def spark_rows(
    values: Sequence[float | None], width: int, height: int, lo: float, hi: float
) -> list[str]:
    """Rows of block characters (top row first); None is a gap, never a zero."""
    vals = list(values)[-width:] if width > 0 else []
    pad = width - len(vals)
    levels = height * 8
    span = hi - lo
    rows = [[" "] * width for _ in range(height)]
    for i, v in enumerate(vals):
        if v is None:
            continue
        frac = 0.0 if span <= 0 else (v - lo) / span
        lvl = max(1, min(levels, round(frac * levels)))  # a value is never invisible
        col = pad + i
        for r in range(height):
            fill = lvl - (height - 1 - r) * 8
            rows[r][col] = BLOCKS[max(0, min(8, fill))]
    return ["".join(r) for r in rows]


def _clip(text: str, width: int) -> str:
    """Text in `width` columns, marked where cut (never cut silently mid-word)."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


class Sparkline(Widget):
    """A sparkline drawn one colour per row: a handful of bytes per row instead of a
    colour code per cell (the stock Sparkline's cost over SSH)."""

    COMPONENT_CLASSES = {"spark--bar", "spark--warn", "spark--scale"}
    DEFAULT_CSS = """
    Sparkline { height: 2; width: 1fr; }
    Sparkline > .spark--bar { color: $primary; }
    Sparkline > .spark--warn { color: $error; }
    Sparkline > .spark--scale { color: $foreground-muted; }
    """

    values: reactive[tuple[float | None, ...]] = reactive((), layout=False)
    """The series, oldest first; only the last ``width`` points are drawn."""
    fixed: reactive[tuple[float, float] | None] = reactive(None)
    """A fixed (lo, hi) range, e.g. (0, 100) for percentages; None auto-scales from 0."""

    def __init__(
        self, *, warn: bool = False, id: str | None = None, unit: str = "", floor: float = 0.0
    ) -> None:
        super().__init__(id=id)
        self.warn = warn
        self.unit = unit  # shown with the scale: "%", " ms"
        self.floor = floor  # an auto scale's top is never below this (errors: 5%)

    def scale(self) -> tuple[float, float]:
        if self.fixed is not None:
            return self.fixed
        shown = [v for v in self.values[-self.size.width :] if v is not None]
        return 0.0, max(max(shown) if shown else 1.0, self.floor) or 1.0

    def render_line(self, y: int) -> Strip:
        w = self.size.width
        h = self.size.height
        lo, hi = self.scale()
        rows = spark_rows(self.values, w, h, lo, hi)
        if y >= len(rows):
            return Strip.blank(w)
        style = self.get_component_rich_style("spark--warn" if self.warn else "spark--bar")
        # Every chart says its range: its top at the left of the top row (and, on a
        # chart two rows or more high, its bottom at the left of the bottom row), so a
        # full chart is never mistaken for a large value.
        tag = ""
        if y == 0:
            tag = f"{compact(hi)}{self.unit}┤"
        elif y == h - 1:
            tag = f"{compact(lo)}{self.unit}┤"
        if tag and w > len(tag) + 8:
            scale_style = self.get_component_rich_style("spark--scale")
            # Blank cells take the bar's style too: one run of one style per row.
            return Strip([Segment(tag, scale_style), Segment(rows[y][len(tag) :], style)], w)
        return Strip([Segment(rows[y], style)], w)


def compact(v: float) -> str:
    """A scale's bound in a few characters: 0, 8.5, 85, 1.2k, 16k, 2.3M."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2g}M" if a < 1e7 else f"{v / 1e6:.0f}M"
    if a >= 1e3:
        return f"{v / 1e3:.2g}k" if a < 1e4 else f"{v / 1e3:.0f}k"
    if a >= 10 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2g}"


class MetricLabel(Static):
    """The figures beside a sparkline: name, current value, window p50/p95."""

    DEFAULT_CSS = """
    MetricLabel { width: 30; height: 2; padding: 0 1 0 0; text-wrap: nowrap; text-overflow: ellipsis; }
    """


class MetricSpark(Widget):
    """A labelled sparkline row."""

    DEFAULT_CSS = """
    MetricSpark { layout: horizontal; height: 2; }
    """

    def __init__(
        self,
        key: str,
        title: str,
        *,
        fixed: tuple[float, float] | None = None,
        warn: bool = False,
        unit: str = "",
        floor: float = 0.0,
    ) -> None:
        super().__init__(id=f"spark-{key}")
        self.key = key
        self.title = title
        self.label = MetricLabel()
        self.spark = Sparkline(warn=warn, unit=unit, floor=floor)
        self.spark.fixed = fixed
        self._label_text: tuple[str, str] | None = None

    def compose(self):  # type: ignore[no-untyped-def]
        yield self.label
        yield self.spark

    def show(self, values: tuple[float | None, ...], line1: str, line2: str) -> None:
        if values != self.spark.values:
            self.spark.values = values
        if (line1, line2) != self._label_text:
            self._label_text = (line1, line2)
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f"{self.title:<11}", style="bold")
            t.append(clean_text(line1, keep_newlines=False))
            if line2:
                t.append("\n" + clean_text(line2, keep_newlines=False), style="dim")
            self.label.update(drawable(t))


class MarkerRow(Widget):
    """Where the arm switched (│), a marker was added (◆), an alert or stall fired (!), on
    the sparklines' time axis, with the axis span at the right."""

    COMPONENT_CLASSES = {"marker--arm", "marker--note", "marker--alert", "marker--axis"}
    DEFAULT_CSS = """
    MarkerRow { height: 1; width: 1fr; }
    MarkerRow > .marker--arm { color: $accent; }
    MarkerRow > .marker--note { color: $secondary; }
    MarkerRow > .marker--alert { color: $error; }
    MarkerRow > .marker--axis { color: $foreground-muted; }
    """

    marks: reactive[tuple[tuple[str, ...], ...]] = reactive(())
    axis: reactive[str] = reactive("")
    offset_cols: int = 30

    def render_line(self, y: int) -> Strip:
        w = self.size.width
        cols = max(0, w - self.offset_cols)
        marks = list(self.marks)[-cols:]
        pad = cols - len(marks)
        axis_style = self.get_component_rich_style("marker--axis")
        segs = [
            Segment(
                _clip(visible(self.axis), self.offset_cols - 1).ljust(self.offset_cols), axis_style
            ),
            Segment(" " * pad, axis_style),
        ]
        styles = {
            "arm": (self.get_component_rich_style("marker--arm"), "│"),
            "marker": (self.get_component_rich_style("marker--note"), "◆"),
            "alert": (self.get_component_rich_style("marker--alert"), "!"),
            "stall": (self.get_component_rich_style("marker--alert"), "!"),
        }
        run_style: Style | None = None
        run = ""
        for m in marks:
            st, ch = axis_style, "·" if False else " "
            for kind in ("alert", "stall", "arm", "marker"):
                if kind in m:
                    st, ch = styles[kind]
                    break
            if st is run_style:
                run += ch
            else:
                if run:
                    segs.append(Segment(run, run_style))
                run, run_style = ch, st
        if run:
            segs.append(Segment(run, run_style))
        return Strip(segs, w)


def drawable(text: Text) -> Text:
    """``text`` as the dashboard may draw it: every control character made visible, the
    spans unmoved (``textsafe.visible``). Every line a panel or a label draws passes
    here: the one gate at the drawing boundary."""
    plain = text.plain
    safe = visible(plain)
    if safe == plain:
        return text
    out = text.copy()
    out.plain = safe
    return out


class InfoPanel(Static):
    """A block of text that is only re-rendered when its content changed (and drawn
    through ``drawable``)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._last: str | None = None

    def show(self, text: Text) -> None:
        key = text.plain + "|" + "".join(str(s.style) for s in text.spans)
        if key != self._last:
            self._last = key
            self.update(drawable(text))


class KeyBar(Widget):
    """The footer: each key with its label, as many as the width holds, in the order the
    app lists them (help and quit first). What does not fit is named as a count and is
    in `?`, so that no key is shown without its label and nothing is cut mid-word
    (Textual's Footer scrolls sideways and cut `space play/paus` at 80 columns)."""

    COMPONENT_CLASSES = {"keybar--key", "keybar--label", "keybar--more"}
    DEFAULT_CSS = """
    KeyBar { height: 1; width: 100%; background: $footer-background; }
    KeyBar > .keybar--key { color: $footer-key-foreground; text-style: bold; }
    KeyBar > .keybar--label { color: $footer-description-foreground; }
    KeyBar > .keybar--more { color: $foreground-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spans: list[tuple[int, int, str, DOMNode]] = []  # x0, x1, action, namespace

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _s: self.refresh())

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def keys(self) -> list[tuple[str, str, str, DOMNode]]:
        """(key shown, label, action, namespace) of each key the screen has now, once per
        action; the command palette last."""
        seen: set[str] = set()
        out: list[tuple[str, str, str, DOMNode]] = []
        active = self.screen.active_bindings
        for ns, binding, enabled, _tip in active.values():
            if binding.show and enabled and binding.action not in seen:
                seen.add(binding.action)
                out.append(
                    (self.app.get_key_display(binding), binding.description, binding.action, ns)
                )
        # the palette's binding is not shown as such (Textual's Footer adds it apart)
        pal = active.get(self.app.COMMAND_PALETTE_BINDING)
        if self.app.ENABLE_COMMAND_PALETTE and pal is not None and pal.enabled:
            out.append(
                (self.app.get_key_display(pal.binding), "palette", pal.binding.action, pal.node)
            )
        return out

    def render(self) -> Text:
        width = self.size.width
        keys = self.keys()
        key_style = self.get_component_rich_style("keybar--key")
        label_style = self.get_component_rich_style("keybar--label")
        text = Text(no_wrap=True, overflow="crop")
        self._spans = []
        x = 0
        for n, (key, label, action, ns) in enumerate(keys):
            piece = len(key) + 1 + len(label) + 2
            left = len(keys) - n - 1
            # room for the count of what would then be left out (this key among them)
            room = width - x - (len(f" +{left + 1} keys in ?") if left else 0)
            if piece > room:
                more = len(keys) - n
                text.append(f" +{more} keys in ?", self.get_component_rich_style("keybar--more"))
                break
            text.append(f" {key}", key_style)
            text.append(f" {label} ", label_style)
            self._spans.append((x, x + piece, action, ns))
            x += piece
        return text

    async def on_click(self, event: Click) -> None:
        for x0, x1, action, ns in self._spans:
            if x0 <= event.x < x1:
                await self.app.run_action(action, ns)
                return
