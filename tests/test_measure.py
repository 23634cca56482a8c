from tokmon.engine.chunks import ChunkInfo
from tokmon.engine.measure import NS_PER_MS, StreamMeter


def text(n_chars=3, content=True, cum=None):
    return ChunkInfo(
        text_chars=n_chars, content_chars=n_chars if content else 0, completion_tokens=cum
    )


def ms(x):
    return int(x * NS_PER_MS)


def test_multi_token_chunks_with_final_usage():
    # 3 tokens per chunk every 15 ms after 120 ms, 60 tokens.
    m = StreamMeter(t_send=0)
    for i in range(20):
        m.on_event(ms(120 + 15 * i), text())
    m.on_event(ms(120 + 15 * 19), ChunkInfo(completion_tokens=60))
    f = m.finish(ms(500))
    assert f["ttft_ms"] == 120
    assert f["output_tokens"] == 60 and not f["tokens_estimated"]
    assert abs(f["tpot_ms"] - 285 / 59) < 1e-9
    assert abs(f["decode_tps"] - 59 / 0.285) < 1e-6
    assert f["chunks"] == 20
    assert m.untick_tokens() == 40  # 20 ticked one per chunk, 40 more from usage


def test_continuous_usage_gives_exact_ticks():
    m = StreamMeter(t_send=0)
    ticks = [m.on_event(ms(10 * (i + 1)), text(cum=3 * (i + 1))) for i in range(4)]
    assert ticks == [3, 3, 3, 3]
    assert m.untick_tokens() == 0


def test_reasoning_first_stream_ttft_vs_ttfc():
    m = StreamMeter(t_send=ms(5))
    m.on_event(ms(50), text(content=False))  # reasoning
    m.on_event(ms(80), text(content=False))
    m.on_event(ms(200), text())
    f = m.finish(ms(210))
    assert f["ttft_ms"] == 45 and f["ttfc_ms"] == 195


def test_one_token_output_has_no_tpot():
    m = StreamMeter(t_send=0)
    m.on_event(ms(30), text())
    m.on_event(ms(31), ChunkInfo(completion_tokens=1))
    f = m.finish(ms(31))
    assert f["output_tokens"] == 1 and "tpot_ms" not in f and "decode_tps" not in f
    assert f["e2e_ms"] == 30


def test_no_usage_counts_chunks_as_estimate():
    m = StreamMeter(t_send=0)
    for i in range(5):
        m.on_event(ms(10 + i), text())
    f = m.finish(ms(20))
    assert f["output_tokens"] == 5 and f["tokens_estimated"]


def test_llama_timings_count_is_not_an_estimate():
    m = StreamMeter(t_send=0)
    for i in range(5):
        m.on_event(ms(10 + i), text())
    m.on_event(ms(16), ChunkInfo(timings_predicted_n=5))
    assert m.finish(ms(20))["tokens_estimated"] is False


def test_stalls_and_gaps():
    m = StreamMeter(t_send=0, stall_ms=100)
    for t in (10, 20, 250, 260):
        m.on_event(ms(t), text())
    f = m.finish(ms(300))
    assert m.stalls == 1 and f["stalls"] == 1
    assert abs(f["max_gap_ms"] - 230) < 1e-3


def test_no_text_at_all_e2e_is_stream_end():
    m = StreamMeter(t_send=0)
    f = m.finish(ms(40))
    assert f["e2e_ms"] == 40 and "ttft_ms" not in f
