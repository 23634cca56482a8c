"""Snapshot tests of the main screen from a deterministic fake source."""

from fakes import FakeSource

from tokmon.ui.app import DashboardApp


def test_main_screen_80x24(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(80, 24))


def test_main_screen_120x40(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(120, 40))


def test_main_screen_200x50(snap_compare):
    assert snap_compare(DashboardApp(FakeSource()), terminal_size=(200, 50))
