"""Judgments that agree with each other (#58): each through the fold, with synthetic
facts on a known schedule — no wall clock, no server."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tokmon.model.contract.views import StepFigures
from tokmon.model.data.facts import Requests
from tokmon.model.data.records import Event, RequestRecord
from tokmon.model.data.table import RequestTable
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.model.judge.ladder import knee

S = 1_000_000_000


def request(rid: int, arm: str, kind: str, step: int, t: int, dec: float, seg: int = 0):
    return RequestRecord(
        rid=rid, arm=arm, outcome="ok", t_sched=t, t_end=t + S // 2, kind=kind, step=step,
        segment=seg, t_send=t, ttft_ms=50.0, e2e_ms=500.0, output_tokens=64,
        tpot_ms=1000.0 / dec, decode_tps=dec,
    )  # fmt: skip


def ladder_fold(shares: dict[str, dict[str, int]], speed: dict[str, dict[str, float]]) -> Fold:
    """A two-arm ladder of two steps whose arms ran the kinds in other shares: at each
    step ``shares[arm][kind]`` requests of each kind, decoding at ``speed[arm][kind]``
    tok/s (a little spread around it), plus four requests sent before the first step
    began (the ladder's edge: they belong to no step)."""
    f = Fold(FoldSettings(arms=("plain", "spec"), kind_weights=(("code", 1.0), ("creative", 1.0))))
    recs = [request(i, "plain", ("code", "creative")[i % 2], -1, 0, 40.0) for i in range(4)]
    t, rid, seg = S, 100, 0
    rng = np.random.default_rng(3)
    for step, value in enumerate(("4", "32")):
        for arm in ("plain", "spec"):
            f.apply(Event(t=t, kind="arm", message=f"arm → {arm}", data={"arm": arm}))
            f.apply(Event(t=t, kind="step", message="step",
                          data={"step": step, "arm": arm, "value": value,
                                "param": "concurrency", "warm_s": 0.0}))  # fmt: skip
            for kind, n in shares[arm].items():
                for _ in range(n):
                    t += S // 100
                    dec = speed[arm][kind] * (1 + 0.02 * rng.standard_normal())
                    recs.append(request(rid, arm, kind, step, t, dec, seg))
                    rid += 1
            seg += 1
            t += S
    f.apply(Requests(RequestTable.from_records(recs)))
    f.apply(Event(t=t, kind="ladder", message="ladder done", data={}))
    return f


def test_a_ladder_steps_speed_up_is_stratified_by_kind_and_agrees_with_the_crossover():
    """Spec ran 193 creative and 166 code requests to plain's other shares: the pooled
    ratio said spec loses at the step (×0.89) where code gave ×1.86 and creative ×0.78.
    One method now: each step's speed-up is the kinds' ratios combined with the mix's
    weights — between them, at their weighted geometric mean — and the crossover's
    per-kind ratios are its very strata; the finished ladder is whole (its edge
    requests, sent before the first step, are no stratum)."""
    shares = {"plain": {"code": 150, "creative": 40}, "spec": {"code": 40, "creative": 150}}
    speed = {"plain": {"code": 40.0, "creative": 40.0}, "spec": {"code": 80.0, "creative": 32.0}}
    s = ladder_fold(shares, speed).summary(20 * S)
    lad = s["ladder"]
    cross = {c["kind"]: {p[0]: p[1:] for p in c["points"]} for c in lad["crossover"]}
    assert set(cross) == {"code", "creative"}
    for sp in lad["speedup"]:
        r = sp["decode_ratio"]
        load = float(sp["value"])
        code, creative = cross["code"][load][0], cross["creative"][load][0]
        assert code > 1.9 and creative < 0.85  # the kinds' own ratios
        assert min(code, creative) < r["ratio"] < max(code, creative)
        geo = math.exp(0.5 * math.log(code) + 0.5 * math.log(creative))  # the mix: 1:1
        assert abs(r["ratio"] / geo - 1) < 0.10, (r["ratio"], geo)
        assert r["ratio"] > 1.1 and r["ci95"][0] > 1.0  # spec pays over this mix
        assert r["kinds"] == ["code", "creative"] and not r["partial"]
    # the whole run: stratified the same way, and whole
    dec = s["comparison"]["decode_tokens_per_s"]
    assert not dec["partial"] and dec["coverage"] == 1.0, dec
    assert 1.1 < dec["ratio"] < 1.4


def test_a_step_missing_a_kind_in_one_arm_says_so():
    shares = {"plain": {"code": 30, "creative": 30}, "spec": {"code": 30, "creative": 3}}
    speed = {"plain": {"code": 40.0, "creative": 40.0}, "spec": {"code": 80.0, "creative": 32.0}}
    s = ladder_fold(shares, speed).summary(20 * S)
    for sp in s["ladder"]["speedup"]:
        r = sp["decode_ratio"]
        assert r["partial"] and r["coverage"] == 0.5
        assert r["missing"] == [{"kind": "creative", "n": [30, 3]}]


def fig(value: str, tps: float, ttft95: float) -> StepFigures:
    return StepFigures(step=0, value=value, arm="a", duration_s=10.0, tokens_per_s=tps,
                       requests=10, ok=10, failed=0, error_rate=0.0, ttft_p50=ttft95 / 2,
                       ttft_p95=ttft95, tpot_p50=20.0, decode_p50=40.0, gpu_mem_max_pct=None,
                       kv_max_pct=None)  # fmt: skip


def test_the_knee_is_the_most_throughput_before_latency_takes_off():
    """A capacity search probed 1, 8, 11 and 12 streams (out of order): the knee was
    placed at 11 streams with 949 tok/s while 8 gave 1,100.8. It is where throughput
    stopped rising (against the best below, not the step before) while latency took
    off, and the load that gave the most below it."""
    steps = [fig("12", 960.0, 900.0), fig("1", 200.0, 100.0), fig("11", 949.0, 190.0),
             fig("8", 1100.8, 150.0)]  # fmt: skip
    k = knee(steps)
    assert k is not None and k.value == "8" and k.tokens_per_s == 1100.8
    # throughput still rising where latency takes off: no knee yet
    assert knee([fig("1", 100.0, 100.0), fig("2", 190.0, 150.0), fig("4", 380.0, 250.0)]) is None


def test_the_slo_verdict_is_said_wherever_figures_are():
    """``--slo`` showed no attainment on the dashboard or in the closing text (only the
    JSON's ``slo_fraction``). Now the verdict is in words, with its interval and the
    target: in the summary (whole run and per arm), the closing text and the reports'
    text, a scenario's headline, and the dashboard's panel, live."""
    from tokmon.model.data.facts import Tick
    from tokmon.model.judge.slo import slo_verdict
    from tokmon.model.statistics.stats import Slo
    from tokmon.ui.headless import summary_text
    from tokmon.ui.panels import compare_blocks

    slo = Slo(ttft_ms=100.0, tpot_ms=50.0, target=0.95)
    v = slo_verdict("", 1178, 1204, slo)
    assert v.text() == ("TTFT ≤ 100 ms and TPOT ≤ 50 ms: 97.8% of 1,204 requests "
                        "[96.9%, 98.5%] — meets the 95% target")  # fmt: skip
    assert slo_verdict("", 80, 100, slo).verdict == "misses the 95% target"
    assert "within its interval" in slo_verdict("", 96, 100, slo).verdict
    f = Fold(FoldSettings(arms=("plain", "spec"), slo=slo, scenario="chat",
                          scenario_headline="TTFT and TPOT against the SLO (goodput)"))  # fmt: skip
    recs = [request(i, ("plain", "spec")[i % 2], "chat", -1, i * S // 10,
                    40.0 if i % 7 else 10.0) for i in range(200)]  # fmt: skip
    recs = [r if r.rid % 9 else dataclasses.replace(r, ttft_ms=250.0) for r in recs]
    f.apply(Requests(RequestTable.from_records(recs)))
    f.apply(Tick(t=30 * S))
    s = f.summary(30 * S)
    whole = s["slo"]
    # TTFT 250 ms: every 9th; TPOT 100 ms: every 7th; both: every 63rd
    assert whole["counted"] == 200 and whole["met"] == 200 - 23 - 29 + 4
    assert whole["text"].startswith("TTFT ≤ 100 ms and TPOT ≤ 50 ms: 76.0% of 200 requests")
    assert whole["verdict"] == "misses the 95% target" and whole["meets"] is False
    assert set(s["arms"]["plain"]["slo"]) >= {"fraction", "ci95", "verdict", "text"}
    text = summary_text(s)
    assert "SLO TTFT ≤ 100 ms and TPOT ≤ 50 ms: 76.0% of 200 requests" in text
    assert "the headline is TTFT and TPOT against the SLO (goodput) — TTFT ≤ 100 ms" in text
    snap = f.snapshot
    assert snap is not None and [x.arm for x in snap.slo] == ["plain", "spec"]
    lines = [ln.plain for b in compare_blocks(snap, 200, False) for ln in b.lines]
    assert any(
        ln.startswith("SLO TTFT ≤ 100 ms and TPOT ≤ 50 ms (whole run, 95% target)")
        and "plain " in ln
        and "% of 100 requests [" in ln
        for ln in lines
    ), lines


@pytest.mark.slow
def test_a_serve_ab_report_describes_both_servers(tmp_path):
    """A ``serve=`` A/B (spec off / on): the text report showed one environment (spec
    off; the spec arm's only in the JSON), the header the unfilled ``--port {port}``,
    and every planned restart was also logged as "server restart detected". Now each
    arm's server is described, what differs first, its command as run; a planned
    restart is told by its own events only."""
    import re

    from helpers import tokmon

    rec = tmp_path / "ab.jsonl"
    r = tokmon("run", "--arm", "plain:serve=tokmon sim --port {port}", "--arm",
               "spec:serve=tokmon sim --port {port} --spec on", "--alternate", "5s",
               "--cycles", "1", "-c", "4", "--max-tokens", "16", "--headless", "--no-gpu",
               "--record", str(rec), "--status-interval", "1h", "--metrics-interval", "0.25s",
               timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "restart detected" not in r.stderr and "{port}" not in r.stdout
    assert re.search(r"spec @ serve: tokmon sim --port \d+ --spec on", r.stdout), r.stdout
    for fmt in ("text", "md"):
        p = tokmon("report", str(rec), "-F", fmt)
        assert p.returncode == 0, p.stderr
        out = p.stdout
        assert "the servers differ" in out and "restart detected" not in out
        assert "speculative decoding" in out.split("the servers differ")[1].split("arm plain:")[0]
        assert re.search(r"arm spec: serve: tokmon sim --port \d+ --spec on", out), out


def test_the_quality_line_is_whole_at_every_width():
    """The quality line was cut at 200 columns (``… correct [9…``): the panel's width
    there is a third of it, and a head too long for its first part now has a line of
    its own."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from fakes import FakeSource

    from tokmon.model.judge.quality import Accuracy
    from tokmon.ui.panels import compare_blocks

    snap = dataclasses.replace(
        FakeSource().snapshot(),
        quality=(Accuracy("baseline", 50, 47, 0.84, 0.98), Accuracy("spec", 50, 48, 0.87, 0.99,
                                                                      unjudged=2)),
    )  # fmt: skip
    for width in (58, 64, 80, 120):
        lines = [ln.plain for b in compare_blocks(snap, width) for ln in b.lines
                 if "correct" in ln.plain or "quality" in ln.plain]  # fmt: skip
        text = " ".join(lines)
        assert "baseline 47/50 correct [84%, 98%]" in text, (width, lines)
        assert "spec 48/50 correct [87%, 99%], 2 unjudged" in text, (width, lines)
        assert all(len(ln) <= width for ln in lines), (width, lines)


def test_a_host_too_busy_to_measure_is_said():
    """Against a server sharing the client's two cores, the dashboard's run gave TTFT
    p50 909 ms where the headless one gave 29 ms, with ``host 100% · loop lag 2400 ms``
    in the header and no warning in the closing summary. The summary now says for which
    share of the run the host was saturated, what that may have inflated, and that the
    server shares the host."""
    from tokmon.model.data.facts import Sample, Status, Tick
    from tokmon.model.data.records import EngineStatus
    from tokmon.ui.headless import summary_text

    f = Fold(FoldSettings(arms=("a",), target="http://127.0.0.1:8000/v1"))
    f.apply(Requests(RequestTable.from_records(
        [request(i, "a", "chat", -1, i * S // 10, 40.0) for i in range(50)])))  # fmt: skip
    for i in range(100):
        cpu = 100.0 if i % 10 < 6 else 40.0  # saturated 60% of the time
        f.apply(Sample(i * S, "host", {"host_cpu_pct": cpu, "self_cpu_pct": 85.0}))
        f.apply(Status(EngineStatus(t=i * S, in_flight=4, sent=i, paused=False, arm="a",
                                    level=4.0, mode="concurrency",
                                    loop_lag_ms=2400.0 if i % 10 < 3 else 1.0,
                                    send_lag_ms=0.1)))  # fmt: skip
    f.apply(Tick(t=100 * S))
    c = f.summary(100 * S)["client"]
    assert c["host_saturated_share"] == 0.6 and c["loop_late_share"] == 0.3
    assert c["server_on_this_host"] and c["loop_lag_ms_max"] == 2400.0
    text = summary_text(f.summary(100 * S))
    line = next(ln for ln in text.splitlines() if ln.startswith("WARNING: "))
    assert "saturated (CPU ≥ 90%) for 60% of the run" in line
    assert "the server runs on this host" in line and "may be slower" in line
    # a free host: one quiet line
    g = Fold(FoldSettings(arms=("a",), target="http://gpu-box:8000/v1"))
    for i in range(20):
        g.apply(Sample(i * S, "host", {"host_cpu_pct": 20.0, "self_cpu_pct": 10.0}))
    assert g.summary(20 * S)["client"]["verdict"].startswith(
        "the client's host was free enough to measure"
    )


def test_the_smaller_things_a_new_user_met():
    """#58, 9: a mistyped option gets a "did you mean"; the time axis reads as a length
    of time, not a clock; `--scenario code` with one arm says a speed-up needs two; the
    latencies of a window that holds both arms say so."""
    import sys

    from helpers import tokmon

    from tokmon.cli.scenarios import headline
    from tokmon.ui.panels import chart_labels, span_words

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from fakes import FakeSource

    r = tokmon("run", "--url", "http://127.0.0.1:9/v1", "--concurrncy", "4")
    assert r.returncode == 2 and "(--concurrncy: did you mean --concurrency?)" in r.stderr
    assert [span_words(s) for s in (80, 4800, 86_400, 5_400 * 2)] == [
        "80 s", "80 min", "24 h", "3 h"]  # fmt: skip
    assert "needs 2 arms" in headline("code", 1) and "needs" not in headline("code", 2)
    snap = FakeSource().snapshot()  # two arms, both with requests in the window
    labels = chart_labels(snap)
    assert labels["ttft"][1].startswith("2 arms · ") and labels["decode"][1].startswith("2 arms")


async def test_at_80x24_the_events_panel_shows_an_event_not_its_title_alone():
    from tokmon.model.data.commands import End
    from tokmon.sources.replay import ReplaySource
    from tokmon.ui.app import DashboardApp

    src = ReplaySource(str(__import__("pathlib").Path(__file__).parent / "data" / "rec"
                           / "ladder-ab.jsonl.gz"))  # fmt: skip
    src.start()
    try:
        src.command(End())
        app = DashboardApp(src)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            app.draw()
            await pilot.pause(0.3)
            lines = [s.text.rstrip() for s in app.screen._compositor.render_strips()]
    finally:
        src.close()
    ev = [ln for ln in lines if ln.lstrip().startswith("events")]
    assert ev and ev[0].strip() != "events" and "stopping: draining" in "\n".join(lines)
