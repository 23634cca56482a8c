"""A run plan you can read: ``tokmon run``'s options, every one checked, as a frozen
``RunPlan`` — before any server is asked, any file read or any socket opened.

``plan_run`` is a function of what it is given: the typed options (``RunOptions``), what
they point at already read (``Given``: the workload's files, the environment's URL and
key) and the run's id. A mistake in any option is one line here, before anything starts.
The one thing it does besides is register each secret it meets with the sanitiser, at
once, so that no later output (an error line included) can carry it.

What the plan needs done (connect Ray, start a managed server, resolve each arm's model,
measure the prompts, survey the servers) is ``cli/run.py``'s ``prepare_run``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokmon.cli.listen import parse_listen
from tokmon.cli.options import RunOptions
from tokmon.cli.parser import UsageError
from tokmon.model.env.redact import secrets_in
from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S
from tokmon.textsafe import add_secret

if TYPE_CHECKING:
    from tokmon.model.judge.capacity import CapacityPlan
    from tokmon.model.judge.ladder import Ladder
    from tokmon.model.statistics.stats import Slo
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.questions import QualityItem
    from tokmon.model.workloads.trace import Trace
    from tokmon.model.workloads.workload import Prompt, Script


def dur(name: str, text: str | None, allow_zero: bool = True) -> float | None:
    from tokmon.model.workloads.workload import WorkloadError, parse_duration

    if text is None:
        return None
    try:
        v = parse_duration(text)
    except WorkloadError as e:
        raise UsageError(f"{name}: {e}") from None
    if not allow_zero and v <= 0:
        raise UsageError(f"{name}: must be longer than zero")
    return v


@dataclass(frozen=True)
class Given:
    """What the options point at, read before the plan is made (``cli/given.py``): the
    URL and API key from the environment or a file, and the workload's files."""

    url: str | None = None  # --url, else TOKMON_URL
    api_key: str | None = None  # --api-key-file, else TOKMON_API_KEY or OPENAI_API_KEY
    prompts: tuple[Prompt, ...] = ()
    conversations: tuple[Script, ...] = ()
    quality_items: tuple[QualityItem, ...] = ()
    trace: Trace | None = None  # --trace or --replay-load


@dataclass(frozen=True)
class ServerPlan:
    """How managed servers (serve= arms) are run."""

    ready_timeout_s: float
    stop_timeout_s: float
    warmup_n: int
    on_failure: str
    endpoint: str
    log_dir: str | None  # beside the recording; None: a new temporary folder
    sample_gpu: bool  # each server's GPU memory read as it starts
    shown_args: tuple[str, ...]


@dataclass(frozen=True)
class ProbePlan:
    """What is sampled beside the streams."""

    gpu: str  # "nvml", "dcgm" or "off"
    gpus: tuple[int, ...] | None
    gpu_interval_s: float
    dcgm_url: str | None
    server_pid: int | None
    server_metrics: bool
    metrics_url: str | None  # None: /metrics next to each arm's URL
    metrics_interval_s: float
    net_interval_s: float | None  # None: off


@dataclass(frozen=True)
class RecordPlan:
    """``--record`` and how it is written."""

    path: str
    append: bool
    overwrite: bool
    chunks: bool
    rotate_s: float | None
    max_bytes: int | None


@dataclass(frozen=True)
class ViewPlan:
    """How the run is watched and what it writes at the end."""

    headless: bool
    theme: str | None
    fps: float
    status_every_s: float
    web: tuple[str, int] | None
    web_control: bool
    prometheus: tuple[str, int] | None
    linger_s: float  # --prometheus-linger
    summary_json: str | None


@dataclass(frozen=True)
class ExitPlan:
    """What makes the run's exit code other than 0 beyond a failure."""

    alerts: bool  # --alerts-exit: 3 if any alert fired
    capacity_at_least: float | None
    fail_on_slo: bool
    slo_target: float


