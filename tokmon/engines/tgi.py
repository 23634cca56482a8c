"""Text Generation Inference: Prometheus series under ``tgi_`` (its speculation as a
histogram of the tokens each step skipped) and its configuration in ``/info``."""

from tokmon.engines.base import ConfigSource, Engine, EngineMap, field_at

ENGINE = Engine(
    "tgi",
    metrics=EngineMap(
        "tgi",
        "tgi_",
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        skipped_hist="tgi_request_skipped_tokens",
    ),
    config=ConfigSource(
        "tgi",
        "/info",
        (
            field_at("model", "model_id"),
            field_at("dtype", "model_dtype"),
            field_at("max_model_len", "max_total_tokens", kind="int"),
            field_at("slots", "max_concurrent_requests", kind="int"),
            field_at("kv_cache_tokens", "max_batch_total_tokens", kind="int"),
        ),
        version=("version",),
    ),
)
