"""``tokmon run``: the options turned into a run (pre-flight, arms, probes, recorder),
the session driven (dashboard or headless), and the exit code."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokmon import __version__
from tokmon.cli.listen import can_listen, parse_listen
from tokmon.cli.parser import RunFailed, UsageError, api_key
from tokmon.model.commands import StopRun
from tokmon.model.redact import redact_argv, secrets_in
from tokmon.model.words import count
from tokmon.textsafe import (
    add_secret,
    dumps,
    open_private,
    say,
    share_with_group,
    write_text,
)

if TYPE_CHECKING:
    from tokmon.model.config import RunConfig
    from tokmon.model.trace import Trace
    from tokmon.model.workload import PromptShape


def dur(name: str, text: str | None, allow_zero: bool = True) -> float | None:
    from tokmon.model.workload import WorkloadError, parse_duration

    if text is None:
        return None
    try:
        v = parse_duration(text)
    except WorkloadError as e:
        raise UsageError(f"{name}: {e}") from None
    if not allow_zero and v <= 0:
        raise UsageError(f"{name}: must be longer than zero")
    return v


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


def quality_items(args: argparse.Namespace, share: float) -> tuple[Any, ...]:
    """``--quality-file``: a team's own questions, asked instead of the built-in set."""
    from tokmon.inputs import load_quality_file
    from tokmon.model.workload import WorkloadError

    if args.quality is not None and share:
        raise UsageError("--quality N (a run of probes only) and --quality-probes (a share "
                         "of the load) exclude each other")  # fmt: skip
    if not args.quality_file:
        return ()
    if not share and args.quality is None:
        raise UsageError("--quality-file asks its questions with --quality-probes SHARE "
                         "(mixed into the load) or --quality N (on their own)")  # fmt: skip
    try:
        return load_quality_file(args.quality_file)
    except WorkloadError as e:
        raise UsageError(str(e)) from None


def quality_run(args: argparse.Namespace, arms: list[Any]) -> tuple[int, str]:
    """``--quality N``: every request a probe, N per arm, then stop. Several arms take
    turns request by request (each asked the same questions in the same order); arms
    with serve= take turns on one GPU, so they cannot."""
    n = args.quality
    for opt, given in (("--requests", args.requests), ("--ladder", getattr(args, "ladder", None)),
                       ("--find-capacity", getattr(args, "find_capacity", None)),
                       ("--trace", getattr(args, "trace", None))):  # fmt: skip
        if given:
            raise UsageError(f"--quality N and {opt} exclude each other (it asks N questions "
                             "of each arm, then stops)")  # fmt: skip
    assign = args.assign
    if len(arms) > 1 and assign == "switch":
        if any(a.serve for a in arms):
            raise UsageError("--quality N over serve= arms: they take turns on one GPU; use "
                             "--quality-probes 100% --alternate DURATION instead")  # fmt: skip
        assign = "alternate"
    return n * (len(arms) if assign != "switch" else 1), assign


def parse_slo(text: str | None) -> Any:
    from tokmon.model.stats import Slo

    got: dict[str, float] = {}
    if not text:
        return Slo()
    for part in text.split(","):
        k, eq, v = part.partition("=")
        k = k.strip()
        if not eq or k not in ("ttft", "tpot", "e2e"):
            raise UsageError(f"--slo: expected ttft=MS,tpot=MS,e2e=MS, got {part!r}")
        try:
            x = float(v)
        except ValueError:
            raise UsageError(f"--slo: {k} is not a number: {v!r}") from None
        if x <= 0:
            raise UsageError(f"--slo: {k} must be positive")
        got[f"{k}_ms"] = x
    return Slo(**got)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What the options ask for, every one checked, before any server is asked: the
    run's configuration with each arm's model as given (``prepare_run`` resolves them),
    and what must be performed before the run can start."""

    cfg: RunConfig  # its arms as given: url, endpoint and model before the pre-flight
    target: str | None  # --url (or TOKMON_URL)
    auth: dict[str, str]  # the API key, as the header every request carries
    ladder: Any  # Ladder | CapacityPlan | None
    prometheus: tuple[str, int] | None
    web: Any
    tokenizer: str | None  # a local tokenizer to measure prompts with
    measure_prompts: bool  # prompts built to an exact token count (the server is asked)
    survey: bool  # each server's environment written down before measuring


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A plan performed: the managed servers started, each arm's model resolved, the
    prompts measured and each server's environment surveyed."""

    cfg: RunConfig
    ladder: Any
    models: dict[str, dict[str, Any]]  # per server URL: its /v1/models
    versions: dict[str, str]
    environment: tuple[Any, ...]
    managed: Any
    prometheus: tuple[str, int] | None
    web: Any
    target: str
    model: str
    notes: tuple[tuple[str, str], ...]  # the set-up's warnings: events as the run starts


def build_run(args: argparse.Namespace, file_arms: list[Any]) -> Prepared:
    """The options as a checked plan, then what it needs performed."""
    return prepare_run(plan_run(args, file_arms), args)


