"""The dashboard: a Textual app fed by a *source* (live session, replay, or a fake).

It redraws on its own clock, at most ``fps`` times a second, from the latest frozen
snapshot, and skips the frame when the snapshot has not changed. Keys become commands
to the source; the app never measures anything and never blocks the engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, Label

from tokmon.model.data.commands import (
    ChangeLevel,
    Check,
    Command,
    End,
    Jump,
    Marker,
    Play,
    Seek,
    Speed,
    StopRun,
    Switch,
    TogglePause,
    ToggleRecord,
)
from tokmon.model.folding.snapshot import Snapshot, Source
from tokmon.textsafe import clean_text
from tokmon.ui.header import header_text
from tokmon.ui.panels import (
    CHARTS,
    VIEWS,
    Block,
    axis_label,
    chart_columns,
    chart_labels,
    compare_blocks,
    events_text,
    fit_blocks,
    split_blocks,
)
from tokmon.ui.themes import DEFAULT, ThemeError, builtin_themes, load_theme_file
from tokmon.ui.widgets import InfoPanel, KeyBar, MarkerRow, MetricSpark, drawable

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
        live = max(1, len(CHARTS) - len(self.dead))
        return max(1, min(CHART_MAX, self._free() // live))

    def heights(self) -> dict[str, int]:
        """Each chart's rows: the share, and one more for the first charts while rows are
        left over (a blank row under the panels is a row a chart could have used)."""
        keys = [c.key for c in CHARTS]
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
        return max(0, left - 2)  # (0: only the title's row: the latest event beside it)

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
            for c in CHARTS:
                yield MetricSpark(
                    c.key, c.title, fixed=c.fixed, warn=c.warn, unit=c.unit, floor=c.floor
                )
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
        Binding("s", "send('switch')", "arm"),
        Binding("p", "send('pause')", "pause"),
        Binding("plus,equals_sign", "send('level', 1)", "+load", key_display="+"),
        Binding("minus", "send('level', -1)", "-load", key_display="-"),
        Binding("m", "marker", "mark"),
        Binding("r", "send('record')", "rec"),
        Binding("z", "zoom", "view"),
        Binding("b", "panels", "panels"),
        Binding("w", "time_split", "split"),
        Binding("o", "send('check')", "check"),
        Binding("space", "send('play')", "play/pause"),
        Binding("left", "send('seek', -10)", "-10s", key_display="←"),
        Binding("right", "send('seek', 10)", "+10s", key_display="→"),
        Binding("left_square_bracket", "send('jump', -1)", "prev event", key_display="["),
        Binding("right_square_bracket", "send('jump', 1)", "next event", key_display="]"),
        Binding("less_than_sign", "send('speed', -1)", "slower", key_display="<"),
        Binding("greater_than_sign", "send('speed', 1)", "faster", key_display=">"),
        Binding("e", "send('end')", "end"),
        # One rule for an interrupt, as in a headless run: the first Ctrl-C drains the
        # in-flight requests, a second stops now (they end as cancelled), exit 130.
        # Ctrl-Q (Textual's own quit) is the same interrupt, never a silent abort.
        Binding("ctrl+c,ctrl+q", "interrupt", show=False, priority=True),
    ]
    # Each key maps to a source command; keys whose command the source lacks are hidden.
    # what a key sends (``send(name, *args)`` in a binding): one action for them all, and
    # a key whose command the source does not take is not shown (``check_action``)
    KEY_COMMANDS: dict[str, type[Command]] = {
        c.name: c
        for c in (
            Switch,
            TogglePause,
            ChangeLevel,
            ToggleRecord,
            Check,
            Play,
            Seek,
            Jump,
            Speed,
            End,
        )
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
        self._signal_loop: asyncio.AbstractEventLoop | None = None  # (``close_soon``)
        self._close_asked = False

    # ------------------------------------------------------------------ setup
    def close_soon(self, hard: bool = False) -> None:
        """Close the app from a signal handler: the handler may have interrupted the loop
        mid-step, so nothing of it is touched but its wake-up (``call_soon_threadsafe``)."""
        self._close_asked = True
        if self._signal_loop is not None:
            self._signal_loop.call_soon_threadsafe(self.exit)

    def on_mount(self) -> None:
        self._signal_loop = asyncio.get_running_loop()
        if self._close_asked:  # (a signal before the app was up)
            self.exit()
            return
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
            "Switch arm",
            "Send new requests to the next arm (s)",
            lambda: self.action_send("switch"),
        )
        yield SystemCommand(
            "Pause / resume", "Stop or restart sending (p)", lambda: self.action_send("pause")
        )
        yield SystemCommand(
            "More load",
            "One step more concurrency or rate (+)",
            lambda: self.action_send("level", 1),
        )
        yield SystemCommand(
            "Less load",
            "One step less concurrency or rate (-)",
            lambda: self.action_send("level", -1),
        )
        yield SystemCommand("Add marker", "Mark this moment with a note (m)", self.action_marker)
        yield SystemCommand(
            "Recording on / off", "Start or stop recording (r)", lambda: self.action_send("record")
        )
        yield SystemCommand(
            "Time view", "Recent minutes, the last hour, the last day or the whole run (z)",
            self.action_zoom,
        )  # fmt: skip

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "send" and parameters:
            return parameters[0] in self.source.commands
        if action == "marker":
            return Marker.name in self.source.commands
        return True

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
            line.update(drawable(Text(n[0])))
            line.set_classes(n[1])

    # ------------------------------------------------------------------ actions
    def action_send(self, name: str, *args: object) -> None:
        """A key's command to the source (``KEY_COMMANDS``)."""
        cmd = self.KEY_COMMANDS.get(name)
        if cmd is not None:
            self._cmd(cmd(*args))

    def _cmd(self, cmd: Command) -> None:
        if cmd.name not in self.source.commands:
            self.notify(f"not available here: {cmd.name}", timeout=3)
            return
        try:
            msg = self.source.command(cmd)
        except Exception as e:  # a failing command is reported, never fatal
            self.notify(f"{cmd.name} failed: {e}", severity="error")
            return
        if msg:
            self.notice = msg
            self.notify(msg, timeout=3)

    def action_marker(self) -> None:
        def done(note: str | None) -> None:
            if note is not None:
                self._cmd(Marker(note))

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
        live = StopRun.name in self.source.commands and not (snap is not None and snap.done)
        if not live:
            self.exit()
            return
        if self.interrupted == 1 and snap is not None and snap.in_flight:
            self.quitting = True
            self.source.command(StopRun())
            self.notify(
                "stopping: draining in-flight requests (Ctrl-C again: stop now)", timeout=10
            )
            return
        self.source.command(StopRun(hard=True))
        self.exit()

    def action_quit_tokmon(self) -> None:
        snap = self.source.snapshot()
        if (
            self.quitting
            or snap is None
            or snap.done
            or snap.in_flight == 0
            or StopRun.name not in self.source.commands
        ):
            if StopRun.name in self.source.commands and not (snap is not None and snap.done):
                self.source.command(StopRun(hard=True))
            self.exit()
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.quitting = True
                self.source.command(StopRun())
                self.notify("stopping: waiting for in-flight requests (q again: now)", timeout=10)

        self.push_screen(ConfirmQuit(snap.in_flight), done)

    # ------------------------------------------------------------------ drawing
    def _compare_blocks(self, s: Snapshot, width: int = 58) -> list[Block]:
        """The comparison panel as this app shows it now (``w``: where the time goes)."""
        return compare_blocks(s, width, self.split)

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
        try:
            screen.query_one("#header", InfoPanel)
        except NoMatches:
            # the screen's widgets are not there yet (a busy machine ran the draw timer
            # before they were composed) or any more: no frame this tick, the next draws
            self.last_snapshot = None
            return
        self.frames += 1
        with self.batch_update():
            self._draw(screen, snap)

    def get_screen_dashboard(self) -> Dashboard | None:
        for s in self.screen_stack:
            if isinstance(s, Dashboard):
                return s
        return None

    def _draw(self, screen: Dashboard, snap: Snapshot) -> None:
        header = screen.query_one("#header", InfoPanel)
        header.show(header_text(snap, screen.size.width))
        charts = list(screen.query(MetricSpark))
        width = max(10, (charts[0].spark.size.width if charts else 60) or 60)
        pts, per_col = chart_columns(snap, self.view, width)
        w = snap.window
        col = {c.key: [c.column(p) for p in pts] for c in CHARTS}
        labels = chart_labels(snap)
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
        side = split_blocks(snap, width, "where the time goes") if wide else []
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
        screen.query_one("#events", InfoPanel).show(events_text(snap, room))
        _ = w
