"""Snapshot tests of the main screen: a deterministic fake source, and the replay of a
recorded two-arm ladder run, at 80×24, 120×40 and 200×50."""

import re
from pathlib import Path

import pytest
from fakes import FakeSource

from tokmon.model.data.commands import End
from tokmon.sources.replay import ReplaySource
from tokmon.ui.app import HELP, DashboardApp


def test_main_screen_80x24(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(80, 24))


def test_main_screen_120x40(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(120, 40))


def test_main_screen_200x50(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(200, 50))


# A recorded run with two arms (plain, spec) over a concurrency ladder (2, 8), a code and
# creative mix, and a price: two `tokmon sim` servers, recorded by `tokmon run --record`.
LADDER_AB = Path(__file__).parent / "data" / "rec" / "ladder-ab.jsonl.gz"
SIZES = [(80, 24), (120, 40), (200, 50)]


@pytest.fixture
def ladder_replay():
    src = ReplaySource(str(LADDER_AB))
    src.start()
    try:
        src.command(End())
        yield src
    finally:
        src.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_ladder_ab_replay(snap_compare, ladder_replay, size):
    assert snap_compare(DashboardApp(ladder_replay), terminal_size=size)


def screen_lines(app: DashboardApp) -> list[str]:
    # the composed screen as text (what a terminal shows, row by row)
    return [s.text.rstrip() for s in app.screen._compositor.render_strips()]


async def drawn(app: DashboardApp, pilot) -> list[str]:
    """The screen once the app has laid out and drawn its snapshot."""
    await pilot.pause(0.3)
    app.draw()
    await pilot.pause(0.3)
    return screen_lines(app)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_nothing_that_matters_is_cut(ladder_replay, size):
    """At every size: the footer's help and quit, every chart's range, the clock and the
    arm, the A/B ratios and the per-kind line, whole (never ending in an ellipsis); the
    ladder and the cost whole, or folded with the key that shows them -- and with that
    key (`b`), all of them whole."""
    app = DashboardApp(ladder_replay)
    async with app.run_test(size=size) as pilot:
        lines = await drawn(app, pilot)
        footer = lines[-1]
        assert "? help" in footer and "q quit" in footer
        assert "00:50 · arm spec · 8 streams" in lines[0]
        # every chart says its range, or (one line) why it has none
        assert sum("┤" in line or "n/a — " in line for line in lines) >= 7
        body = "\n".join(lines[1:-1])
        # the headline says it is partial (a stratum of the mix is still collecting) and
        # names what is missing; the per-kind figures are beside it, whole (the requests
        # sent before the ladder's first step are no stratum: #58)
        for want in ("spec/plain ratio [95% CI]", "decode ×1.60 [1.53, 1.64] partial 75% of mix",
                     "TPOT   ×0.63", "TTFT   ×1.26", "collecting: creative@1 2/10",
                     "code ×2.49 [2.40, 2.62]", "creative ×1.10 [1.04, 1.13]"):  # fmt: skip
            assert want in body, want
        ladder = ["2 plain      81", "2 spec     136", "8 plain     303", "8 spec     415"]
        cost = "plain 3.72/Mtok · spec 2.86/Mtok"
        if not all(r in body for r in ladder) or cost not in body:
            assert "more (" in body and "): b" in body
        assert not [line for line in lines[2:-1] if line.endswith("…")]
        await pilot.press("b")
        await pilot.pause(0.3)
        body = "\n".join(screen_lines(app))
        assert all(r in body for r in ladder) and cost in body
        assert "events" in body and "00:48 stopping: draining in-flight requests" in body


# A one-arm run of `tokmon sim` (no GPU, no acceptance source): the README's soak example.
ONE_ARM = Path(__file__).parent / "data" / "rec" / "one-arm.jsonl.gz"
# Two `tokmon sim` servers (plain, spec) alternating every 10 s, a code and creative mix.
TWO_ARM = Path(__file__).parent / "data" / "rec" / "two-arm.jsonl.gz"
# One `tokmon sim --spec on` under a concurrency ladder (2, 8).
LADDER_ONE = Path(__file__).parent / "data" / "rec" / "ladder-one.jsonl.gz"
ALL_SIZES = [(80, 24), (100, 30), (120, 40), (200, 50), (300, 80)]
LAYOUTS = {"one-arm": ONE_ARM, "two-arm": TWO_ARM, "ladder": LADDER_ONE, "ladder-ab": LADDER_AB}


@pytest.mark.parametrize("size", ALL_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("layout", list(LAYOUTS))
async def test_every_row_is_used_and_every_figure_whole(layout, size):
    """At five sizes and four layouts (one arm, two arms, a ladder, a two-arm ladder): no
    line ends cut, the header's included; the footer labels every key it shows and names
    how many more are in `?`; a chart with no source is one line saying why, its rows
    given to the others; under the charts at most two blank rows (the rest went to the
    charts)."""
    rec = LAYOUTS[layout]
    src = ReplaySource(str(rec))
    src.start()
    try:
        src.command(End())
        app = DashboardApp(src)
        async with app.run_test(size=size) as pilot:
            lines = await drawn(app, pilot)
    finally:
        src.close()
    assert not [ln for ln in lines if ln.endswith("…")], "\n".join(lines)
    footer = lines[-1]
    assert footer.startswith(" ? help  q quit "), footer
    shown = re.findall(r"(?:^|  ) ?(\S+) (\S+(?: \S+)?)(?=  |$| \+)", footer)
    for key, label in shown:  # every key with its label, and each one the help explains
        key = {"^p": "ctrl+p"}.get(key, key)
        assert label and key in HELP.replace("+ / -", "+ -"), (key, footer)
    more = re.search(r" \+(\d+) keys in \?$", footer)
    everything = "e end  ^p palette"
    assert (everything in footer) != (more is not None), footer  # all keys, or the count
    gpu = [ln for ln in lines if ln.startswith(" GPU ")]
    assert len(gpu) == 1 and "n/a — no GPU" in gpu[0], gpu  # one line, and why
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("────"))
    blank = [ln for ln in lines[rule + 1 : -1] if not ln.strip()]
    assert len(blank) <= 2, "\n".join(lines)
    if layout == "one-arm":
        accept = [ln for ln in lines if ln.startswith(" accept ")]
        assert len(accept) == 1 and "n/a — no acceptance source" in accept[0]
