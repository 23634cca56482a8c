"""Answers checked for correctness, per arm: the built-in questions, how an answer is
read, the accuracy's interval and the difference between arms — against simulators whose
answer model is set (right, or wrong at a known rate per task)."""

from __future__ import annotations

import json
import random

import numpy as np
from helpers import tokmon

from tokmon.model.data.commands import Check
from tokmon.model.judge.quality import first_json_object, is_correct, newcombe, read_number
from tokmon.model.workloads.questions import (
    QUALITY_PASS,
    TASKS,
    builtin_items,
    parse_items,
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
    assert [it.task for it in items[: len(TASKS)]] == list(TASKS)
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


def test_a_short_program_is_answered_by_tokmon_not_by_running_text():
    """The code task's answer is computed by tokmon's own loop: x = 3, three doublings
    less i·2 each: 3 → 6 → 10 → 16."""
    it = next(i for i in builtin_items(12, seed=1) if i.task == "code")
    assert "print(x)" in it.prompt.messages[0][1] and it.check == "number"
    q = (
        "What does this Python program print?\n\nx = 3\nfor i in range(3):\n"
        "    x = x * 2 - i * 2\nprint(x)\n\nAnswer with the number."
    )
    assert solve(q) == ("code", "16")


def test_a_teams_own_questions_from_a_file(tmp_path):
    """--quality-file: its questions replace the built-in set, each checked by its own
    rule and counted under its own task; --quality N asks N of each arm on their own
    (the arms take turns request by request) and stops."""
    arith = (
        "A market stall has 40 pears. It buys 12 more, then sells 2. How many pears "
        "does it have now? Answer with the number."
    )
    lines = [
        {"prompt": arith, "answer": 50, "check": "number", "task": "ledger"},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": arith},
            ],
            "answer": "51",
            "check": "number",
            "task": "trap",
        },
        {"prompt": "Say the magic word.", "answer": "xyzzy", "check": "contains", "task": "magic"},
    ]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    items = parse_items(qa.read_text(), "qa.jsonl")
    assert [i.kind for i in items] == ["qa:ledger", "qa:trap", "qa:magic"]
    assert items[1].prompt.messages[0] == ("system", "Be brief.")
    out = tmp_path / "s.json"
    with SimProcess(SimConfig(seed=1, schedule=(20.0, 2.0, 1))) as a:
        r = tokmon("run", "--arm", f"x:url={a.url}", "--arm", f"y:url={a.url}",
                   "--quality", "9", "--quality-file", str(qa), "-c", "3", "--headless",
                   "--summary-json", str(out), "--status-interval", "1h", "--no-gpu")  # fmt: skip
    assert r.returncode == 0, r.stderr
    q = json.loads(out.read_text())["quality"]["arms"]
    for arm in ("x", "y"):
        by = q[arm]["by_task"]
        assert q[arm]["n"] == 9 and set(by) == {"ledger", "trap", "magic"}, q[arm]
        assert by["ledger"]["correct"] == by["ledger"]["n"] > 0
        assert by["trap"]["correct"] == 0 and by["magic"]["correct"] == 0


