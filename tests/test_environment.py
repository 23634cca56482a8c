"""The environment record: each engine's configuration parsed from its real (captured)
or documented answers, the network path timed against a simulator that adds a known
delay, the security posture both ways, and the record in the run, the reports and
``report --compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import tokmon

from tokmon.model.env.environment import (
    NetPath,
    Security,
    ServerEnv,
    config_of,
    differences,
    parse_config,
    proxy_evidence,
    warnings_for,
)
from tokmon.probes.env import metrics_config
from tokmon.sim.model import PROFILES

DATA = Path(__file__).parent / "data" / "env"
KEY = "sk-env-test-KEY-31337"


def vllm(name: str) -> tuple[str | None, str | None, dict]:
    engine, info, names, positions = metrics_config((DATA / name).read_text())
    answers = {f"metrics:{k}": v for k, v in info.items()}
    models = json.loads((DATA / "vllm-0.32-models.json").read_text())
    return config_of(answers, models, engine, names, positions)


def test_vllm_configuration_from_its_real_answers():
    """(#58: the model is the name it is served under, its weights' path beside it; a CPU
    build sizes its KV cache in bytes, and its GPU memory fraction is not shown.)"""
    engine, _, cfg = vllm("vllm-0.32-spec-metrics.txt")
    assert engine == "vllm"
    assert cfg == {
        "block_size": 128,
        "kv_cache_dtype": "auto",
        "prefix_caching": True,
        "kv_cache_bytes": 1073741824,
        "kv_cache_tokens": 524288,
        "max_model_len": 2048,
        "model": "tiny",
        "weights": "/root/.cache/tokmon-engines/tiny-llama",
        "spec": True,
        "spec_tokens": 3,  # one per-position series per speculative token (3 configured)
    }
    _, _, plain = vllm("vllm-0.32-plain-metrics.txt")
    assert plain["spec"] is False and "spec_tokens" not in plain
    assert plain["block_size"] == 128


def test_llamacpp_sglang_tgi_configuration_from_their_documented_answers():
    props = json.loads((DATA / "llamacpp-props.json").read_text())
    engine, version, cfg = config_of({"/props": props}, None)
    assert (engine, version) == ("llama.cpp", "b6100-abcdef12")
    assert cfg == {
        "model": "../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        "max_model_len": 8192,
        "slots": 4,
        "spec": True,
        "spec_tokens": 16,
    }
    props["default_generation_settings"]["speculative"] = False
    _, _, off = config_of({"/props": props}, None)
    assert off["spec"] is False and "spec_tokens" not in off  # n_max is a default then

    info = json.loads((DATA / "sglang-get_server_info.json").read_text())
    engine, version, cfg = config_of({"/get_server_info": info}, None)
    assert (engine, version) == ("sglang", "0.4.9")
    assert cfg["prefix_caching"] is True  # disable_radix_cache: false
    assert (cfg["spec"], cfg["spec_method"], cfg["spec_tokens"]) == (True, "EAGLE", 4)
    assert (cfg["tp_size"], cfg["quantization"], cfg["dtype"]) == (2, "fp8", "bfloat16")
    assert (cfg["max_model_len"], cfg["slots"], cfg["gpu_mem_util"]) == (32768, 256, 0.88)

    tgi = json.loads((DATA / "tgi-info.json").read_text())
    engine, version, cfg = config_of({"/info": tgi}, None)
    assert (engine, version) == ("tgi", "2.0.1")
    assert cfg == {
        "model": "bigscience/bloom-560m",
        "dtype": "torch.float16",
        "max_model_len": 2048,
        "slots": 128,
        "kv_cache_tokens": 32000,
    }


def test_hostile_configuration_values_are_never_figures():
    engine, _, cfg = parse_config(
        {
            "/props": {
                "total_slots": "1e400",
                "model_path": "\x1b]0;x\x07" + "m" * 5000,
                "default_generation_settings": {"n_ctx": True, "speculative": "maybe"},
            },
            "/get_server_info": {"unrelated": 1},  # an endpoint of that name, not SGLang's
        }
    )
    assert engine == "llama.cpp"
    assert "slots" not in cfg and "max_model_len" not in cfg and "spec" not in cfg
    assert len(cfg["model"]) <= 301
    # a crafted recording: wrong types give defaults, never an exception
    env = ServerEnv.from_json(
        {
            "url": "http://x/v1",
            "network": ["not", "a", "dict"],
            "security": {"api_status": 99999, "key_sent": "yes", "warnings": "nope"},
            "config": {"spec_tokens": "abc", "spec": "true", "block_size": -0.5},
        }
    )
    assert env is not None
    assert env.security.api_status is None and env.security.key_sent is False
    assert env.config == {"spec": True}
    assert ServerEnv.from_json({"url": 3}) is None and ServerEnv.from_json([]) is None


def test_proxy_evidence_and_warnings():
    ev = proxy_evidence(
        {"Via": "1.1 envoy", "server": "envoy", "x-envoy-upstream-service-time": "3", "a": "b"}
    )
    assert ev == ("via: 1.1 envoy", "x-envoy-upstream-service-time: 3", "server: envoy")
    assert proxy_evidence({"server": "uvicorn"}) == ()
    remote = NetPath(scheme="http", host="10.0.0.5", loopback=False)
    w = warnings_for(remote, Security(key_sent=True, api_status=200, metrics_status=200))
    assert any("in clear" in x for x in w)
    assert any("without a key" in x for x in w) and any("/metrics" in x for x in w)
    local = NetPath(scheme="http", host="127.0.0.1", loopback=True)
    assert warnings_for(local, Security(key_sent=True, api_status=200, metrics_status=200)) == ()
    tls = NetPath(scheme="https", host="h", loopback=False)
    assert warnings_for(tls, Security(cert_verified=False, key_sent=True, api_status=401)) == (
        "TLS certificate not verified",
    )


def test_differences_flag_configuration_not_timing_noise():
    a = ServerEnv("u", "vllm", "0.32.0", {"spec": False}, NetPath(rtt_ms=0.30))
    b = ServerEnv("u", "vllm", "0.33.0", {"spec": True, "spec_tokens": 3}, NetPath(rtt_ms=0.45))
    diff = {k: d for k, _, _, d in differences(a, b)}
    assert diff["engine"] and diff["speculative decoding"] and diff["spec tokens"]
    assert not diff["HTTP round trip"]  # 0.15 ms apart: noise
    c = ServerEnv("u", "vllm", "0.32.0", {"spec": False}, NetPath(rtt_ms=20.3))
    assert {k: d for k, _, _, d in differences(a, c)}["HTTP round trip"]


# ------------------------------------------------------------------ against the simulator


def test_env_of_a_simulator_with_a_key_and_a_known_delay(make_sim):
    sim = make_sim(spec=True, api_key=KEY, net_delay_s=0.020)
    p = tokmon("env", sim.url, "-F", "json", env={"TOKMON_API_KEY": KEY})
    assert p.returncode == 0, p.stderr
    assert KEY not in p.stdout
    d = json.loads(p.stdout)
    cfg = d["config"]
    assert d["engine"] == "tokmon-sim"
    assert (cfg["spec"], cfg["spec_tokens"]) == (True, PROFILES["27b-h100"].spec_k)
    assert (cfg["block_size"], cfg["max_model_len"], cfg["prefix_caching"]) == (16, 131072, False)
    assert cfg["slots"] == PROFILES["27b-h100"].max_batch  # from its /props, with the key
    net = d["network"]
    print("round trip with a 20 ms delay:", net["rtt_ms"], "min", net["rtt_min_ms"])
    # the delay is the simulator's timer: it fires no earlier, and within 0.5 ms of it
    assert 20.0 <= net["rtt_min_ms"] <= 20.5, net
    assert net["connect_ms"] < 20 and net["rtt_path"] == "/health" and net["loopback"]
    sec = d["security"]
    assert (sec["key_sent"], sec["api_status"], sec["api_open"]) == (True, 401, False)
    assert (sec["metrics_status"], sec["metrics_open"]) == (200, True)
    assert sec["warnings"] == []  # loopback
    text = tokmon("env", sim.url, env={"TOKMON_API_KEY": KEY})
    assert text.returncode == 0 and KEY not in text.stdout
    assert "refused without a key (HTTP 401)" in text.stdout
    assert "speculative decoding     on" in text.stdout
    # without the key: one line, exit 2
    bare = tokmon("env", sim.url)
    assert bare.returncode == 2 and "needs an API key" in bare.stderr
    assert bare.stderr.count("\n") == 1


def test_env_of_an_open_simulator(make_sim):
    sim = make_sim()
    p = tokmon("env", sim.url, "-F", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["config"]["spec"] is False and "spec_tokens" not in d["config"]
    sec = d["security"]
    assert (sec["key_sent"], sec["api_status"], sec["api_open"]) == (False, 200, True)
    bad = tokmon("env", "http://127.0.0.1:1/v1")
    assert bad.returncode == 2 and "connection refused" in bad.stderr


def _record(sim, tmp_path: Path, name: str) -> tuple[Path, dict]:
    rec, summ = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.json"
    p = tokmon(
        "run", "--url", sim.url, "--headless", "--no-gpu", "-c", "2", "-n", "16",
        "--max-tokens", "16", "--net-interval", "0.2s", "--record", str(rec),
        "--summary-json", str(summ),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return rec, json.loads(summ.read_text())


def test_a_run_records_its_environment_and_network(make_sim, tmp_path):
    sim = make_sim(net_delay_s=0.010, time_scale=4)
    rec, summary = _record(sim, tmp_path, "a")
    env = summary["environment"][sim.url]
    assert env["config"]["spec"] is False and env["network"]["rtt_min_ms"] >= 10.0
    assert "raw" not in env  # the raw answers stay in the recording's header
    net = summary["network"][sim.url]
    assert net["samples"] >= 1 and net["rtt_ms"]["min"] >= 10.0
    # every request's TTFT holds one round trip: the share is a real fraction
    assert 0 < net["ttft_share"]["default"] <= 1
    header = json.loads(rec.read_text().splitlines()[0])
    assert "/v1/models" in header["servers"][sim.url]["env"]["raw"]
    # the report leads with it, and its JSON is the live summary
    text = tokmon("report", str(rec))
    assert text.stdout.startswith("Environment\n"), text.stdout[:200]
    assert "HTTP round trip" in text.stdout and "Network during the run" in text.stdout
    js = json.loads(tokmon("report", str(rec), "-F", "json").stdout)
    assert js["environment"] == summary["environment"] and js["network"] == summary["network"]
    md = tokmon("report", str(rec), "-F", "md").stdout
    assert "| speculative decoding | off |" in md
    html = tokmon("report", str(rec), "-F", "html").stdout
    assert "<h2>Environment</h2>" in html and "HTTP round trip" in html


@pytest.mark.slow
def test_compare_names_every_difference_of_configuration(make_sim, tmp_path):
    a, _ = _record(make_sim(time_scale=4), tmp_path, "a")
    b, _ = _record(make_sim(spec=True, time_scale=4, net_delay_s=0.010), tmp_path, "b")
    p = tokmon("report", str(a), "--compare", str(b))
    assert p.returncode == 0, p.stderr
    marked = [ln for ln in p.stdout.splitlines() if ln.startswith("≠")]
    labels = {ln[2:26].strip() for ln in marked}
    assert labels == {"speculative decoding", "spec tokens", "HTTP round trip"}, marked
    assert marked[1].startswith("≠ spec tokens")  # in its place, after speculative decoding
    assert "KV block size" not in labels  # the same on both
    assert "  GPU driver" in p.stdout and "  client CPU" in p.stdout  # the machines too
    js = json.loads(tokmon("report", str(a), "--compare", str(b), "-F", "json").stdout)
    fields = {d["field"] for d in js["environment_differences"]}
    assert {"speculative decoding", "spec tokens", "HTTP round trip"} <= fields
    md = tokmon("report", str(a), "--compare", str(b), "-F", "md").stdout
    assert "| speculative decoding | off | on | **differs** |" in md


def test_env_over_tls_through_a_gateway(tmp_path):
    """An https server that says a gateway answered: TLS version and cipher recorded, the
    certificate not verified under --insecure (and a warning says so), the gateway's
    headers named; without --insecure the self-signed certificate is one clear line."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from helpers import self_signed

    key, crt = self_signed(tmp_path)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = b'{"object":"list","data":[{"id":"m"}]}' if "models" in self.path else b""
            self.send_response(200 if self.path in ("/v1/models", "/health") else 404)
            self.send_header("content-length", str(len(body)))
            self.send_header("via", "1.1 envoy")
            self.send_header("x-envoy-upstream-service-time", "2")
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{srv.server_address[1]}/v1"
    try:
        p = tokmon("env", url, "--insecure", "-F", "json")
        assert p.returncode == 0, p.stderr
        d = json.loads(p.stdout)
        sec, net = d["security"], d["network"]
        assert sec["tls_version"] in ("TLSv1.2", "TLSv1.3") and sec["cipher"]
        assert sec["cert_verified"] is False
        assert "TLS certificate not verified" in sec["warnings"]
        assert net["scheme"] == "https" and net["tls_ms"] is not None and net["rtt_ms"]
        assert "via: 1.1 envoy" in net["proxy"]
        strict = tokmon("env", url)
        assert strict.returncode == 2 and strict.stderr.count("\n") == 1, strict.stderr
    finally:
        srv.shutdown()