@dataclass(frozen=True)
class RunPlan:
    """What the options ask for, every one checked, before any server is asked: the
    run's configuration with each arm's model as given (``prepare_run`` resolves them),
    what must be performed before the run can start, and how it is watched."""

    cfg: RunConfig  # its arms as given: url, endpoint and model before the pre-flight
    target: str | None  # --url (or TOKMON_URL)
    auth: dict[str, str]  # the API key, as the header every request carries
    ladder: Ladder | CapacityPlan | None
    slo: Slo
    window_s: float
    drift_alert: float  # %/h
    check_outputs: int
    gpu_hour_price: float | None
    gpu_count: int | None
    cycles: int | None
    scenario: str  # --scenario's name, or ""
    tokenizer: str | None  # a local tokenizer to measure prompts with
    measure_prompts: bool  # prompts built to an exact token count (the server is asked)
    survey: bool  # each server's environment written down before measuring
    group_readable: bool  # files written 0640 rather than 0600
    servers: ServerPlan | None
    probes: ProbePlan
    record: RecordPlan | None
    view: ViewPlan
    exits: ExitPlan


@dataclass(frozen=True)
class _Load:
    """How the load is offered: a ladder or a capacity search (its first step sets the
    streams or the rate), streams or a rate, or a trace."""

    ladder: Ladder | CapacityPlan | None
    mode: str
    conc: int
    rate: float | None


def _load(o: RunOptions, given: Given) -> _Load:
    concurrency, rate = o.concurrency, o.rate
    ladder: Ladder | CapacityPlan | None = None
    if o.ladder:
        from tokmon.model.judge.ladder import LadderError, parse_ladder

        try:
            ladder = parse_ladder(
                o.ladder,
                dur("--step-duration", o.step_duration, False) or 30.0,
                dur("--step-warmup", o.step_warmup) or 0.0,
                o.ladder_stop,
                dur("--duration", o.duration, allow_zero=False),
            )
        except LadderError as e:
            raise UsageError(str(e)) from None
        if o.requests is not None:
            raise UsageError("--ladder and --requests exclude each other: a ladder runs by time")
        if ladder.param == "concurrency":
            if rate is not None:
                raise UsageError("--ladder concurrency=… and --rate exclude each other")
            concurrency = int(ladder.values[0])
        elif ladder.param == "rate":
            if concurrency is not None:
                raise UsageError("--ladder rate=… and --concurrency exclude each other")
            rate = float(ladder.values[0])
    if o.find_capacity:
        search = capacity_plan(o, ladder)
        ladder = search
        if search.param == "concurrency":
            concurrency = int(search.start)
        else:
            rate = search.start
    if concurrency is not None and rate is not None:
        raise UsageError("--concurrency and --rate exclude each other: pick one")
    mode = "rate" if rate is not None else "concurrency"
    trace = given.trace
    if trace is not None:
        mode = "trace"
    conc = 4 if concurrency is None else concurrency
    # (each option's range is checked by its type, config values included; a ladder's
    # first step sets --concurrency or --rate here, so those two are checked again)
    if mode == "concurrency" and not 1 <= conc <= 100_000:
        raise UsageError(f"--concurrency must be between 1 and 100000, got {conc}")
    if mode == "rate" and not (rate is not None and 0 < rate <= 1e6):
        raise UsageError(
            f"--rate must be a positive number of requests/s (at most 1e6), got {rate}"
        )
    return _Load(ladder, mode, conc, rate)


@dataclass(frozen=True)
class _Workload:
    """What each request asks: its lengths, kinds, conversations and shared prefix, and
    the warm-up before anything counts."""

    duration: float | None
    warm_req: int
    warm_s: float
    ptoks: Any
    mtoks: Any
    conversations: Any
    shared: Any
    mix: tuple[tuple[str, float], ...]
    extra: dict[str, Any]


