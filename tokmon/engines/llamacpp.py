"""llama.cpp's server: Prometheus series under ``llamacpp:`` (``--metrics``; the
speculative counters with or without ``_total``), its configuration in ``/props``, a
``/tokenize`` that takes ``content`` (llama-cpp-python's ``/extras/tokenize`` takes
``input``), and per request the final chunk's ``timings``: the prompt's time, the time
over the predicted tokens, the prompt tokens reused from its cache, and ``draft_n`` only
when drafting happened."""

from tokmon.engines.base import (
    ConfigSource,
    Engine,
    EngineMap,
    SpecPath,
    TimingPath,
    TokenizeForm,
    field_at,
)

ENGINE = Engine(
    "llama.cpp",
    metrics=EngineMap(
        "llama.cpp",
        "llamacpp:",
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        gen_tokens=("llamacpp:tokens_predicted_total",),
        drafts=("llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_drafts"),
        draft_tokens=(
            "llamacpp:spec_decode_num_draft_tokens_total",
            "llamacpp:spec_decode_num_draft_tokens",
        ),
        accepted=(
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "llamacpp:spec_decode_num_accepted_tokens",
        ),
    ),
    config=ConfigSource(
        "llama.cpp",
        "/props",
        (
            field_at("model", "model_path"),
            field_at("max_model_len", "default_generation_settings", "n_ctx", kind="int"),
            field_at("slots", "total_slots", kind="int"),
            field_at("spec", "default_generation_settings", "speculative", kind="bool"),
            field_at(
                "spec_tokens",
                "default_generation_settings",
                "params",
                "speculative.n_max",
                kind="int",
            ),
        ),
        version=("build_info",),
    ),
    tokenize=(TokenizeForm("/tokenize", "content"), TokenizeForm("/extras/tokenize", "input")),
    timing=TimingPath(
        ("timings",),
        prefill="prompt_ms",
        decode_total="predicted_ms",
        decode_count="predicted_n",
        cached="cache_n",
    ),
    spec=SpecPath(("timings",), draft=("draft_n",), accepted=("draft_n_accepted",), when="draft_n"),
    source="response:llama.cpp",
)
