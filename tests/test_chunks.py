import json

import pytest

from tokmon.engine.chunks import ProtocolError, interpret


def ev(obj):
    return json.dumps(obj).encode()


def test_role_only_chunk_carries_no_text():
    i = interpret(ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    assert i.text_chars == 0
    i = interpret(ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}))
    assert i.text_chars == 0


def test_content_and_finish():
    i = interpret(ev({"choices": [{"delta": {"content": "abc"}, "finish_reason": "stop"}]}))
    assert (i.text_chars, i.content_chars, i.finish_reason) == (3, 3, "stop")


def test_reasoning_both_names_count_as_text_not_content():
    for key in ("reasoning", "reasoning_content"):
        i = interpret(ev({"choices": [{"delta": {key: "think"}}]}))
        assert i.text_chars == 5 and i.content_chars == 0


def test_tool_call_delta_is_text():
    i = interpret(
        ev({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}}]})
    )
    assert i.text_chars >= 1 and i.content_chars == 0


def test_usage_chunk_with_empty_choices():
    i = interpret(ev({"choices": [], "usage": {"completion_tokens": 60, "prompt_tokens": 9}}))
    assert i.text_chars == 0 and i.completion_tokens == 60 and i.prompt_tokens == 9


def test_completions_text_field():
    i = interpret(ev({"choices": [{"text": "hi", "index": 0}]}))
    assert i.content_chars == 2


def test_error_event_after_200_both_shapes():
    assert interpret(ev({"error": {"message": "boom", "code": 500}})).error.startswith("boom")
    assert interpret(ev({"object": "error", "message": "old vllm"})).error == "old vllm"


def test_done():
    assert interpret(b"[DONE]").done


def test_garbage_is_protocol_error():
    with pytest.raises(ProtocolError):
        interpret(b'{"choices": [')
    with pytest.raises(ProtocolError):
        interpret(b"[1, 2]")


def test_prefill_progress_chunk_has_no_text():
    i = interpret(
        ev({"choices": [{"delta": {}}], "prompt_progress": {"total": 10, "processed": 5}})
    )
    assert i.text_chars == 0


def test_llama_cpp_timings_and_vllm_spec_metrics():
    i = interpret(
        ev(
            {
                "choices": [{"delta": {}, "finish_reason": "length"}],
                "timings": {"predicted_n": 32, "draft_n": 40, "draft_n_accepted": 30},
            }
        )
    )
    assert i.timings_predicted_n == 32
    assert (i.spec.draft_tokens, i.spec.accepted_tokens) == (40, 30)
    i = interpret(
        ev(
            {
                "choices": [],
                "usage": {"completion_tokens": 5},
                "metrics": {
                    "speculative_decoding": {
                        "num_spec_steps": 2,
                        "num_draft_tokens": 6,
                        "num_accepted_draft_tokens": 3,
                        "mean_acceptance_length": 2.5,
                    }
                },
            }
        )
    )
    assert (i.spec.drafts, i.spec.draft_tokens, i.spec.accepted_tokens) == (2, 6, 3)
    assert i.spec.source == "response:vllm"