def plan_run(args: argparse.Namespace, file_arms: list[Any]) -> RunPlan:
    """Check every option; no server is asked (a mistake is an error before anything
    starts). Reads the workload's files (through ``tokmon.inputs``)."""
    from tokmon.engine.h1 import prepare
    from tokmon.inputs import load_prompt_file
    from tokmon.model.arms import Arm, ArmError, check_unique, parse_arm
    from tokmon.model.config import RunConfig, Timeouts, redact_header
    from tokmon.model.workload import LengthDist, WorkloadError, parse_mix

    qshare = quality_share(args.quality_probes)  # (checked before any server is asked)
    qitems = quality_items(args, qshare)

    url = args.url or os.environ.get("TOKMON_URL")
    share_with_group(bool(getattr(args, "group_readable", False)))
    prometheus = parse_listen(  # a bad option is an error before anything starts
        "--prometheus",
        getattr(args, "prometheus", None),
        getattr(args, "prometheus_allow_remote", False),
    )
    dur("--prometheus-linger", getattr(args, "prometheus_linger", "0s"))
    if prometheus is not None and prometheus[1] and not can_listen(*prometheus):
        raise UsageError(f"--prometheus: {prometheus[0]}:{prometheus[1]} is in use")
    from tokmon.cli.webview import listen_of

    web = listen_of(args)
    ladder = None
    if getattr(args, "ladder", None):
        from tokmon.model.ladder import LadderError, parse_ladder

        try:
            ladder = parse_ladder(
                args.ladder,
                dur("--step-duration", args.step_duration, False) or 30.0,
                dur("--step-warmup", args.step_warmup) or 0.0,
                args.ladder_stop,
                dur("--duration", args.duration, allow_zero=False),
            )
        except LadderError as e:
            raise UsageError(str(e)) from None
        if args.requests is not None:
            raise UsageError("--ladder and --requests exclude each other: a ladder runs by time")
        if ladder.param == "concurrency":
            if args.rate is not None:
                raise UsageError("--ladder concurrency=… and --rate exclude each other")
            args.concurrency = int(ladder.values[0])
        elif ladder.param == "rate":
            if args.concurrency is not None:
                raise UsageError("--ladder rate=… and --concurrency exclude each other")
            args.rate = float(ladder.values[0])
    if getattr(args, "find_capacity", None):
        ladder = capacity_plan(args, ladder)
    if args.concurrency is not None and args.rate is not None:
        raise UsageError("--concurrency and --rate exclude each other: pick one")
    mode = "rate" if args.rate is not None else "concurrency"
    trace = load_trace(args, ladder)
    if trace is not None:
        mode = "trace"
    conc = 4 if args.concurrency is None else args.concurrency
    # (each option's range is checked by its type, config values included; a ladder's
    # first step sets --concurrency or --rate here, so those two are checked again)
    if mode == "concurrency" and not 1 <= conc <= 100_000:
        raise UsageError(f"--concurrency must be between 1 and 100000, got {conc}")
    if mode == "rate" and not (args.rate > 0 and args.rate <= 1e6):
        raise UsageError(
            f"--rate must be a positive number of requests/s (at most 1e6), got {args.rate}"
        )
    duration = dur("--duration", args.duration, allow_zero=False)
    warm_req, warm_s = 0, 0.0
    w = str(args.warmup).strip()
    if w.isdigit():
        warm_req = int(w)
    else:
        warm_s = dur("--warmup", w) or 0.0
    try:
        ptoks = LengthDist.parse(args.prompt_tokens)
    except WorkloadError as e:
        raise UsageError(f"--prompt-tokens: {e}") from None
    try:
        mtoks = LengthDist.parse(args.max_tokens)
    except WorkloadError as e:
        raise UsageError(f"--max-tokens: {e}") from None
    conversations = None
    conv_file = getattr(args, "conversations", None)
    if args.turns or conv_file:
        from tokmon.inputs import load_conversations
        from tokmon.model.workload import Conversations

        flag = "--turns" if args.turns else "--conversations"
        if mode != "concurrency":
            raise UsageError(f"{flag}: a conversation is one stream; use -c N, not --rate")
        if args.turns and conv_file:
            raise UsageError("--turns and --conversations exclude each other: a file's "
                             "conversations have their own turns")  # fmt: skip
        try:
            turns = LengthDist.parse(args.turns or "1")
            scripts = load_conversations(conv_file) if conv_file else ()
        except WorkloadError as e:
            raise UsageError(str(e) if conv_file else f"--turns: {e}") from None
        if scripts and (args.prompts or args.shared_prefix):
            raise UsageError("--conversations brings its own prompts: not with --prompts "
                             "or --shared-prefix")  # fmt: skip
        think = dur("--think-time", args.think_time) or 0.0
        conversations = Conversations(turns, think, args.followup_tokens, scripts)
    shared = None
    if args.shared_prefix:
        from tokmon.model.workload import SharedPrefix, parse_count

        try:
            n = parse_count(args.shared_prefix)
        except WorkloadError as e:
            raise UsageError(f"--shared-prefix: {e}") from None
        if not 1 <= n <= 1_000_000:
            raise UsageError(f"--shared-prefix: 1 to 1M tokens, got {args.shared_prefix!r}")
        shared = SharedPrefix(n, args.prefix_pool)
        if args.prompts:
            raise UsageError("--shared-prefix builds synthetic prompts: not with --prompts")
    prompts: tuple[Any, ...] = ()
    if args.prompts:
        try:
            prompts = tuple(load_prompt_file(args.prompts))
        except WorkloadError as e:
            raise UsageError(str(e)) from None
    mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    if trace is not None:
        mix = trace.kinds  # (the kinds whose prompts are measured before the run)
    elif args.mix:
        try:
            mix = tuple(parse_mix(args.mix).items())
        except WorkloadError as e:
            raise UsageError(str(e)) from None
    extra: dict[str, Any] = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except ValueError as e:
            raise UsageError(f"--extra-body is not valid JSON: {e}") from None
        if not isinstance(extra, dict):
            raise UsageError("--extra-body must be a JSON object")
    shown = tuple(str(x) for x in (getattr(args, "show_header", None) or []))
    url, headers, key = credentials(
        args.header if isinstance(args.header, list) else [args.header],
        shown,
        getattr(args, "api_key_file", None),
        url,
    )
    arms: list[Arm] = list(file_arms)
    try:
        arms += [parse_arm(a) for a in args.arm]
        check_unique(arms)
    except ArmError as e:
        raise UsageError(str(e)) from None
    shown_args = tuple(str(x) for x in (getattr(args, "show_arg", None) or []))
    for a in arms:
        for sec in secrets_in(a.serve, shown_args):
            add_secret(sec)  # scrubbed from every output, a server's log included
    if not arms:
        arms = [Arm(name="default")]
    assign, budget = args.assign, args.requests
    if args.quality is not None:
        qshare = 1.0  # every request a question
        budget, assign = quality_run(args, arms)
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
    auth: dict[str, str] = {"authorization": f"Bearer {key}"} if key else {}
    if getattr(args, "ray", None) and any(a.serve for a in arms):
        raise UsageError(
            "--ray and arms with serve= exclude each other (a managed server is local)"
        )
    if getattr(args, "tokenizer", None) and args.approx_prompt_tokens:
        raise UsageError("--tokenizer and --approx-prompt-tokens exclude each other")
    given = [  # (the pre-flight gives each its model; a managed server's url comes then)
        Arm(name=a.name, url=a.url or url or "", model=a.model or args.model or "",
            endpoint=a.endpoint or args.endpoint, body=a.body, headers=a.headers, serve=a.serve)
        for a in arms
    ]  # fmt: skip
    timeouts = Timeouts(
        connect_s=dur("--connect-timeout", args.connect_timeout, False) or 10.0,
        first_token_s=dur("--first-token-timeout", args.first_token_timeout, False) or 120.0,
        idle_s=dur("--idle-timeout", args.idle_timeout, False) or 60.0,
        total_s=dur("--total-timeout", args.total_timeout, False) or 900.0,
    )
    ray_opts = ray_options(args)
    alternate = dur("--alternate", args.alternate, allow_zero=False) if args.alternate else None
    if trace is not None:  # (a trace is sent once: -n cuts it to its first N requests)
        budget = min(args.requests or trace.count, trace.count)
    cfg = RunConfig(
        run_id=secrets.token_hex(4),
        arms=tuple(given),
        mode=mode,
        concurrency=conc,
        rate=args.rate or 1.0,
        arrival=args.arrival,
        burstiness=args.burstiness,
        max_concurrency=args.max_concurrency,
        duration_s=duration,
        requests=budget,
        trace=trace,
        record_prompts=bool(getattr(args, "record_prompts", False)),
        quality_share=qshare,
        quality_items=qitems,
        prompt_tokens=ptoks,
        shared_prefix=shared,
        conversations=conversations,
        max_tokens=mtoks,
        prompts=prompts,
        mix=mix,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        extra_body=extra,
        headers=headers,
        api_key=key,
        warmup_requests=warm_req,
        warmup_s=warm_s,
        settle_s=dur("--settle", args.settle) or 0.0,
        assign=assign,
        alternate_s=alternate,
        stall_ms=(dur("--stall-threshold", args.stall_threshold, False) or 1.0) * 1000,
        timeouts=timeouts,
        insecure=args.insecure,
        # With a request budget, a worker with no stream of its own would hold its share
        # of the budget forever: at most one worker per stream and per request. (Without
        # one, an idle worker waits for + or a ladder step to give it streams.)
        workers=args.workers
        if budget is None
        else min(args.workers, budget, conc if mode == "concurrency" else args.workers),
        continuous_usage=args.continuous_usage,
        shown_headers=shown,
        shown_args=shown_args,
        ray=getattr(args, "ray", None),
        ray_options=ray_opts,
        ray_on_loss=getattr(args, "ray_on_loss", "continue"),
    )
    scripted = conversations is not None and bool(conversations.scripts)
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
        prometheus=prometheus,
        web=web,
        tokenizer=getattr(args, "tokenizer", None),
        measure_prompts=not (prompts or given_prompts or scripted or args.approx_prompt_tokens),
        survey=not getattr(args, "no_env", False),
    )