def _workload(o: RunOptions, given: Given, mode: str) -> _Workload:
    from tokmon.model.workloads.workload import LengthDist, WorkloadError, parse_mix

    trace = given.trace
    duration = dur("--duration", o.duration, allow_zero=False)
    warm_req, warm_s = 0, 0.0
    w = str(o.warmup).strip()
    if w.isdigit():
        warm_req = int(w)
    else:
        warm_s = dur("--warmup", w) or 0.0
    try:
        ptoks = LengthDist.parse(o.prompt_tokens)
    except WorkloadError as e:
        raise UsageError(f"--prompt-tokens: {e}") from None
    try:
        mtoks = LengthDist.parse(o.max_tokens)
    except WorkloadError as e:
        raise UsageError(f"--max-tokens: {e}") from None
    conversations = None
    if o.turns or o.conversations:
        from tokmon.model.workloads.workload import Conversations

        flag = "--turns" if o.turns else "--conversations"
        if mode != "concurrency":
            raise UsageError(f"{flag}: a conversation is one stream; use -c N, not --rate")
        try:
            turns = LengthDist.parse(o.turns or "1")
        except WorkloadError as e:
            raise UsageError(f"--turns: {e}") from None
        think = dur("--think-time", o.think_time) or 0.0
        conversations = Conversations(turns, think, o.followup_tokens, given.conversations)
    shared = None
    if o.shared_prefix:
        from tokmon.model.workloads.workload import SharedPrefix, parse_count

        try:
            n = parse_count(o.shared_prefix)
        except WorkloadError as e:
            raise UsageError(f"--shared-prefix: {e}") from None
        if not 1 <= n <= 1_000_000:
            raise UsageError(f"--shared-prefix: 1 to 1M tokens, got {o.shared_prefix!r}")
        shared = SharedPrefix(n, o.prefix_pool)
        if o.prompts:
            raise UsageError("--shared-prefix builds synthetic prompts: not with --prompts")
    mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    if trace is not None:
        mix = trace.kinds  # (the kinds whose prompts are measured before the run)
    elif o.mix:
        try:
            mix = tuple(parse_mix(o.mix).items())
        except WorkloadError as e:
            raise UsageError(str(e)) from None
    extra: dict[str, Any] = {}
    if o.extra_body:
        try:
            extra = json.loads(o.extra_body)
        except ValueError as e:
            raise UsageError(f"--extra-body is not valid JSON: {e}") from None
        if not isinstance(extra, dict):
            raise UsageError("--extra-body must be a JSON object")
    return _Workload(duration, warm_req, warm_s, ptoks, mtoks, conversations, shared, mix, extra)


@dataclass(frozen=True)
class _Arms:
    """The arms and how each is reached: the target, the headers and key (every secret
    in them scrubbed from every output), who sends what share of the requests."""

    arms: list[Any]
    url: str | None
    headers: dict[str, str]
    key: str | None
    shown: tuple[str, ...]
    shown_args: tuple[str, ...]
    assign: str
    budget: int | None
    qshare: float


def _arms(o: RunOptions, given: Given, file_arms: list[Any], qshare: float) -> _Arms:
    from tokmon.model.workloads.arms import Arm, ArmError, check_unique, parse_arm
    from tokmon.model.workloads.config import redact_header

    shown = tuple(str(x) for x in o.show_header)
    url, headers, key = credentials(o.header, shown, given.api_key, given.url)
    arms: list[Arm] = list(file_arms)
    try:
        arms += [parse_arm(a) for a in o.arm]
        check_unique(arms)
    except ArmError as e:
        raise UsageError(str(e)) from None
    shown_args = tuple(str(x) for x in o.show_arg)
    for a in arms:
        for sec in secrets_in(a.serve, shown_args):
            add_secret(sec)  # scrubbed from every output, a server's log included
    if not arms:
        arms = [Arm(name="default")]
    assign, budget = o.assign, o.requests
    if o.quality is not None:
        qshare = 1.0  # every request a question
        budget, assign = quality_run(o, arms)
    for i, a in enumerate(arms):
        if a.url:
            clean, basic = split_credentials(a.url)
            if basic:
                if key:
                    raise UsageError(
                        f"arm {a.name}: credentials in its url and an API key exclude each other"
                    )
                arms[i] = dataclasses.replace(
                    a, url=clean, headers={"authorization": basic, **a.headers}
                )
        for k, v in arms[i].headers.items():
            if redact_header(k, v, shown) != v:
                add_secret(v)
    from tokmon.engine.target import prepare

    try:  # what the engine will send: a URL it can reach, headers it can write
        for a in arms:
            if a.url or url:
                prepare(a.url or url or "", {**headers, **a.headers})
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not url and any(not a.url and not a.serve for a in arms):
        raise UsageError(
            "no target: give --url (e.g. http://127.0.0.1:8000/v1), or url= in every --arm"
        )
    return _Arms(arms, url, headers, key, shown, shown_args, assign, budget, qshare)


