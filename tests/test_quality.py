"""Answers checked for correctness, per arm: the built-in questions, how an answer is
read, the accuracy's interval and the difference between arms — against simulators whose
answer model is set (right, or wrong at a known rate per task)."""

from __future__ import annotations

import json
import random

import numpy as np
from helpers import tokmon

from tokmon.model.quality import (
    TASKS,
    builtin_items,
    first_json_object,
    is_correct,
    newcombe,
    read_number,
    solve,
    wrong,
)
from tokmon.recording.play import summary_of
from tokmon.recording.reader import read_recording
from tokmon.report.render import render
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_every_builtin_question_has_one_checkable_answer():
    """The same seed gives the same questions; each task comes in turn; the simulator's
    solver reads the answer back from the question alone; the answer checks and a wrong
    one (off by one, a letter or word out of place, a field changed) does not."""
    items = builtin_items(50, seed=3)
    assert items == builtin_items(50, seed=3) and items != builtin_items(50, seed=4)
    assert [it.task for it in items[:5]] == list(TASKS)
    for it in items:
        q = it.prompt.messages[0][1]
        assert solve(q) == (it.task, it.answer)
        assert is_correct(it.check, it.answer, f" The answer is {it.answer}. then some words")
        assert not is_correct(it.check, it.answer, f" The answer is {wrong(it.task, it.answer)}.")
        assert not is_correct(it.check, it.answer, "")
    assert solve("Write a poem about the sea.") is None


def test_an_answer_is_read_tolerantly_and_never_run():
    assert read_number("so 3 + 4 = 7, and the total is 1,234.") == 1234.0
    assert read_number(r"we get \boxed{42} (not 43)") == 42.0
    assert read_number("no number here") is None
    assert is_correct("number", "-5", "The change is -5.")
    assert is_correct("exact", "Paris", "  'Paris'.\nIt is the capital.")
    assert not is_correct("exact", "Paris", "It is Paris.")
    assert is_correct("contains", "ember falcon", "Sorted: Ember Falcon!")
    assert not is_correct("contains", "ember falcon", "emberfalcon")
    text = 'Here it is: {"name": "Ada", "age": 36, "city": "Oslo", "extra": "{}"} done'
    assert first_json_object(text) == {"name": "Ada", "age": 36, "city": "Oslo", "extra": "{}"}
    assert is_correct("json", '{"name": "Ada", "age": 36}', text)
    assert is_correct("json", '{"age": 36}', '{"age": 36.0}')
    assert not is_correct("json", '{"age": 37}', text)
    assert first_json_object("{not json} and {also: no}") is None
    # model output is only ever text: code in it is neither run nor evaluated
    assert not is_correct("number", "4", "__import__('os').system('touch /tmp/x') 2+2")


def test_the_difference_interval_holds_the_set_difference_in_at_least_90_percent():
    """An arm 10 points worse (90% against 80%), 150 answers each, 400 seeded runs: the
    Newcombe interval of the difference holds −0.10 in at least 90% of them (95% asked);
    at equal rates it holds 0 as often."""
    rng = np.random.default_rng(11)
    for p1, p2 in ((0.9, 0.8), (0.85, 0.85), (1.0, 0.9)):
        hits = 0
        for _ in range(400):
            k1, k2 = int(rng.binomial(150, p1)), int(rng.binomial(150, p2))
            _, lo, hi = newcombe(k1, 150, k2, 150)
            hits += lo <= p2 - p1 <= hi
        assert hits / 400 >= 0.90, (p1, p2, hits)


def test_quality_probes_per_arm_against_simulators_with_a_known_answer_model(tmp_path):
    """A right arm and a "quantised" one that gets every arithmetic question wrong: every
    answer of the first checks, none of the second's arithmetic does, its other tasks
    all do; the probes stay out of the speed-up (it covers the whole chat workload, not
    partial); the report and the replay say the same."""
    out, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    with (
        SimProcess(SimConfig(seed=1, schedule=(20.0, 2.0, 1))) as a,
        SimProcess(SimConfig(seed=2, schedule=(20.0, 2.0, 1), wrong={"arith": 1.0})) as b,
    ):
        r = tokmon("run", "--arm", f"plain:url={a.url}", "--arm", f"quant:url={b.url}",
                   "--alternate", "1s", "-c", "4", "-d", "4s", "--max-tokens", "16",
                   "--quality-probes", "50%", "--headless", "--summary-json", str(out),
                   "--record", str(rec), "--status-interval", "1h", "--no-gpu", "--seed", "5")  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    q = s["quality"]
    plain, quant = q["arms"]["plain"], q["arms"]["quant"]
    assert plain["n"] >= 10 and plain["correct"] == plain["n"]
    assert quant["by_task"]["arith"]["correct"] == 0 and quant["by_task"]["arith"]["n"] > 0
    for task, v in quant["by_task"].items():
        if task != "arith":
            assert v["correct"] == v["n"], (task, v)
    d = q["difference"]
    assert d["other"] == "quant" and d["diff"] < 0 and d["ci95"][0] <= d["diff"] <= d["ci95"][1]
    dec = s["comparison"]["decode_tokens_per_s"]
    assert not dec["partial"] and set(s["comparison"]["by_kind"]) == {"chat"}
    assert (
        "quality probes (answers checked" in r.stdout and "quality cost quant − plain" in r.stdout
    )
    assert summary_of(read_recording(str(rec)))["quality"] == q
    # worse beyond the interval: an alert, once, live and in the summary
    alerts = [x for x in s["alerts"] if x.get("alert") == "quality"]
    if d["ci95"][1] < 0:
        assert len(alerts) == 1 and alerts[0]["arm"] == "quant", s["alerts"]
        assert "ALERT" in r.stderr and "quality: quant − plain" in r.stderr
    assert f"quant: {quant['correct']}/{quant['n']} correct" in render(
        read_recording(str(rec)), "text"
    )


def test_bad_quality_options_are_one_line():
    for args, says in ((["run", "--url", "http://127.0.0.1:9/v1", "--quality-probes", "150%"],
                        "--quality-probes: the share must be above 0"),
                       (["run", "--url", "http://127.0.0.1:9/v1", "--quality-probes", "some"],
                        "--quality-probes: expected a share"),
                       (["sim", "--wrong", "poetry=0.1"], "--wrong: unknown task 'poetry'"),
                       (["sim", "--wrong", "arith=2"], "--wrong: rate of arith must be in [0, 1]")):  # fmt: skip
        r = tokmon(*args, "--headless") if args[0] == "run" else tokmon(*args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_same_questions_for_the_same_seed_whatever_the_rng_state():
    random.seed(1)
    a = builtin_items(5, seed=9)
    random.seed(2)
    assert builtin_items(5, seed=9) == a
