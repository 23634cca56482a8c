"""vLLM: Prometheus series under ``vllm:``, its cache configuration in the
``vllm:cache_config_info`` gauge's labels, ``/tokenize`` at the root, and per request
(``--enable-per-request-metrics``, ``--per-request-spec-decode-metrics``) its queue,
prefill and mean inter-token time and its speculative-decoding counts in ``metrics``."""

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
    "vllm",
    metrics=EngineMap(
        "vllm",
        "vllm:",
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        preemptions=("vllm:num_preemptions_total",),
        prompt_tokens=("vllm:prompt_tokens_total",),
        gen_tokens=("vllm:generation_tokens_total",),
        drafts=("vllm:spec_decode_num_drafts_total",),
        draft_tokens=("vllm:spec_decode_num_draft_tokens_total",),
        accepted=("vllm:spec_decode_num_accepted_tokens_total",),
        per_pos=("vllm:spec_decode_num_accepted_tokens_per_pos_total",),
        acc_rate_gauge=("vllm:spec_decode_draft_acceptance_rate",),
        prefix_queries=("vllm:prefix_cache_queries_total",),
        prefix_hits=("vllm:prefix_cache_hits_total",),
        queue_hist=("vllm:request_queue_time_seconds",),
        prefill_hist=("vllm:request_prefill_time_seconds",),
        itl_hist=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        spec_prefix="vllm:spec_decode_",
    ),
    config=ConfigSource(
        "vllm",
        "metrics:vllm:cache_config_info",
        (
            field_at("block_size", "block_size", kind="int"),
            field_at("kv_cache_dtype", "cache_dtype"),
            field_at("prefix_caching", "enable_prefix_caching", kind="bool"),
            field_at("gpu_mem_util", "gpu_memory_utilization", kind="float"),
            field_at("kv_cache_bytes", "kv_cache_memory_bytes", kind="int"),
            field_at("kv_cache_tokens", "kv_cache_size_tokens", kind="int"),
        ),
    ),
    tokenize=(TokenizeForm("/tokenize", "prompt"),),
    timing=TimingPath(
        ("metrics",),
        queue="queue_time_ms",
        prefill="time_to_first_token_ms",
        itl="mean_itl_ms",
    ),
    spec=SpecPath(
        ("metrics", "speculative_decoding"),
        draft=("num_draft_tokens",),
        accepted=("num_accepted_draft_tokens",),
        steps=("num_spec_steps",),
        length=("mean_acceptance_length",),
    ),
    source="response:vllm",
)
