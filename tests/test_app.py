"""The dashboard through Textual's pilot: keys become commands; text stays text."""

import pytest
from fakes import FakeSource

from tokmon.ui.app import ConfirmQuit, DashboardApp, HelpScreen, MarkerScreen
from tokmon.ui.panels import chart_columns
from tokmon.ui.widgets import MarkerRow, MetricSpark, spark_rows


def test_spark_rows_gap_is_not_zero_and_fixed_scale():
    rows = spark_rows([None, 0.0, 50.0, 100.0], 4, 1, 0.0, 100.0)
    assert rows[0][0] == " " and rows[0][1] != " "  # a gap is blank, a zero is not
    rows = spark_rows([90.0], 1, 2, 0.0, 100.0)
    assert rows[1] == "█" and rows[0] != " "  # 90% draws near the top on a 0-100 scale


async def test_keys_send_commands():
    src = FakeSource()
    app = DashboardApp(src)
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        assert src.arm == "spec"
        await pilot.press("p")
        assert src.paused
        await pilot.press("plus")
        await pilot.press("minus")
        await pilot.press("minus")
        assert src.level == 7.0
        await pilot.press("r")
        assert src.recording
        for view in ("hour", "day", "whole", "recent"):
            await pilot.press("z")
            assert app.view == view
        await pilot.press("m")
        assert isinstance(app.screen, MarkerScreen)
        await pilot.press(*"slow node", "enter")
        assert ("marker", "slow node") in src.calls
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuit)
        await pilot.press("n")
        assert src.stopped is None
        await pilot.press("q")
        await pilot.press("y")
        assert src.stopped is False  # a drain, not a hard stop
        await pilot.pause(0.5)
    assert app.return_code == 0 or app.return_code is None


