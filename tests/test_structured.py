"""Tool calls and structured output as workload kinds (#61): each measured as its own
kind and checked as it comes back, and guided decoding's cost measured against the same
prompts without the schema, on a simulator whose cost is set."""

from __future__ import annotations

import json

from helpers import tokmon

from tokmon.model.workloads.structured import SCHEMA, TOOL, check_call, check_json, validate
from tokmon.recording.reader import read_recording
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_the_checks_read_answers_and_calls():
    ok = {"name": "latency", "value": 120, "unit": "ms", "ok": True}
    assert check_json(json.dumps(ok)) == ""
    assert check_json('{"name": "x"}') == "$: no 'value'"
    assert check_json(json.dumps({**ok, "unit": "hours"})).startswith("$.unit: 'hours' is not")
    assert check_json(json.dumps({**ok, "value": True})) == "$.value: not an integer"
    assert check_json("{nope") == "not JSON" and check_json("[" * 5000) == "not JSON"
    args = {"service": "checkout", "metric": "latency", "window_minutes": 15}
    assert check_call("get_metric", json.dumps(args)) == ""
    assert check_call("", "{}") == "no tool called"
    assert check_call("get_metric", '{"service": "a"}') == "$: no 'metric'"
    assert validate([1, "x"], {"type": "array", "items": {"type": "integer"}}) == (
        "$[1]: not an integer"
    )
    assert SCHEMA["required"] and TOOL["function"]["parameters"]["required"]


def test_guided_decodings_cost_and_tool_calls_against_a_simulator(tmp_path):
    """Every token under the schema costs 2 ms more than the schedule's 10: guided TPOT
    over free is 1.2 — measured within 5%, its interval holding it up to the timers'
    lateness; every guided answer
    and every tool call validates; tool calls are a kind of their own."""
    cfg = SimConfig(schedule=(20.0, 10.0, 1), guided_ms=2.0, seed=3)
    rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "-n", "120", "-c", "4", "--mix",
                   "guided=2,tools=1", "--max-tokens", "64", "--headless", "--no-gpu",
                   "--status-interval", "1h", "--record", str(rec), "--summary-json",
                   str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(summ.read_text())
    a = s["structured"]["arms"]["default"]
    tpot = a["guided_cost"]["tpot"]
    assert abs(tpot["ratio"] / 1.2 - 1) < 0.05, tpot
    # The interval is the requests' sampling error; the schedule's own is its timers'
    # lateness, a ms or so at either end of a guided answer's ~200 ms of gaps, which no
    # number of requests averages away (CI: 1.2014 [1.2003, 1.2029]). So the interval
    # holds 1.2 up to 1%.
    assert tpot["ci95"][0] <= 1.2 * 1.01 and tpot["ci95"][1] >= 1.2 * 0.99, tpot
    assert a["valid"]["guided"]["valid"] == a["valid"]["guided"]["checked"] > 20
    assert a["valid"]["tools"]["valid"] == a["valid"]["tools"]["checked"] > 20
    kinds = s["arms"]["default"]["by_kind"]
    assert {"guided", "guided-free", "tools"} <= set(kinds)
    recs = read_recording(str(rec)).records
    assert all(x.valid == 1.0 for x in recs if x.kind in ("guided", "tools"))
    assert all(x.valid is None for x in recs if x.kind == "guided-free")
    assert "guided decoding costs (guided / the same prompts free): TPOT ×1.2" in r.stdout


def test_a_greedy_answer_under_a_schema_depends_on_the_prompt_only(make_sim):
    """As its text does (an output check compares arms on it): the same greedy request
    under a schema, or with a tool to call, is answered the same twice; another prompt
    is answered otherwise."""
    import httpx

    from tokmon.model.workloads.structured import guided_body, tools_body

    sim = make_sim(seed=5)

    def ask(extra: dict, text: str = "Record the latency as JSON.") -> str:
        body = {"model": "sim-27b", "messages": [{"role": "user", "content": text}],
                "max_tokens": 64, "temperature": 0, **extra}  # fmt: skip
        r = httpx.post(sim.url + "/chat/completions", json=body, timeout=30)
        return json.dumps(r.json()["choices"][0]["message"])

    for extra in (guided_body(), tools_body()):
        first = ask(extra)
        assert ask(extra) == first and ask(extra, "Record the errors as JSON.") != first
