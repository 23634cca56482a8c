"""--find-capacity: the highest load that meets the SLO, found by search against a
server whose capacity is known, in fewer probe-seconds than a ladder over the range."""

from __future__ import annotations

import json

import pytest
from helpers import tokmon

from tokmon.model.judge.capacity import CapacityPlan, CapacitySearch, Probe, judge, wilson
from tokmon.recording.play import summary_of
from tokmon.recording.reader import read_recording
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_wilson_and_the_sequential_verdict():
    lo, hi = wilson(75, 75)
    assert 0.951 < lo < 0.952 and hi == 1.0
    plan = CapacityPlan("concurrency", goodput=0.95, min_s=2, max_s=8)
    assert judge(plan, 500, 500, 1.0) is None  # before its minimum, never
    assert judge(plan, 75, 75, 2.0) == ("pass", False)
    assert judge(plan, 50, 50, 2.0) is None  # [0.93, 1]: not yet clear of 95%
    assert judge(plan, 40, 10, 2.0) == ("fail", False)
    assert judge(plan, 50, 48, 8.0) == ("pass", True)  # out of time: its point decides


def test_the_search_doubles_then_bisects_to_one_stream():
    """A server that holds 11 streams: 1, 2, 4, 8, 16 (fails), 12 (fails), 10, 11."""
    s = CapacitySearch(CapacityPlan("concurrency"))
    seen = []
    while (lv := s.next_level()) is not None:
        seen.append(lv)
        ok = lv <= 11
        s.add(Probe(lv, 100, 100 if ok else 0, 0, 0, "pass" if ok else "fail", 2.0))
    assert seen == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (s.passed, s.failed, s.done) == (11, 12, True)
    assert s.verdict_text().startswith("capacity 11 streams (12 streams fails")
    # failing at the first level: below it, and at one stream the search says so
    s = CapacitySearch(CapacityPlan("concurrency", start=4))
    while (lv := s.next_level()) is not None:
        s.add(Probe(lv, 100, 0, 0, 0, "fail", 2.0))
    assert s.passed is None and s.stopped == "fails at 1 stream"


def test_an_open_loop_search_brackets_to_five_percent():
    """Rates: doubling from 16, then bisecting until the bracket is within 5%."""
    s = CapacitySearch(CapacityPlan("rate", start=16))
    seen = []
    while (lv := s.next_level()) is not None:
        seen.append(lv)
        ok = lv <= 100
        s.add(Probe(lv, 100, 100 if ok else 0, 0, 0, "pass" if ok else "fail", 2.0))
    assert seen[:4] == [16, 32, 64, 128] and s.done
    assert s.passed is not None and s.failed is not None
    assert 95 <= s.passed <= 100 < s.failed and s.failed - s.passed <= 0.05 * s.passed
    assert s.verdict_text().startswith(f"capacity {s.passed:.3g} req/s")


def test_two_arms_capacities_give_their_ratio_with_the_bracket_left_open():
    """Plain holds 8 streams (9 fails), spec 12 (13 fails): ×1.5, and since each true
    capacity lies in [capacity, fails_at), the ratio lies in [12/9, 13/8]; what each
    serves there comes from its probe's step."""
    from tokmon.model.judge.capacity import capacity_summary
    from tokmon.report.summary_text import capacity_lines

    searches = {
        "plain": {"param": "concurrency", "capacity": 8.0, "fails_at": 9.0, "done": True},
        "spec": {"param": "concurrency", "capacity": 12.0, "fails_at": 13.0, "done": True},
    }
    steps = [
        {"arm": "plain", "value": "8", "tokens_per_s": 400.0, "cost_per_million_tokens": 1.5,
         "ttft_p95": 90.0, "tpot_p50": 20.0},
        {"arm": "spec", "value": "12", "tokens_per_s": 900.0, "cost_per_million_tokens": None,
         "ttft_p95": 95.0, "tpot_p50": 12.0},
    ]  # fmt: skip
    out = capacity_summary(searches, steps)
    assert out["spec"]["ratio_to"] == {"baseline": "plain", "ratio": 1.5,
                                       "bracket": [round(12 / 9, 4), round(13 / 8, 4)]}  # fmt: skip
    assert out["plain"]["serves"]["tokens_per_s"] == 400.0 and "ratio_to" not in out["plain"]
    text = "\n".join(capacity_lines(out))
    assert "there it serves 400.0 tok/s at 1.5/Mtok, TTFT p95 90" in text
    assert "capacity spec/plain ×1.50 (the searches' brackets allow 1.33 to 1.62)" in text