async def test_shows_figures_and_marks():
    src = FakeSource()
    app = DashboardApp(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        tok = app.screen.query_one("#spark-tok", MetricSpark)
        assert len(tok.spark.values) > 0
        marks = app.screen.query_one("#marks", MarkerRow)
        assert any("arm" in m for m in marks.marks)
        text = app.screen.query_one("#compare").render()
        assert "×2.31" in str(text)


async def test_server_text_is_never_markup_or_escape():
    evil = "[bold red]pwned[/] \x1b]0;title\x07\x1b[31mred\x1b[0m [link=x]y[/link]"
    src = FakeSource(text=evil)
    app = DashboardApp(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        events = str(app.screen.query_one("#events").render())
        assert "[bold red]pwned[/]" in events  # shown literally
        assert "\x1b" not in events and "\x07" not in events


async def test_compact_at_80x24():
    app = DashboardApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        assert app.screen.has_class("compact")
        sparks = list(app.screen.query(MetricSpark))
        bottom = app.screen.query_one("#bottom")
        # nothing overlaps: every chart row ends above the bottom panel
        assert all(s.region.bottom <= bottom.region.y for s in sparks)
        assert bottom.region.height >= 4


async def test_wide_screens_show_where_the_time_goes_beside_the_comparison():
    """From 180 columns the split has its own panel between the comparison and the
    events; `w` puts it in the comparison's place (and the side panel goes); below 180
    only `w` shows it."""
    app = DashboardApp(FakeSource(split=True))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(0.3)
        side = app.screen.query_one("#split")
        assert side.display and side.region.width >= 60
        text = str(side.render())
        assert "where the time goes" in text and "spec TTFT 80.0 ms" in text
        assert "queue 30.0 ms (38%)" in text and "= 2.90 tok/step" in text
        assert "×2.31" in str(app.screen.query_one("#compare").render())
        await pilot.press("w")
        await pilot.pause(0.3)
        assert not side.display
        assert "(w: back to the comparison)" in str(app.screen.query_one("#compare").render())
        await pilot.resize_terminal(150, 50)
        await pilot.press("w")
        await pilot.pause(0.3)
        assert not side.display


@pytest.mark.parametrize("theme", ["tokmon-dark", "tokmon-light", "tokmon-contrast"])
async def test_themes_load(theme):
    app = DashboardApp(FakeSource(), theme=theme)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == theme


async def test_broken_theme_falls_back(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\nprimary = 'not a colour'\n")
    app = DashboardApp(FakeSource(), theme=str(bad))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "tokmon-dark"


def test_whole_run_view_stretches_a_short_run_to_the_width():
    src = FakeSource(seconds=30)
    app = DashboardApp(src)
    app.view = "whole"
    snap = src.snapshot()
    n = len(snap.whole)
    pts, per_col = chart_columns(snap, app.view, n * 3 + 1)
    assert len(pts) == n * 3  # every point over three columns
    assert per_col == snap.whole[0].span / 3  # and the axis says so
    assert [p.t for p in pts[::3]] == [p.t for p in snap.whole]
    assert sum(1 for p in pts if p.marks) == sum(1 for p in snap.whole if p.marks)


async def test_a_dialog_leaves_the_dashboard_in_view():
    """The marker prompt (and every dialog) sits over the dashboard, which stays visible
    while the note is typed (an opaque screen used to blank it)."""
    app = DashboardApp(FakeSource())
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("m", *"slow")
        await pilot.pause(0.3)
        shot = app.export_screenshot().replace("&#160;", " ")
        assert "Marker note" in shot
        assert "tok/s" in shot and "TTFT" in shot  # the charts' labels, under the dialog


async def test_a_notice_takes_its_own_line_and_covers_nothing():
    """A command's answer shows on a line of its own above the footer (never a toast over
    the comparison or the events), then goes."""
    from textual.widgets import Label
    from textual.widgets._toast import Toast

    app = DashboardApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("s")
        await pilot.pause(0.2)
        line = app.screen.query_one("#notice", Label)
        assert line.display and "switch done" in str(line.render())
        assert not app.query(Toast)
        compare = app.screen.query_one("#compare").region
        events = app.screen.query_one("#events").region
        for panel in (compare, events):
            assert panel.bottom <= line.region.y  # above the notice, not under it
        app._notice = ("x", "information", 0.0)  # its time is up
        await pilot.pause(0.6)
        assert not line.display


async def test_time_views_in_clock_time():
    """`z`: the last hour and the last day are labelled from one clock time to another
    (this machine's zone: the run's start plus the points' times)."""
    import dataclasses
    import time

    src = FakeSource()
    start = time.mktime((2026, 12, 6, 14, 0, 0, 0, 0, -1))
    src._snap = dataclasses.replace(src._snap, wall_start=start)
    n = len(src._snap.recent)
    end = time.strftime("%H:%M", time.localtime(start + n))
    app = DashboardApp(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        axis = app.screen.query_one("#marks", MarkerRow)
        assert axis.axis.startswith("recent · ")
        await pilot.press("z")
        await pilot.pause()
        assert axis.axis.startswith(f"hour 14:00–{end}")
        await pilot.press("z")
        await pilot.pause()
        assert axis.axis.startswith(f"day 14:00–{end}")
        await pilot.press("z")
        await pilot.pause()
        assert axis.axis.startswith("whole run · ")


def test_the_last_day_is_the_whole_runs_last_day():
    import dataclasses

    from tokmon.model.contract.history import Point
    from tokmon.ui.panels import axis_label, view_points

    pts = tuple(Point(t=float(i * 600), span=600.0, tok_s=1.0) for i in range(3 * 144))  # 3 days
    snap = dataclasses.replace(FakeSource()._snap, whole=pts)
    day = view_points(snap, "day", 100)
    assert len(day) == 144 and day[0].t == 2 * 86_400.0
    # (a length of time, never a clock's reading: #58)
    assert axis_label("day", day, 864.0, 0.0) == "last day · 24 h · 14 min/col"


@pytest.mark.parametrize("width", [80, 100, 200])
@pytest.mark.parametrize("cpu", [9.0, 89.0, 100.0])
def test_the_header_shows_a_busy_tokmon_whole_at_any_width(width, cpu):
    """Busy (over 80% of a core), tokmon's own CPU never gives way, but it shortens like
    any item: at 80 columns beside the counts and 'warming up' it was cut by an ellipsis
    ('host 5…', seen in CI on a loaded machine)."""
    from dataclasses import replace

    from tokmon.model.contract.views import ProbeView
    from tokmon.model.judge.storage import StorageView
    from tokmon.ui.header import header_text

    snap = replace(
        FakeSource().snapshot(),
        ok=12_345, failed=0, in_flight=8, warming_up=True, recording=False,
        probes=ProbeView(self_cpu_pct=cpu, host_cpu_pct=55.0),
        judgments={"storage": StorageView(rss_mib=149.0)},
    )  # fmt: skip
    lines = header_text(snap, width).plain.split("\n")
    assert all(len(ln) <= width and not ln.endswith("…") for ln in lines), lines
    if cpu > 80:
        assert f"tokmon CPU {cpu:.0f}%" in lines[1], lines
    if width == 200:
        assert f"tokmon CPU {cpu:.0f}% · 149 MiB · host 55%" in lines[1], lines


async def test_a_draw_before_the_widgets_are_there_draws_nothing():
    """The draw timer may fire before the screen has composed its widgets, or after they
    are gone (a busy CI machine did: NoMatches for '#header' ended the app): no frame that
    tick, and the next one draws."""
    app = DashboardApp(FakeSource())
    async with app.run_test(size=(100, 30)) as pilot:
        dash = app.get_screen_dashboard()
        assert dash is not None
        await dash.query_one("#header").remove()
        app.last_snapshot = None
        app.draw()
        await pilot.pause()
        assert app.last_snapshot is None  # (no frame: drawn again once it is there)
