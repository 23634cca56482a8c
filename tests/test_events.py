"""An event's meaning to the figures, typed once (``model/data/events.py``): what the fold
acts on. A recording's events are untrusted: data that does not say what it would change
means nothing, and changes no figure."""

from __future__ import annotations

import pytest

from tokmon.model.data.events import (
    ArmSwitch,
    LadderEnds,
    LevelSet,
    OutputCheck,
    Pause,
    SearchNews,
    ServerNews,
    StepBegins,
    meaning,
)
from tokmon.model.data.records import Event


def ev(kind: str, data: dict | None = None, message: str = "") -> Event:
    return Event(t=1, kind=kind, message=message, data=data or {})


def test_each_kind_that_changes_a_figure_has_its_typed_meaning():
    assert meaning(ev("arm", {"arm": "spec", "segment": 3})) == ArmSwitch("spec")
    step = {"step": 2, "arm": "a", "value": 16, "warm_s": 1.5, "param": "concurrency"}
    assert meaning(ev("step", step)) == StepBegins(2, "a", "16", 1.5, "concurrency", 16.0)
    # a prompt-length ladder moves no load level
    assert meaning(ev("step", {**step, "param": "prompt_tokens"})).level is None
    assert meaning(ev("ladder", {"reason": "errors"})) == LadderEnds("errors")
    assert meaning(ev("ladder")) == LadderEnds(None)
    probe = {"arm": "a", "probe": {}}  # (the whole data: the search reads its own keys)
    assert meaning(ev("probe", probe)) == SearchNews("probe", "a", probe)
    assert meaning(ev("level", {"level": "12"})) == LevelSet(12.0)  # (a header by hand)
    assert meaning(ev("pause", message="paused by the user")) == Pause(True)
    assert meaning(ev("pause", message="resumed")) == Pause(False)
    srv = ev("server", {"arm": "a", "state": "ready"})
    assert meaning(srv) == ServerNews(srv)
    assert meaning(ev("check", {"result": {"same": 3}})) == OutputCheck({"same": 3})


@pytest.mark.parametrize(
    "kind,data",
    [
        ("arm", {"arm": 7}),  # not a name
        ("step", {"step": 1, "value": 4}),  # no arm
        ("search", {"plan": {}}),  # no arm
        ("level", {"level": "lots"}),
        ("level", {"level": float("nan")}),
        ("level", {"level": True}),  # a bool is no number
        ("check", {"result": "same"}),
        ("marker", {"arm": "a"}),  # shown and logged, no figure changes
        ("alert", {}),
    ],
)
def test_data_that_does_not_say_what_it_changes_means_nothing(kind, data):
    assert meaning(ev(kind, data)) is None


def test_a_step_with_odd_fields_is_read_as_the_fold_always_read_it():
    got = meaning(ev("step", {"arm": "a", "step": "x", "value": None, "warm_s": -0.0}))
    assert got == StepBegins(0, "a", "None", 0.0, "None", None)
