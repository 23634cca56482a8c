"""The dashboard: a Textual app fed by a *source* (live session, replay, or a fake).

It redraws on its own clock, at most ``fps`` times a second, from the latest frozen
snapshot, and skips the frame when the snapshot has not changed. Keys become commands
to the source; the app never measures anything and never blocks the engine.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label

from tokmon.model.history import Point, merge_all
from tokmon.model.records import EngineStatus
from tokmon.model.snapshot import Snapshot, Source
from tokmon.model.words import hms
from tokmon.report.split_text import arm_lines, causes_parts, wrap
from tokmon.report.summary_text import fmt_ms
from tokmon.textsafe import clean_text
from tokmon.ui.header import LAG_HOT_MS, header_text
from tokmon.ui.themes import DEFAULT, ThemeError, builtin_themes, load_theme_file
from tokmon.ui.widgets import InfoPanel, KeyBar, MarkerRow, MetricSpark

# key, title, fixed range, warn colour, unit of the scale, floor of an auto scale
SPARKS = (
    ("tok", "tokens/s", None, False, "", 0.0),
    ("decode", "decode", None, False, "", 0.0),
    ("ttft", "TTFT", None, False, "ms", 0.0),
    ("accept", "accept", (0.0, 100.0), False, "%", 0.0),
    # the share of requests that failed in the window (not a count: one error in a
    # quiet minute must not fill the chart); its scale is at least 0-5%
    ("errors", "errors", None, True, "%", 5.0),
    ("gpu", "GPU", (0.0, 100.0), False, "%", 0.0),
    ("kv", "server", (0.0, 100.0), False, "%", 0.0),
)
# rows the panels below the charts keep at least (arms, comparison, events)
BOTTOM_MIN = 6  # rows under the charts at least: a rule, a title and a few lines
CHART_MAX = 16  # rows a chart grows to at most (a taller one shows no more)
EVENTS_WANTED = 8  # the latest events the bottom is sized to show (side by side)
WIDE = 180  # columns from which the time split has a panel beside the comparison

HELP = """\
 s       switch arm (A ⇄ B, or cycle)
 p       pause / resume sending
 + / -   more / less load (streams or rate)
 m       add a marker (with a note)
 r       start / stop recording
 z       time view: recent → last hour → last day → whole run (the
         hour and the day in clock time)
 b       panels: fold the charts away, the comparison and events whole
 w       where the time goes: each arm's TTFT in parts (network, front
         end, queue, prefill), its TPOT split, TPOT by batch, and the
         A/B speed-up as tokens per step × step speed
 o       quality pass: 50 questions with known answers per arm, and
         (two arms) the greedy outputs of every arm compared
 ?       this help
 q       quit (drains in-flight requests)
 ctrl+p  command palette: the same actions, and the themes
 replay  space play/pause · ← → seek 10 s · [ ] previous/next event
         < > slower/faster (1×–100×) · e end

 Charts share one time axis: a column per second (recent), or the whole
 run compressed to the width; the axis line names any other scale. Each
 says its range at its left: top ┤ and bottom ┤. Marks under them:
 │ arm switch, ◆ marker, ! alert or stall.
 Figures are windowed (10 s); a gap is no data, never a zero. The arms'
 ok and err are counts over the whole run, their other columns the window.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: auto; max-width: 100%; height: auto; max-height: 100%; border: round $primary; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text("tokmon keys", style="bold"))
            yield Label(Text(HELP))

    def action_dismiss(self, result: Any = None) -> Any:  # type: ignore[override]
        self.dismiss(None)


class ConfirmQuit(ModalScreen[bool]):
    BINDINGS = [Binding("escape,n", "no", "no"), Binding("y,q", "yes", "yes")]
    DEFAULT_CSS = """
    ConfirmQuit { align: center middle; }
    ConfirmQuit > Vertical { width: 64; max-width: 100%; height: auto; border: round $warning; background: $surface; padding: 0 1; }
    ConfirmQuit Label { width: 100%; }
    ConfirmQuit Horizontal { height: auto; }
    """

    def __init__(self, in_flight: int) -> None:
        super().__init__()
        self.in_flight = in_flight

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                f"{self.in_flight} requests are in flight. Stop sending, let them "
                "finish, and quit?  (y/n)"
            )
            with Horizontal():
                yield Button("Quit", id="yes", variant="warning")
                yield Button("Keep running", id="no")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class MarkerScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    MarkerScreen { align: center middle; }
    MarkerScreen > Vertical { width: 64; max-width: 100%; height: auto; border: round $secondary; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Marker note (enter to add, escape to cancel):")
            yield Input(placeholder="e.g. restarted vLLM with --max-num-seqs 64", id="note")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or "marker")

    def action_cancel(self) -> None:
        self.dismiss(None)