@pytest.mark.slow
def test_find_capacity_against_a_server_of_known_capacity(tmp_path):
    """TTFT × (in flight / 8)² above 8 streams, base 40 ms, an SLO of 86 ms: the capacity
    is ⌊√(86/40)·8⌋ = 11 streams (75.6 ms: 10 ms to spare for a loaded machine's
    lateness; 12 streams are 90 ms, over it however early the loops wake), found in fewer
    probe-seconds than a ladder of 1–16 at the probes' minimum; the replay's summary is
    the live one."""
    out, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    cfg = SimConfig(schedule=(40.0, 2.0, 1), schedule_capacity=8, seed=1)
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "--find-capacity", "concurrency",
                   "--slo", "ttft=86", "--max-tokens", "8", "--ignore-eos",
                   "--probe-duration", "2s,8s", "--step-warmup", "1s", "--headless",
                   "--summary-json", str(out), "--record", str(rec), "--no-gpu",
                   "--status-interval", "1h", "--capacity-at-least", "12", timeout=300)  # fmt: skip
    s = json.loads(out.read_text())
    c = s["capacity_search"]["default"]
    # (10: more than 10 ms late for one request in 20 at 11 streams, on a very busy host)
    assert c["done"] and c["capacity"] in (10, 11), c
    # found below the 12 asked: exit 1 for CI, the summary written all the same
    found = f"capacity {c['capacity']:.1f} is below --capacity-at-least 12"
    assert r.returncode == 1 and found in r.stderr, r.stderr
    assert c["fails_at"] == c["capacity"] + 1
    assert "ttft met by" in c["why_next_fails"]
    assert c["probe_seconds"] < 16 * 2.0  # a ladder of 1..16 at 2 s a step: 32 probe-s
    assert "capacity (default, concurrency, ttft=86 for 95% of requests): " in r.stdout
    assert c["serves"]["tokens_per_s"] > 0 and "there it serves" in r.stdout
    got = summary_of(read_recording(str(rec)))
    assert got["capacity_search"] == s["capacity_search"]


@pytest.mark.slow
def test_find_capacity_over_rate_against_a_server_of_known_capacity(tmp_path):
    """Open loop against the same kind of server (base TTFT 100 ms, 4 streams before it
    slows, 64 tokens 2 ms apart): above about N / (TTFT + decode) = 4 / 0.226 s ≈ 17.7
    req/s its backlog grows without end, so that is the open-loop capacity under a TTFT
    SLO of twice the base. The overloaded probes' backlogs are aborted after a probe's
    longest (recorded as cancelled, no error burst), so the probes below them start
    clean and the search converges within 5%."""
    out, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    cfg = SimConfig(schedule=(100.0, 2.0, 1), schedule_capacity=4, seed=1)
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "--find-capacity", "rate", "--arrival", "constant",
                   "--slo", "ttft=200", "--max-tokens", "64", "--ignore-eos",
                   "--probe-duration", "1s,3s", "--step-warmup", "0.5s", "--headless",
                   "--summary-json", str(out), "--record", str(rec), "--no-gpu",
                   "--status-interval", "1h", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    c = s["capacity_search"]["default"]
    assert c["done"] and 15 <= c["capacity"] <= 19, c
    assert c["fails_at"] > c["capacity"] and c["fails_at"] - c["capacity"] <= 0.05 * c["capacity"]
    assert "ttft met by" in c["why_next_fails"] or "failed" in c["why_next_fails"]
    # 32 req/s (about twice the capacity) left a backlog: aborted, not inherited
    kinds = [e["kind"] for e in s["events"]]
    assert "abort" in kinds and "errors" not in kinds, s["events"]
    assert s["arms"]["default"]["requests"]["by_outcome"]["cancelled"] > 0
    tb = read_recording(str(rec)).requests  # each aborted request says why
    why = {tb.vocab["error"][e] for o, e in zip(tb.cols["outcome"], tb.cols["error"], strict=True)
           if tb.vocab["outcome"][o] == "cancelled"}  # fmt: skip
    assert why == {"aborted: the backlog of a failed probe, after 3 s"}, why