def plan_run(o: RunOptions, given: Given, file_arms: list[Any], run_id: str) -> RunPlan:
    """Check every option against the others and against what its files hold: the load,
    the workload, the arms, then the rest, each group on its own."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig, Timeouts

    qshare = quality_share(o.quality_probes)
    check_quality(o, qshare)
    check_trace(o)
    check_conversations(o)
    web = parse_listen("--web", o.web, o.web_allow_remote)
    prometheus = parse_listen("--prometheus", o.prometheus, o.prometheus_allow_remote)
    linger = dur("--prometheus-linger", o.prometheus_linger) or 0.0
    load = _load(o, given)
    ladder, mode, conc, rate = load.ladder, load.mode, load.conc, load.rate
    trace = given.trace
    wl = _workload(o, given, mode)
    way = _arms(o, given, file_arms, qshare)
    arms, url, headers, key = way.arms, way.url, way.headers, way.key
    shown, shown_args, assign, budget, qshare = (
        way.shown, way.shown_args, way.assign, way.budget, way.qshare
    )  # fmt: skip
    auth: dict[str, str] = {"authorization": f"Bearer {key}"} if key else {}
    managed = any(a.serve for a in arms)
    if o.ray and managed:
        raise UsageError(
            "--ray and arms with serve= exclude each other (a managed server is local)"
        )
    if o.tokenizer and o.approx_prompt_tokens:
        raise UsageError("--tokenizer and --approx-prompt-tokens exclude each other")
    alternate = dur("--alternate", o.alternate, allow_zero=False) if o.alternate else None
    if o.cycles and alternate is None:
        raise UsageError("--cycles needs --alternate (how long each turn lasts)")
    if managed and assign != "switch":
        raise UsageError("arms with serve= take turns on one GPU: --assign must be switch")
    given_arms = [  # (the pre-flight gives each its model; a managed server's url comes then)
        Arm(name=a.name, url=a.url or url or "", model=a.model or o.model or "",
            endpoint=a.endpoint or o.endpoint, body=a.body, headers=a.headers, serve=a.serve)
        for a in arms
    ]  # fmt: skip
    timeouts = Timeouts(
        connect_s=dur("--connect-timeout", o.connect_timeout, False) or 10.0,
        first_token_s=dur("--first-token-timeout", o.first_token_timeout, False) or 120.0,
        idle_s=dur("--idle-timeout", o.idle_timeout, False) or 60.0,
        total_s=dur("--total-timeout", o.total_timeout, False) or 900.0,
    )
    if trace is not None:  # (a trace is sent once: -n cuts it to its first N requests)
        budget = min(o.requests or trace.count, trace.count)
    cfg = RunConfig(
        run_id=run_id,
        arms=tuple(given_arms),
        mode=mode,
        concurrency=conc,
        rate=rate or 1.0,
        arrival=o.arrival,
        burstiness=o.burstiness,
        max_concurrency=o.max_concurrency,
        duration_s=wl.duration,
        requests=budget,
        trace=trace,
        record_prompts=o.record_prompts,
        quality_share=qshare,
        quality_items=given.quality_items,
        prompt_tokens=wl.ptoks,
        shared_prefix=wl.shared,
        conversations=wl.conversations,
        max_tokens=wl.mtoks,
        prompts=given.prompts,
        mix=wl.mix,
        ignore_eos=o.ignore_eos,
        image_sizes=image_sizes(o.image_size),
        temperature=o.temperature,
        top_p=o.top_p,
        seed=o.seed,
        extra_body=wl.extra,
        headers=headers,
        api_key=key,
        warmup_requests=wl.warm_req,
        warmup_s=wl.warm_s,
        settle_s=dur("--settle", o.settle) or 0.0,
        assign=assign,
        alternate_s=alternate,
        stall_ms=(dur("--stall-threshold", o.stall_threshold, False) or 1.0) * 1000,
        timeouts=timeouts,
        insecure=o.insecure,
        # With a request budget, a worker with no stream of its own would hold its share
        # of the budget forever: at most one worker per stream and per request. (Without
        # one, an idle worker waits for + or a ladder step to give it streams.)
        workers=o.workers
        if budget is None
        else min(o.workers, budget, conc if mode == "concurrency" else o.workers),
        continuous_usage=o.continuous_usage,
        shown_headers=shown,
        shown_args=shown_args,
        ray=o.ray,
        ray_options=ray_options(o),
        ray_on_loss=o.ray_on_loss,
    )
    scripted = bool(given.conversations)
    given_prompts = (
        trace is not None
        and trace.stream is None
        and all(e.prompt is not None for e in trace.entries)
    )
    return RunPlan(
        cfg=cfg,
        target=url,
        auth=auth,
        ladder=ladder,
        slo=parse_slo(o.slo, float(o.slo_target)),
        window_s=dur("--window", o.window, allow_zero=False) or WINDOW_S,
        drift_alert=parse_drift_alert(o.drift_alert),
        check_outputs=max(0, o.check_outputs),
        gpu_hour_price=o.gpu_hour_price,
        gpu_count=o.gpu_count,
        cycles=o.cycles,
        scenario=o.scenario or "",
        tokenizer=o.tokenizer,
        measure_prompts=not (given.prompts or given_prompts or scripted or o.approx_prompt_tokens),
        survey=not o.no_env,
        group_readable=o.group_readable,
        servers=server_plan(o, shown_args) if managed else None,
        probes=probe_plan(o),
        record=record_plan(o),
        view=ViewPlan(
            headless=o.headless,
            theme=o.theme,
            fps=o.fps,
            status_every_s=dur("--status-interval", o.status_interval, False) or 5.0,
            web=web,
            web_control=o.web_control,
            prometheus=prometheus,
            linger_s=linger,
            summary_json=o.summary_json,
        ),
        exits=ExitPlan(
            alerts=o.alerts_exit,
            capacity_at_least=o.capacity_at_least,
            fail_on_slo=o.fail_on_slo,
            slo_target=o.slo_target,
        ),
    )


# ----------------------------------------------------------------------------- checks
# (each pure; ``cli/given.py`` calls those about a file before it reads the file, so that
# a clash of options is told before a large file is read)


def check_trace(o: RunOptions) -> None:
    """``--trace`` or ``--replay-load``: what a trace fixes (times, lengths, kinds,
    prompts) may not be given again."""
    if not (o.trace or o.replay_load):
        return
    flag = "--trace" if o.trace else "--replay-load"
    if o.trace and o.replay_load:
        raise UsageError("--trace and --replay-load exclude each other: one load at a time")
    clashes = {
        "--concurrency": o.concurrency is not None,
        "--rate": o.rate is not None,
        "--ladder": bool(o.ladder),
        "--turns": bool(o.turns),
        "--conversations": bool(o.conversations),
        "--prompts": bool(o.prompts),
        "--shared-prefix": bool(o.shared_prefix),
        "--mix": bool(o.mix),
    }
    for other, clash in clashes.items():
        if clash:
            raise UsageError(f"{flag} sets the load request by request: not with {other}")


def check_conversations(o: RunOptions) -> None:
    if not o.conversations:
        return
    if o.turns:
        raise UsageError("--turns and --conversations exclude each other: a file's "
                         "conversations have their own turns")  # fmt: skip
    if o.prompts or o.shared_prefix:
        raise UsageError("--conversations brings its own prompts: not with --prompts "
                         "or --shared-prefix")  # fmt: skip


def check_quality(o: RunOptions, share: float) -> None:
    if o.quality is not None and share:
        raise UsageError("--quality N (a run of probes only) and --quality-probes (a share "
                         "of the load) exclude each other")  # fmt: skip
    if o.quality_file and not share and o.quality is None:
        raise UsageError("--quality-file asks its questions with --quality-probes SHARE "
                         "(mixed into the load) or --quality N (on their own)")  # fmt: skip


def quality_share(text: str | None) -> float:
    """``--quality-probes``: 5%, or 0.05; above 0 and at most 1."""
    if not text:
        return 0.0
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(
            f"--quality-probes: expected a share such as 5% or 0.05, got {text!r}"
        ) from None
    if not (0 < v <= 1):  # (NaN fails this too)
        raise UsageError(
            f"--quality-probes: the share must be above 0 and at most 100%, got {text!r}"
        )
    return v


def quality_run(o: RunOptions, arms: list[Any]) -> tuple[int, str]:
    """``--quality N``: every request a probe, N per arm, then stop. Several arms take
    turns request by request (each asked the same questions in the same order); arms
    with serve= take turns on one GPU, so they cannot."""
    n = o.quality or 0
    for opt, clash in (("--requests", o.requests), ("--ladder", o.ladder),
                       ("--find-capacity", o.find_capacity), ("--trace", o.trace)):  # fmt: skip
        if clash:
            raise UsageError(f"--quality N and {opt} exclude each other (it asks N questions "
                             "of each arm, then stops)")  # fmt: skip
    assign = o.assign
    if len(arms) > 1 and assign == "switch":
        if any(a.serve for a in arms):
            raise UsageError("--quality N over serve= arms: they take turns on one GPU; use "
                             "--quality-probes 100% --alternate DURATION instead")  # fmt: skip
        assign = "alternate"
    return n * (len(arms) if assign != "switch" else 1), assign


def image_sizes(text: str) -> tuple[int, ...]:
    """``512`` or ``256,512,1024``: each a size the image kind can make, each once."""
    from tokmon.model.workloads.images import SIZES

    out: list[int] = []
    for part in str(text).split(","):
        try:
            px = int(part.strip())
        except ValueError:
            px = -1
        if px not in SIZES:
            raise UsageError(
                f"--image-size: each of {', '.join(map(str, SIZES))}, got {part.strip()!r}"
            )
        if px in out:
            raise UsageError(f"--image-size: {px} given twice")
        out.append(px)
    return tuple(out)


def parse_slo(text: str | None, target: float = 0.95) -> Slo:
    from tokmon.model.statistics.stats import Slo

    got: dict[str, float] = {}
    if not text:
        return Slo(target=target)
    for part in text.split(","):
        k, eq, v = part.partition("=")
        k = k.strip()
        if not eq or k not in ("ttft", "tpot", "e2e", "answer"):
            raise UsageError(f"--slo: expected ttft=MS,tpot=MS,e2e=MS,answer=MS, got {part!r}")
        try:
            x = float(v)
        except ValueError:
            raise UsageError(f"--slo: {k} is not a number: {v!r}") from None
        if x <= 0:
            raise UsageError(f"--slo: {k} must be positive")
        got[f"{k}_ms"] = x
    return Slo(**got, target=target)


def parse_drift_alert(text: str | None) -> float:
    t = str(text or f"{DRIFT_ALERT_PCT_H:g}%/h").strip().lower().replace(" ", "")
    for suffix in ("%/h", "%/hour", "%"):
        if t.endswith(suffix):
            t = t[: -len(suffix)]
            break
    try:
        v = float(t)
    except ValueError:
        raise UsageError(f"--drift-alert: expected a rate like 5%/h, got {text!r}") from None
    if not v > 0:
        raise UsageError("--drift-alert must be positive")
    return v


def ray_options(o: RunOptions) -> dict[str, Any]:
    """``--ray-resources``: the options of each worker actor (checked here: one line;
    whether Ray is installed is found when it is joined)."""
    if not o.ray:
        if o.ray_resources:
            raise UsageError("--ray-resources needs --ray")
        return {}
    if not o.ray_resources:
        return {}
    try:
        opts = json.loads(o.ray_resources)
    except ValueError as e:
        raise UsageError(f"--ray-resources is not valid JSON: {e}") from None
    allowed = {"num_cpus", "num_gpus", "memory", "resources", "scheduling_strategy"}
    if not isinstance(opts, dict) or not set(opts) <= allowed:
        raise UsageError(f"--ray-resources: a JSON object of {', '.join(sorted(allowed))}")
    return opts


def capacity_plan(o: RunOptions, ladder: Any) -> CapacityPlan:
    """``--find-capacity``: the search's plan (its start: --concurrency or --rate, else 1)."""
    from tokmon.model.judge.capacity import CapacityPlan

    param = str(o.find_capacity)
    if ladder is not None:
        raise UsageError("--find-capacity and --ladder exclude each other: one schedule of load")
    if o.requests is not None:
        raise UsageError("--find-capacity and --requests exclude each other: a search runs by time")
    if not o.slo:
        raise UsageError("--find-capacity needs --slo (e.g. --slo ttft=500,tpot=50): the load "
                         "is found under it")  # fmt: skip
    lo_hi = [x.strip() for x in str(o.probe_duration).split(",")]
    if len(lo_hi) != 2:
        raise UsageError(f"--probe-duration: expected MIN,MAX (5s,auto), got {o.probe_duration!r}")
    lo = dur("--probe-duration", lo_hi[0], allow_zero=False) or 5.0
    # MAX "auto": as long as the probe's request budget takes at the requests' duration
    hi = 0.0 if lo_hi[1] == "auto" else dur("--probe-duration", lo_hi[1], allow_zero=False) or 0.0
    if hi and hi < lo:
        raise UsageError("--probe-duration: MAX is below MIN")
    mine, other = (o.concurrency, o.rate) if param == "concurrency" else (o.rate, o.concurrency)
    if other is not None:
        name = "rate" if param == "concurrency" else "concurrency"
        raise UsageError(f"--find-capacity {param} and --{name} exclude each other")
    start = float(mine or 1)
    return CapacityPlan(
        param=param,
        goodput=float(o.slo_target),
        slo=str(o.slo),
        start=start,
        min_s=lo,
        max_s=hi,
        warm_s=dur("--step-warmup", o.step_warmup) or 0.0,
    )