def prepare_run(plan: RunPlan, args: argparse.Namespace) -> Prepared:
    """Perform what the plan needs, in order: connect to Ray, start the first managed
    server, resolve each arm's model (the pre-flight), measure the prompts, survey each
    server. A failure is one line; a server started here is stopped on the way out."""
    cfg, auth, headers = plan.cfg, plan.auth, plan.cfg.headers
    if cfg.ray is not None:
        from tokmon.sources.ray_workers import RayUnavailable, connect

        try:
            connect(cfg.ray, cfg.workers)
        except RayUnavailable as e:
            raise UsageError(str(e)) from None
    local = None
    if plan.tokenizer:
        from tokmon.engine.calibrate import CalibrationError, local_tokenizer

        try:
            local = local_tokenizer(plan.tokenizer)
        except CalibrationError as e:
            raise UsageError(str(e)) from None
    arms = list(cfg.arms)
    managed = start_managed(args, arms, {**auth, **headers}) if any(a.serve for a in arms) else None
    try:
        return _resolve(plan, cfg, managed, local)
    except BaseException:  # (a failed pre-flight, Ctrl-C while measuring): no server left
        if managed is not None:
            managed.close()
        raise


def _resolve(plan: RunPlan, cfg: RunConfig, managed: Any, local: Any) -> Prepared:
    """Each arm's model from its server, the prompts measured, each server surveyed."""
    from tokmon.engine.preflight import PreflightError, fetch_models, resolve_model

    url, auth, headers = plan.target, plan.auth, cfg.headers
    arms = list(cfg.arms)
    if managed is not None:
        arms = [dataclasses.replace(a, url=managed.url) if a.serve else a for a in arms]
    resolved = []
    models_cache: dict[str, dict[str, Any]] = {}
    started = {st.arm for st in managed.started} if managed is not None else set()
    for a in arms:
        if a.serve and a.name not in started:
            # its server starts when its turn comes; its model is what it serves then
            resolved.append(a)
            continue
        try:
            if a.url not in models_cache:
                models_cache[a.url] = fetch_models(
                    a.url, {**auth, **headers, **a.headers}, insecure=cfg.insecure
                )
            model = resolve_model(a.url, a.model, models_cache[a.url])
        except PreflightError as e:
            prefix = f"arm {a.name}: " if len(arms) > 1 else ""
            raise PreflightError(prefix + str(e)) from None
        resolved.append(dataclasses.replace(a, model=model))
    cfg = dataclasses.replace(cfg, arms=tuple(resolved))
    notes: list[tuple[str, str]] = []  # warnings of the set-up: events once the run starts
    if plan.measure_prompts:
        cfg = dataclasses.replace(cfg, prompt_shape=measure_prompts(cfg, local, notes))
    # What each server runs on, the way to it and what it lets anyone do: written down
    # before measuring (the method), in the recording and the summary.
    envs = {}
    if plan.survey:
        from tokmon.probes.env import survey

        for a_url in models_cache:
            a_hdr = next((a.headers for a in resolved if a.url == a_url), {})
            envs[a_url] = survey(a_url, {**auth, **headers, **a_hdr}, insecure=cfg.insecure)
    return Prepared(
        cfg=cfg,
        ladder=plan.ladder,
        models=models_cache,
        versions={u: e.version for u, e in envs.items() if e.version},
        environment=tuple(envs.values()),
        managed=managed,
        prometheus=plan.prometheus,
        web=plan.web,
        target=url or resolved[0].url,
        model=resolved[0].model,
        notes=tuple(notes),
    )


