"""The simulated OpenAI-compatible server: HTTP/1.1 on asyncio, continuous batching.

The HTTP layer is a small asyncio ``Protocol`` rather than a web framework: the
simulator must stream over 50,000 one-token chunks a second on one core so that it is
never the bottleneck when the client is measured (bench/sim_speed.py). The timing model
is in ``tokmon.sim.model``; faults in ``tokmon.sim.faults``; the server's settings in
``tokmon.sim.config``, its ``/metrics`` in ``tokmon.sim.metrics``, its words in
``tokmon.sim.vocab``.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import zlib
from collections import deque
from time import perf_counter_ns
from typing import Any

from tokmon import __version__
from tokmon.model.workloads.questions import solve, wrong
from tokmon.sim import wire
from tokmon.sim.config import SimConfig
from tokmon.sim.metrics import Metrics
from tokmon.sim.model import ALPHA, classify_prompt
from tokmon.sim.prefix import PrefixCache
from tokmon.sim.seq import Seq
from tokmon.sim.structured import image_tokens_of, pieces, structured_script
from tokmon.sim.tokenizer import BOS_ID, count_prompt, token_ids
from tokmon.sim.vocab import TOKENS

MAX_HEADER = 64 * 1024
MAX_BODY = 16 * 1024 * 1024


class SimServer:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        w = cfg.wobble
        self.wobble = math.exp(random.Random(cfg.seed).gauss(0.0, w) - w * w / 2) if w else 1.0
        self.metrics = Metrics(cfg.model_name, cfg)
        self.prefix_cache = PrefixCache()
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.kv_used = 0
        self.wake = asyncio.Event()
        self.t0 = time.monotonic()
        self.next_id = 0
        self.fault_counts: dict[str, int] = {}
        self.requests = 0
        self.server: asyncio.base_events.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.created = int(time.time())
        self.restarts = 0
        self.scheduled: set[asyncio.Task[None]] = set()
        # Schedule mode: when each chunk of each request (by its x-request-id) was written,
        # on perf_counter's clock -- the truth a client's timestamps are compared with.
        self.write_log: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str = "127.0.0.1", port: int = 8000) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: HttpProtocol(self), host, port, reuse_address=True, backlog=4096
        )
        self._task = loop.create_task(self._engine_loop())
        sock = self.server.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        for t in list(self.scheduled):
            t.cancel()
        if self._task:
            self._task.cancel()
        if self.server:
            self.server.close()

    def hours(self) -> float:
        return (time.monotonic() - self.t0) * self.cfg.time_scale / 3600.0

    def scale(self) -> float:
        """Cost multiplier from drift, per time scale (seconds of wall time per model second)."""
        f = self.cfg.faults
        return (
            (1.0 + f.drift / 100.0 * self.hours())
            * (1.0 + f.slowdown / 100.0)
            * self.wobble
            / self.cfg.time_scale
        )

    def decode_scale(self) -> float:
        """The scheduled step (``step``, ``step_at``): decoding only, prefill unchanged."""
        f = self.cfg.faults
        if f.step and time.monotonic() - self.t0 >= f.step_at:
            return 1.0 + f.step / 100.0
        return 1.0

    def kv_budget(self) -> int:
        return self.cfg.profile.kv_tokens

    def kv_phantom(self) -> int:
        return int(self.kv_budget() * min(0.95, self.cfg.faults.kv_creep / 100.0 * self.hours()))

    def restart(self) -> None:
        """Counters back to zero, in-flight streams dropped: what a server restart looks like."""
        self.metrics = Metrics(self.cfg.model_name, self.cfg)
        self.prefix_cache = PrefixCache()
        for s in list(self.running) + list(self.waiting):
            s.done = True
            s.proto.abort()
        self.running.clear()
        self.waiting.clear()
        self.kv_used = 0
        self.t0 = time.monotonic()
        self.restarts += 1

    # ------------------------------------------------------------------ requests
    def submit(
        self, proto: HttpProtocol, body: dict[str, Any], chat: bool, request_id: str = ""
    ) -> Seq | tuple[int, str]:
        cfg = self.cfg
        model = body.get("model") or cfg.model_name
        if model != cfg.model_name:
            return 404, f"The model `{model}` does not exist."
        image_tokens = 0
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return 400, "'messages' must be a non-empty list"
            texts = []
            for m in msgs:
                if not isinstance(m, dict):
                    return 400, "each message must be an object"
                c = m.get("content", "")
                if isinstance(c, list):
                    image_tokens += sum(image_tokens_of(p) for p in c if isinstance(p, dict))
                    c = " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
                texts.append(str(c or ""))
            prompt = "\n".join(texts)
        else:
            p = body.get("prompt")
            if isinstance(p, list):
                p = " ".join(str(x) for x in p)
            if not isinstance(p, str):
                return 400, "'prompt' must be a string"
            prompt = p
            texts = [p]
        mt = body.get("max_tokens", body.get("max_completion_tokens", 256))
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            return 400, "'max_tokens' must be a positive integer"
        mt = min(mt, 1_000_000)
        s = Seq()
        s.rid = self.next_id
        s.request_id = request_id
        self.next_id += 1
        s.cid = f"{'chatcmpl' if chat else 'cmpl'}-sim{s.rid:08x}"
        s.proto = proto
        s.chat = chat
        s.model = model
        s.created = self.created
        s.max_tokens = mt
        s.prompt_tokens = count_prompt(texts, chat, self.cfg.token_bytes) + image_tokens
        s.image_tokens = image_tokens
        # the prefix cache: whole blocks of the prompt seen before skip their prefill
        s.cached = self.prefix_cache.lookup(texts, s.prompt_tokens)
        self.metrics.prefix_queries.labels(**self.metrics.lv).inc(s.prompt_tokens)
        self.metrics.prefix_hits.labels(**self.metrics.lv).inc(s.cached)
        s.kind = classify_prompt(prompt)
        s.alpha = ALPHA.get(s.kind, 0.5)
        s.script = []
        qa = solve(prompt)
        if qa is not None:  # a question with a known answer: said first, then the usual text
            task, ans = qa
            if self.rng.random() < cfg.wrong.get(task, 0.0):
                ans = wrong(task, ans)
            s.script = [" " + w for w in f"The answer is {ans}.".split(" ")]
        # Greedy (temperature 0) output depends only on the prompt, like a real model's.
        greedy = body.get("temperature", 1.0) == 0
        text_seed = zlib.crc32(prompt.encode()) ^ mt
        drawn = self.rng.getrandbits(64)  # (drawn either way: the server's draws stay as they were)
        shape_rng = random.Random(text_seed + 1 if greedy else drawn)
        s.shape, s.tool = structured_script(body, chat, shape_rng)
        if s.shape:  # an answer under a schema, or a tool call: its text is the script
            s.script = pieces(s.shape)
            mt = min(mt, len(s.script))
            s.max_tokens = mt
        spec = cfg.spec
        if body.get("speculative") is False or body.get("speculative.n_max") == 0:
            spec = False
        s.spec = spec and cfg.profile.spec_k > 0
        so = body.get("stream_options") or {}
        s.stream = bool(body.get("stream", False))
        s.include_usage = bool(isinstance(so, dict) and so.get("include_usage"))
        s.continuous = bool(isinstance(so, dict) and so.get("continuous_usage_stats"))
        if greedy:
            s.rng = random.Random(zlib.crc32(prompt.encode()) ^ mt)
        else:
            s.rng = random.Random(self.rng.getrandbits(64))
        s.acc_rng = random.Random(self.rng.getrandbits(64))
        s.t_arrival = s.t_received = time.monotonic()
        s.kv_need = s.prompt_tokens + mt
        self.requests += 1
        fault = cfg.faults.draw(self.rng.random())
        s.fault = fault
        s.fault_at = self.rng.randint(1, max(1, mt - 1)) if fault else 0
        if fault:
            self.fault_counts[fault] = self.fault_counts.get(fault, 0) + 1
        if fault == "http_500":
            return 500, "Internal server error (simulated fault)"
        if fault == "http_429":
            return 429, "Too many requests (simulated fault)"
        self.metrics.n_prompt += s.prompt_tokens
        if cfg.front_ms > 0:
            delay = cfg.front_ms / 1000.0 / cfg.time_scale
            asyncio.get_running_loop().call_later(delay, self._enqueue, s)
        else:
            self._enqueue(s)
        return s

    def _enqueue(self, s: Seq) -> None:
        """The request reaches the engine (after the API server's front end)."""
        if s.done or s.proto.closed:
            return
        s.t_arrival = time.monotonic()
        self.metrics.front.labels(**self.metrics.lv).observe(s.t_arrival - s.t_received)
        if self.cfg.schedule is not None:
            t = asyncio.get_running_loop().create_task(self._scheduled(s))
            self.scheduled.add(t)
            t.add_done_callback(self.scheduled.discard)
        else:
            self.waiting.append(s)
            self.wake.set()

    # ------------------------------------------------------------------ engine
    async def _engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        prof = self.cfg.profile
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                t_next = loop.time()
            # Admit while the batch and the KV budget allow (FIFO: no overtaking).
            prefill_tokens = 0
            admitted = 0
            budget = self.kv_budget() - self.kv_phantom()
            while self.waiting and len(self.running) < prof.max_batch:
                s = self.waiting[0]
                if s.done:
                    self.waiting.popleft()
                    continue
                if self.kv_used + s.kv_need > budget and self.running:
                    break
                self.waiting.popleft()
                self.kv_used += s.kv_need
                self.running.append(s)
                prefill_tokens += s.prompt_tokens - s.cached
                admitted += 1
                s.t_sched = time.monotonic()
                self.metrics.queue.labels(**self.metrics.lv).observe(s.t_sched - s.t_arrival)
            if not self.running:
                continue
            spec_any = any(s.spec for s in self.running)
            step_ms = prof.decode_step_ms(len(self.running), spec_any) * self.decode_scale()
            if admitted:
                step_ms += prof.prefill_ms(prefill_tokens)
            if prof.jitter:
                sg = prof.jitter
                step_ms *= math.exp(self.rng.gauss(0.0, sg) - sg * sg / 2)
            dt = step_ms / 1000.0 * self.scale()
            if dt > 0:
                t_next = max(t_next + dt, loop.time())
                await asyncio.sleep(t_next - loop.time())
            else:
                await asyncio.sleep(0)
            self._step(spec_any)

    def _step(self, spec_any: bool) -> None:
        now = time.monotonic()
        k = self.cfg.profile.spec_k
        m = self.metrics
        keep: list[Seq] = []
        observe = self.cfg.profile.step_base_ms > 0
        for s in self.running:
            if s.done:
                self.kv_used -= s.kv_need
                continue
            if s.stall_until and now < s.stall_until:
                keep.append(s)
                continue
            n = 1
            if s.spec and s.produced > 0:
                acc = 0
                rnd = s.acc_rng.random
                while acc < k and rnd() < s.alpha:
                    acc += 1
                s.drafted += k
                s.accepted += acc
                s.steps += 1
                m.spec_seen = True
                m.n_drafts += 1
                m.n_draft_tokens += k
                m.n_accepted += acc
                for i in range(acc):
                    m.n_pos[i] += 1
                n = acc + 1
            n = min(n, s.max_tokens - s.produced)
            if observe and s.produced:
                m.itl.labels(**m.lv).observe((now - s.t_last) / max(n, 1))
            self._emit(s, n, now)
            if s.done:
                self.kv_used -= s.kv_need
            else:
                keep.append(s)
        self.running = keep

    def _emit(self, s: Seq, n: int, now: float) -> None:
        """Write one chunk of ``n`` tokens (and the end of the stream when it is done)."""
        if s.proto.closed:
            s.done = True
            return
        first = s.produced == 0
        if first:
            s.t_first = now
            self.metrics.ttft.labels(**self.metrics.lv).observe(now - s.t_arrival)
            self.metrics.prefill.labels(**self.metrics.lv).observe(now - s.t_sched)
        s.t_last = now
        start = s.produced
        s.produced += n
        self.metrics.n_gen += n
        rng = s.rng
        script = s.script
        text = "".join(
            script[i] if i < len(script) else TOKENS[rng.randrange(len(TOKENS))]
            for i in range(start, start + n)
        )
        if self.cfg.alter_outputs and start == 0 and rng.random() < self.cfg.alter_outputs:
            text = " altered" + text  # this arm's greedy output differs from the other's
        last = s.produced >= s.max_tokens
        fault = s.fault
        if fault and start < s.fault_at <= s.produced and fault != "stall":
            self._fault_mid_stream(s)
            return
        if fault == "stall" and start < s.fault_at <= s.produced:
            s.stall_until = now + self.cfg.faults.stall_s / self.cfg.time_scale
            s.fault = None
        if not s.stream:
            s.parts.append(text)
            if last:
                self._finish_plain(s, now)
            return
        out = []
        if first and s.chat:
            out.append(wire.chunk(s, role=True))
        thinks = s.chat and not s.shape and wire.thinking(self.cfg, start)
        end = ("tool_calls" if s.tool else "stop") if s.shape else "length"
        out.append(wire.chunk(s, text=text, finish=end if last else None, think=thinks,
                               call=s.tool if s.shape and s.tool else "", first=start == 0))  # fmt: skip
        if last:
            s.done = True
            if s.include_usage:
                out.append(wire.usage_chunk(self.cfg, s))
            out.append(b"data: [DONE]\n\n")
            self._observe_end(s, now)
        if s.request_id and self.cfg.schedule is not None and len(self.write_log) < 1_000_000:
            # stamped right before the write: after it, a woken client may preempt us
            self.write_log.setdefault(s.request_id, []).append(perf_counter_ns())
        s.proto.write_chunk(b"".join(out), end=last)

    def _observe_end(self, s: Seq, now: float) -> None:
        m = self.metrics
        m.e2e.labels(**m.lv).observe(now - s.t_arrival)
        m.decode.labels(**m.lv).observe(now - s.t_first)
        m.req_ok.labels(finished_reason="length", **m.lv).inc()

    def _fault_mid_stream(self, s: Seq) -> None:
        s.done = True
        if s.fault == "drop":
            s.proto.abort()
            return
        if s.fault == "stream_error":
            err = {
                "error": {
                    "message": "simulated engine error",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
            s.proto.write_chunk(b"data: " + json.dumps(err).encode() + b"\n\n", end=True)
        elif s.fault == "malformed":
            s.proto.write_chunk(b'data: {"choices": [{"delta": {"content": \n\n', end=False)
            s.proto.write_chunk(b"data: [DONE]\n\n", end=True)
        elif s.fault == "overlong":
            s.proto.write_chunk(b"data: " + b"x" * (5 * 1024 * 1024), end=False)
            s.proto.write_chunk(b"\n\ndata: [DONE]\n\n", end=True)

    def _finish_plain(self, s: Seq, now: float) -> None:
        s.done = True
        text = "".join(s.parts)
        if s.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        d: dict[str, Any] = {
            "id": s.cid,
            "object": "chat.completion" if s.chat else "text_completion",
            "created": s.created,
            "model": s.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.produced,
                "total_tokens": s.prompt_tokens + s.produced,
                "prompt_tokens_details": {"cached_tokens": s.cached},
            },
        }
        if self.cfg.request_metrics:
            d["metrics"] = wire.timing(s)  # (vLLM: at the top level when not streamed)
        self._observe_end(s, now)
        s.proto.respond_json(200, d)

    async def _scheduled(self, s: Seq) -> None:
        """A fixed schedule: first chunk at ttft, then one chunk every gap, tpc tokens each."""
        assert self.cfg.schedule is not None
        ttft_ms, gap_ms, tpc = self.cfg.schedule
        ttft_ms += s.image_tokens * self.cfg.image_ms_per_token  # (its images' prefill)
        cap = self.cfg.schedule_capacity
        if cap > 0:  # (this request is one of the scheduled tasks)
            ttft_ms *= max(1.0, (len(self.scheduled) / cap) ** 2)
        loop = asyncio.get_running_loop()
        scale = self.cfg.time_scale
        t0 = loop.time()
        # the schedule's first part is the queue (scheduled then, as vLLM would say)
        q = min(self.cfg.schedule_queue_ms, ttft_ms) / 1000.0 / scale
        s.t_sched = s.t_arrival + q
        self.metrics.queue.labels(**self.metrics.lv).observe(q)
        i = 0
        gaps_ms = 0.0  # the gaps so far (a scheduled step makes the later ones longer)
        # guided decoding's cost: every token under a schema this much more (a grammar's mask)
        gap_ms = gap_ms + (self.cfg.guided_ms if s.shape and not s.tool else 0.0)
        while not s.done:
            if i:
                gaps_ms += gap_ms * self.decode_scale()
            target = t0 + (ttft_ms + gaps_ms) / 1000.0 / scale
            delay = target - loop.time()
            while delay > 0:
                # a client that went away ends its request here, as a real server aborts
                # it (else a backlog of the abandoned would load the server on and on)
                if s.proto.closed:
                    s.done = True
                    return
                await asyncio.sleep(min(delay, 0.05))
                delay = target - loop.time()
            n = min(tpc, s.max_tokens - s.produced)
            late = max(0.0, loop.time() - target)
            self._emit(s, n, time.monotonic())
            (self.metrics.late_next if i else self.metrics.late_first).observe(late)
            i += 1
            pause = s.stall_until - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
                t0 += pause

    def metrics_text(self) -> bytes:
        budget = self.kv_budget()
        kv = min(1.0, (self.kv_used + self.kv_phantom()) / budget) if budget else 0.0
        return self.metrics.render(len(self.running), len(self.waiting), kv)


# What a server with an API key still answers to anyone (as vLLM does).
OPEN_PATHS = frozenset({"/health", "/version", "/metrics"})


class HttpProtocol(asyncio.Protocol):
    """A minimal HTTP/1.1 server connection: keep-alive, Content-Length bodies, chunked
    streaming responses."""

    def __init__(self, sim: SimServer) -> None:
        self.sim = sim
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = False
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_HEADER + MAX_BODY:
            self.respond_error(413, "request too large")
            self.abort()
            return
        self._process()

    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER:
                    self.respond_error(431, "headers too large")
                    self.abort()
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, path, version = lines[0].split(" ", 2)
            except ValueError:
                self.respond_error(400, "bad request line")
                self.abort()
                return
            headers = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                headers[k.strip().lower()] = v.strip()
            try:
                clen = int(headers.get("content-length", "0"))
            except ValueError:
                self.respond_error(400, "bad content-length")
                self.abort()
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.respond_error(411, "chunked request bodies are not supported")
                self.abort()
                return
            if len(self.buf) < end + 4 + clen:
                return
            body = self.buf[end + 4 : end + 4 + clen]
            self.buf = self.buf[end + 4 + clen :]
            conn = headers.get("connection", "").lower()
            self.keep_alive = not (
                conn == "close"
                or (version == "HTTP/1.0" and conn != "keep-alive")
                or self.sim.cfg.close_connections
            )
            self.busy = True
            args = (method, path.split("?", 1)[0], headers, body)
            delay = self.sim.cfg.net_delay_s
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._guarded, *args)
            else:
                self._guarded(*args)

    def _guarded(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if self.closed:
            return
        key = self.sim.cfg.api_key
        try:
            protected = key and path not in OPEN_PATHS and not path.startswith("/admin/")
            if protected and headers.get("authorization") != f"Bearer {key}":
                self.respond_error(401, "invalid or missing API key")
                return
            self._dispatch(method, path, headers, body)
        except Exception as e:  # never let a request take the server down
            self.respond_error(500, f"internal error: {type(e).__name__}")

    def _dispatch(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        sim = self.sim
        if path in ("/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions"):
            if method != "POST":
                self.respond_error(405, "use POST")
                return
            try:
                obj = json.loads(body or b"null")
            except ValueError:
                self.respond_error(400, "request body is not valid JSON")
                return
            if not isinstance(obj, dict):
                self.respond_error(400, "request body must be a JSON object")
                return
            res = sim.submit(
                self,
                obj,
                chat=path.endswith("chat/completions"),
                request_id=headers.get("x-request-id", ""),
            )
            if isinstance(res, tuple):
                status, msg = res
                extra = {"retry-after": "1"} if status == 429 else None
                self.respond_error(status, msg, extra)
                return
            if res.stream:
                self._start_stream()
            return
        if method == "GET" and path in ("/v1/models", "/models"):
            self.respond_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": sim.cfg.model_name,
                            "object": "model",
                            "created": sim.created,
                            "owned_by": "tokmon-sim",
                            "max_model_len": 131072,
                        }
                    ],
                },
            )
        elif path == "/tokenize" and method == "POST":
            self._tokenize(body)
        elif method == "GET" and path == "/health":
            self.respond(200, b"", "text/plain")
        elif method == "GET" and path == "/props":
            # as llama.cpp's server: slots, context and speculation (what tokmon env reads)
            k = sim.cfg.profile.spec_k if sim.cfg.spec else 0
            self.respond_json(
                200,
                {
                    "default_generation_settings": {
                        "n_ctx": 131072,
                        "speculative": bool(k),
                        "params": {"speculative.n_max": k},
                    },
                    "total_slots": sim.cfg.profile.max_batch,
                    "model_path": sim.cfg.model_name,
                    "build_info": __version__,
                },
            )
        elif method == "GET" and path == "/version":
            self.respond_json(200, {"version": __version__})
        elif method == "GET" and path == "/metrics":
            self.respond(200, sim.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/admin/faults":
            if method == "POST":
                try:
                    obj = json.loads(body or b"{}")
                    if not isinstance(obj, dict):
                        raise ValueError("expected a JSON object")
                    sim.cfg.faults.update(obj)
                except ValueError as e:
                    self.respond_error(400, str(e))
                    return
            self.respond_json(
                200,
                {
                    "faults": sim.cfg.faults.as_dict(),
                    "injected": sim.fault_counts,
                    "requests": sim.requests,
                },
            )
        elif path == "/admin/write-log" and method == "POST":
            log, sim.write_log = sim.write_log, {}
            self.respond_json(200, log)
        elif path == "/admin/restart" and method == "POST":
            sim.restart()
            self.respond_json(200, {"restarts": sim.restarts})
        else:
            self.respond_error(404, f"no route {method} {path}")

    def _tokenize(self, body: bytes) -> None:
        """vLLM's form ({"prompt"} or {"messages"} → count, tokens) and llama.cpp's
        ({"content"} → tokens, no BOS unless add_special)."""
        try:
            obj = json.loads(body or b"null")
            if not isinstance(obj, dict):
                raise ValueError
        except ValueError:
            self.respond_error(400, "request body must be a JSON object")
            return
        if not self.sim.cfg.tokenize:
            self.respond_error(404, "no route POST /tokenize")
            return
        if isinstance(obj.get("content"), str):
            tb = self.sim.cfg.token_bytes
            ids = token_ids(obj["content"], tb)
            if obj.get("add_special"):
                ids = [BOS_ID, *ids]
            self.respond_json(200, {"tokens": ids})
            return
        msgs = obj.get("messages")
        if isinstance(msgs, list):
            texts = [str(m.get("content", "")) for m in msgs if isinstance(m, dict)]
            n = count_prompt(texts, chat=True, token_bytes=self.sim.cfg.token_bytes)
        elif isinstance(obj.get("prompt"), str):
            ids = [BOS_ID, *token_ids(obj["prompt"], self.sim.cfg.token_bytes)]
            self.respond_json(200, {"count": len(ids), "max_model_len": 131072, "tokens": ids})
            return
        else:
            self.respond_error(400, "give 'prompt', 'messages' or 'content'")
            return
        self.respond_json(200, {"count": n, "max_model_len": 131072, "tokens": [BOS_ID] * n})

    # ------------------------------------------------------------------ responses
    def _start_stream(self) -> None:
        if self.transport is None or self.closed:
            return
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
            + (b"" if self.keep_alive else b"connection: close\r\n")
            + b"\r\n"
        )

    def write_chunk(self, data: bytes, end: bool) -> None:
        if self.transport is None or self.closed:
            return
        out = b"%x\r\n%s\r\n" % (len(data), data)
        if end:
            out += b"0\r\n\r\n"
        self.transport.write(out)
        if end:
            self._done()

    def respond(
        self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None
    ) -> None:
        if self.transport is None or self.closed:
            return
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            405: "Method Not Allowed",
            411: "Length Required",
            413: "Payload Too Large",
            429: "Too Many Requests",
            431: "Request Header Fields Too Large",
            500: "Internal Server Error",
        }.get(status, "")
        hdr = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
        for k, v in (extra or {}).items():
            hdr += f"{k}: {v}\r\n"
        if not self.keep_alive:
            hdr += "connection: close\r\n"
        self.transport.write(hdr.encode() + b"\r\n" + body)
        self._done()

    def respond_json(self, status: int, obj: Any) -> None:
        self.respond(status, json.dumps(obj).encode(), "application/json")

    def respond_error(self, status: int, msg: str, extra: dict[str, str] | None = None) -> None:
        kind = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError"}.get(
            status, "InternalServerError"
        )
        self.respond(
            status,
            json.dumps({"error": {"message": msg, "type": kind, "code": status}}).encode(),
            "application/json",
            extra,
        )

    def _done(self) -> None:
        self.busy = False
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            self.closed = True
            return
        if self.buf:
            asyncio.get_running_loop().call_soon(self._process)


async def serve(cfg: SimConfig, host: str, port: int, ready: Any = None) -> None:
    sim = SimServer(cfg)
    real_port = await sim.start(host, port)
    if ready is not None:
        ready(real_port)
    try:
        await asyncio.Event().wait()
    finally:
        await sim.close()
