"""The engine: holds the streams open, stamps the chunks, and ships finished records.

It runs in its own process (``engine_main``), so nothing the dashboard does can move a
timestamp. It talks to its parent over two pipes: batches of frozen records out (every
``flush_s``), small command tuples in (switch arm, pause, change load, stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any

import numpy as np

from tokmon.engine import h1
from tokmon.engine.client import Tick, ssl_context, stream_request
from tokmon.engine.measure import KEEP_CHARS, NS_PER_MS
from tokmon.engine.target import prepare
from tokmon.inputs import read_share
from tokmon.model.data.records import (
    Abort,
    BeginStep,
    Command,
    EngineBatch,
    EngineFailure,
    EngineStatus,
    Event,
    Pause,
    QualityPass,
    RequestRecord,
    SentPrompt,
    SetLevel,
    StartTrace,
    Stop,
    SwitchArm,
)
from tokmon.model.judge.quality import CHECK_CHARS, judge
from tokmon.model.workloads.arms import Arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.images import IMAGE
from tokmon.model.workloads.questions import QUALITY_MAX_TOKENS, QUALITY_SET, builtin_items
from tokmon.model.workloads.structured import GUIDED, GUIDED_FREE, TOOLS, check_call, check_json
from tokmon.model.workloads.trace import trace_prompt
from tokmon.model.workloads.workload import (
    Arrivals,
    LengthDist,
    Prompt,
    Script,
    WorkloadError,
    followup_message,
    synthetic_prompt,
)


class Chat:
    """One conversation on one stream: its history (the user's messages and the text the
    server generated, or the reply a conversation file recorded), and which turn comes
    next. A failed turn ends it (its history would lack the reply)."""

    def __init__(self, turns: int, script: Script | None = None) -> None:
        self.script = script
        self.turns = len(script.turns) if script is not None else max(1, turns)
        self.turn = 0
        self.messages: tuple[tuple[str, str], ...] = ()
        self.kind = "chat" if script is None else script.kind
        self.asked: int | None = None
        self.done = False
        self._got = False

    def next_prompt(self, eng: Engine) -> tuple[Prompt, int]:
        cfg = eng.cfg
        conv = cfg.conversations
        assert conv is not None
        self.turn += 1
        self._got = False
        sc = self.script
        if sc is not None:
            opening = sc.opening if self.turn == 1 else ()
            self.messages = (*self.messages, *opening, ("user", sc.turns[self.turn - 1][0]))
            max_tokens = eng.max_tokens.sample(eng.rng)
        elif self.turn == 1:
            p, max_tokens = eng._pick_prompt()
            self.kind = p.kind
            self.messages = p.messages or (("user", p.text),)
            self.asked = p.asked
        else:
            msg = followup_message(conv.followup, eng.rng, cfg.prompt_shape)
            self.messages = (*self.messages, ("user", msg))
            max_tokens = eng.max_tokens.sample(eng.rng)
            self.asked = None
        self.done = self.turn >= self.turns
        return Prompt(kind=self.kind, messages=self.messages, asked=self.asked), max_tokens

    def reply(self, text: str) -> None:
        sc = self.script
        recorded = sc.turns[self.turn - 1][1] if sc is not None else None
        self.messages = (*self.messages, ("assistant", text if recorded is None else recorded))
        self._got = True

    def ended(self, outcome: str) -> None:
        if outcome != "ok" or not self._got:
            self.done = True


SPIN_NS = 2_000_000


async def until(t: int, evt: asyncio.Event) -> bool:
    """Wait until the monotonic clock reaches ``t`` (True), or ``evt`` is set (False).
    The loop's timers wake up to a millisecond or two late (epoll counts whole
    milliseconds, rounded up) and may fire early: the timer is set ``SPIN_NS`` short and
    the rest is spent yielding to the loop, so a scheduled request leaves on time and
    never before its time."""
    while True:
        delay = t - perf_counter_ns()
        if delay <= 0:
            return True
        if evt.is_set():
            return False
        if delay > SPIN_NS:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(evt.wait(), (delay - SPIN_NS) / 1e9)
        else:
            await asyncio.sleep(0)


def split_share(total: int, worker: int, nworkers: int) -> int:
    """Worker ``worker``'s share of an integer total (shares add up to the total)."""
    return total // nworkers + (1 if worker < total % nworkers else 0)


