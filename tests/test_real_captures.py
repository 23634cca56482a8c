"""Every field tokmon reads from real engines, on responses captured from them
(vLLM 0.32 CPU build and llama-cpp-python 0.3.36, tiny local model; the requests are
the tests' own, captured with curl from servers that scripts/real-engines.sh set up)."""

from pathlib import Path

from tokmon.engine.chunks import interpret
from tokmon.engine.measure import StreamMeter
from tokmon.engine.sse import SSEParser
from tokmon.probes.server import neutral

REAL = Path(__file__).parent / "data" / "real"


def meter_of(name: str) -> StreamMeter:
    m = StreamMeter(t_send=0)
    p = SSEParser()
    t = 1_000_000
    for payload in p.feed((REAL / name).read_bytes()) + p.flush():
        info = interpret(payload)
        if info.done:
            break
        m.on_event(t, info)
        t += 1_000_000
    return m


def test_vllm_stream_counts_from_usage():
    m = meter_of("vllm-0.32-cpu_stream.txt")
    assert m.output_tokens() == (6, False)
    assert m.text_chunks >= 1 and m.finish_reason == "length"
    assert m.prompt_tokens and m.prompt_tokens > 0


def test_vllm_ngram_per_request_spec_metrics():
    m = meter_of("vllm-0.32-cpu-ngram_stream.txt")
    assert m.output_tokens() == (48, False)
    sp = m.spec
    assert sp is not None and sp.source == "response:vllm"
    assert sp.drafts == 12 and sp.draft_tokens == 34 and sp.accepted_tokens == 34
    assert sp.acceptance_length == 1 + 34 / 12


def test_vllm_metrics_real_exposition():
    n = neutral((REAL / "vllm-0.32-cpu_metrics.txt").read_text())
    assert n["engine"] == "vllm" and "kv" in n and "gen_tokens" in n and "running" in n
    s = neutral((REAL / "vllm-0.32-cpu-ngram_metrics.txt").read_text())
    assert (s["drafts"], s["draft_tokens"], s["accepted"]) == (12, 34, 34)
    assert s["per_pos"][0] == 12


def test_llama_cpp_stream_without_usage_counts_every_step():
    """llama-cpp-python 0.3.36: one chunk per token, no usage even when asked, and tokens
    that decode to no text still come as a chunk with "content": ""."""
    import json

    m = meter_of("llama-cpp-python-0.3.36_stream.txt")
    usage = json.loads((REAL / "llama-cpp-python-0.3.36_response.json").read_text())["usage"]
    assert m.usage_tokens is None and m.finish_reason == "length"
    assert m.output_tokens() == (usage["completion_tokens"], True)  # the same request, unstreamed
    assert m.empty_steps == 2 and m.text_chunks == usage["completion_tokens"] - 2