def ray_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--ray-resources``: the options of each worker actor (checked here: one line)."""
    if not getattr(args, "ray", None):
        if getattr(args, "ray_resources", None):
            raise UsageError("--ray-resources needs --ray")
        return {}
    from tokmon.sources.ray_workers import RayUnavailable, import_ray

    try:
        import_ray()
    except RayUnavailable as e:
        raise UsageError(str(e)) from None
    raw = getattr(args, "ray_resources", None)
    if not raw:
        return {}
    try:
        opts = json.loads(raw)
    except ValueError as e:
        raise UsageError(f"--ray-resources is not valid JSON: {e}") from None
    allowed = {"num_cpus", "num_gpus", "memory", "resources", "scheduling_strategy"}
    if not isinstance(opts, dict) or not set(opts) <= allowed:
        raise UsageError(f"--ray-resources: a JSON object of {', '.join(sorted(allowed))}")
    return opts


def scenario_headline(args: argparse.Namespace) -> str:
    from tokmon.cli.scenarios import headline

    return headline(getattr(args, "scenario", None))


def capacity_plan(args: argparse.Namespace, ladder: Any) -> Any:
    """``--find-capacity``: the search's plan (its start: --concurrency or --rate, else 1)."""
    from tokmon.model.capacity import CapacityPlan

    param = args.find_capacity
    if ladder is not None:
        raise UsageError("--find-capacity and --ladder exclude each other: one schedule of load")
    if args.requests is not None:
        raise UsageError("--find-capacity and --requests exclude each other: a search runs by time")
    if not getattr(args, "slo", None):
        raise UsageError("--find-capacity needs --slo (e.g. --slo ttft=500,tpot=50): the load "
                         "is found under it")  # fmt: skip
    lo_hi = [x.strip() for x in str(args.probe_duration).split(",")]
    if len(lo_hi) != 2:
        raise UsageError(
            f"--probe-duration: expected MIN,MAX (5s,60s), got {args.probe_duration!r}"
        )
    lo = dur("--probe-duration", lo_hi[0], allow_zero=False) or 5.0
    hi = dur("--probe-duration", lo_hi[1], allow_zero=False) or 60.0
    if hi < lo:
        raise UsageError("--probe-duration: MAX is below MIN")
    other = "rate" if param == "concurrency" else "concurrency"
    if getattr(args, other) is not None:
        raise UsageError(f"--find-capacity {param} and --{other} exclude each other")
    start = float(getattr(args, param) or 1)
    if param == "concurrency":
        args.concurrency = int(start)
    else:
        args.rate = start
    return CapacityPlan(
        param=param,
        goodput=float(args.slo_target),
        slo=str(args.slo),
        start=start,
        min_s=lo,
        max_s=hi,
        warm_s=dur("--step-warmup", args.step_warmup) or 0.0,
    )


