"""The command line: ``tokmon run | demo | sim | replay | report | export``.

argparse (the standard library) rather than a CLI framework: it starts in milliseconds,
which matters for a tool whose engine processes re-import the package, and it covers
subcommands, defaults and help as well as the frameworks do here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from tokmon import __version__

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad option value or input file: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    run_parser: argparse.ArgumentParser

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


def _fmt() -> Any:
    return lambda prog: argparse.ArgumentDefaultsHelpFormatter(
        prog, max_help_position=32, width=100
    )


# ----------------------------------------------------------------------------- parser


def add_load_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load")
    g.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=None,
        help="closed loop: this many streams always in flight (default 4)",
    )
    g.add_argument(
        "--rate",
        "-r",
        type=float,
        default=None,
        help="open loop: requests per second (instead of --concurrency)",
    )
    g.add_argument(
        "--arrival",
        default="poisson",
        choices=["poisson", "constant", "gamma"],
        help="arrival process under --rate",
    )
    g.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="gamma shape under --arrival gamma (<1 burstier, >1 smoother)",
    )
    g.add_argument(
        "--max-concurrency",
        type=int,
        default=1024,
        help="cap on streams in flight under --rate (waits show as send lag)",
    )
    g.add_argument("--duration", "-d", default=None, help="run length: 30s, 10m, 2h")
    g.add_argument("--requests", "-n", type=int, default=None, help="stop after this many requests")
    g.add_argument(
        "--warmup",
        default="0",
        help="warm-up: N requests or a duration (20s); recorded, excluded from summaries",
    )
    g.add_argument("--workers", type=int, default=1, help="engine processes sharing the load")
    g.add_argument(
        "--ladder",
        default=None,
        metavar="PARAM=V1,V2,…",
        help="steps of concurrency=1,2,4,8 / rate=1,2,4 / prompt-tokens=128,1k,4k / "
        "max-tokens=…, each for --step-duration, for every arm in turn",
    )
    g.add_argument("--step-duration", default="30s", help="length of one ladder step")
    g.add_argument("--step-warmup", default="5s", help="start of each step kept out of its figures")
    g.add_argument(
        "--ladder-stop",
        default=None,
        metavar="errors=5%,ttft_p95=MS",
        help="end the ladder when a step passes these (the server is saturated)",
    )


def add_request_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("requests")
    g.add_argument(
        "--prompt-tokens",
        default="128",
        help="synthetic prompt length: 512, 256:2048 (uniform), normal:512,128",
    )
    g.add_argument("--max-tokens", default="256", help="output length, same syntax")
    g.add_argument(
        "--prompts",
        default=None,
        help="prompt file: JSON Lines with prompt or messages (and kind), or ShareGPT JSON",
    )
    g.add_argument(
        "--mix", default=None, help="task kinds by weight: code=0.3,chat=0.5,creative=0.2"
    )
    g.add_argument("--ignore-eos", action="store_true", help="ask for exactly max-tokens tokens")
    g.add_argument("--temperature", type=float, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument(
        "--seed", type=int, default=None, help="seed for the workload (and request seed)"
    )
    g.add_argument("--extra-body", default=None, help="JSON object merged into every request body")
    g.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K:V",
        help="extra request header (repeatable)",
    )
    g.add_argument(
        "--continuous-usage",
        action="store_true",
        help="ask for per-chunk usage (vLLM, SGLang): exact tokens per chunk",
    )
    g.add_argument(
        "--stall-threshold", default="1s", help="a chunk gap longer than this is a stall"
    )
    g.add_argument("--connect-timeout", default="10s")
    g.add_argument("--first-token-timeout", default="120s")
    g.add_argument("--idle-timeout", default="60s", help="longest gap between chunks")
    g.add_argument("--total-timeout", default="15m")
    g.add_argument("--insecure", action="store_true", help="do not verify HTTPS certificates")


def add_arm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("arms (A/B)")
    g.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME:key=value,...",
        help="an arm: url=, model=, endpoint=, body={json}, header=K:V (repeatable)",
    )
    g.add_argument("--alternate", default=None, help="switch arms automatically every DURATION")
    g.add_argument(
        "--settle",
        default="0s",
        help="requests sent this soon after a switch are kept out of the comparison",
    )
    g.add_argument(
        "--check-outputs",
        type=int,
        default=0,
        metavar="N",
        help="at start (and on key o): N greedy prompts to every arm, outputs compared",
    )
    g.add_argument(
        "--assign",
        default="switch",
        choices=["switch", "alternate", "random"],
        help="switch: one arm at a time; alternate/random: each request picks its arm",
    )


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output")
    g.add_argument(
        "--headless", action="store_true", help="no dashboard: status lines and a summary"
    )
    g.add_argument("--summary-json", default=None, metavar="FILE", help="write the summary as JSON")
    g.add_argument("--status-interval", default="5s", help="headless status line period")
    g.add_argument("--slo", default=None, help="SLOs in ms for goodput: ttft=500,tpot=50,e2e=10000")
    g.add_argument(
        "--fail-on-slo",
        action="store_true",
        help="exit 1 when the goodput fraction is below --slo-target",
    )
    g.add_argument("--slo-target", type=float, default=0.95)
    g.add_argument("--theme", default=None, help="dashboard theme: a name or a .toml path")
    g.add_argument("--fps", type=float, default=4.0, help="dashboard redraws per second (max)")
    g.add_argument("--window", default="10s", help="width of the sliding window")
    g.add_argument(
        "--drift-alert",
        default="5%/h",
        help="alert when a metric drifts (significantly) faster than this",
    )
    g.add_argument(
        "--alerts-exit", action="store_true", help="exit 3 if any alert fired (soak tests in CI)"
    )
    g.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour: cost per million output tokens, live and in the summary",
    )
    g.add_argument(
        "--gpu-count",
        type=int,
        default=None,
        help="GPUs the server uses (default: the GPUs sampled, else 1)",
    )
    g.add_argument(
        "--record",
        default=None,
        metavar="FILE",
        help="record the session to FILE (JSON Lines; .gz to compress)",
    )
    g.add_argument(
        "--record-chunks", action="store_true", help="also record every chunk gap of every request"
    )


def add_probe_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("probes")
    g.add_argument(
        "--metrics-url",
        default=None,
        help="server Prometheus endpoint (default: /metrics next to each --url)",
    )
    g.add_argument("--no-server-metrics", action="store_true", help="do not scrape /metrics")
    g.add_argument("--gpu-interval", default="0.5s", help="NVML sampling period")
    g.add_argument("--gpus", default=None, help="GPU indices to sample, e.g. 0,2")
    g.add_argument("--no-gpu", action="store_true", help="do not sample the GPU")
    g.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="the server's process id, for its own GPU memory (local servers)",
    )
    g.add_argument(
        "--dcgm-url",
        default=None,
        help="a DCGM exporter's /metrics (GPU on another host) instead of NVML",
    )


def build_parser() -> Parser:
    top = Parser(
        prog="tokmon",
        description="A live monitor for LLM inference servers.",
        formatter_class=_fmt(),
    )
    top.add_argument("--version", action="version", version=f"tokmon {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    run = sub.add_parser(
        "run",
        help="drive a streaming workload against a server and watch it",
        formatter_class=_fmt(),
        description="Drive a streaming workload against an OpenAI-compatible "
        "server; measure every request.",
    )
    top.run_parser = run
    run.add_argument(
        "--url",
        "-u",
        default=None,
        help="base URL of the API, e.g. http://127.0.0.1:8000/v1 (env TOKMON_URL)",
    )
    run.add_argument("--endpoint", default="chat", choices=["chat", "completions"])
    run.add_argument("--model", "-m", default=None, help="model name (default: the server's first)")
    run.add_argument("--config", default=None, help="TOML file of defaults (CLI flags win)")
    run.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="read the API key from FILE (else TOKMON_API_KEY or OPENAI_API_KEY)",
    )
    add_load_options(run)
    add_request_options(run)
    add_arm_options(run)
    add_output_options(run)
    add_probe_options(run)

    demo = sub.add_parser(
        "demo",
        help="run tokmon against its built-in simulator (no GPU needed)",
        formatter_class=_fmt(),
        description="Start two simulated servers (speculative decoding off and "
        "on) and monitor them as arms 'baseline' and 'spec'.",
    )
    demo.add_argument("--headless", action="store_true")
    demo.add_argument(
        "--duration", "-d", default=None, help="stop after this long (default: never)"
    )
    demo.add_argument("--concurrency", "-c", type=int, default=8)
    demo.add_argument("--profile", default="27b-h100", help="simulator profile")
    demo.add_argument("--time-scale", type=float, default=1.0)
    demo.add_argument(
        "--alternate", default="30s", help="switch arms every DURATION ('off' for never)"
    )
    demo.add_argument("--no-faults", action="store_true", help="no injected faults")
    demo.add_argument("--seed", type=int, default=None)
    demo.add_argument("--summary-json", default=None, metavar="FILE")
    demo.add_argument("--record", default=None, metavar="FILE")
    demo.add_argument("--status-interval", default="5s")
    demo.add_argument("--theme", default=None)
    demo.add_argument("--fps", type=float, default=4.0)

    rp = sub.add_parser(
        "replay",
        help="replay a recording in the dashboard",
        formatter_class=_fmt(),
        description="Open a recording in the dashboard: space plays/pauses, "
        "←/→ seek, [ ] jump between events, < > speed, e end.",
    )
    rp.add_argument("file")
    rp.add_argument("--speed", type=float, default=1.0, help="1 to 100")
    rp.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep reading a file that a running tokmon is still writing",
    )
    rp.add_argument("--theme", default=None)
    rp.add_argument("--fps", type=float, default=4.0)

    rep = sub.add_parser(
        "report",
        help="turn a recording into a report",
        formatter_class=_fmt(),
        description="Summary per arm and segment, the A/B comparison, drift, "
        "errors and the environment, from a recording.",
    )
    rep.add_argument("file")
    rep.add_argument(
        "--format", "-F", default="text", choices=["text", "md", "json", "csv", "html"]
    )
    rep.add_argument("-o", "--output", default=None, help="write to this file (default: stdout)")
    rep.add_argument(
        "--target-rate",
        type=float,
        default=None,
        metavar="R",
        help="with SLOs in the run: how many GPUs R requests/s would need",
    )
    rep.add_argument(
        "--compare",
        default=None,
        metavar="OTHER",
        help="a second recording: its first arm against this one's",
    )

    ex = sub.add_parser(
        "export", help="per-request data of a recording as CSV or Parquet", formatter_class=_fmt()
    )
    ex.add_argument("file")
    ex.add_argument("--format", "-F", default="csv", choices=["csv", "parquet"])
    ex.add_argument("-o", "--output", default=None)

    sim = sub.add_parser(
        "sim",
        help="serve the built-in simulated OpenAI-compatible server",
        formatter_class=_fmt(),
        description="A simulated inference server (continuous batching, "
        "speculative decoding, vLLM metrics, fault injection).",
    )
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8000)
    sim.add_argument("--profile", default="27b-h100", help="model/GPU class (see --list-profiles)")
    sim.add_argument("--set", default="", metavar="FIELD=V,...", help="override profile fields")
    sim.add_argument("--list-profiles", action="store_true")
    sim.add_argument("--spec", default="off", choices=["on", "off"], help="speculative decoding")
    sim.add_argument("--seed", type=int, default=None)
    sim.add_argument("--model-name", default="sim-27b")
    sim.add_argument("--time-scale", type=float, default=1.0, help="run this many times faster")
    sim.add_argument(
        "--faults",
        default="",
        metavar="NAME=V,...",
        help="http_500=0.01,http_429=,stream_error=,drop=,malformed=,overlong=,"
        "stall=,stall_s=3,drift=%%/h,kv_creep=%%/h,slowdown=%%",
    )
    sim.add_argument(
        "--schedule",
        default=None,
        metavar="TTFT_MS,GAP_MS,TOKENS",
        help="fixed per-request schedule instead of the batching model",
    )
    sim.add_argument(
        "--alter-outputs",
        type=float,
        default=0.0,
        help="share of greedy outputs this server changes (output-check tests)",
    )
    return top


# ----------------------------------------------------------------------------- helpers


def dur(name: str, text: str | None, allow_zero: bool = True) -> float | None:
    from tokmon.core.workload import WorkloadError, parse_duration

    if text is None:
        return None
    try:
        v = parse_duration(text)
    except WorkloadError as e:
        raise UsageError(f"{name}: {e}") from None
    if not allow_zero and v <= 0:
        raise UsageError(f"{name}: must be longer than zero")
    return v


def parse_slo(text: str | None) -> Any:
    from tokmon.core.stats import Slo

    slo = Slo()
    if not text:
        return slo
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
        setattr(slo, f"{k}_ms", x)
    return slo


CONFIG_KEYS = {
    "url",
    "endpoint",
    "model",
    "concurrency",
    "rate",
    "arrival",
    "burstiness",
    "max_concurrency",
    "duration",
    "requests",
    "warmup",
    "workers",
    "prompt_tokens",
    "max_tokens",
    "prompts",
    "mix",
    "ignore_eos",
    "temperature",
    "top_p",
    "seed",
    "extra_body",
    "header",
    "continuous_usage",
    "stall_threshold",
    "connect_timeout",
    "first_token_timeout",
    "idle_timeout",
    "total_timeout",
    "insecure",
    "alternate",
    "settle",
    "assign",
    "headless",
    "summary_json",
    "status_interval",
    "slo",
    "fail_on_slo",
    "slo_target",
    "theme",
    "fps",
    "window",
    "api_key_file",
    "record",
    "record_chunks",
    "metrics_url",
    "no_server_metrics",
    "gpu_interval",
    "gpus",
    "no_gpu",
    "dcgm_url",
    "check_outputs",
    "drift_alert",
    "alerts_exit",
    "gpu_hour_price",
    "gpu_count",
    "ladder",
    "step_duration",
    "step_warmup",
    "ladder_stop",
}


def load_config(path: str) -> tuple[dict[str, Any], list[Any]]:
    from tokmon.core.arms import ArmError, arm_from_mapping

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"--config: cannot read {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config: {path} is not valid TOML: {e}") from None
    arms_tbl = data.pop("arms", {})
    defaults: dict[str, Any] = {}
    for k, v in data.items():
        key = k.replace("-", "_")
        if key not in CONFIG_KEYS:
            raise UsageError(f"--config: unknown key {k!r} in {path}")
        if key == "extra_body" and isinstance(v, dict):
            v = json.dumps(v)
        defaults[key] = v
    arms = []
    if not isinstance(arms_tbl, dict):
        raise UsageError(f"--config: 'arms' in {path} must be a table of tables")
    for name, tbl in arms_tbl.items():
        if not isinstance(tbl, dict):
            raise UsageError(f"--config: arms.{name} must be a table")
        try:
            arms.append(arm_from_mapping(name, tbl))
        except ArmError as e:
            raise UsageError(f"--config: {e}") from None
    return defaults, arms


def api_key(path: str | None = None) -> str | None:
    """From --api-key-file, else TOKMON_API_KEY, else OPENAI_API_KEY; never a flag value."""
    if path:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(
                f"--api-key-file: cannot read {path}: {getattr(e, 'strerror', None) or e}"
            ) from None
        if not key:
            raise UsageError(f"--api-key-file: {path} is empty")
        return key
    return os.environ.get("TOKMON_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


# ----------------------------------------------------------------------------- run


def build_run(args: argparse.Namespace, file_arms: list[Any]) -> tuple[Any, dict[str, Any]]:
    """Validate every option and resolve the targets; returns (RunConfig, info)."""
    from tokmon.core.arms import Arm, ArmError, check_unique, parse_arm
    from tokmon.core.config import RunConfig, Timeouts
    from tokmon.core.h1 import prepare
    from tokmon.core.preflight import PreflightError, fetch_models, resolve_model, server_version
    from tokmon.core.workload import LengthDist, WorkloadError, load_prompt_file, parse_mix

    url = args.url or os.environ.get("TOKMON_URL")
    ladder = None
    if getattr(args, "ladder", None):
        from tokmon.core.ladder import LadderError, parse_ladder

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
    if args.concurrency is not None and args.rate is not None:
        raise UsageError("--concurrency and --rate exclude each other: pick one")
    mode = "rate" if args.rate is not None else "concurrency"
    conc = 4 if args.concurrency is None else args.concurrency
    if mode == "concurrency" and not 1 <= conc <= 100_000:
        raise UsageError(f"--concurrency must be between 1 and 100000, got {conc}")
    if mode == "rate" and not (args.rate > 0 and args.rate <= 1e6):
        raise UsageError(
            f"--rate must be a positive number of requests/s (at most 1e6), got {args.rate}"
        )
    if not 1 <= args.max_concurrency <= 100_000:
        raise UsageError("--max-concurrency must be between 1 and 100000")
    if args.requests is not None and args.requests < 1:
        raise UsageError("--requests must be at least 1")
    if not 1 <= args.workers <= 64:
        raise UsageError("--workers must be between 1 and 64")
    if args.burstiness <= 0:
        raise UsageError("--burstiness must be positive")
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
    prompts: tuple[Any, ...] = ()
    if args.prompts:
        try:
            prompts = tuple(load_prompt_file(args.prompts))
        except WorkloadError as e:
            raise UsageError(str(e)) from None
    mix: tuple[tuple[str, float], ...] = (("chat", 1.0),)
    if args.mix:
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
    headers: dict[str, str] = {}
    for h in args.header if isinstance(args.header, list) else [args.header]:
        k, colon, v = str(h).partition(":")
        if not colon or not k.strip():
            raise UsageError(f"--header must be K:V, got {h!r}")
        headers[k.strip()] = v.strip()
    if args.temperature is not None and not 0 <= args.temperature <= 100:
        raise UsageError("--temperature must be between 0 and 100")
    arms: list[Arm] = list(file_arms)
    try:
        arms += [parse_arm(a) for a in args.arm]
        check_unique(arms)
    except ArmError as e:
        raise UsageError(str(e)) from None
    if not arms:
        arms = [Arm(name="default")]
    try:  # what the engine will send: a URL it can reach, headers it can write
        for a in arms:
            if a.url or url:
                prepare(a.url or url or "", {**headers, **a.headers})
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not url and any(not a.url for a in arms):
        raise UsageError(
            "no target: give --url (e.g. http://127.0.0.1:8000/v1), or url= in every --arm"
        )
    key = api_key(getattr(args, "api_key_file", None))
    auth: dict[str, str] = {"authorization": f"Bearer {key}"} if key else {}
    resolved: list[Arm] = []
    models_cache: dict[str, dict[str, Any]] = {}
    for a in arms:
        a_url = a.url or url or ""
        try:
            if a_url not in models_cache:
                models_cache[a_url] = fetch_models(
                    a_url, {**auth, **headers, **a.headers}, insecure=args.insecure
                )
            model = resolve_model(a_url, a.model or args.model or "", models_cache[a_url])
        except PreflightError as e:
            prefix = f"arm {a.name}: " if len(arms) > 1 else ""
            raise PreflightError(prefix + str(e)) from None
        resolved.append(
            Arm(
                name=a.name,
                url=a_url,
                model=model,
                endpoint=a.endpoint or args.endpoint,
                body=a.body,
                headers=a.headers,
            )
        )
    timeouts = Timeouts(
        connect_s=dur("--connect-timeout", args.connect_timeout, False) or 10.0,
        first_token_s=dur("--first-token-timeout", args.first_token_timeout, False) or 120.0,
        idle_s=dur("--idle-timeout", args.idle_timeout, False) or 60.0,
        total_s=dur("--total-timeout", args.total_timeout, False) or 900.0,
    )
    alternate = dur("--alternate", args.alternate, allow_zero=False) if args.alternate else None
    cfg = RunConfig(
        arms=tuple(resolved),
        mode=mode,
        concurrency=conc,
        rate=args.rate or 1.0,
        arrival=args.arrival,
        burstiness=args.burstiness,
        max_concurrency=args.max_concurrency,
        duration_s=duration,
        requests=args.requests,
        prompt_tokens=ptoks,
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
        assign=args.assign,
        alternate_s=alternate,
        stall_ms=(dur("--stall-threshold", args.stall_threshold, False) or 1.0) * 1000,
        timeouts=timeouts,
        insecure=args.insecure,
        workers=args.workers,
        continuous_usage=args.continuous_usage,
    )
    versions: dict[str, str] = {}
    for a_url in models_cache:
        ver = server_version(a_url, auth, args.insecure)
        if ver:
            versions[a_url] = ver
    info = {
        "ladder": ladder,
        "models": models_cache,
        "versions": versions,
        "target": url or resolved[0].url,
        "model": resolved[0].model,
    }
    return cfg, info


def run_session(args: argparse.Namespace, cfg: Any, info: dict[str, Any]) -> int:
    from tokmon.core.session import LiveSession

    slo = parse_slo(getattr(args, "slo", None))
    window = dur("--window", getattr(args, "window", "10s"), allow_zero=False) or 10.0
    status_every = dur("--status-interval", args.status_interval, allow_zero=False) or 5.0
    probes = build_probes(args, cfg, window)
    recorder, header = make_recorder(args, cfg, info, slo, probes)
    session = LiveSession(
        cfg,
        target=info["target"],
        model=info["model"],
        slo=slo,
        window_s=window,
        probes=probes,
        recorder=recorder,
        header=header,
        check_outputs_n=max(0, getattr(args, "check_outputs", 0) or 0),
        drift_alert=parse_drift_alert(getattr(args, "drift_alert", "5%/h")),
        gpu_hour_price=getattr(args, "gpu_hour_price", None),
        gpus=getattr(args, "gpu_count", None),
        ladder=info.get("ladder"),
    )
    headless = args.headless or not sys.stdout.isatty()
    try:
        session.start()
        if headless:
            run_headless(session, status_every)
        else:
            from tokmon.ui.app import run_app

            run_app(session, theme=args.theme, fps=args.fps)
        session.command("stop", True)
        session.wait(10.0)
    finally:
        session.close()
    summary = session.summary()
    print(_summary_text(summary))
    if args.summary_json:
        try:
            Path(args.summary_json).write_text(json.dumps(summary, indent=2) + "\n")
        except OSError as e:
            print(f"tokmon: cannot write {args.summary_json}: {e.strerror or e}", file=sys.stderr)
            return 1
    if getattr(args, "alerts_exit", False) and summary.get("alerts"):
        print(f"tokmon: {len(summary['alerts'])} alert(s) fired", file=sys.stderr)
        return 3
    if getattr(args, "fail_on_slo", False) and slo.any:
        met = sum(a.get("slo_met") or 0 for a in summary["arms"].values())
        counted = sum(
            (
                a["requests"]["ok"]
                + a["requests"]["failed"]
                - a["requests"]["warmup"]
                - a["requests"]["settle"]
            )
            for a in summary["arms"].values()
        )
        frac = met / counted if counted else 0.0
        if frac < args.slo_target:
            print(
                f"tokmon: {frac:.1%} of requests met the SLOs, below the target "
                f"{args.slo_target:.0%}",
                file=sys.stderr,
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
    args: argparse.Namespace, cfg: Any, info: dict[str, Any], slo: Any, probes: list[Any]
) -> tuple[Any, dict[str, Any]]:
    """The recorder for --record, and the header that writes the environment down."""
    if not getattr(args, "record", None):
        return None, {}
    from tokmon.core.recording import Recorder, environment

    secrets = [cfg.api_key or ""] + [
        v
        for h in (cfg.headers, *[a.headers for a in cfg.arms])
        for k, v in h.items()
        if _secret_header(k)
    ]
    try:
        Path(args.record).parent.mkdir(parents=True, exist_ok=True)
        with open(args.record, "ab"):
            pass
    except OSError as e:
        raise UsageError(f"--record: cannot write {args.record}: {e.strerror or e}") from None
    recorder = Recorder(
        args.record, secrets=tuple(secrets), chunks=getattr(args, "record_chunks", False)
    )
    gpu_info: dict[str, Any] = {}
    for pr in probes:
        if hasattr(pr, "info") and hasattr(pr, "_init"):
            pr._init()
            gpu_info = pr.info
    header = {
        "tokmon_version": __version__,
        "command": _redact_argv(sys.argv),
        "settings": cfg.redacted(),
        "slo": {k: v for k, v in vars(slo).items() if v is not None},
        "cost": {
            "gpu_hour_price": getattr(args, "gpu_hour_price", None),
            "gpus": getattr(args, "gpu_count", None),
        },
        "target": {
            "url": info["target"],
            "model": info["model"],
            "endpoint": cfg.arms[0].endpoint or "chat",
        },
        "host": environment(),
        "gpu": gpu_info,
        "servers": {
            u: {"models": m, "version": info["versions"].get(u)} for u, m in info["models"].items()
        },
    }
    return recorder, header


def _secret_header(k: str) -> bool:
    from tokmon.core.config import _redact_header

    return _redact_header(k, "x") != "x"


def _redact_argv(argv: list[str]) -> list[str]:
    out = []
    for a in argv:
        k, colon, _ = a.partition(":")
        out.append(f"{k}: <redacted>" if colon and _secret_header(k.strip()) else a)
    return out


def build_probes(args: argparse.Namespace, cfg: Any, window: float) -> list[Any]:
    from tokmon.core.probes.gpu import DcgmProbe, NvmlProbe
    from tokmon.core.probes.host import HostProbe
    from tokmon.core.probes.server import ServerMetricsProbe, metrics_url_for

    probes: list[Any] = [HostProbe()]
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
        from tokmon.core.probes.gpu import pid_listening_on

        server_pid = getattr(args, "server_pid", None) or pid_listening_on(cfg.arms[0].url)
        probes.append(NvmlProbe(interval or 0.5, gpus=gpus, server_pid=server_pid))
    if not getattr(args, "no_server_metrics", False):
        by_url: dict[str, list[str]] = {}
        for a in cfg.arms:
            url = getattr(args, "metrics_url", None) or metrics_url_for(a.url)
            by_url.setdefault(url, []).append(a.name)
        key = cfg.api_key
        hdr = {"authorization": f"Bearer {key}"} if key else {}
        for url, arms in by_url.items():
            probes.append(
                ServerMetricsProbe(
                    url, tuple(arms), window_s=window, headers=hdr, insecure=cfg.insecure
                )
            )
    return probes


def _summary_text(summary: dict[str, Any]) -> str:
    from tokmon.core.summary import summary_table

    return summary_table(summary)


def run_headless(session: Any, every: float) -> None:
    """Status lines to stderr until the run ends; Ctrl-C drains, a second Ctrl-C stops."""
    interrupted = {"n": 0}

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted["n"] += 1
        if interrupted["n"] == 1:
            print(
                "\ntokmon: stopping — draining in-flight requests (Ctrl-C again to stop now)",
                file=sys.stderr,
            )
            session.command("stop")
        else:
            session.command("stop", True)

    def on_sigterm(signum: int, frame: Any) -> None:
        session.command("stop", True)

    old_int = signal.signal(signal.SIGINT, on_sigint)
    old_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        next_print = time.monotonic() + every
        while not session.wait(0.2):
            if time.monotonic() >= next_print:
                next_print += every
                s = session.snapshot()
                if s is not None:
                    print(status_line(s), file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def status_line(s: Any) -> str:
    from tokmon.core.summary import fmt_ms

    w = s.window
    parts = [
        f"[{s.elapsed_s:7.1f}s]",
        f"arm {s.arm}",
        f"ok {s.ok}",
        f"failed {s.failed}",
        f"in flight {s.in_flight}",
    ]
    if w is not None:
        parts += [
            f"{w.tokens_per_s:8.1f} tok/s",
            f"TTFT p50 {fmt_ms(w.ttft_p50)} p95 {fmt_ms(w.ttft_p95)} ms",
            f"TPOT p50 {fmt_ms(w.tpot_p50)} ms",
        ]
    if s.warming_up:
        parts.append("(warming up)")
    for arm, secs in s.down.items():
        parts.append(f"SERVER DOWN ({arm}) for {secs:.0f}s")
    return " · ".join(parts)


# ----------------------------------------------------------------------------- sim / demo


def cmd_sim(args: argparse.Namespace) -> int:
    import asyncio

    from tokmon.sim.model import PROFILES
    from tokmon.sim.server import serve

    if args.list_profiles:
        for p in PROFILES.values():
            print(
                f"{p.name:<10} {p.description}: single stream {p.single_stream_tps():.0f} tok/s"
                if p.step_base_ms
                else f"{p.name:<10} {p.description}"
            )
        return 0
    cfg = sim_config(
        args.profile,
        args.set,
        args.spec == "on",
        args.seed,
        args.model_name,
        args.time_scale,
        args.faults,
        args.schedule,
        args.alter_outputs,
    )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")

    def ready(port: int) -> None:
        print(
            f"tokmon sim: serving {cfg.model_name} ({cfg.profile.name}, spec "
            f"{'on' if cfg.spec else 'off'}) on http://{args.host}:{port}/v1",
            file=sys.stderr,
            flush=True,
        )

    try:
        asyncio.run(serve(cfg, args.host, args.port, ready))
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        pass
    return 0


def sim_config(
    profile: str,
    overrides: str,
    spec: bool,
    seed: int | None,
    model: str,
    time_scale: float,
    faults: str,
    schedule: str | None,
    alter: float,
) -> Any:
    from tokmon.sim.faults import Faults
    from tokmon.sim.model import parse_profile
    from tokmon.sim.server import SimConfig

    try:
        prof = parse_profile(profile, overrides)
    except ValueError as e:
        raise UsageError(f"--profile: {e}") from None
    try:
        fl = Faults.parse(faults)
    except ValueError as e:
        raise UsageError(f"--faults: {e}") from None
    if not time_scale > 0:
        raise UsageError("--time-scale must be positive")
    sched = None
    if schedule:
        try:
            a, b, c = schedule.split(",")
            sched = (float(a), float(b), int(c))
        except ValueError:
            raise UsageError("--schedule: expected TTFT_MS,GAP_MS,TOKENS_PER_CHUNK") from None
        if sched[0] < 0 or sched[1] < 0 or sched[2] < 1:
            raise UsageError("--schedule: values must be >= 0 and TOKENS >= 1")
    if not 0 <= alter <= 1:
        raise UsageError("--alter-outputs must be between 0 and 1")
    return SimConfig(
        profile=prof,
        spec=spec,
        seed=seed,
        model_name=model,
        time_scale=time_scale,
        faults=fl,
        schedule=sched,
        alter_outputs=alter,
    )


DEMO_FAULTS = "http_500=0.004,http_429=0.004,stream_error=0.003,stall=0.004,stall_s=1.5"


def cmd_demo(args: argparse.Namespace) -> int:
    from tokmon.sim.process import SimProcess

    if not 1 <= args.concurrency <= 4096:
        raise UsageError("--concurrency must be between 1 and 4096")
    faults = "" if args.no_faults else DEMO_FAULTS
    base = sim_config(
        args.profile, "", False, args.seed, "sim-27b", args.time_scale, faults, None, 0
    )
    spec = sim_config(
        args.profile,
        "",
        True,
        None if args.seed is None else args.seed + 1,
        "sim-27b",
        args.time_scale,
        faults,
        None,
        0,
    )
    sims = [SimProcess(base), SimProcess(spec)]
    try:
        for s in sims:
            s.start()
        ns = build_parser().parse_args(
            [
                "run",
                "--url",
                sims[0].url,
                "--arm",
                f"baseline:url={sims[0].url}",
                "--arm",
                f"spec:url={sims[1].url}",
                "--concurrency",
                str(args.concurrency),
                "--prompt-tokens",
                "64:512",
                "--max-tokens",
                "128:384",
                "--mix",
                "code=0.35,structured=0.15,chat=0.3,creative=0.2",
                "--warmup",
                "4",
                "--settle",
                "2s",
                "--check-outputs",
                "6",
                "--gpu-hour-price",
                "2.5",
            ]
            + (["--duration", args.duration] if args.duration else [])
            + (
                []
                if str(args.alternate).lower() in ("off", "0", "none")
                else ["--alternate", args.alternate]
            )
            + (["--seed", str(args.seed)] if args.seed is not None else [])
        )
        ns.headless = args.headless
        ns.summary_json = args.summary_json
        ns.record = args.record
        ns.status_interval = args.status_interval
        ns.theme = args.theme
        ns.fps = args.fps
        cfg, info = build_run(ns, [])
        return run_session(ns, cfg, info)
    finally:
        for s in sims:
            s.stop()


# ----------------------------------------------------------------------------- recordings


def _write_out(path: str | None, text: str) -> None:
    if path is None:
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    print(f"tokmon: wrote {path}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    from tokmon.core.recording import read_recording
    from tokmon.report import render

    rec = read_recording(args.file)
    if args.compare:
        from tokmon.report import compare_recordings

        other = read_recording(args.compare)
        _write_out(args.output, compare_recordings(rec, other, args.format))
    else:
        _write_out(args.output, render(rec, args.format, args.target_rate))
    if rec.truncated:
        print(
            f"tokmon report: note: {args.file} was cut (the writer did not finish); "
            "figures cover the complete lines",
            file=sys.stderr,
        )
    if rec.corrupt:
        print(f"tokmon report: note: {rec.corrupt} corrupt line(s) skipped", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tokmon.core.recording import read_recording
    from tokmon.report import export_columns, export_csv

    rec = read_recording(args.file)
    if args.format == "csv":
        _write_out(args.output, export_csv(rec))
        return 0
    try:
        import pyarrow as pa  # type: ignore[import-not-found]
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError(
            "Parquet export needs pyarrow: pip install pyarrow (or use --format csv)"
        ) from None
    if not args.output:
        raise UsageError("Parquet export needs -o FILE")
    pq.write_table(pa.table(export_columns(rec)), args.output)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from tokmon.core.replay import SPEEDS, ReplaySource

    if not 1 <= args.speed <= 100:
        raise UsageError("--speed must be between 1 and 100")
    src = ReplaySource(
        args.file, speed=min(SPEEDS, key=lambda s: abs(s - args.speed)), follow=args.follow
    )
    src.start()
    try:
        from tokmon.ui.app import run_app

        run_app(src, theme=args.theme, fps=args.fps)
    finally:
        src.close()
    return 0


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # A config file gives defaults below the command line.
    file_arms: list[Any] = []
    if argv and argv[0] == "run" and "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            parser.error("--config needs a file")
        try:
            defaults, file_arms = load_config(argv[i + 1])
        except UsageError as e:
            print(f"tokmon run: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        parser.run_parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    from tokmon.core.preflight import PreflightError
    from tokmon.core.recording import RecordingError

    try:
        if args.command == "run":
            cfg, info = build_run(args, file_arms)
            return run_session(args, cfg, info)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "sim":
            return cmd_sim(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "export":
            return cmd_export(args)
    except (UsageError, PreflightError) as e:
        print(f"tokmon {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RecordingError as e:
        print(f"tokmon {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as e:
        print(f"tokmon {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tokmon: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug: one line for the user, the details in a file
        import tempfile
        import traceback

        fd, path = tempfile.mkstemp(prefix="tokmon-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exc(file=f)
        print(
            f"tokmon {args.command}: internal error ({type(e).__name__}: {e}); details in {path}",
            file=sys.stderr,
        )
        return 70
    return 0
