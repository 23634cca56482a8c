"""What the server said when requests failed: the failures' causes in its own words, per
arm, grouped where only their numbers differ, bounded however many distinct messages
a server invents."""

from __future__ import annotations

import json

from helpers import tokmon

from tokmon.model.contract.registry import Context
from tokmon.model.data.table import RequestTable
from tokmon.model.judge.errors_judgment import KEEP, Errors
from tokmon.sim.faults import Faults
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_a_failing_run_says_why_in_the_servers_words(tmp_path):
    """A simulator that answers a third of the requests with HTTP 500: the summary, the
    closing text and the JSON give the server's message with its count, not only
    ``http_5xx 10``."""
    summ = tmp_path / "s.json"
    with SimProcess(SimConfig(schedule=(2.0, 1.0, 1), faults=Faults(http_500=0.3), seed=5)) as sim:
        r = tokmon("run", "--url", sim.url, "-n", "40", "-c", "4", "--max-tokens", "8",
                   "--headless", "--no-gpu", "--status-interval", "1h",
                   "--summary-json", str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(summ.read_text())
    failed = s["arms"]["default"]["requests"]["by_outcome"]["http_5xx"]
    e = s["errors"]["arms"]["default"]
    assert failed > 0 and e["failed"] == failed
    assert e["causes"] == [
        {
            "outcome": "http_5xx",
            "requests": failed,
            "message": "HTTP 500: Internal server error (simulated fault)",
        }
    ]
    assert f"default: {failed} × http_5xx: HTTP 500: Internal server error" in r.stdout


def _table(errors: list[tuple[str, str]]) -> RequestTable:
    return RequestTable.from_lines(
        [{"id": i, "arm": "a", "o": o, "ts": i * 10**6, "te": i * 10**6 + 10**6, "err": e}
         for i, (o, e) in enumerate(errors)],
        {},
    )  # fmt: skip


def test_messages_differing_in_their_numbers_are_one_and_the_count_is_bounded():
    j = Errors(Context(None, ("a",)))
    many = [("http_4xx", f"HTTP 400: you asked 2{i:03d} tokens, the limit is 2048")
            for i in range(30)]  # fmt: skip
    j.requests(_table(many + [("timeout", "no token for 30 s")] * 5 + [("ok", "")] * 9))
    v = j.view(0, {})
    assert v is not None
    (a,) = v.arms
    assert a.failed == 35 and [(c.outcome, c.requests) for c in a.causes] == [
        ("http_4xx", 30), ("timeout", 5)]  # fmt: skip
    assert a.causes[0].message == "HTTP 400: you asked 2000 tokens, the limit is 2048"
    # a server that invents a message for each request: at most KEEP kept, all counted
    j2 = Errors(Context(None, ("a",)))
    j2.requests(_table([("http_5xx", f"error id {chr(65 + i % 26)}{i}x{'y' * (i // 26)}")
                        for i in range(KEEP * 3)]))  # fmt: skip
    st = j2.arms["a"]
    assert len(st.by) == KEEP and st.failed == KEEP * 3
    assert sum(n for n, _ in st.by.values()) + st.others == KEEP * 3
    lines = j2.view(0, {}).lines()  # type: ignore[union-attr]
    assert lines[-1].endswith(f"{KEEP * 3 - 3} more, with other messages"), lines