def test_bad_quality_files_and_options_are_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    url = ["run", "--url", "http://127.0.0.1:9/v1", "--headless"]
    for text, says in (('{"prompt": "hi", "answer": 1, "check": "number"}\nnot json\n',
                        "line 2: not a JSON object"),
                       ('{"prompt": "hi", "answer": "x", "check": "regex"}', "line 1: \"check\""),
                       ('{"prompt": "hi", "answer": "seven", "check": "number"}',
                        "must be a number"),
                       ('{"prompt": "hi", "answer": [1], "check": "json"}', "a JSON object"),
                       ('{"answer": 1, "check": "number"}', "give \"prompt\" or \"messages\""),
                       ('{"prompt": "hi", "answer": 1, "check": "number", "task": "A B"}',
                        "\"task\" must be"),
                       ("\n\n", "no questions in it")):  # fmt: skip
        bad.write_text(text)
        r = tokmon(*url, "--quality", "5", "--quality-file", str(bad))
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (
            text,
            r.stderr,
        )
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for args, says in ((["--quality-file", str(bad)], "--quality-file asks its questions"),
                       (["--quality", "5", "--requests", "9"], "--quality N and --requests"),
                       (["--quality", "5", "--quality-probes", "5%"], "exclude each other"),
                       (["--quality-file", str(tmp_path / "none.jsonl"), "--quality", "3"],
                        "cannot read")):  # fmt: skip
        r = tokmon(*url, *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_quality_pass_on_demand():
    """`o` on the dashboard (the session's "check" command): the next QUALITY_PASS
    requests of the arm receiving load are probes, in a run that had none; the output
    check needs a second arm and is not started with one."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sources.live import LiveSession

    with SimProcess(SimConfig(seed=3, schedule=(10.0, 1.0, 1), time_scale=8)) as sim:
        cfg = RunConfig(arms=(Arm("a", url=sim.url, model="sim-27b"),), concurrency=4,
                        requests=QUALITY_PASS + 200, max_tokens=LengthDist("fixed", 8))  # fmt: skip
        s = LiveSession(cfg, target=sim.url, model="sim-27b")
        s.start()
        said = s.command(Check())
        assert said == f"quality pass: {QUALITY_PASS} questions", said
        assert s.wait(60)
        s.close()
    acc = s.fold.quality.accuracy("a")
    assert acc is not None and acc.n == QUALITY_PASS and acc.correct == QUALITY_PASS
    assert any(e.kind == "quality" and "quality pass" in e.message for e in s.fold.events)


def test_a_quality_pass_asks_every_arm_when_the_arms_take_turns():
    """`o` promised 50 questions per arm; only the arm in force got them (baseline 50/50,
    nothing for spec). The arm in force is asked now, the other when its turn comes."""
    import time

    from tokmon.model.data.commands import Switch
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sources.live import LiveSession

    sched = SimConfig(seed=3, schedule=(10.0, 1.0, 1), time_scale=8)
    with SimProcess(sched) as a, SimProcess(sched) as b:
        cfg = RunConfig(arms=(Arm("base", url=a.url, model="sim-27b"),
                              Arm("spec", url=b.url, model="sim-27b")), concurrency=4,
                        requests=2 * QUALITY_PASS + 300, max_tokens=LengthDist("fixed", 8))  # fmt: skip
        s = LiveSession(cfg, target=a.url, model="sim-27b")
        s.start()
        said = s.command(Check())
        assert said.startswith(f"quality pass: {QUALITY_PASS} questions of each arm"), said
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the arm in force has its answers
            with s.lock:
                got = s.fold.quality.accuracy("base")
            if got is not None and got.n >= QUALITY_PASS:
                break
            time.sleep(0.05)
        s.command(Switch())  # the other arm's turn: its questions now
        assert s.wait(60)
        s.close()
    for arm in ("base", "spec"):
        acc = s.fold.quality.accuracy(arm)
        assert acc is not None and acc.n == QUALITY_PASS, (arm, acc)


def test_an_alert_raised_at_the_last_tick_is_in_the_last_snapshot():
    """A quality verdict reached on the run's last requests is raised at its last tick,
    after that tick's snapshot was made: it is still shown (the headless lines, the last
    frame), live and when the same facts are folded again, as a replay folds them."""
    from tokmon.model.data.facts import Requests, Tick
    from tokmon.model.data.records import RequestRecord
    from tokmon.model.data.table import RequestTable, record_to_line
    from tokmon.model.folding.fold import Fold, FoldSettings

    def fold_of(events_from: list | None) -> Fold:
        fold = Fold(FoldSettings(arms=("plain", "quant")), derive=events_from is None)
        recs = [RequestRecord(rid=i, arm=("plain", "quant")[i % 2], outcome="ok",
                              t_sched=10**8 * i, t_end=10**8 * i + 10**8, ttft_ms=50.0,
                              e2e_ms=100.0, output_tokens=8, kind="qa:arith",
                              quality=1.0 if i % 2 == 0 else 0.0)
                for i in range(80)]  # fmt: skip
        fold.apply(Requests(RequestTable.from_lines([record_to_line(r, 0) for r in recs],
                                                    fold.vocab)))  # fmt: skip
        raised = fold.apply(Tick(10 * 10**9, final=True))
        for ev in events_from or []:  # (a replay: the events the recording holds)
            fold.apply(ev)
        fold.raised = raised  # type: ignore[attr-defined]
        return fold

    live = fold_of(None)
    alerts = [e for e in live.raised if e.data.get("alert") == "quality"]
    assert len(alerts) == 1
    assert live.snapshot is not None and live.snapshot.done
    assert alerts[0] in live.snapshot.events
    again = fold_of(list(live.raised))
    assert again.snapshot is not None and again.snapshot.events == live.snapshot.events
