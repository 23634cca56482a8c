"""SGLang: Prometheus series under ``sglang:``, its configuration in
``/get_server_info``, ``/tokenize`` as vLLM's, and per request its speculative-decoding
counts in ``sglext.spec_tokens_details`` (2026; the keys under either name)."""

from tokmon.engines.base import ConfigSource, Engine, EngineMap, SpecPath, TokenizeForm, field_at

ENGINE = Engine(
    "sglang",
    metrics=EngineMap(
        "sglang",
        "sglang:",
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        gen_tokens=("sglang:generation_tokens_total",),
        acc_rate_gauge=("sglang:spec_accept_rate",),
        acc_len_gauge=("sglang:spec_accept_length",),
        prefix_hit_gauge=("sglang:cache_hit_rate",),
    ),
    config=ConfigSource(
        "sglang",
        "/get_server_info",
        (
            field_at("model", "model_path"),
            field_at("max_model_len", "context_length", kind="int"),
            field_at("dtype", "dtype"),
            field_at("quantization", "quantization"),
            field_at("kv_cache_dtype", "kv_cache_dtype"),
            field_at("block_size", "page_size", kind="int"),
            field_at("gpu_mem_util", "mem_fraction_static", kind="float"),
            field_at("prefix_caching", "disable_radix_cache", kind="not"),
            field_at("tp_size", "tp_size", kind="int"),
            field_at("slots", "max_running_requests", kind="int"),
            field_at("spec_method", "speculative_algorithm"),
            field_at("spec_tokens", "speculative_num_draft_tokens", kind="int"),
        ),
        version=("version",),
    ),
    tokenize=(TokenizeForm("/tokenize", "prompt"),),
    spec=SpecPath(
        ("sglext", "spec_tokens_details"),
        draft=("num_draft_tokens", "draft_tokens"),
        accepted=("num_accepted_tokens", "accepted_tokens"),
        steps=("num_verify_steps", "spec_verify_ct"),
        length=("accept_length", "avg_accept_length"),
    ),
    source="response:sglang",
)