class Dashboard(Screen[None]):
    """The rows are shared out each frame: first the lines the comparison panel needs to
    show every figure whole, then the charts (1 row each at least, up to 6), and the rest
    to the events. Where even one-row charts leave too little, the comparison keeps what
    matters most (see ``fit_blocks``) and says which key shows the rest: ``b`` folds the
    charts away and gives the panels the whole screen."""

    need = 0  # lines the comparison would take whole
    panels = False  # `b`: the charts folded away
    has_split = False  # the run has server figures to split the time by
    # charts with no source (no GPU, no acceptance figure): one line each saying why,
    # their rows given to the others
    dead: frozenset[str] = frozenset()
    _shape: tuple[Any, ...] = ()

    def on_resize(self, event: Any) -> None:
        self._shape = ()
        self.lay_out()
        # what fits depends on the size: draw again
        self.app.last_snapshot = None  # type: ignore[attr-defined]

    def narrow(self) -> bool:
        # Narrow terminals: the comparison and the events one above the other, so their
        # lines are whole (side by side at 80 columns each had ~38 characters).
        return self.size.width < 110

    def wide(self) -> bool:
        # Wide terminals: where the time goes in a panel of its own, beside the
        # comparison (each of the three panels keeps ~60 characters), once the server
        # has said something to split the time by.
        return self.size.width >= WIDE and self.has_split and not self.app.split  # type: ignore[attr-defined]

    def _free(self) -> int:
        events = 3 if self.narrow() else 0  # at least a title and the last event
        below = max(BOTTOM_MIN, self.need + 1 + events)
        return self.size.height - 4 - below - len(self.dead)

    def chart_rows(self) -> int:
        """Rows of each chart that has a source: what the panels below do not need,
        shared out (a dead chart takes one)."""
        if self.panels:
            return 0
        live = max(1, len(SPARKS) - len(self.dead))
        return max(1, min(CHART_MAX, self._free() // live))

    def heights(self) -> dict[str, int]:
        """Each chart's rows: the share, and one more for the first charts while rows are
        left over (a blank row under the panels is a row a chart could have used)."""
        keys = [k for k, *_ in SPARKS]
        if self.panels:
            return dict.fromkeys(keys, 0)
        rows = self.chart_rows()
        live = [k for k in keys if k not in self.dead]
        left = max(0, self._free() - rows * len(live)) if rows < CHART_MAX else 0
        out = {}
        for k in keys:
            out[k] = 1 if k in self.dead else rows + (1 if left > 0 else 0)
            if k not in self.dead and left > 0:
                left -= 1
        return out

    def below(self) -> int:
        """Rows under the charts for the comparison and the events (rules included)."""
        used = 3 + (0 if self.panels else sum(self.heights().values()) + 1)
        if self.query_one("#notice").display:
            used += 1
        return self.size.height - used  # the header, the charts and marks, the footer

    def room(self) -> int:
        """Lines the comparison panel has, below its rule."""
        return max(1, self.below() - 1 - (3 if self.narrow() else 0))

    def events_room(self, compare_lines: int) -> int:
        """Events that fit under the events' rule and title (computed, as the widgets'
        sizes are only known after the frame that sets them)."""
        left = self.below() - (compare_lines + 1 if self.narrow() else 0)
        return max(1, left - 2)

    def lay_out(self, need: int | None = None) -> None:
        if need is not None:
            self.need = need
        w = self.size.width
        rows = self.chart_rows()
        narrow = self.narrow()
        label_w = 34 if w < 120 else 38 if w < 180 else 46
        wide = self.wide()
        hs = self.heights()
        shape = (tuple(hs.values()), label_w, int(narrow), int(self.panels), int(wide))
        if shape == self._shape:
            return  # nothing moves: no relayout
        self._shape = shape
        self.set_class(rows == 1, "compact")
        self.query_one("#charts").display = not self.panels
        for ms in self.query(MetricSpark):
            dead = ms.key in self.dead
            h = max(1, hs.get(ms.key, rows))
            ms.styles.height = h
            ms.spark.styles.height = h
            ms.spark.display = not dead
            ms.label.styles.height = min(h, 2)
            ms.label.styles.width = "1fr" if dead else label_w
        self.query_one("#marks", MarkerRow).offset_cols = label_w
        bottom = self.query_one("#bottom")
        bottom.styles.layout = "vertical" if narrow else "horizontal"
        compare, events = self.query_one("#compare"), self.query_one("#events")
        compare.styles.width = events.styles.width = "1fr" if not narrow else "100%"
        side = self.query_one("#split")
        side.display = wide
        side.styles.width = "1fr"
        compare.styles.height = "auto" if narrow else "1fr"
        events.styles.height = "1fr"
        events.styles.min_height = 3 if narrow else None

    def compose(self) -> ComposeResult:
        yield InfoPanel(id="header")
        with Vertical(id="charts"):
            for key, title, fixed, warn, unit, floor in SPARKS:
                yield MetricSpark(key, title, fixed=fixed, warn=warn, unit=unit, floor=floor)
            yield MarkerRow(id="marks")
        with Horizontal(id="bottom"):
            yield InfoPanel(id="compare")
            yield InfoPanel(id="split")
            yield InfoPanel(id="events")
        yield Label(id="notice")
        yield KeyBar(id="footer")


class DashboardApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "tokmon"
    # The footer shows keys in this order: help and quit first, so that they stay
    # visible at 80 columns.
    BINDINGS = [
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit_tokmon", "quit"),
        Binding("s", "switch_arm", "arm"),
        Binding("p", "pause", "pause"),
        Binding("plus,equals_sign", "level(1)", "+load", key_display="+"),
        Binding("minus", "level(-1)", "-load", key_display="-"),
        Binding("m", "marker", "mark"),
        Binding("r", "record", "rec"),
        Binding("z", "zoom", "view"),
        Binding("b", "panels", "panels"),
        Binding("w", "time_split", "split"),
        Binding("o", "check_outputs", "check"),
        Binding("space", "play", "play/pause"),
        Binding("left", "seek(-10)", "-10s", key_display="←"),
        Binding("right", "seek(10)", "+10s", key_display="→"),
        Binding("left_square_bracket", "jump(-1)", "prev event", key_display="["),
        Binding("right_square_bracket", "jump(1)", "next event", key_display="]"),
        Binding("less_than_sign", "speed(-1)", "slower", key_display="<"),
        Binding("greater_than_sign", "speed(1)", "faster", key_display=">"),
        Binding("e", "end", "end"),
        # One rule for an interrupt, as in a headless run: the first Ctrl-C drains the
        # in-flight requests, a second stops now (they end as cancelled), exit 130.
        # Ctrl-Q (Textual's own quit) is the same interrupt, never a silent abort.
        Binding("ctrl+c,ctrl+q", "interrupt", show=False, priority=True),
    ]
    # Each key maps to a source command; keys whose command the source lacks are hidden.
    ACTION_COMMANDS = {
        "switch_arm": "switch",
        "pause": "pause",
        "level": "level",
        "marker": "marker",
        "record": "record",
        "check_outputs": "check",
        "play": "play",
        "seek": "seek",
        "jump": "jump",
        "speed": "speed",
        "end": "end",
    }

    def __init__(self, source: Source, *, theme: str | None = None, fps: float = 4.0) -> None:
        super().__init__()
        self.source = source
        self.fps = max(0.5, min(fps, 30.0))
        self.view = "recent"
        self.split = False  # `w`: where the time goes, in place of the comparison
        self.last_snapshot: Snapshot | None = None
        self.last_view = ""
        self.quitting = False
        self.interrupted = 0  # Ctrl-C presses: the run's exit code is 130 after one
        self.notice = ""
        self._theme_request = theme
        self._theme_errors: list[str] = []
        self.frames = 0  # frames actually drawn (skipped ones are not counted)
        self._notice: tuple[str, SeverityLevel, float] | None = None  # text, kind, until

    # ------------------------------------------------------------------ setup
    def on_mount(self) -> None:
        themes, errors = builtin_themes()
        for t in themes:
            self.register_theme(t)
        self._theme_errors = errors
        want = self._theme_request or DEFAULT
        if want.endswith(".toml"):
            try:
                t = load_theme_file(__import__("pathlib").Path(want))
                self.register_theme(t)
                want = t.name
            except ThemeError as e:
                self._theme_errors.append(str(e))
                want = DEFAULT
        if want not in self.available_themes:
            self._theme_errors.append(f"unknown theme {want!r}: using {DEFAULT}")
            want = DEFAULT if DEFAULT in self.available_themes else "textual-dark"
        self.theme = want
        for msg in self._theme_errors:
            self.notify(msg, severity="warning", timeout=8)
        self.push_screen(Dashboard())
        self.call_after_refresh(self._show_notice)
        self.call_after_refresh(self.draw)
        self.set_interval(1.0 / self.fps, self.draw)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Switch arm", "Send new requests to the next arm (s)", self.action_switch_arm
        )
        yield SystemCommand("Pause / resume", "Stop or restart sending (p)", self.action_pause)
        yield SystemCommand(
            "More load", "One step more concurrency or rate (+)", lambda: self.action_level(1)
        )
        yield SystemCommand(
            "Less load", "One step less concurrency or rate (-)", lambda: self.action_level(-1)
        )
        yield SystemCommand("Add marker", "Mark this moment with a note (m)", self.action_marker)
        yield SystemCommand("Recording on / off", "Start or stop recording (r)", self.action_record)
        yield SystemCommand(
            "Time view", "Recent minutes, the last hour, the last day or the whole run (z)",
            self.action_zoom,
        )  # fmt: skip

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        cmd = self.ACTION_COMMANDS.get(action)
        return cmd is None or cmd in self.source.commands

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        # A notice takes a line of its own above the footer for a few seconds, instead of
        # a toast laid over the comparison and the events (which it used to hide).
        text = clean_text(f"{title}: {message}" if title else str(message), keep_newlines=False)
        self._notice = (text, severity, time.monotonic() + (5.0 if timeout is None else timeout))
        self._show_notice()

    def _show_notice(self) -> None:
        dash = next((s for s in self.screen_stack if isinstance(s, Dashboard)), None)
        if dash is None:
            return  # shown once the dashboard is up (a theme warning at start)
        line = dash.query_one("#notice", Label)
        n = self._notice
        if n is not None and time.monotonic() >= n[2]:
            n = self._notice = None
        line.display = n is not None
        if n is not None:
            line.update(Text(n[0]))
            line.set_classes(n[1])

    # ------------------------------------------------------------------ actions
    def action_play(self) -> None:
        self._cmd("play")

    def action_seek(self, seconds: int) -> None:
        self._cmd("seek", seconds)

    def action_jump(self, direction: int) -> None:
        self._cmd("jump", direction)

    def action_speed(self, step: int) -> None:
        self._cmd("speed", step)

    def action_end(self) -> None:
        self._cmd("end")

    def _cmd(self, name: str, *args: Any) -> None:
        if name not in self.source.commands:
            self.notify(f"not available here: {name}", timeout=3)
            return
        try:
            msg = self.source.command(name, *args)
        except Exception as e:  # a failing command is reported, never fatal
            self.notify(f"{name} failed: {e}", severity="error")
            return
        if msg:
            self.notice = msg
            self.notify(msg, timeout=3)

    def action_switch_arm(self) -> None:
        self._cmd("switch")

    def action_pause(self) -> None:
        self._cmd("pause")

    def action_level(self, sign: int) -> None:
        self._cmd("level", sign)

    def action_check_outputs(self) -> None:
        self._cmd("check")

    def action_record(self) -> None:
        self._cmd("record")

    def action_marker(self) -> None:
        def done(note: str | None) -> None:
            if note is not None:
                self._cmd("marker", note)

        self.push_screen(MarkerScreen(), done)

    def action_zoom(self) -> None:
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        self.last_snapshot = None  # redraw now
        self.draw()

    def action_time_split(self) -> None:
        self.split = not self.split
        dash = self.get_screen_dashboard()
        if dash is not None:
            dash._shape = ()  # the side panel comes or goes
        self.last_snapshot = None  # redraw now
        self.draw()

    def action_panels(self) -> None:
        dash = self.get_screen_dashboard()
        if dash is not None:
            dash.panels = not dash.panels
            dash.lay_out()
            self.last_snapshot = None  # redraw now
            self.draw()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_interrupt(self) -> None:
        self.interrupted += 1
        snap = self.source.snapshot()
        live = "stop" in self.source.commands and not (snap is not None and snap.done)
        if not live:
            self.exit()
            return
        if self.interrupted == 1 and snap is not None and snap.in_flight:
            self.quitting = True
            self.source.command("stop")
            self.notify(
                "stopping: draining in-flight requests (Ctrl-C again: stop now)", timeout=10
            )
            return
        self.source.command("stop", True)
        self.exit()

    def action_quit_tokmon(self) -> None:
        snap = self.source.snapshot()
        if (
            self.quitting
            or snap is None
            or snap.done
            or snap.in_flight == 0
            or "stop" not in self.source.commands
        ):
            if "stop" in self.source.commands and not (snap is not None and snap.done):
                self.source.command("stop", True)
            self.exit()
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.quitting = True
                self.source.command("stop")
                self.notify("stopping: waiting for in-flight requests (q again: now)", timeout=10)

        self.push_screen(ConfirmQuit(snap.in_flight), done)

    # ------------------------------------------------------------------ drawing
    def draw(self) -> None:
        if self._notice is not None and time.monotonic() >= self._notice[2]:
            self._show_notice()  # its time is up: the line goes
        snap = self.source.snapshot()
        if self.quitting and (snap is None or snap.done):
            self.exit()
            return
        if snap is None or (snap is self.last_snapshot and self.view == self.last_view):
            return  # nothing changed: no frame
        self.last_snapshot = snap
        self.last_view = self.view
        try:
            screen = (
                self.screen if isinstance(self.screen, Dashboard) else self.get_screen_dashboard()
            )
        except Exception:
            return
        if screen is None:
            return
        self.frames += 1
        with self.batch_update():
            self._draw(screen, snap)

    def get_screen_dashboard(self) -> Dashboard | None:
        for s in self.screen_stack:
            if isinstance(s, Dashboard):
                return s
        return None

    def _series(self, snap: Snapshot, width: int) -> tuple[list[Point], float]:
        """The points to draw, one a column, and the seconds each column stands for."""
        pts = view_points(snap, self.view, width)
        span = pts[0].span if pts else 1.0
        if 0 < len(pts) < width and width > 0:
            # a short run fills the width: each point drawn over as many columns as fit
            # (its marks on the first), so a wide chart is never mostly empty; the axis
            # label says how long is shown
            k = width // len(pts)
            if k >= 2:
                quiet = [dataclasses.replace(p, marks=()) for p in pts]
                return [
                    q for p, blank in zip(pts, quiet, strict=True) for q in (p, *[blank] * (k - 1))
                ], span / k
            return pts, span
        if len(pts) <= width or width <= 0:
            return pts, span
        group = -(-len(pts) // width)
        return [merge_all(pts[i : i + group]) for i in range(0, len(pts), group)], span * group

    def _draw(self, screen: Dashboard, snap: Snapshot) -> None:
        header = screen.query_one("#header", InfoPanel)
        header.show(header_text(snap, screen.size.width))
        charts = list(screen.query(MetricSpark))
        width = max(10, (charts[0].spark.size.width if charts else 60) or 60)
        pts, per_col = self._series(snap, width)
        w = snap.window
        col = {
            "tok": [p.tok_s for p in pts],
            "decode": [p.decode_p50 for p in pts],
            "ttft": [p.ttft_p50 for p in pts],
            "accept": [None if p.acc_rate is None else 100 * p.acc_rate for p in pts],
            "errors": [None if p.err_rate is None else 100 * p.err_rate for p in pts],
            "gpu": [p.gpu_util for p in pts],
            "kv": [p.kv_pct for p in pts],
        }
        labels = self._labels(snap)
        screen.dead = frozenset(
            ch.key
            for ch in charts
            if labels.get(ch.key, ("", ""))[0] == "n/a"
            and all(v is None for v in col.get(ch.key, ()))
        )
        for ch in charts:
            l1, l2 = labels.get(ch.key, ("", ""))
            if ch.key in screen.dead:  # one line: what it would show, and why it cannot
                l1, l2 = f"n/a — {l2}", ""
            ch.show(tuple(col.get(ch.key, ())), l1, l2)
        marks = screen.query_one("#marks", MarkerRow)
        marks.marks = tuple(p.marks for p in pts)
        marks.axis = axis_label(self.view, pts, per_col, snap.wall_start)
        screen.has_split = any(sp.ttft.source or sp.tpot.source for sp in snap.time_split)
        wide = screen.wide()
        panes = 1 if screen.narrow() else 3 if wide else 2
        width = screen.size.width // panes - 2
        blocks = self._compare_blocks(snap, width)
        need = sum(len(b.lines) for b in blocks)
        side = self._split_blocks(snap, width, "where the time goes") if wide else []
        if not screen.narrow():  # side by side: the events and the split want rows too
            need = max(need, min(len(snap.events), EVENTS_WANTED) + 2,
                       sum(len(b.lines) for b in side))  # fmt: skip
        screen.lay_out(need=need)
        compare = fit_blocks(blocks, screen.room(), width)
        screen.query_one("#compare", InfoPanel).show(compare)
        if wide:
            screen.query_one("#split", InfoPanel).show(fit_blocks(side, screen.room(), width))
        # the latest events that fit under the title (the oldest scroll away first)
        room = screen.events_room(len(compare.plain.splitlines()))
        screen.query_one("#events", InfoPanel).show(self._events_text(snap, room))
        _ = w

    def _labels(self, s: Snapshot) -> dict[str, tuple[str, str]]:
        w = s.window
        if w is None:
            return {}
        arms = (
            " · ".join(
                f"{v.name} {v.window.tokens_per_s:,.0f}"
                for v in s.arm_views
                if v.window is not None
            )
            if len(s.arm_views) > 1
            else f"{w.requests_per_s:.2f} req/s"
        )
        err_cls = (
            " ".join(f"{k.replace('http_', '')} {v}" for k, v in sorted(w.errors.items())) or "none"
        )
        acc1, acc2 = "n/a", "no acceptance source"
        if w.acceptance_rate is not None:
            acc1 = f"{w.acceptance_rate:.0%}"
            if w.acceptance_length is not None:
                acc1 += f" · len {w.acceptance_length:.2f}"
            acc2 = f"from {w.acceptance_source}"
        elif w.tokens_per_chunk is not None and w.tokens_per_chunk > 1.05:
            acc1 = f"~{w.tokens_per_chunk:.2f} tok/chunk"
            acc2 = "estimate from chunks"
        pr = s.probes
        gpu1 = "n/a" if pr.gpu_util is None else f"util {pr.gpu_util:.0f}%"
        if pr.gpu_mem_used_gib is not None:
            gpu1 += f" · {pr.gpu_mem_used_gib:.1f} GiB"
        gpu2 = (
            pr.gpu_note or "no GPU probe"
            if pr.gpu_util is None
            else (
                f"{pr.gpu_power_w:.0f} W · {pr.gpu_temp_c or 0:.0f}°C"
                if pr.gpu_power_w is not None
                else ""
            )
        )
        kv1 = "n/a" if pr.kv_pct is None else f"KV {pr.kv_pct:.0f}%"
        if pr.queue is not None:
            kv1 += f" · queue {pr.queue:.0f}"
        kv2 = (
            pr.server_note or "no server metrics"
            if pr.kv_pct is None
            else (f"running {pr.running or 0:.0f} · {pr.engine or ''}")
        )
        if pr.prefix_hit_pct is not None:  # the prefix cache at work (or not)
            kv2 = f"prefix hit {pr.prefix_hit_pct:.0f}% · " + kv2
        out = {
            "tok": (f"{w.tokens_per_s:,.0f} tok/s", arms),
            "decode": (
                f"p50 {_num(w.decode_p50)} tok/s",
                f"TPOT p50 {fmt_ms(w.tpot_p50)} p95 {fmt_ms(w.tpot_p95)}"
                + ("" if w.tpot_cv is None else f" cv {w.tpot_cv:.2f}"),
            ),
            "ttft": (
                f"p50 {fmt_ms(w.ttft_p50)} ms",
                f"p95 {fmt_ms(w.ttft_p95)} p99 {fmt_ms(w.ttft_p99)} ms",
            ),
            "accept": (acc1, acc2),
            # the window's share, then the run's count: "0/13" beside the header's
            # "failed 1" read as a contradiction until each said what it covers
            "errors": (
                f"{w.failed}/{w.ended} ({(w.failed / w.ended if w.ended else 0):.1%})"
                f" last {w.width_s:.0f} s",
                err_cls
                + (f" · stalls {w.stalls}" if w.stalls else "")
                + f" · run: {s.failed} failed",
            ),
            "gpu": (gpu1, gpu2),
            "kv": (kv1, kv2),
        }
        # The running trend (Sen's slope, %/h) once there is enough data, beside line 1.
        for key, metric in (
            ("tok", "tok_s"),
            ("decode", "tpot_p50"),
            ("ttft", "ttft_p95"),
            ("errors", "err_rate"),
            ("gpu", "gpu_mem_pct"),
            ("kv", "kv_pct"),
        ):
            tr = s.trends.get(metric)
            if tr is not None and key in out:
                l1, l2 = out[key]
                if tr.known:  # narrow enough to tell a drift that matters from none
                    sig = "*" if tr.significant else ""
                    out[key] = (f"{l1} {tr.pct_per_hour:+.1f}%/h{sig}", l2)
                else:
                    out[key] = (f"{l1} · drift: too short to tell", l2)
        return out

    def _split_blocks(
        self,
        s: Snapshot,
        width: int,
        title: str = "where the time goes (w: back to the comparison)",
    ) -> list[Block]:
        """`w` (or beside the comparison on wide screens): where each arm's time goes
        (its TTFT in parts, its TPOT split, TPOT by batch) and the A/B speed-up as its
        causes."""
        out = [Block((Text(title, style="bold"),))]
        for sp in s.time_split:
            lines = arm_lines(sp.arm, sp.to_json(), width)
            out.append(Block(tuple(Text(x) for x in lines), fold=2 if sp.arm != s.arm else 0,
                             name=f"{sp.arm} split"))  # fmt: skip
        if not s.time_split:
            out.append(Block((Text("no requests yet", style="dim"),)))
        lines = self._causes_lines(s, width)
        if lines:
            out.append(Block(tuple(Text(x) for x in lines), fold=3, name="causes"))
        return out

    def _causes_lines(self, s: Snapshot, width: int) -> list[str]:
        """The decode speed-up as its causes: per task kind where the mix has several
        (pooled medians over code and free text are neither's causes), else the whole."""
        cmp = s.comparison
        if s.causes_by_kind:
            ratios = {k.kind: k.ratio for k in cmp.by_kind} if cmp is not None else {}
            lines = ["decode speed-up's causes by task kind (whole run):"]
            for c in s.causes_by_kind:
                r = ratios.get(c.kind)
                lines += wrap(causes_parts(c.to_json(), None if r is None else r.ratio),
                              "  ", width, " ")  # fmt: skip
            return lines
        if s.causes is None:
            return []
        dec = cmp.decode if cmp is not None else None
        return wrap(causes_parts(s.causes.to_json(), None if dec is None else dec.ratio),
                    "", width, " ")  # fmt: skip

    def _compare_blocks(self, s: Snapshot, width: int = 58) -> list[Block]:
        """The comparison panel: the arms, the ladder, the A/B ratios, cost and outputs,
        each block with how readily it folds when rows are short."""
        if self.split:
            return self._split_blocks(s, width)
        # The counts are the run's and the figures the window's: a line above the
        # columns says so, first to fold where rows are short (the help says it too).
        win = f"last {s.window.width_s:.0f} s" if s.window is not None else "window"
        out: list[Block] = [
            Block((Text(f"{'':9}{'whole run':^10}{win:^18}", style="dim"),), fold=5,
                  name="column scopes"),
            Block((Text(f"{'arm':<9}{'ok':>5} {'err':>4} {'tok/s':>6}{'dec':>6}{'TTFT':>6}",
                        style="bold"),)),
        ]  # fmt: skip
        for v in s.arm_views:
            w = v.window
            mark = "▶" if v.name == s.arm else " "
            # counts keep their width (1.2k, 34k, 5.6M) and a space between: they never merge
            line = (
                f"{mark}{clean_text(v.name, False)[:8]:<8}{_count(v.ok):>5} {_count(v.failed):>4} "
            )
            if w is not None:
                line += f"{w.tokens_per_s:>6.0f}{_num(w.decode_p50):>6}{fmt_ms(w.ttft_p50):>6}"
            out.append(Block((Text(line),)))
            if w is not None:
                # The rest of each arm's window: TPOT, TTFT p95, error rate, acceptance.
                acc = "n/a" if w.acceptance_rate is None else f"{w.acceptance_rate:.0%}"
                err = f"{w.failed / w.ended:.1%}" if w.ended else "—"
                detail = (f"  TPOT {fmt_ms(w.tpot_p50)} · p95 TTFT {fmt_ms(w.ttft_p95)} · "
                          f"err {err} · acc {acc}")  # fmt: skip
                out.append(Block((Text(detail, style="dim"),), fold=4, name="arm details"))
        for cv in s.capacity:  # --find-capacity: the bracket narrowing, probe by probe
            probing = "" if cv.done else f" · probing {s.level:g}"
            marks = " ".join(f"{p.level:g}{'✓' if p.verdict == 'pass' else '✗'}"
                             for p in cv.probes)  # fmt: skip
            lines = [Text(f"{clean_text(cv.arm, False)[:10]}: {cv.text}{probing}", style="bold")]
            lines += _kind_lines(marks.split(" ") if marks else [], "  probes ", width)
            out.append(Block(tuple(lines)))
        lad = s.ladder
        if lad is not None and lad.done:
            # The curve, point by point: throughput against latency at each step.
            rows = [Text(f"ladder {lad.param}: tok/s TTFT95  dec  KV", style="bold")]
            for f in lad.done:
                k = lad.knee_of(f.arm)
                mark = " ← knee" if k is not None and k.step == f.step else ""
                arm = f" {f.arm[:6]}" if len(s.arms) > 1 else ""
                kv = "—" if f.kv_max_pct is None else f"{f.kv_max_pct:.0f}%"
                rows.append(Text(f"  {f.value:>6}{arm} {(f.tokens_per_s or 0):>7.0f} "
                                 f"{fmt_ms(f.ttft_p95):>6} {_num(f.decode_p50):>5} {kv:>4}{mark}"))  # fmt: skip
            out.append(Block(tuple(rows), fold=2, name="ladder", shrinks=True))
        c = s.comparison
        if c is not None:
            lines = [Text(f"{c.other[:8]}/{c.baseline[:8]} ratio [95% CI] by {c.method}",
                          style="bold")]  # fmt: skip
            for r, name in ((c.decode, "decode"), (c.tpot, "TPOT"), (c.ttft, "TTFT")):
                if r is None:
                    lines.append(Text(f"  {name:<7}collecting data", style="dim"))
                else:
                    t = Text(f"  {name:<7}×{r.ratio:.2f} [{r.lo:.2f}, {r.hi:.2f}]",
                             style="bold" if r.significant and not r.partial else "")  # fmt: skip
                    if r.partial:
                        # part of the workload: said, never passed off as the whole
                        t.append(f" partial {r.coverage:.0%} of mix", style="bold yellow")
                    elif not r.significant:
                        t.append(" n.s.", style="dim")
                    lines.append(t)
            part = next(
                (r for r in (c.decode, c.tpot, c.ttft) if r is not None and r.partial), None
            )
            if part is not None:
                lines.extend(_kind_lines([f"{m}" for m in part.missing], "  collecting: ", width))
            if c.by_kind and (len(c.by_kind) > 1 or any(k.ratio is None for k in c.by_kind)):
                # always beside the headline: folds to lines of its own, never away
                lines.extend(_kind_lines([k.text() for k in c.by_kind], "decode by kind: ", width))
            out.append(Block(tuple(lines)))
            cross = [x for cr in s.crossovers for x in wrap(cr.text().split(" "), "", width, " ")]
            if cross:  # where the speed-up stops paying, by load (and by kind)
                out.append(Block(tuple(Text(x) for x in cross), fold=2, name="crossover"))
            why = self._causes_lines(s, width)
            if why:  # the speed-up as its causes (w: the whole split)
                out.append(Block(tuple(Text(x) for x in why), fold=2, name="causes (w)"))
        elif len(s.arms) < 2:
            out.append(Block((Text("one arm: add --arm to compare", style="dim"),), fold=3))
        if any(
            a.cost.cost_per_mtok is not None or a.cost.joules_per_token is not None
            for a in s.costs.values()
        ):
            parts = []
            for name, a in s.costs.items():
                bits = []
                if a.cost.cost_per_mtok is not None:
                    bits.append(f"{a.cost.cost_per_mtok:.2f}/Mtok")
                if a.cost.joules_per_token is not None:
                    bits.append(f"{a.cost.joules_per_token:.2f} J/tok")
                parts.append(f"{name[:8]} " + (" ".join(bits) if bits else "—"))
            basis = f" at {s.price.text()}" if s.price is not None else ""
            out.append(Block((Text(f"cost{basis} (whole run)"), Text("  " + " · ".join(parts))),
                             fold=1, name="cost"))  # fmt: skip
            for name, a in s.costs.items():
                kc = [(k, v.cost_per_mtok) for k, v in a.by_kind if v.cost_per_mtok]
                if len(kc) > 1:  # what each kind of task costs: code is cheap with a draft
                    rows = _kind_lines([f"{k} {v:.2f}" for k, v in kc],
                                       f"  {name[:8]} by kind (/Mtok): ", width)  # fmt: skip
                    out.append(Block(tuple(Text(r.plain, style="dim") for r in rows),
                                     fold=3, name="cost by kind"))  # fmt: skip
        if s.quality:  # beside speed: whether the answers are still right
            parts = [f"{clean_text(a.arm, False)[:8]} {a.text()}" for a in s.quality]
            qlines = [Text(x) for x in wrap(parts, "quality (answers checked, whole run): ", width)]
            d = s.quality_diff
            if d is not None:
                qlines.append(Text(f"  quality cost: {clean_text(d.text(), False)}",
                                   style="bold red" if d.verdict == "worse" else ""))  # fmt: skip
            out.append(Block(tuple(qlines), fold=1, name="quality"))
        oc = s.output_check
        if oc is not None:
            lines = []
            for name, r in oc["arms"].items():
                if r["identical_share"] is None:
                    lines.append(Text(f"outputs {name[:8]}: none compared", style="dim"))
                else:
                    t = Text(f"outputs {name[:8]}: {r['identical']}/{r['compared']} identical")
                    if r["first_divergence_median"] is not None:
                        t.append(f", diverge ~char {r['first_divergence_median']:.0f}", style="dim")
                    lines.append(t)
            out.append(Block(tuple(lines), fold=2, name="outputs"))
        if len(s.workers) > 1:
            out.append(Block(tuple(_worker_line(w) for w in s.workers), fold=3, name="workers"))
        return out

    def _events_text(self, s: Snapshot, room: int = 6) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("events\n", style="bold")
        for ev in list(s.events)[-room:]:
            t.append(f"{hms((ev.t - s.t_start) / 1e9):>8} ", style="dim")
            style = "bold" if ev.kind in ("arm", "alert", "restart") else ""
            t.append(clean_text(ev.message, keep_newlines=False) + "\n", style=style)
        return t


def _kind_lines(parts: list[str], head: str, width: int = 58) -> list[Text]:
    """The per-kind figures, as many to a line as fit ``width`` (the narrowest panel),
    each whole: a long list wraps between figures, never inside one."""
    out: list[str] = []
    cur = head
    for p in parts:
        sep = "" if cur in (head, "  ") else " · "
        if len(cur) + len(sep) + len(p) > width and cur not in (head, "  "):
            out.append(cur)
            cur, sep = "  ", ""
        cur += sep + p
    out.append(cur)
    return [Text(line) for line in out]


def _worker_line(w: EngineStatus) -> Text:
    """One load generator: where it runs, its streams, its send lag and CPU — loud when
    it is the limit (lag over 50 ms, CPU over 90% of a core), so that an overloaded
    client is never read as a slow server."""
    t = Text(f"worker {w.worker} {clean_text(w.host, False)[:16]} · {w.in_flight} in flight · ")
    hot = "bold reverse"
    t.append(f"lag {w.send_lag_ms:.1f} ms", style=hot if w.send_lag_ms > LAG_HOT_MS else "")
    t.append(" · ")
    t.append(f"CPU {w.cpu_pct:.0f}%", style=hot if w.cpu_pct > 90 else "")
    return t


@dataclass(frozen=True)
class Block:
    """Lines of the comparison panel, and how readily they fold away when rows are short
    (0: never; the highest first). A block that shrinks loses its oldest lines first,
    keeping its title (the ladder's latest steps are the ones being watched)."""

    lines: tuple[Text, ...]
    fold: int = 0
    name: str = ""
    shrinks: bool = False


def fit_blocks(blocks: list[Block], room: int, width: int = 10_000) -> Text:
    """The blocks in their order within ``room`` lines; what had to fold is named on the
    last line with the key that shows it (``b``: the panels over the whole screen)."""
    blocks = list(blocks)
    hidden: list[str] = []

    def over() -> bool:
        return sum(len(b.lines) for b in blocks) + (1 if hidden else 0) > room

    while over():
        folding = [i for i, b in enumerate(blocks) if b.fold > 0]
        if not folding:
            break
        i = max(folding, key=lambda j: (blocks[j].fold, j))
        b = blocks[i]
        if b.shrinks and len(b.lines) > 3:  # its title and two lines at least
            blocks[i] = dataclasses.replace(b, lines=(b.lines[0], *b.lines[2:]))
            hidden.append(f"earlier {b.name}")
            continue
        del blocks[i]
        if b.name and b.name not in hidden:
            hidden.append(b.name)
    t = Text(no_wrap=True, overflow="ellipsis")
    for b in blocks:
        for line in b.lines:
            t.append_text(line)
            t.append("\n")
    if hidden:
        t.append(more_line(list(dict.fromkeys(hidden)), width), style="dim")
    return t


def more_line(names: list[str], width: int) -> str:
    """``more (cost, ladder): b`` within ``width``: the names that do not fit are counted
    (``+2``), so the key that shows them is never cut."""
    for k in range(len(names), 0, -1):
        rest = len(names) - k
        line = f"more ({', '.join(names[:k])}{f', +{rest}' if rest else ''}): b"
        if len(line) <= width:
            return line
    return f"more ({len(names)}): b"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


# The time views `z` cycles through: the recent minutes (a column a second), the last
# hour (every second of it, merged to the width), the last day (the whole run's points
# of it) and the whole run.
VIEWS = ("recent", "hour", "day", "whole")
DAY_S = 86_400.0


def view_points(snap: Snapshot, view: str, width: int) -> list[Point]:
    """The points a time view draws (before they are merged to the width)."""
    if view == "recent":
        return list(snap.recent)[-width:]
    if view == "hour":
        return list(snap.recent)  # (the last 3,600 seconds, one point each)
    pts = list(snap.whole)
    if view == "day" and pts:
        end = pts[-1].t + pts[-1].span
        pts = [p for p in pts if p.t + p.span > end - DAY_S]
    return pts


def axis_label(view: str, pts: list[Point], per_col: float, wall_start: float) -> str:
    """What the time axis shows: the view and its span (the hour and the day from one
    clock time to another, this machine's zone), and the seconds a column stands for."""
    scale = _scale(per_col)
    span = pts[-1].t - pts[0].t + pts[-1].span if pts else 0
    if view in ("hour", "day") and pts and wall_start > 0:
        a, b = wall_start + pts[0].t, wall_start + pts[-1].t + pts[-1].span
        fmt = "%H:%M" if b - a >= 120 else "%H:%M:%S"
        when = f"{time.strftime(fmt, time.localtime(a))}–{time.strftime(fmt, time.localtime(b))}"
        return f"{view} {when}" + (f" · {scale}" if scale else "")
    name = {"recent": "recent", "hour": "last hour", "day": "last day"}.get(view, "whole run")
    return f"{name} · {hms(span)}" + (f" · {scale}" if scale else " shown")


def _scale(seconds_per_column: float) -> str:
    """The time axis's scale where it is not one column a second (the help's promise)."""
    c = seconds_per_column
    if abs(c - 1.0) < 1e-9:
        return ""
    if c < 1:
        return f"{round(1 / c)} cols/s"
    return f"{c:.0f} s/col" if c < 120 else f"{c / 60:.0f} min/col"


def _count(n: int) -> str:
    """A count in at most four characters."""
    if n < 10_000:
        return str(n)
    for div, unit in ((1_000, "k"), (1_000_000, "M"), (1_000_000_000, "G")):
        v = n / div
        if v < 9.95:
            return f"{v:.1f}{unit}"
        if v < 999.5:
            return f"{v:.0f}{unit}"
    return "many"


def run_app(source: Source, theme: str | None = None, fps: float = 4.0) -> bool:
    """Run the dashboard; True when it was ended by an interrupt (Ctrl-C)."""
    app = DashboardApp(source, theme=theme, fps=fps)
    app.run()
    return app.interrupted > 0