def test_find_capacity_needs_an_slo_and_one_schedule(tmp_path):
    for extra, says in (([], "--find-capacity needs --slo"),
                        (["--slo", "ttft=80", "--ladder", "concurrency=1,2"], "exclude each other"),
                        (["--slo", "ttft=80", "--probe-duration", "9s,2s"], "MAX is below MIN")):  # fmt: skip
        r = tokmon("run", "--url", "http://127.0.0.1:9/v1", "--find-capacity", "concurrency",
                   "--headless", *extra)  # fmt: skip
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_the_crossover_is_where_the_model_puts_it(tmp_path):
    """Two simulators, speculative decoding off and on, a ladder of 4–32 streams on a
    half-code, half-creative mix. By the model a verify step costs 24 + 0.6·b + 4.8 ms
    against 24 + 0.12·b, so creative text (1.43 tokens a step) stops paying at about 13
    streams — between the steps 8 and 16 — and costs about 17% at 32; code (3.5 tokens a
    step) pays at every load."""
    out = tmp_path / "s.json"
    with (
        SimProcess(SimConfig(seed=1, time_scale=5)) as a,
        SimProcess(SimConfig(seed=2, spec=True, time_scale=5)) as b,
    ):
        r = tokmon("run", "--arm", f"plain:url={a.url}", "--arm", f"spec:url={b.url}",
                   "--ladder", "concurrency=4,8,16,32", "--step-duration", "5s",
                   "--step-warmup", "1s", "--mix", "code=1,creative=1", "--max-tokens", "64",
                   "--ignore-eos", "--headless", "--summary-json", str(out), "--no-gpu",
                   "--status-interval", "1h", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    cross = {c["kind"]: c for c in json.loads(out.read_text())["ladder"]["crossover"]}
    assert set(cross) == {"code", "creative"}, cross  # per kind only: a mix's median is neither
    assert cross["code"]["crossover_at"] is None  # pays at every load
    assert cross["creative"]["crossover_at"] in (8.0, 16.0), cross["creative"]
    assert cross["creative"]["costs_at"] == 32.0 and 0.08 < cross["creative"]["cost"] < 0.26
    assert (
        "crossover: spec on creative pays" in r.stdout
        or "crossover: spec on creative does not" in r.stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,extra,headline",
    [
        ("chat", ["-d", "3s"], "TTFT and TPOT against the SLO"),
        ("serve", ["--probe-duration", "1s,3s", "--step-warmup", "0.5s", "--max-tokens", "8"],
         "capacity and goodput"),
        ("batch", ["-d", "3s", "--max-tokens", "32"], "output tokens/s and cost"),
        ("code", ["-d", "3s"], "decode speed-up by task kind"),
    ],
)  # fmt: skip
def test_each_scenario_runs_and_says_what_it_is(tmp_path, name, extra, headline):
    """A preset is a bundle of options below the user's own: each runs against the
    simulator, and its summary (and the closing text) names it and its headline."""
    out = tmp_path / "s.json"
    cfg = SimConfig(schedule=(20.0, 1.0, 4), schedule_capacity=6, seed=1)
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "--scenario", name, *extra, "--headless",
                   "--summary-json", str(out), "--no-gpu", "--status-interval", "1h",
                   timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert s["scenario"]["name"] == name and headline in s["scenario"]["headline"]
    assert f"scenario {name}: the headline is" in r.stdout
    a = s["arms"]["default"]
    assert a["requests"]["ok"] > 0
    if name == "serve":
        c = s["capacity_search"]["default"]
        assert c["done"] and c["capacity"] is not None
    if name == "code":
        assert set(a["by_kind"]) == {"code", "structured"}
    if name == "chat":
        assert s["slo"]["fraction"] is not None


def test_a_probe_is_sized_by_evidence_not_by_the_clock():
    """A probe of 60 s took 9 requests of 4-second answers (goodput 9/9 [70%, 100%]) and
    the search could not finish: a probe now runs to its request budget, its time limit
    what that budget takes at the requests' measured duration; while doubling, a probe
    whose first requests all met the SLOs passes as a scout, and the capacity found is
    confirmed with the full test."""
    from tokmon.model.judge.capacity import time_limit

    plan = CapacityPlan("concurrency", goodput=0.95, min_s=2)
    # at 95% a clear pass needs 73 requests that all met it: a budget of 93
    assert plan.requests_for() == 93 and wilson(73, 73)[0] >= 0.95 > wilson(72, 72)[0]
    assert time_limit(plan, 1, 4.0) == 558.0  # 93 requests of 4 s at one stream, ×1.5
    assert time_limit(plan, 32, 4.0) == 30.0  # (at least 30 s)
    assert time_limit(plan, 1, None) == 600.0  # nothing measured yet
    assert time_limit(CapacityPlan("concurrency", max_s=45), 1, 4.0) == 45.0  # the user's
    assert judge(plan, 5, 5, 3.0, 360.0, scouting=True) == ("pass", True)
    assert judge(plan, 10, 10, 3.0, 360.0, scouting=False) is None  # the full test
    assert judge(plan, 10, 9, 3.0, 360.0, scouting=True) is None  # one missed: run on
    assert judge(plan, 93, 89, 30.0, 600.0) == ("pass", True)  # its budget: by its point
    assert judge(plan, 20, 19, 361.0, 360.0) == ("pass", True)  # its time: by its point
    # doubling with scouts, then the capacity found probed once more in full
    s = CapacitySearch(plan)
    seen, lefts = [], []
    while (lv := s.next_level()) is not None:
        seen.append(lv)
        scout = s.scouting
        if lv <= 8:
            s.add(Probe(lv, 5 if scout else 75, 5 if scout else 75, 0, 0, "pass", 5.0, scout))
        else:
            s.add(Probe(lv, 40, 30, 0, 0, "fail", 5.0))
        lefts.append(s.left())
    assert seen == [1, 2, 4, 8, 16, 12, 10, 9, 8]
    # said once it brackets: 16 failed, 8 passed as a scout: 12, 10, 9, then 8 in full
    assert lefts[4:] == ["about 4 more probes", "about 3 more probes", "about 2 more probes",
                         "about 1 more probe", ""]  # fmt: skip
    assert (s.passed, s.failed, s.done) == (8, 9, True) and not s._last()[8].by_point
    assert s.to_json()["at_capacity"]["by_point"] is False  # the confirmation, not the scout


SCALE = 1  # the answers' length: 1 is 2 s (the suite's), 2 the issue's 4 s


@pytest.mark.slow
def test_a_search_on_long_answers_finishes_in_minutes(tmp_path):
    """A server that holds 8 streams (a batch of 8) with 2-second answers, an SLO of
    TTFT ≤ 0.5 s (a ninth stream waits a whole answer): the search finds 8, 9 failing,
    the capacity confirmed with the full test, and its probes take under two minutes.
    (The issue's 4-second answers under TTFT ≤ 1 s, on a clock twice as slow, took 215 s
    of the four minutes asked: ``bench/capacity_long.py`` runs them; here the same search
    at half the scale, to keep the suite's time.)"""
    from tokmon.sim.model import parse_profile

    prof = parse_profile("zero", f"step_base_ms={25 * SCALE},max_batch=8")
    with SimProcess(SimConfig(profile=prof, seed=3)) as sim:
        out = tmp_path / "s.json"
        r = tokmon("run", "--url", sim.url, "--find-capacity", "concurrency", "--slo",
                   f"ttft={500 * SCALE}", "--max-tokens", "80", "--ignore-eos", "--headless",
                   "--no-gpu", "--summary-json", str(out), "--status-interval", "1h",
                   timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    cap = json.loads(out.read_text())["capacity_search"]["default"]
    print(f"answers of {80 * 25 * SCALE / 1000:g} s: capacity {cap['capacity']}, fails at "
          f"{cap['fails_at']}, {cap['probe_seconds']:.0f} probe-s")  # fmt: skip
    assert (cap["capacity"], cap["fails_at"], cap["done"]) == (8.0, 9.0, True), cap
    top = cap["at_capacity"]
    assert not top["by_point"] and top["ci95"][0] >= 0.95, top  # confirmed in full
    assert cap["probe_seconds"] < 120 * SCALE, cap["probe_seconds"]