def build_body(cfg: RunConfig, arm: Arm, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
    endpoint = arm.endpoint or "chat"
    body: dict[str, Any] = {"model": arm.model}
    body.update(prompt.body_fields(endpoint))
    body["max_tokens"] = max_tokens
    body["stream"] = True
    so: dict[str, Any] = {"include_usage": True}
    if cfg.continuous_usage:
        so["continuous_usage_stats"] = True
    body["stream_options"] = so
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.top_p is not None:
        body["top_p"] = cfg.top_p
    if cfg.seed is not None:
        body["seed"] = cfg.seed
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update(cfg.extra_body)
    body.update(arm.body)
    return body


def request_id(run_id: str, rid: int) -> str:
    """The x-request-id of request ``rid``: a UUID (llama-cpp-python's server answers 400
    to any other), the run's id first and the request's number, in hex, last."""
    return f"{run_id}-0000-4000-8000-{rid:012x}"


def endpoint_url(arm: Arm) -> str:
    base = arm.url.rstrip("/")
    return base + ("/completions" if arm.endpoint == "completions" else "/chat/completions")


def request_headers(cfg: RunConfig, arm: Arm) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": "text/event-stream"}
    if cfg.api_key:
        h["authorization"] = f"Bearer {cfg.api_key}"
    h.update(cfg.headers)
    h.update(arm.headers)
    return h


class Engine:
    def __init__(
        self,
        cfg: RunConfig,
        worker: int,
        nworkers: int,
        out: Connection | None,
        start_trace: bool = True,
    ) -> None:
        """``start_trace``: without a command pipe, start a trace at once (tests,
        benchmarks); False: wait for the parent's ``StartTrace`` all the same (a Ray
        actor's commands come through its methods)."""
        self.cfg = cfg
        self.worker = worker
        self.nworkers = nworkers
        self.out = out
        self.arms = {a.name: a for a in cfg.arms}
        self.arm_names = [a.name for a in cfg.arms]
        self.arm = cfg.arms[0].name
        self.segment = 0
        self.step = -1
        self.settle_ns = int(cfg.settle_s * 1e9)
        self.prompt_tokens = cfg.prompt_tokens
        self.max_tokens = cfg.max_tokens
        self.t_switch = 0
        self.targets = {a.name: prepare(endpoint_url(a), request_headers(cfg, a)) for a in cfg.arms}
        seed = cfg.seed if cfg.seed is not None else int(time.time_ns() % 2**31)
        self.rng = np.random.default_rng(seed + 7919 * worker)
        self.pyrng = random.Random(seed + worker)
        # quality probes: the built-in questions, drawn in turn (each worker from its own
        # place), at the share asked; their own generator, so the load's draws stay the same
        # (every arm asked the same questions in the same order: a place per arm; a
        # quality pass, `o`, may ask them of a run with no share set)
        self.q_items = cfg.quality_items or builtin_items(QUALITY_SET, seed)
        self.q_rng = random.Random(seed * 31 + worker + 17)
        self.q_next = {a.name: worker * 7 for a in cfg.arms}
        # per arm: probes still to send of a quality pass (QualityPass)
        self.q_pass: dict[str, int] = {}
        self.guided_n = 0  # guided requests picked: every other one is the control
        self.mix_kinds = [k for k, _ in cfg.mix]
        self.mix_w = np.array([w for _, w in cfg.mix], dtype=float)
        self.mode = cfg.mode
        # this worker's share of the load (a trace's speed is not shared out)
        self.level = (
            float(split_share(cfg.concurrency, worker, nworkers))
            if cfg.mode == "concurrency"
            else cfg.level / (1 if cfg.mode == "trace" else nworkers)
        )
        self.budget = split_share(cfg.requests, worker, nworkers) if cfg.requests else None
        self.warmup_left = split_share(cfg.warmup_requests, worker, nworkers)
        self.sent = 0
        self.counter = 0
        self.conversations_begun = 0
        self.images_made = 0
        self.in_flight: dict[int, tuple[str, int, str, int]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.open_tasks: set[asyncio.Task[None]] = set()  # open-loop requests in flight
        self.records: list[RequestRecord] = []
        self.prompts: list[SentPrompt] = []
        self.events: list[Event] = []
        self.ticks = Tick()
        self.paused = False
        self.pause_token = self.paused_t = 0
        self.resume_evt = asyncio.Event()
        self.resume_evt.set()
        self.stopping = False
        self.hard_stop = False
        self.stop_evt = asyncio.Event()
        self.level_evt = asyncio.Event()
        self.fault = ""  # the load's input failed as it was read (sent once)
        self.trace_go = asyncio.Event()  # the parent's StartTrace came (or there is no parent)
        self.trace_t0 = 0
        self.start_trace = start_trace
        self.host = socket.gethostname()
        self._cpu_at = (time.process_time(), time.monotonic())
        self.t_start = 0
        self.loop_lag_ms = 0.0
        self.lags: list[float] = []
        self.slots: dict[int, asyncio.Task[None]] = {}
        self.pool = h1.Pool(
            cfg.timeouts.connect_s,
            ssl_context(cfg.insecure) if any(t.tls for t in self.targets.values()) else None,
        )
        self.batches: list[EngineBatch] = []

    # ------------------------------------------------------------------ requests
    def _pick_prompt(self) -> tuple[Prompt, int]:
        cfg = self.cfg
        if cfg.prompts:
            p = cfg.prompts[int(self.rng.integers(0, len(cfg.prompts)))]
        else:
            if len(self.mix_kinds) == 1:
                kind = self.mix_kinds[0]
            else:
                kind = self.mix_kinds[int(self.rng.choice(len(self.mix_kinds), p=self.mix_w))]
            n = self.prompt_tokens.sample(self.rng)
            p = synthetic_prompt(kind, n, self.rng, cfg.prompt_shape, cfg.shared_prefix)
            if kind == IMAGE:  # the sizes in turn: each as many images as the next
                sizes = cfg.image_sizes
                p = replace(p, image=sizes[self.images_made % len(sizes)])
                self.images_made += 1
        return p, self.max_tokens.sample(self.rng)

    def _next_script(self) -> Script | None:
        """The next conversation of a file, in turn (the workers share the file out)."""
        scripts = self.cfg.conversations.scripts if self.cfg.conversations else ()
        if not scripts:
            return None
        i = self.conversations_begun * self.nworkers + self.worker
        self.conversations_begun += 1
        return scripts[i % len(scripts)]

    def _pick_arm(self, n: int) -> str:
        if self.cfg.assign == "alternate" and len(self.arm_names) > 1:
            return self.arm_names[n % len(self.arm_names)]
        if self.cfg.assign == "random" and len(self.arm_names) > 1:
            return self.pyrng.choice(self.arm_names)
        return self.arm

    def _take_budget(self) -> bool:
        if self.stopping:
            return False
        if self.budget is not None:
            if self.budget <= 0:
                return False
            self.budget -= 1
        return True

    async def one(
        self, t_sched: int, chat: Chat | None = None, given: tuple[Prompt, int] | None = None
    ) -> str:
        n = self.counter
        self.counter += 1
        rid = n * self.nworkers + self.worker
        arm_name = self._pick_arm(n)
        arm = self.arms[arm_name]
        item = None
        if given is not None:
            prompt, max_tokens = given
        elif chat is None and (
            self.q_pass.get(arm_name, 0) > 0 or self.q_rng.random() < self.cfg.quality_share
        ):
            if self.q_pass.get(arm_name, 0) > 0:
                self.q_pass[arm_name] -= 1
            item = self.q_items[self.q_next[arm_name] % len(self.q_items)]
            self.q_next[arm_name] += 1
            prompt, max_tokens = item.prompt, QUALITY_MAX_TOKENS
        else:
            prompt, max_tokens = self._pick_prompt() if chat is None else chat.next_prompt(self)
        if prompt.kind == GUIDED:
            # every other guided request is the same kind of prompt without the schema:
            # the control that says what the grammar costs (model/workloads/structured.py)
            self.guided_n += 1
            if self.guided_n % 2 == 0:
                prompt = prompt.without_extra(GUIDED_FREE)
        checked = prompt.kind in (GUIDED, TOOLS)
        answer: list[str] = []
        call: list[tuple[str, str]] = []
        if self.cfg.record_prompts:
            self.prompts.append(SentPrompt(rid, prompt.messages, prompt.text))
        body = json.dumps(build_body(self.cfg, arm, prompt, max_tokens)).encode()
        warm = False
        if self.warmup_left > 0:
            self.warmup_left -= 1
            warm = True
        if self.cfg.warmup_s and (t_sched - self.t_start) < self.cfg.warmup_s * 1e9:
            warm = True
        settle = bool(self.t_switch) and (t_sched - self.t_switch) < self.settle_ns
        base: dict[str, Any] = {
            "kind": prompt.kind,
            "prompt_tokens_asked": prompt.asked,
            "max_tokens_asked": max_tokens,
            "segment": self.segment,
            "step": self.step,
            "warmup": warm,
            "settle": settle,
            "worker": self.worker,
            "turn": 0 if chat is None else chat.turn,
            "image_px": prompt.image or None,
        }
        self.in_flight[rid] = (arm_name, t_sched, prompt.kind, self.segment)
        self.sent += 1
        try:
            rec = await stream_request(
                self.pool,
                self.targets[arm_name],
                rid=rid,
                arm=arm_name,
                body=body,
                t_sched=t_sched,
                ticks=self.ticks,
                first_token_s=self.cfg.timeouts.first_token_s,
                total_s=self.cfg.timeouts.total_s,
                idle_s=self.cfg.timeouts.idle_s,
                stall_ms=self.cfg.stall_ms,
                base=base,
                request_id=request_id(self.cfg.run_id, rid),
                # a probe's answer is judged on its first CHECK_CHARS (one more tells a
                # longer one); a conversation's reply is sent back, up to KEEP_CHARS
                keep_chars=CHECK_CHARS + 1
                if item is not None
                else KEEP_CHARS
                if chat or checked
                else 0,
                on_text=answer.append
                if item is not None or checked
                else chat.reply
                if chat
                else None,
                on_call=(lambda n, a: call.append((n, a))) if checked else None,
            )
            if checked and rec.outcome == "ok":
                # the structured answer or the tool call, read (never run) and validated
                why = (check_json(answer[0] if answer else "") if prompt.kind == GUIDED
                       else check_call(*(call[0] if call else ("", ""))))  # fmt: skip
                rec = replace(rec, valid=0.0 if why else 1.0,
                              error=rec.error or (f"invalid: {why}" if why else ""))  # fmt: skip
            if item is not None and rec.outcome == "ok":
                # read, never run: the answer is checked as text (model/judge/quality.py), in
                # time linear in its length (CHECK_CHARS at most); one it cannot judge
                # is counted as unjudged, never as wrong
                ok, why = judge(item.check, item.answer, answer[0] if answer else "")
                if ok is None:
                    rec = replace(rec, error=why)
                else:
                    rec = replace(rec, quality=1.0 if ok else 0.0)
        except asyncio.CancelledError as e:
            self.records.append(
                RequestRecord(
                    rid=rid,
                    arm=arm_name,
                    outcome="cancelled",
                    t_sched=t_sched,
                    t_end=perf_counter_ns(),
                    # (an Abort cancels with its reason; a stop without one)
                    error=str(e.args[0]) if e.args else "cancelled at stop",
                    **base,
                )
            )
            self.in_flight.pop(rid, None)
            raise
        except Exception as e:  # a bug must cost one request, never the run
            rec = RequestRecord(
                rid=rid,
                arm=arm_name,
                outcome="protocol",
                t_sched=t_sched,
                t_end=perf_counter_ns(),
                error=f"internal: {type(e).__name__}",
                **base,
            )
        self.in_flight.pop(rid, None)
        if rec.send_lag_ms is not None:
            self.lags.append(rec.send_lag_ms)
        self.records.append(rec)
        if chat is not None:
            chat.ended(rec.outcome)
        return rec.outcome

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    # ------------------------------------------------------------------ load shapes
    async def slot(self, idx: int) -> None:
        backoff = 0.0
        conv = self.cfg.conversations
        chat: Chat | None = None
        while not self.stopping and idx < int(self.level):
            if self.paused:
                await self.resume_evt.wait()
                continue
            if conv is not None:
                if chat is None or chat.done:
                    chat = Chat(conv.turns.sample(self.rng), self._next_script())
                elif conv.think_s > 0:  # the user reads, then types the next message
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop_evt.wait(), conv.think_s)
                    if self.stopping:
                        break
                    if self.paused:  # paused while the user read: nothing is sent
                        continue
            if not self._take_budget():
                break
            if await self.one(perf_counter_ns(), chat) == "connect":
                # The server is down: each stream retries with a growing pause instead of
                # hammering it (every attempt is still counted as a failure).
                backoff = min(5.0, backoff * 2 if backoff else 0.25)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_evt.wait(), backoff)
            else:
                backoff = 0.0
        self.slots.pop(idx, None)

    def _ensure_slots(self) -> None:
        for i in range(int(self.level)):
            if i not in self.slots:
                self.slots[i] = self._spawn(self.slot(i))

    async def arrivals(self) -> None:
        arr = Arrivals(
            self.cfg.arrival,
            max(self.level, 1e-9),
            self.cfg.burstiness,
            seed=None if self.cfg.seed is None else self.cfg.seed + 31 * self.worker,
        )
        cap = max(1, split_share(self.cfg.max_concurrency, self.worker, self.nworkers))
        sem = asyncio.Semaphore(cap)
        next_t = perf_counter_ns()
        while not self.stopping:
            if self.paused:
                await self.resume_evt.wait()
                next_t = perf_counter_ns()
                continue
            arr.set_rate(max(self.level, 1e-9))
            next_t += int(arr.next_gap() * 1e9)
            self._spare(next_t)
            self.level_evt.clear()
            if not await until(next_t, self.level_evt) and not self.stopping:
                # The rate changed: re-plan from now rather than from an old gap.
                next_t = perf_counter_ns()
                continue
            if not await self._send_capped(sem, next_t):
                break

    async def _send_capped(
        self, sem: asyncio.Semaphore, t_sched: int, given: tuple[Prompt, int] | None = None
    ) -> bool:
        """An open-loop request scheduled at ``t_sched``, under the cap on streams in
        flight (waiting here shows as send lag, never a drop); False: the run is over."""
        if not self._take_budget():
            return False
        await sem.acquire()
        if self.stopping:
            sem.release()
            return False
        t = self._spawn(self.one(t_sched, given=given))
        t.add_done_callback(lambda _t: sem.release())
        self.open_tasks.add(t)
        t.add_done_callback(self.open_tasks.discard)
        return True

    def _spare(self, next_t: int) -> None:
        """Before an open-loop send with time to spare: a connection ready for it (a task
        only where none is idle)."""
        target = self.targets[self.arm]
        if next_t - perf_counter_ns() > SPIN_NS and self.pool.wants_spare(target):
            self._spawn(self.pool.spare(target))

    async def replay_trace(self) -> None:
        """Every request of the trace at its own time (this worker's share: every
        ``nworkers``-th, so the shares interleave and ``-n N`` sends the first N). Each
        prompt is built while waiting for its time: building a long one is never send
        lag. A pause shifts the rest of the schedule by its length."""
        tr = self.cfg.trace
        assert tr is not None
        cap = max(1, split_share(self.cfg.max_concurrency, self.worker, self.nworkers))
        sem = asyncio.Semaphore(cap)
        seed = self.cfg.seed if self.cfg.seed is not None else 0
        await self.trace_go.wait()
        # a large file is read here, a line at a time a little ahead of its time
        with contextlib.closing(read_share(tr, self.worker, self.nworkers)) as share:
            await self._send_share(share, tr, sem, seed)

    async def _send_share(self, share: Any, tr: Any, sem: asyncio.Semaphore, seed: int) -> None:
        shift = 0
        while True:
            try:
                i, e = next(share, (-1, None))
            except WorkloadError as err:
                self.fault = str(err)
                self.budget = 0  # (the engine ends once its requests in flight have)
                return
            if e is None:
                self.budget = 0  # the share is sent: the engine ends with its last answer
                return
            given = (trace_prompt(e, i, seed, tr.block, self.cfg.prompt_shape), e.output_tokens)
            while True:
                next_t = self.trace_t0 + shift + round(e.t_ms * 1e6 / tr.speed)
                self._spare(next_t)
                await until(next_t, self.stop_evt)
                if not self.paused or self.stopping:
                    break
                p0 = perf_counter_ns()
                await self.resume_evt.wait()
                shift += perf_counter_ns() - p0
            if not await self._send_capped(sem, next_t, given):
                break

    # ------------------------------------------------------------------ control
    def on_command(self, cmd: Command) -> None:
        now = perf_counter_ns()
        if isinstance(cmd, BeginStep):
            # A ladder step: new lengths (if given); its first requests settle.
            self.step = cmd.step
            self.settle_ns = int(max(cmd.warm_s, self.cfg.settle_s) * 1e9)
            if cmd.prompt_tokens is not None:
                self.prompt_tokens = LengthDist.parse(cmd.prompt_tokens)
            if cmd.max_tokens is not None:
                self.max_tokens = LengthDist.parse(cmd.max_tokens)
            self.t_switch = cmd.t
        elif isinstance(cmd, SwitchArm):
            if cmd.arm in self.arms:
                self.arm, self.segment, self.t_switch = cmd.arm, cmd.segment, cmd.t
                if cmd.model:
                    self.arms[cmd.arm] = replace(self.arms[cmd.arm], model=cmd.model)
        elif isinstance(cmd, Pause):
            self.paused, self.pause_token, self.paused_t = cmd.paused, cmd.token, now
            if cmd.paused:
                self.resume_evt.clear()
            else:
                self.resume_evt.set()
        elif isinstance(cmd, SetLevel):
            if self.mode == "concurrency":
                self.level = float(split_share(int(cmd.level), self.worker, self.nworkers))
                self._ensure_slots()
            else:
                self.level = cmd.level / self.nworkers
                self.level_evt.set()
        elif isinstance(cmd, StartTrace):
            self.trace_t0 = cmd.t
            self.trace_go.set()
        elif isinstance(cmd, Abort):
            for t in list(self.open_tasks):
                t.cancel(f"aborted: {cmd.why}")  # (the request's record says why)
        elif isinstance(cmd, QualityPass):
            for a in cmd.arms or tuple(self.arm_names):
                share = split_share(cmd.n, self.worker, self.nworkers)
                self.q_pass[a] = self.q_pass.get(a, 0) + share
        elif isinstance(cmd, Stop):
            self.stopping = True
            self.trace_go.set()
            self.hard_stop = cmd.hard
            self.resume_evt.set()
            self.level_evt.set()
            self.stop_evt.set()
        self.events.append(Event(t=now, kind="engine", message=f"command {type(cmd).__name__}"))

    async def _lag_probe(self) -> None:
        while True:
            t0 = perf_counter_ns()
            await asyncio.sleep(0.05)
            lag = (perf_counter_ns() - t0) / NS_PER_MS - 50.0
            self.loop_lag_ms = max(self.loop_lag_ms, lag)

    def _status(self, done: bool = False) -> EngineStatus:
        lags = self.lags
        lag = float(np.median(lags)) if lags else 0.0
        # its own CPU (an overloaded load generator must never pass for a slow server)
        cpu, wall = time.process_time(), time.monotonic()
        cpu_pct = 100 * (cpu - self._cpu_at[0]) / max(1e-6, wall - self._cpu_at[1])
        self._cpu_at = (cpu, wall)
        return EngineStatus(
            t=perf_counter_ns(),
            in_flight=len(self.in_flight),
            sent=self.sent,
            paused=self.paused,
            arm=self.arm,
            level=self.level,
            mode=self.mode,
            loop_lag_ms=self.loop_lag_ms,
            send_lag_ms=lag,
            done=done,
            worker=self.worker,
            host=self.host,
            cpu_pct=round(max(0.0, cpu_pct), 1),
            pause_token=self.pause_token,
            paused_t=self.paused_t,
        )

    def flush(self, done: bool = False) -> None:
        batch = EngineBatch(
            worker=self.worker,
            records=self.records,
            ticks=self.ticks.take(),
            events=self.events,
            status=self._status(done),
            prompts=self.prompts,
            fault=self.fault,
        )
        self.fault = ""
        self.records, self.events, self.lags, self.prompts = [], [], [], []
        self.loop_lag_ms = 0.0
        if self.out is None:
            self.batches.append(batch)  # in-process use (tests, benchmarks)
        else:
            try:
                self.out.send(batch)
            except (BrokenPipeError, OSError):
                # The parent is gone: nobody is left to measure for.
                self.stopping = self.hard_stop = True
                self.stop_evt.set()

    async def _flusher(self) -> None:
        ppid = os.getppid()
        while True:
            await asyncio.sleep(self.cfg.flush_s)
            self.flush()
            if os.getppid() != ppid:
                self.stopping = self.hard_stop = True
                self.stop_evt.set()

    async def run(self, cmd: Connection | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.t_start = perf_counter_ns()
        if cmd is None:
            if self.start_trace:  # (tests, benchmarks): the trace starts now
                self.trace_t0 = self.t_start
                self.trace_go.set()
            elif self.mode == "trace":
                self.flush()  # "up" (a Ray actor: its parent starts the trace)
        else:

            def _read() -> None:
                try:
                    while cmd.poll():
                        self.on_command(cmd.recv())
                except (EOFError, OSError):
                    loop.remove_reader(cmd.fileno())
                    self.on_command(Stop(hard=True))

            loop.add_reader(cmd.fileno(), _read)
            if self.mode == "trace":
                self.flush()  # "up": the trace starts once every engine has said so
        flusher = loop.create_task(self._flusher())
        lagger = loop.create_task(self._lag_probe())
        deadline = self.cfg.duration_s
        if self.mode == "concurrency":
            self._ensure_slots()
            producer = None
        elif self.mode == "trace":
            producer = self._spawn(self.replay_trace())
        else:
            producer = self._spawn(self.arrivals())
        try:
            # Wait for the end: duration, budget exhausted, or a stop command.
            t_end = None if deadline is None else loop.time() + deadline
            while not self.stopping:
                timeout = None if t_end is None else max(0.0, t_end - loop.time())
                if timeout == 0.0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_evt.wait(), min(timeout or 0.25, 0.25))
                if self.budget is not None and self.budget <= 0 and not self.in_flight:
                    break
                if self.mode == "concurrency" and not self.slots and self.budget == 0:
                    break
            self.stopping = True
            self.resume_evt.set()
            self.level_evt.set()
            if producer is not None:
                producer.cancel()
            # Drain: in-flight requests finish, within a bounded wait.
            t_drain = loop.time() + (0 if self.hard_stop else self.cfg.drain_s)
            while self.in_flight and loop.time() < t_drain and not self.hard_stop:
                self.stop_evt.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_evt.wait(), 0.05)
            for t in list(self.tasks):
                t.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            flusher.cancel()
            lagger.cancel()
            self.pool.close()
            self.flush(done=True)


def set_pdeathsig() -> None:
    """Ask Linux to end this process when its parent dies (even by kill -9)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        # SIGKILL: an engine ignores SIGTERM (below), which the parent handles
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # not Linux: the flusher's parent check still ends the engine


def engine_main(
    cfg: RunConfig, worker: int, nworkers: int, out: Connection, cmd: Connection
) -> None:
    """Entry point of an engine process."""
    set_pdeathsig()
    # The parent owns Ctrl-C, SIGTERM and SIGHUP (sent to the whole group by systemd,
    # ``timeout`` or a dropped SSH session): it drains and sends "stop"; an engine that
    # died of them would read as a failed run.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        eng = Engine(cfg, worker, nworkers, out)
        asyncio.run(eng.run(cmd))
    except KeyboardInterrupt:
        pass
    except Exception as e:  # a bug: the parent says why in one line and exits non-zero
        with contextlib.suppress(Exception):
            out.send(EngineFailure(worker, f"{type(e).__name__}: {e}"[:300]))
        raise SystemExit(1) from None
    finally:
        with contextlib.suppress(Exception):
            out.close()
