"""The usage fields and the way to the server, per request (#61): what a prefix-cache hit
saves, predicted outputs, output length asked against got, and each new connection's
setup in its phases — from a simulator's counts and tokmon's own stamps."""

from __future__ import annotations

import json

from helpers import tokmon

from tokmon.engine.chunks import interpret
from tokmon.engine.measure import StreamMeter
from tokmon.sim.model import parse_profile
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_what_a_cache_hit_saves_and_how_the_requests_got_there(tmp_path):
    """A 1,024-token shared system prompt, cached after its first use (the simulator's
    prefix cache, its prefill 0.2 ms a token): hits are faster by what their cached
    tokens would have cost — about 200 ms per 1,000 cached tokens; every request asked
    max_tokens 16 and got them; new connections as many as the streams, each with its
    setup in phases."""
    prof = parse_profile("zero", "prefill_ms_per_token=0.2,step_base_ms=2")
    summ = tmp_path / "s.json"
    with SimProcess(SimConfig(profile=prof, seed=4)) as sim:
        r = tokmon("run", "--url", sim.url, "-n", "40", "-c", "2", "--shared-prefix", "1024",
                   "--prompt-tokens", "1200", "--max-tokens", "16", "--ignore-eos",
                   "--headless", "--no-gpu", "--status-interval", "1h", "--summary-json",
                   str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(summ.read_text())
    u = s["usage"]["arms"]["default"]
    assert u["cache_hits"] >= 30 and u["hit_rate_p50"] > 0.8, u
    assert 150 < u["hit_saves_ms_per_1k_cached_tokens"] < 250, u
    assert (u["max_tokens_asked"], u["stopped_early"], u["got_of_asked_p50"]) == (40, 0, 1.0)
    c = s["connection"]["arms"]["default"]
    assert 2 <= c["new_connections"] <= 4 and c["requests"] == 40
    assert c["dns_ms_p50"] is not None and c["tcp_ms_p50"] is not None and c["tls_ms_p50"] is None
    assert "a hit saves" in r.stdout and "opened a connection" in r.stdout


def test_predicted_outputs_are_read_from_the_usage():
    m = StreamMeter(0)
    m.on_event(1_000_000, interpret(b'{"choices":[{"delta":{"content":"x"}}]}'))
    m.on_event(2_000_000, interpret(
        b'{"choices":[],"usage":{"completion_tokens":2,"completion_tokens_details":'
        b'{"accepted_prediction_tokens":5,"rejected_prediction_tokens":2}}}'))  # fmt: skip
    out = m.finish(3_000_000)
    assert (out["pred_accepted"], out["pred_rejected"]) == (5, 2)


def test_the_dashboard_says_only_what_tells_and_wraps_it_whole():
    """On the dashboard a prefix cache that never hit, no early stop and connections kept
    alive are left out (the report says them); connections opened by a fifth of the
    requests are shown, wrapped between words at the panel's width, never cut."""
    from tokmon.model.judge.connection_judgment import ArmWay, ConnectionView
    from tokmon.model.judge.usage_judgment import ArmUsage, UsageView

    quiet = ArmUsage("a", 70, 0.0, 0, None, None, None, (0, 0, 0), 70, 0, 1.0)
    assert UsageView((quiet,)).panel_lines() == ()
    assert "hit rate p50 0% of 70 requests" in "\n".join(UsageView((quiet,)).lines())
    early = ArmUsage("a", 0, None, 0, None, None, None, (0, 0, 0), 70, 14, 0.5)
    assert "20% stopped before their max_tokens" in "\n".join(UsageView((early,)).panel_lines())

    kept = ConnectionView((ArmWay("a", 100, 8, 0.4, 0.1, 0.3, None, 1.2),))
    assert kept.panel_lines() == () and "8 of 100 requests" in "\n".join(kept.lines())
    churn = ConnectionView((ArmWay("a" * 30, 100, 60, 0.4, 0.1, 0.3, 2.5, 1.2),))
    assert "60 of 100 requests opened a connection" in "\n".join(churn.panel_lines())

    from dataclasses import replace

    from fakes import FakeSource
    from rich.text import Text

    from tokmon.ui.panels import compare_blocks

    snap = replace(FakeSource().snapshot(), judgments={"connection": churn})
    got = [ln.plain for b in compare_blocks(snap, 48) for ln in b.lines
           if isinstance(ln, Text)]  # fmt: skip
    way = [ln for ln in got if "connection" in ln or "TLS" in ln or "TTFB" in ln]
    assert way and all(len(ln) <= 48 and not ln.endswith("…") for ln in got), got
    assert "TLS 2.50" in " ".join(got)
