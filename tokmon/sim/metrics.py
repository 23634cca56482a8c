"""The simulator's ``/metrics``: vLLM V1's metric names and shapes, rendered by
prometheus-client on a fresh registry (so a restarted server starts its counters at 0,
as a real one does).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from tokmon.sim.config import SimConfig


class Metrics:
    """vLLM V1 metric names, on a fresh registry (a restart resets every counter)."""

    def __init__(self, model: str, cfg: SimConfig | None = None) -> None:
        r = self.registry = CollectorRegistry()
        lbl = ["model_name", "engine"]
        self.lv = {"model_name": model, "engine": "0"}
        self.running = Gauge("vllm:num_requests_running", "Running requests", lbl, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting requests", lbl, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (0-1)", lbl, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Prefill tokens", lbl, registry=r)
        self.gen = Counter("vllm:generation_tokens", "Generation tokens", lbl, registry=r)
        self.preempt = Counter("vllm:num_preemptions", "Preemptions", lbl, registry=r)
        # vLLM V1's prefix cache counters, in prompt tokens
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries (tokens)", lbl, registry=r
        )
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits (tokens)", lbl, registry=r
        )
        self.req_ok = Counter(
            "vllm:request_success", "Finished requests", lbl + ["finished_reason"], registry=r
        )
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Drafts", lbl, registry=r)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens", lbl, registry=r
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Accepted tokens", lbl, registry=r
        )
        self.per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per position",
            lbl + ["position"],
            registry=r,
        )
        b = (
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
            20.0,
            40.0,
            80.0,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT", lbl, buckets=b, registry=r
        )
        self.itl = Histogram("vllm:inter_token_latency_seconds", "ITL", lbl, buckets=b, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E", lbl, buckets=b, registry=r)
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "Queue time", lbl, buckets=b, registry=r
        )
        self.prefill = Histogram(
            "vllm:request_prefill_time_seconds", "Prefill time", lbl, buckets=b, registry=r
        )
        self.decode = Histogram(
            "vllm:request_decode_time_seconds", "Decode time", lbl, buckets=b, registry=r
        )
        # Schedule mode: how late the simulator itself sent each chunk (its own timer and
        # loop), so a timing-fidelity benchmark can tell the server's share of an error.
        self.late = Histogram(
            "tokmon_sim:schedule_lateness_seconds",
            "Lateness of scheduled chunks, by the simulator's own clock",
            lbl + ["chunk"],
            buckets=(0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128),
            registry=r,
        )
        # The front end's true time per request (receipt → the engine's queue): the
        # ground truth a client's split of TTFT is checked against.
        self.front = Histogram(
            "tokmon_sim:front_end_seconds",
            "Time from a request's receipt to the engine's queue, by the simulator's clock",
            lbl,
            buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1),
            registry=r,
        )
        self.late_first = self.late.labels(**self.lv, chunk="first")
        self.late_next = self.late.labels(**self.lv, chunk="next")
        # As vLLM: the speculative counters exist only where a method is configured, one
        # per-position series per speculative token; the cache configuration as an info
        # gauge (what ``tokmon env`` reads).
        self.spec_seen = bool(cfg and cfg.spec)
        self.spec_k = cfg.profile.spec_k if cfg is not None and cfg.spec else 0
        if cfg is not None:
            Info("vllm:cache_config", "Information of the LLMEngine CacheConfig", registry=r).info(
                {
                    "block_size": "16",
                    "cache_dtype": "auto",
                    "enable_prefix_caching": "False",
                    "gpu_memory_utilization": "0.9",
                    "num_gpu_blocks": str(cfg.profile.kv_tokens // 16),
                    "kv_cache_size_tokens": str(cfg.profile.kv_tokens),
                }
            )
        # Counters are kept as plain ints and pushed before each scrape: cheap per token.
        self.n_gen = 0
        self.n_prompt = 0
        self.n_drafts = 0
        self.n_draft_tokens = 0
        self.n_accepted = 0
        self.n_pos = [0] * 16

    def render(self, running: int, waiting: int, kv: float) -> bytes:
        lv = self.lv
        self.running.labels(**lv).set(running)
        self.waiting.labels(**lv).set(waiting)
        self.kv.labels(**lv).set(kv)
        _push(self.gen.labels(**lv), self.n_gen)
        _push(self.prompt.labels(**lv), self.n_prompt)
        self.preempt.labels(**lv)
        if self.spec_seen:
            _push(self.drafts.labels(**lv), self.n_drafts)
            _push(self.draft_tokens.labels(**lv), self.n_draft_tokens)
            _push(self.accepted.labels(**lv), self.n_accepted)
            for i, v in enumerate(self.n_pos):
                if v or i < (self.spec_k or 4):
                    _push(self.per_pos.labels(position=str(i), **lv), v)
        return generate_latest(self.registry)


def _push(counter: Any, total: int) -> None:
    cur = counter._value.get()
    if total > cur:
        counter.inc(total - cur)