def load_trace(args: argparse.Namespace, ladder: Any) -> Trace | None:
    """``--trace`` or ``--replay-load``: the load given request by request (None: neither).
    What a trace fixes (times, lengths, kinds, prompts) may not be given again."""
    from tokmon.model.workload import WorkloadError

    trace_file = getattr(args, "trace", None)
    load_file = getattr(args, "replay_load", None)
    if not (trace_file or load_file):
        return None
    flag = "--trace" if trace_file else "--replay-load"
    if trace_file and load_file:
        raise UsageError("--trace and --replay-load exclude each other: one load at a time")
    clashes = {
        "--concurrency": args.concurrency is not None,
        "--rate": args.rate is not None,
        "--ladder": ladder is not None,
        "--turns": bool(args.turns),
        "--conversations": bool(getattr(args, "conversations", None)),
        "--prompts": bool(args.prompts),
        "--shared-prefix": bool(args.shared_prefix),
        "--mix": bool(args.mix),
    }
    for other, given in clashes.items():
        if given:
            raise UsageError(f"{flag} sets the load request by request: not with {other}")
    try:
        if trace_file:
            from tokmon.inputs import load_mooncake

            # Ray workers on other nodes cannot read this machine's file: they are sent
            # the entries, so the trace is held whole there
            whole = 1 << 62 if getattr(args, "ray", None) else None
            return load_mooncake(trace_file, args.trace_speed, args.trace_block, whole)
        from tokmon.recording.trace import trace_of_recording

        return trace_of_recording(str(load_file), args.trace_speed)
    except WorkloadError as e:
        raise UsageError(str(e)) from None


def measure_prompts(
    cfg: RunConfig, local: Any = None, notes: list[tuple[str, str]] | None = None
) -> PromptShape | None:
    """How to build prompts of an exact token count, measured on the first arm whose
    server is up (the others are held to it in the summary: requested vs. actual per
    arm). Each probe is tried three times; where the server still cannot answer, one
    line says why (on stderr, and as an event of the run: the dashboard and the
    summary) and prompts stay word-sized."""
    import httpx

    from tokmon.engine.calibrate import CalibrationError, calibrate

    arm = next((a for a in cfg.arms if a.model), None)
    if arm is None:
        return None
    try:
        return calibrate(cfg, arm, tuple(k for k, _ in cfg.mix), local)
    except (CalibrationError, httpx.HTTPError) as e:
        msg = f"prompt tokens: not measured on {arm.url} ({e}); about one word a token"
        say(msg, err=True)
        if notes is not None:
            notes.append(("warning", msg))
        return None


def credentials(
    header_args: list[Any], shown: tuple[str, ...], key_file: str | None, url: str | None
) -> tuple[str | None, dict[str, str], str | None]:
    """The --header values, the API key and the URL without its userinfo (which becomes
    Basic authentication): (url, headers, key). Every secret among them is registered with
    the sanitiser, so no output carries it from now on."""
    from tokmon.model.config import redact_header

    headers: dict[str, str] = {}
    for h in header_args:
        k, colon, v = str(h).partition(":")
        if not colon or not k.strip():
            raise UsageError(f"--header must be K:V, got {h!r}")
        headers[k.strip()] = v.strip()
    for k, v in headers.items():
        if redact_header(k, v, shown) != v:
            add_secret(v)  # scrubbed from every output from now on
    key = api_key(key_file)
    add_secret(key)
    # Credentials in a URL are Basic authentication for every request, and never written.
    if url:
        url, basic = split_credentials(url)
        if basic:
            if key:
                raise UsageError("credentials in --url and an API key exclude each other: give one")
            headers.setdefault("authorization", basic)
    return url, headers, key


