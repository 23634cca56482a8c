"""Defects found while reading the house (each failed before its fix): frames redrawn
while recording, a second SLO share."""

from tokmon.model.data.facts import Tick
from tokmon.model.data.records import RequestRecord
from tokmon.model.data.table import RequestTable
from tokmon.model.judge.summary import build_summary, slo_share
from tokmon.model.statistics.stats import ArmTotals, Slo
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.recording.writer import Recorder
from tokmon.sources.live import LiveSession


def test_a_recording_session_hands_the_same_snapshot_while_nothing_changed(tmp_path):
    """The dashboard draws a frame only for a new snapshot; while recording, every call
    made a new copy (with the recording's path), so every frame was drawn."""
    rec = Recorder(str(tmp_path / "r.jsonl"))
    s = LiveSession(RunConfig(arms=(Arm("a", url="http://127.0.0.1:9/v1"),)), recorder=rec)
    s.fold.apply(Tick(1_000_000_000))
    rec.active = True
    a, b = s.snapshot(), s.snapshot()
    assert a is b and a is not None and a.recording == rec.path
    s.fold.apply(Tick(2_000_000_000))
    c = s.snapshot()
    assert c is not a and c is not None and c.t == 2_000_000_000


def test_one_slo_share_for_the_arms_and_the_gate():
    """--fail-on-slo read a share it computed again beside the summary's; now the summary
    holds the run's share, made by the one function the arms' shares use."""
    import numpy as np

    tots = {}
    for arm, ttfts in (("a", [50.0, 150.0, 60.0]), ("b", [40.0, 300.0])):
        recs = [RequestRecord(rid=i, arm=arm, outcome="ok", t_sched=i, t_end=i + 1,
                              ttft_ms=v, e2e_ms=v + 10) for i, v in enumerate(ttfts)]  # fmt: skip
        t = ArmTotals(arm)
        t.add(RequestTable.from_records(recs), np.arange(len(recs)), Slo(ttft_ms=100.0))
        tots[arm] = t
    s = build_summary(started_at="", duration_s=1.0, target={}, totals=tots,
                      active_s={"a": 1.0, "b": 1.0}, alternations=0,
                      slo=Slo(ttft_ms=100.0))  # fmt: skip
    assert {k: s["slo"][k] for k in ("met", "counted", "fraction")} == {
        "met": 3, "counted": 5, "fraction": 0.6}  # fmt: skip
    assert s["arms"]["a"]["slo_fraction"] == slo_share(2, 3)


def test_the_windows_last_bucket_is_complete_for_a_run_started_off_a_boundary():
    """The engines' token buckets start at multiples of 250 ms on the monotonic clock;
    a run that started 100 ms past such a multiple has its buckets at 150, 400, 650…
    ms of its own clock. The window ends at the last bucket surely complete on that
    grid (it was aligned on the run's clock, and took a bucket still being filled)."""
    from tokmon.model.data.facts import Tokens
    from tokmon.model.data.records import TokenTick
    from tokmon.model.folding.fold import Fold, FoldSettings

    phase = 100_000_000  # the run began 100 ms past a bucket boundary
    fold = Fold(FoldSettings(arms=("a",), window_s=2.0))  # the grid: from the buckets
    first = 250_000_000 - phase  # the first whole bucket on the run's clock: 150 ms
    # the bucket at 2.65 s is still being filled: 3 tokens so far
    ticks = [TokenTick(first + i * 250_000_000, "a", 10 if i < 10 else 3) for i in range(11)]
    fold.apply(Tokens(tuple(ticks)))
    # at 2.9 s: the bucket at 2.65 s is still open (it ends at 2.9 s); 2.4 s ended at 2.65
    fold.apply(Tick(2_900_000_000))
    snap = fold.snapshot
    assert snap is not None
    # the window's 2 s end at 2.65 s: buckets 0.65 … 2.4 s, eight of 10 tokens: 40 tok/s
    assert snap.arm_views[0].window is not None
    assert abs(snap.arm_views[0].window.tokens_per_s - 40.0) < 1e-9


def test_an_arms_token_count_is_exact_and_bounded():
    """Tokens are counted in an arm's spans pro rata of each bucket's width, and a
    crafted bucket a year away costs one block of storage, not a year of them."""
    from tokmon.model.judge.active import ArmTokens

    a = ArmTokens(250)
    for t in range(-150, 1000, 250):  # the grid 150 ms off the run's clock
        a.add(t, "x", 10)
    assert a.within("x", [(0, 1000)]) == 40.0  # 4 + 10 + 10 + 10 + 6
    assert a.within("x", [(100, 350), (600, 725)]) == 15.0
    a.add(365 * 86_400 * 10**9, "x", 7)
    assert len(a.blocks["x"]) == 2
    assert a.within("x", [(0, 10**18)]) == 51.0  # 4 + 40 + the far bucket's 7


def test_a_defect_in_the_fold_neither_stops_the_run_nor_loses_a_request(make_sim, tmp_path):
    """A fact the fold cannot take (a defect in tokmon) is recorded all the same, the run
    goes on to its end, and it ends non-zero saying why; before, the reader thread died
    and the run hung until it was killed."""
    from tokmon.model.data.facts import Requests
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.recording.reader import read_recording

    sim = make_sim(schedule=(5.0, 2.0, 1))
    path = tmp_path / "r.jsonl"
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=4,
        duration_s=2.0,
        max_tokens=LengthDist("fixed", 8),
    )
    s = LiveSession(cfg, target=sim.url, model="sim-27b", recorder=Recorder(str(path)))
    apply, broke = s.fold.apply, []

    def breaks_once(fact):
        if isinstance(fact, Requests) and not broke:
            broke.append(fact.table.n)
            raise ValueError("a defect")
        return apply(fact)

    s.fold.apply = breaks_once  # type: ignore[method-assign]
    s.start()
    try:
        assert s.wait(30), "the run hung"
    finally:
        s.close()
    assert broke and any("internal error folding Requests: ValueError" in f for f in s.failures())
    rec = read_recording(str(path))
    folded = sum(s.final["arms"]["a"]["requests"]["by_outcome"].values())
    assert len(rec.records) == folded + broke[0]  # (the batch the fold missed is on file)
    assert any(e.kind == "error" and "a defect" in e.message for e in rec.events)