def server_plan(o: RunOptions, shown_args: tuple[str, ...]) -> ServerPlan:
    from pathlib import PurePath

    # (the recording's folder as written: made absolute where the folder is made)
    log_dir = str(PurePath(o.record).parent) if o.record else None
    return ServerPlan(
        ready_timeout_s=dur("--server-ready-timeout", o.server_ready_timeout, False) or 600.0,
        stop_timeout_s=dur("--server-stop-timeout", o.server_stop_timeout, False) or 30.0,
        warmup_n=o.server_warmup,
        on_failure=o.on_server_failure,
        endpoint=o.endpoint,
        log_dir=log_dir,
        sample_gpu=not o.no_gpu,
        shown_args=shown_args,
    )


def probe_plan(o: RunOptions) -> ProbePlan:
    gpus = None
    if o.gpus:
        try:
            gpus = tuple(int(x) for x in str(o.gpus).split(",") if x.strip())
        except ValueError:
            raise UsageError(f"--gpus must be indices like 0,2, got {o.gpus!r}") from None
    net = None if o.net_interval == "off" else o.net_interval
    return ProbePlan(
        gpu="dcgm" if o.dcgm_url else "off" if o.no_gpu else "nvml",
        gpus=gpus,
        gpu_interval_s=dur("--gpu-interval", o.gpu_interval, allow_zero=False) or 0.5,
        dcgm_url=o.dcgm_url,
        server_pid=o.server_pid,
        server_metrics=not o.no_server_metrics,
        metrics_url=o.metrics_url,
        metrics_interval_s=dur("--metrics-interval", o.metrics_interval, False) or 2.0,
        net_interval_s=None if net is None else dur("--net-interval", net, False) or 5.0,
    )


SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
              "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20,
              "gib": 2**30, "tib": 2**40}  # fmt: skip
MIN_PART_BYTES = 1 << 16  # a part smaller than this would be mostly headers
MIN_PART_S = 1.0


def parse_size(text: str) -> int:
    """``500MB``, ``2GB``, ``1.5GiB`` or plain bytes -> bytes (ValueError: one line)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 500MB, 2GB)")
    return int(float(m.group(1)) * SIZE_UNITS[unit])


def rotation(every: str | None, size: str | None, append: bool) -> tuple[float | None, int | None]:
    """--record-rotate and --record-max-size, checked."""
    if not every and not size:
        return None, None
    if append:
        raise UsageError("--append and --record-rotate/--record-max-size exclude each other "
                         "(a rotated recording begins anew)")  # fmt: skip
    rotate_s = max_bytes = None
    if every:
        rotate_s = dur("--record-rotate", every) or 0.0
        if rotate_s < MIN_PART_S:
            raise UsageError(f"--record-rotate: at least {MIN_PART_S:g}s, got {every}")
    if size:
        try:
            max_bytes = parse_size(size)
        except ValueError as e:
            raise UsageError(f"--record-max-size: {e}") from None
        if max_bytes < MIN_PART_BYTES:
            raise UsageError(f"--record-max-size: at least 64KiB, got {size}")
    return rotate_s, max_bytes


def record_plan(o: RunOptions) -> RecordPlan | None:
    if not o.record:
        return None
    if o.append and o.overwrite:
        raise UsageError("--append and --overwrite exclude each other")
    rotate_s, max_bytes = rotation(o.record_rotate, o.record_max_size, o.append)
    return RecordPlan(
        path=o.record,
        append=o.append,
        overwrite=o.overwrite,
        chunks=o.record_chunks,
        rotate_s=rotate_s,
        max_bytes=max_bytes,
    )


# ----------------------------------------------------------------------------- credentials


def credentials(
    header_args: tuple[str, ...], shown: tuple[str, ...], key: str | None, url: str | None
) -> tuple[str | None, dict[str, str], str | None]:
    """The --header values, the API key and the URL without its userinfo (which becomes
    Basic authentication): (url, headers, key). Every secret among them is registered with
    the sanitiser, so no output carries it from now on."""
    from tokmon.model.workloads.config import redact_header

    headers: dict[str, str] = {}
    for h in header_args:
        k, colon, v = str(h).partition(":")
        if not colon or not k.strip():
            raise UsageError(f"--header must be K:V, got {h!r}")
        headers[k.strip()] = v.strip()
    for k, v in headers.items():
        if redact_header(k, v, shown) != v:
            add_secret(v)  # scrubbed from every output from now on
    add_secret(key)
    # Credentials in a URL are Basic authentication for every request, and never written.
    if url:
        url, basic = split_credentials(url)
        if basic:
            if key:
                raise UsageError("credentials in --url and an API key exclude each other: give one")
            headers.setdefault("authorization", basic)
    return url, headers, key


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its user:password part, and the Basic authorization it stands for.

    One rule for every request tokmon sends (pre-flight, streams, /metrics, output
    checks): credentials in a URL are HTTP Basic authentication, and the URL is never
    written anywhere with them."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    add_secret(unquote(password))
    add_secret(userinfo)
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"