def start_managed(args: argparse.Namespace, arms: list[Any], headers: dict[str, str]) -> Any:
    """Arms with serve=: tokmon starts the first one's server now (its model resolves the
    pre-flight); the others start when their turn comes."""
    import tempfile

    from tokmon.probes.env import survey
    from tokmon.sources.managed import Managed, ServerFailed

    if getattr(args, "assign", "switch") != "switch":
        raise UsageError("arms with serve= take turns on one GPU: --assign must be switch")
    if getattr(args, "cycles", None) and not args.alternate:
        raise UsageError("--cycles needs --alternate (how long each turn lasts)")
    record = getattr(args, "record", None)
    log_dir = Path(record).resolve().parent if record else Path(tempfile.mkdtemp(prefix="tokmon-"))
    gpu_used = None
    if not getattr(args, "no_gpu", False):
        from tokmon.probes.gpu import gpu_memory_used_gib

        gpu_used = gpu_memory_used_gib
    managed = Managed(
        arms,
        log_dir,
        headers,
        ready_timeout_s=dur("--server-ready-timeout", args.server_ready_timeout, False) or 600.0,
        stop_timeout_s=dur("--server-stop-timeout", args.server_stop_timeout, False) or 30.0,
        warmup_n=args.server_warmup,
        on_failure=args.on_server_failure,
        endpoint=args.endpoint,
        gpu_used=gpu_used,
        survey=lambda u: survey(u, headers),
        shown_args=tuple(str(x) for x in (getattr(args, "show_arg", None) or [])),
    )
    first = arms[0]
    if first.serve:
        srv = managed.servers[first.name]
        say(
            f"tokmon: starting arm {first.name}'s server on port {managed.port} "
            f"(log {srv.log_path})",
            err=True,
            flush=True,
        )
        shown = [0]

        def tick(waited: float) -> None:
            if waited >= shown[0] + 10:
                shown[0] = int(waited)
                say(f"tokmon: waiting for arm {first.name}'s server: {waited:.0f} s", err=True)

        try:
            managed.start_first(first.name, tick)
        except (ServerFailed, KeyboardInterrupt) as e:
            managed.close()
            if isinstance(e, KeyboardInterrupt):
                raise
            lines = str(e).split("\n")
            for ln in lines[1:]:
                say(f"  | {ln}", err=True)
            raise RunFailed(lines[0]) from None
        st = managed.started[-1]
        say(f"tokmon: arm {st.arm}'s server ready in {st.ready_s:.1f} s", err=True, flush=True)
    return managed


