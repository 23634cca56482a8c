"""``--prometheus``: tokmon's own metrics scraped during a run against the simulator and
read with Prometheus's own parser; at the end, the counters equal the summary exactly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers import tokmon
from prometheus_client.parser import text_string_to_metric_families

PY = sys.executable

# every metric docs/METRICS.md documents (the gauge of a ladder step only runs a ladder)
DOCUMENTED = {
    "tokmon_ttft_seconds": "histogram",
    "tokmon_tpot_seconds": "histogram",
    "tokmon_e2e_seconds": "histogram",
    "tokmon_max_chunk_gap_seconds": "histogram",
    "tokmon_requests": "counter",
    "tokmon_requests_excluded": "counter",
    "tokmon_output_tokens": "counter",
    "tokmon_alerts": "counter",
    "tokmon_arm_active": "gauge",
    "tokmon_streams_in_flight": "gauge",
    "tokmon_send_lag_seconds": "gauge",
    "tokmon_load_level": "gauge",
    "tokmon_acceptance_rate": "gauge",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, object]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fam, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for s in fam.samples if s.name == name}


def test_metrics_during_the_run_and_equal_to_the_summary_at_its_end(make_sim, tmp_path):
    sim = make_sim(spec=True, time_scale=4)
    port = free_port()
    summ = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TOKMON_API_KEY")}
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "run", "--url", sim.url, "-c", "4", "-n", "60", "--warmup", "4",
         "--mix", "code=0.5,chat=0.5", "--max-tokens", "32", "--headless", "--no-gpu",
         "--prometheus", f"127.0.0.1:{port}", "--prometheus-linger", "120s",
         "--summary-json", str(summ)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        # during the run: every documented metric, of its type, as Prometheus parses it
        deadline = time.monotonic() + 60
        fams: dict[str, object] = {}
        while time.monotonic() < deadline:
            try:
                fams = scrape(port)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if samples(fams["tokmon_requests"], "tokmon_requests_total"):
                break
            time.sleep(0.1)
        for name, typ in DOCUMENTED.items():
            assert name in fams and fams[name].type == typ, name
        assert samples(fams["tokmon_arm_active"], "tokmon_arm_active") == {
            (("arm", "default"),): 1.0
        }
        # the end: the summary is written when the run has ended; the endpoint lingers
        while not summ.exists() and time.monotonic() < deadline + 60:
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            time.sleep(0.1)
        s = json.loads(summ.read_text())["arms"]["default"]
        end = scrape(port)
    finally:
        p.terminate()
        p.wait(30)
    req = samples(end["tokmon_requests"], "tokmon_requests_total")
    assert {dict(k)["outcome"]: v for k, v in req.items()} == s["requests"]["by_outcome"]
    tok = samples(end["tokmon_output_tokens"], "tokmon_output_tokens_total")
    assert tok == {(("arm", "default"),): s["output_tokens"]}
    exc = samples(end["tokmon_requests_excluded"], "tokmon_requests_excluded_total")
    assert exc == {(("arm", "default"), ("why", "warmup")): s["requests"]["warmup"]}
    # every counted TTFT in a bucket, split by task kind
    counts = samples(end["tokmon_ttft_seconds"], "tokmon_ttft_seconds_count")
    assert {dict(k)["kind"] for k in counts} == {"code", "chat"}
    assert sum(counts.values()) == s["ttft_ms"]["count"]
    inf = samples(end["tokmon_ttft_seconds"], "tokmon_ttft_seconds_bucket")
    assert sum(v for k, v in inf.items() if dict(k)["le"] == "+Inf") == s["ttft_ms"]["count"]


def test_prometheus_listens_on_loopback_unless_allowed(tmp_path: Path):
    p = tokmon("run", "--url", "http://127.0.0.1:1/v1", "--prometheus", "0.0.0.0:9464", "-n", "1")
    assert p.returncode == 2 and "not a loopback address" in p.stderr
    bad = tokmon("run", "--url", "http://127.0.0.1:1/v1", "--prometheus", "nope", "-n", "1")
    assert bad.returncode == 2 and "expected HOST:PORT" in bad.stderr


@pytest.mark.parametrize("path", ["contrib/grafana/tokmon.json"])
def test_grafana_dashboard_uses_only_metrics_that_exist(path):
    """Every tokmon_ series a panel queries is one tokmon serves."""
    import re

    root = Path(__file__).resolve().parent.parent
    text = (root / path).read_text()
    dash = json.loads(text)
    assert dash["panels"]
    names = set(re.findall(r"tokmon_[a-z0-9_]+", text))
    served = set(DOCUMENTED) | {"tokmon_ladder_step"}
    suffixes = ("_bucket", "_count", "_sum", "_total")
    for n in names:
        base = next((n[: -len(x)] for x in suffixes if n.endswith(x)), n)
        assert base in served, n


def test_the_kinds_a_scrape_names_are_capped():
    """A prompts file of 50k kinds: only the first 64 get a label of their own, the rest
    count as kind="other", and the exposition says how many were folded (it grew to 14 MB
    and 1.5 s a scrape)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from tokmon.model.data.facts import Requests
    from tokmon.model.data.records import RequestRecord
    from tokmon.model.data.table import RequestTable
    from tokmon.sources.prometheus import MAX_KINDS, TokmonCollector

    col = TokmonCollector()
    recs = [
        RequestRecord(rid=i, arm="a", outcome="ok", t_sched=0, t_end=1, ttft_ms=10.0,
                      e2e_ms=20.0, output_tokens=2, kind=f"kind-{i}\n\x1b" + "x" * 200)
        for i in range(2000)
    ]  # fmt: skip
    col.fact(Requests(RequestTable.from_records(recs)))
    reg = CollectorRegistry()
    reg.register(col)
    text = generate_latest(reg).decode()
    kinds = {line.split('kind="')[1].split('"')[0] for line in text.splitlines()
             if line.startswith("tokmon_ttft_seconds_count")}  # fmt: skip
    assert len(kinds) == MAX_KINDS + 1 and "other" in kinds
    assert "tokmon_kind_label_folds_total 1936.0" in text
    assert len(text) < 2_000_000
