"""LMDeploy's server: Prometheus series under ``lmdeploy:``."""

from tokmon.engines.base import Engine, EngineMap

ENGINE = Engine(
    "lmdeploy",
    metrics=EngineMap(
        "lmdeploy",
        "lmdeploy:",
        running=("lmdeploy:num_requests_running",),
        waiting=("lmdeploy:num_requests_waiting",),
        kv=("lmdeploy:gpu_cache_usage_perc",),
        drafts=("lmdeploy:spec_decode_num_drafts_total",),
        draft_tokens=("lmdeploy:spec_decode_num_draft_tokens_total",),
        accepted=("lmdeploy:spec_decode_num_accepted_tokens_total",),
    ),
)
