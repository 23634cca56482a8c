"""TensorRT-LLM's server: Prometheus series under ``trtllm_``."""

from tokmon.engines.base import Engine, EngineMap

ENGINE = Engine(
    "tensorrt-llm",
    metrics=EngineMap(
        "tensorrt-llm",
        "trtllm_",
        running=("trtllm_num_requests_running",),
        waiting=("trtllm_num_requests_waiting",),
        kv=("trtllm_kv_cache_utilization",),
        draft_tokens=("trtllm_spec_decode_num_draft_tokens_total",),
        accepted=("trtllm_spec_decode_num_accepted_tokens_total",),
        acc_len_gauge=("trtllm_spec_decode_acceptance_length",),
    ),
)