def run_session(
    args: argparse.Namespace,
    run: Prepared,
    on_summary: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    from tokmon.sources.live import LiveSession

    slo = parse_slo(getattr(args, "slo", None))
    window = dur("--window", getattr(args, "window", "10s"), allow_zero=False) or 10.0
    status_every = dur("--status-interval", args.status_interval, allow_zero=False) or 5.0
    cfg = run.cfg
    probes = build_probes(args, cfg, window)
    recorder, header = make_recorder(args, run, slo, probes)
    session = LiveSession(
        cfg,
        target=run.target,
        model=run.model,
        slo=slo,
        window_s=window,
        probes=probes,
        recorder=recorder,
        header=header,
        check_outputs_n=max(0, getattr(args, "check_outputs", 0) or 0),
        drift_alert=parse_drift_alert(getattr(args, "drift_alert", "5%/h")),
        gpu_hour_price=getattr(args, "gpu_hour_price", None),
        gpus=getattr(args, "gpu_count", None),
        ladder=run.ladder,
        environment=run.environment,
        managed=run.managed,
        cycles=getattr(args, "cycles", None),
        prometheus=run.prometheus,
        notes=run.notes,
        scenario=(getattr(args, "scenario", None) or "", scenario_headline(args)),
    )
    headless = args.headless or not sys.stdout.isatty()
    if recorder is not None:
        # a write failure shows at once: an event on the dashboard, a line on stderr
        def on_record_error(msg: str) -> None:
            session.note("recording", msg)
            if headless:
                say(f"tokmon: {msg}", err=True, flush=True)

        recorder.on_error = on_record_error
    written: list[bool] = []
    if args.summary_json:
        path = args.summary_json

        def write_summary(summary: dict[str, Any]) -> None:
            # when the run ends, not when the dashboard closes (an SSH session may close
            # first); a failure is reported below, where the summary is written again
            with contextlib.suppress(OSError):
                write_text(path, dumps(summary, indent=2) + "\n")
                written.append(True)

        session.on_finished = write_summary
    interrupted = 0
    web = None
    try:
        session.start()
        if run.web is not None:
            from tokmon.cli.webview import start_web

            page = [sys.executable, "-m", "tokmon", "view"]
            if getattr(args, "theme", None):
                page += ["--theme", args.theme]
            web = start_web(
                run.web,
                page,
                source=session,
                title="tokmon run",
                control=bool(getattr(args, "web_control", False)),
            )
        if headless:
            from tokmon.ui.headless import run_headless

            interrupted = run_headless(session, status_every)
        else:
            from tokmon.ui.app import run_app

            interrupted = 130 if run_app(session, theme=args.theme, fps=args.fps) else 0
        session.command(StopRun(hard=True))
        session.wait(10.0)
        linger = dur("--prometheus-linger", getattr(args, "prometheus_linger", "0s")) or 0.0
        if session.prom is not None and linger > 0 and not interrupted:
            say(
                f"tokmon: serving the final metrics on :{session.prom.port} for {linger:g} s",
                err=True,
                flush=True,
            )
            with contextlib.suppress(KeyboardInterrupt):
                time.sleep(linger)
    finally:
        if web is not None:
            web.close()
        session.close()
    summary = session.final or session.summary()
    if on_summary is not None:
        on_summary(summary)
    from tokmon.ui.headless import summary_text

    say(summary_text(summary), fit=True)
    code = 0
    if args.summary_json and not written:
        try:
            write_text(args.summary_json, dumps(summary, indent=2) + "\n")
        except OSError as e:
            say(f"tokmon: cannot write {args.summary_json}: {e.strerror or e}", err=True)
            code = 1
    for why in session.failures():
        say(f"tokmon: {why}", err=True)
        code = 1
    # where everything went: a reader of a finished run's terminal finds its files
    wrote = []
    if recorder is not None and recorder.lines:
        wrote.append(f"recording {args.record}")
    if args.summary_json and code == 0:
        wrote.append(f"summary {args.summary_json}")
    if session.managed is not None:
        logs = sorted({str(srv.log_path) for srv in session.managed.servers.values()})
        wrote.append("server log" + ("s " if len(logs) > 1 else " ") + ", ".join(logs))
    if wrote:
        say("tokmon: wrote " + " · ".join(wrote), err=True)
    if recorder is not None and (recorder.lost_lines or recorder.error):
        lost = (
            f"{count(recorder.lost_lines, 'line')} lost"
            if recorder.lost_lines
            else "not all written"
        )
        say(
            f"tokmon: the recording {args.record} is incomplete ({lost}: "
            f"{recorder.error or 'the disk was full'}); the summary above counts everything",
            err=True,
        )
        code = 1
    # (requests cancelled by a stop are the user's, not the server's)
    answered = sum(
        a["requests"]["ok"]
        + a["requests"]["failed"]
        - a["requests"]["by_outcome"].get("cancelled", 0)
        for a in summary["arms"].values()
    )
    if answered and not any(a["requests"]["ok"] for a in summary["arms"].values()):
        say(f"tokmon: none of the {answered} requests succeeded", err=True)
        code = code or 1
    if code:
        return code
    if interrupted:
        return interrupted
    if getattr(args, "alerts_exit", False) and summary.get("alerts"):
        say(f"tokmon: {count(len(summary['alerts']), 'alert')} fired", err=True)
        return 3
    floor = getattr(args, "capacity_at_least", None)
    if floor is not None:
        found = [c.get("capacity") for c in (summary.get("capacity_search") or {}).values()]
        short = [c for c in found if c is None or c < floor]
        if short or not found:
            say(f"tokmon: capacity {', '.join(str(c) for c in found) or 'not found'} is below "
                f"--capacity-at-least {floor:g}", err=True)  # fmt: skip
            return 1
    if getattr(args, "fail_on_slo", False) and slo.any:
        frac = (summary.get("slo") or {}).get("fraction") or 0.0  # (summary.slo_share)
        if frac < args.slo_target:
            say(
                f"tokmon: {frac:.1%} of requests met the SLOs, below the target "
                f"{args.slo_target:.0%}",
                err=True,
            )
            return 1
    return 0


def parse_drift_alert(text: str | None) -> float:
    t = str(text or "5%/h").strip().lower().replace(" ", "")
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


def make_recorder(
    args: argparse.Namespace, run: Prepared, slo: Any, probes: list[Any]
) -> tuple[Any, dict[str, Any]]:
    """The recorder for --record, and the header that writes the environment down."""
    if not getattr(args, "record", None):
        return None, {}
    from tokmon.model.config import redact_header
    from tokmon.recording.writer import Recorder, environment

    cfg = run.cfg
    secrets = [cfg.api_key or ""] + [
        v
        for h in (cfg.headers, *[a.headers for a in cfg.arms])
        for k, v in h.items()
        if redact_header(k, v, cfg.shown_headers) != v
    ]
    path = Path(args.record)
    append, overwrite = getattr(args, "append", False), getattr(args, "overwrite", False)
    if append and overwrite:
        raise UsageError("--append and --overwrite exclude each other")
    if path.exists() and not path.is_file():
        raise UsageError(f"--record: {args.record} is not a regular file")
    if path.exists() and path.stat().st_size and not (append or overwrite):
        raise UsageError(
            f"--record: {args.record} exists — give --overwrite to replace it, or --append "
            "to add this session to it"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_private(path, append=True):
            pass
    except OSError as e:
        raise UsageError(f"--record: cannot write {args.record}: {e.strerror or e}") from None
    rotate_s, max_bytes = _rotation(args, append)
    if rotate_s or max_bytes:
        from tokmon.recording.parts import part_numbers, part_path

        stale = [part_path(args.record, k) for k in sorted(part_numbers(args.record))]
        if stale and not overwrite:
            raise UsageError(
                f"--record: {stale[0]} exists (a part of an earlier run) — give --overwrite "
                "to replace the recording and its parts"
            )
        for p in stale:
            try:
                os.remove(p)
            except OSError as e:
                raise UsageError(f"--record: cannot remove {p}: {e.strerror or e}") from None
    recorder = Recorder(
        args.record,
        secrets=tuple(secrets),
        chunks=getattr(args, "record_chunks", False),
        rotate_s=rotate_s,
        max_bytes=max_bytes,
    )
    recorder.mode = "wb" if overwrite else "ab"
    gpu_info: dict[str, Any] = {}
    for pr in probes:
        if hasattr(pr, "info") and hasattr(pr, "_init"):
            pr._init()
            gpu_info = pr.info
    header = {
        "tokmon_version": __version__,
        "command": _redact_argv(sys.argv, cfg.shown_headers, cfg.shown_args),
        "settings": cfg.redacted(),
        "slo": {k: v for k, v in vars(slo).items() if v is not None},
        "cost": {
            "gpu_hour_price": getattr(args, "gpu_hour_price", None),
            "gpus": getattr(args, "gpu_count", None),
        },
        "target": {
            "url": run.target,
            "model": run.model,
            "endpoint": cfg.arms[0].endpoint or "chat",
        },
        "host": environment(),
        "gpu": gpu_info,
        "servers": {
            u: {
                "models": m,
                "version": run.versions.get(u),
                "env": next((e.to_json() for e in run.environment if e.url == u), None),
            }
            for u, m in run.models.items()
        },
    }
    return recorder, header


SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
              "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20,
              "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_size(text: str) -> int:
    """``500MB``, ``2GB``, ``1.5GiB`` or plain bytes -> bytes (ValueError: one line)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 500MB, 2GB)")
    return int(float(m.group(1)) * SIZE_UNITS[unit])


MIN_PART_BYTES = 1 << 16  # a part smaller than this would be mostly headers
MIN_PART_S = 1.0


def _rotation(args: argparse.Namespace, append: bool) -> tuple[float | None, int | None]:
    """--record-rotate and --record-max-size, checked."""
    every, size = getattr(args, "record_rotate", None), getattr(args, "record_max_size", None)
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


def _redact_argv(
    argv: list[str], shown: tuple[str, ...] = (), shown_args: tuple[str, ...] = ()
) -> list[str]:
    """The command line as it may be written down: URL credentials and the values of
    headers (``--header K:V``) replaced, unless a header is named by --show-header, and
    every secret of a serve= command (``tokmon.model.redact``)."""
    from tokmon.model.config import redact_header

    out: list[str] = []
    header_next = False
    for a in argv:
        if header_next or a.startswith("--header="):
            prefix = "--header=" if a.startswith("--header=") else ""
            k, colon, v = a[len(prefix) :].partition(":")
            if colon:
                a = f"{prefix}{k}:{redact_header(k.strip(), v, shown)}"
        header_next = a in ("--header", "-H")
        out.append(a)
    return [out[0], *redact_argv(out[1:], shown_args)] if out else out


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


def build_probes(args: argparse.Namespace, cfg: Any, window: float) -> list[Any]:
    from tokmon.probes.gpu import DcgmProbe, NvmlProbe
    from tokmon.probes.host import HostProbe
    from tokmon.probes.server import ServerMetricsProbe, metrics_url_for

    probes: list[Any] = [HostProbe(record=getattr(args, "record", None) or None)]
    gpus = None
    if getattr(args, "gpus", None):
        try:
            gpus = [int(x) for x in str(args.gpus).split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--gpus must be indices like 0,2, got {args.gpus!r}") from None
    if getattr(args, "dcgm_url", None):
        probes.append(DcgmProbe(args.dcgm_url, gpus=gpus))
    elif not getattr(args, "no_gpu", False):
        interval = dur("--gpu-interval", getattr(args, "gpu_interval", "0.5s"), allow_zero=False)
        from tokmon.probes.gpu import pid_listening_on

        server_pid = getattr(args, "server_pid", None) or pid_listening_on(cfg.arms[0].url)
        probes.append(NvmlProbe(interval or 0.5, gpus=gpus, server_pid=server_pid))
    if not getattr(args, "no_server_metrics", False):
        by_url: dict[str, list[str]] = {}
        for a in cfg.arms:
            url = getattr(args, "metrics_url", None) or metrics_url_for(a.url)
            by_url.setdefault(url, []).append(a.name)
        m_interval = (
            dur("--metrics-interval", getattr(args, "metrics_interval", "2s"), allow_zero=False)
            or 2.0
        )
        key = cfg.api_key
        # the same authorization as the streams: Bearer key, or the URL's Basic credentials
        hdr = {k: v for k, v in cfg.headers.items() if k.lower() == "authorization"}
        if key:
            hdr = {"authorization": f"Bearer {key}"}
        for url, arms in by_url.items():
            probes.append(
                ServerMetricsProbe(
                    url,
                    tuple(arms),
                    interval=m_interval,
                    window_s=window,
                    headers=hdr,
                    insecure=cfg.insecure,
                )
            )
    net_every = getattr(args, "net_interval", "5s")
    if net_every != "off":
        from tokmon.probes.env import NetProbe

        every = dur("--net-interval", net_every, allow_zero=False) or 5.0
        auth = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        net_arms: dict[str, list[Any]] = {}
        for a in cfg.arms:
            net_arms.setdefault(a.url, []).append(a)
        for url, group in net_arms.items():
            hdr = {**cfg.headers, **auth, **group[0].headers}
            probes.append(
                NetProbe(url, tuple(a.name for a in group), hdr, cfg.insecure, interval=every)
            )
    return probes
