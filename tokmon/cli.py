"""The command line: ``tokmon run | demo | sim | replay | report | export``.

argparse (the standard library) rather than a CLI framework: it starts in milliseconds,
which matters for a tool whose engine processes re-import the package, and it covers
subcommands, defaults and help as well as the frameworks do here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from tokmon import __version__
from tokmon.textsafe import add_secret, dumps, say, write_out, write_text

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad option value or input file: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    run_parser: argparse.ArgumentParser

    def error(self, message: str) -> NoReturn:
        say(f"{self.prog}: error: {message} (see {self.prog} --help)", err=True)
        raise SystemExit(EXIT_USAGE)


def number(lo: float, hi: float, integer: bool = False, lo_open: bool = False) -> Any:
    """An argparse type: a finite number in [lo, hi] (or (lo, hi] with ``lo_open``).

    NaN, infinities and out-of-range values are refused with one line: a --top-p of nan
    would send invalid JSON, a --slo-target of nan would switch the SLO gate off."""

    def conv(text: str) -> float | int:
        try:
            v: float | int = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'a whole number' if integer else 'a number'}, got {text!r}"
            ) from None
        if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
            low = f"more than {lo:g}" if lo_open else f"at least {lo:g}"
            raise argparse.ArgumentTypeError(f"must be {low} and at most {hi:g}, got {text}")
        return v

    conv.__name__ = "integer" if integer else "number"
    return conv


class _Help(argparse.HelpFormatter):
    """Each option's default once: added only where the help does not say it already, and
    only where there is one to say (not None, False or an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        d = action.default
        if (
            "default" in text
            or d is None
            or d is False
            or d == []
            or d == ""
            or d is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        shown = str(d).replace("%", "%%")  # argparse %-formats the help
        return f"{text} (default {shown})" if text else f"default {shown}"


def add_display_options(p: Any) -> None:
    """The dashboard's look, for run, demo and replay alike."""
    p.add_argument("--theme", default=None, help="dashboard theme: a name or a .toml path")
    p.add_argument(
        "--fps", type=number(0.1, 60), default=4.0, help="dashboard redraws per second (max)"
    )


def _fmt() -> Any:
    return lambda prog: _Help(prog, max_help_position=32, width=100)


# ----------------------------------------------------------------------------- parser


def add_load_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load")
    g.add_argument(
        "--concurrency",
        "-c",
        type=number(1, 100_000, integer=True),
        default=None,
        help="closed loop: this many streams always in flight (default 4)",
    )
    g.add_argument(
        "--rate",
        "-r",
        type=number(0, 1e6, lo_open=True),
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
        type=number(0, 1000, lo_open=True),
        default=1.0,
        help="gamma shape under --arrival gamma (<1 burstier, >1 smoother)",
    )
    g.add_argument(
        "--max-concurrency",
        type=number(1, 100_000, integer=True),
        default=1024,
        help="cap on streams in flight under --rate (waits show as send lag)",
    )
    g.add_argument("--duration", "-d", default=None, help="run length: 30s, 10m, 2h")
    g.add_argument(
        "--requests",
        "-n",
        type=number(1, 10**12, integer=True),
        default=None,
        help="stop after this many requests",
    )
    g.add_argument(
        "--warmup",
        default="0",
        help="warm-up: N requests or a duration (20s); recorded, excluded from summaries",
    )
    g.add_argument(
        "--workers",
        type=number(1, 64, integer=True),
        default=1,
        help="engine processes sharing the load",
    )
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
    g.add_argument(
        "--temperature",
        type=number(0, 100),
        default=None,
        help="sampling temperature sent with each request (default: the server's)",
    )
    g.add_argument(
        "--top-p",
        type=number(0, 1),
        default=None,
        help="nucleus sampling sent with each request (default: the server's)",
    )
    g.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, integer=True),
        default=None,
        help="seed for the workload (and request seed)",
    )
    g.add_argument("--extra-body", default=None, help="JSON object merged into every request body")
    g.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K:V",
        help="extra request header (repeatable); its value is redacted in every output "
        "unless named with --show-header",
    )
    g.add_argument(
        "--show-header",
        action="append",
        default=[],
        metavar="NAME",
        help="a --header whose value may appear in recordings and reports (repeatable)",
    )
    g.add_argument(
        "--continuous-usage",
        action="store_true",
        help="ask for per-chunk usage (vLLM, SGLang): exact tokens per chunk",
    )
    g.add_argument(
        "--stall-threshold", default="1s", help="a chunk gap longer than this is a stall"
    )
    g.add_argument("--connect-timeout", default="10s", help="to open a connection")
    g.add_argument("--first-token-timeout", default="120s", help="from the send to the first token")
    g.add_argument("--idle-timeout", default="60s", help="longest gap between chunks")
    g.add_argument("--total-timeout", default="15m", help="for a whole request")
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
        type=number(0, 10_000, integer=True),
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
    g.add_argument(
        "--slo-target",
        type=number(0, 1, lo_open=True),
        default=0.95,
        help="share of requests that must meet the SLOs for --fail-on-slo to pass",
    )
    add_display_options(g)
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
        type=number(0, 1e6),
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour: cost per million output tokens, live and in the summary",
    )
    g.add_argument(
        "--gpu-count",
        type=number(1, 100_000, integer=True),
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
    g.add_argument("--overwrite", action="store_true", help="--record may replace an existing file")
    g.add_argument(
        "--append",
        action="store_true",
        help="--record may add this session to an existing file (reports read the last one)",
    )


def add_probe_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("probes")
    g.add_argument(
        "--metrics-url",
        default=None,
        help="server Prometheus endpoint (default: /metrics next to each --url)",
    )
    g.add_argument("--no-server-metrics", action="store_true", help="do not scrape /metrics")
    g.add_argument(
        "--metrics-interval",
        default="2s",
        help="how often /metrics is scraped: each scrape costs the server CPU (the README "
        "gives the measured cost)",
    )
    g.add_argument("--gpu-interval", default="0.5s", help="NVML sampling period")
    g.add_argument("--gpus", default=None, help="GPU indices to sample, e.g. 0,2")
    g.add_argument("--no-gpu", action="store_true", help="do not sample the GPU")
    g.add_argument(
        "--server-pid",
        type=number(1, 2**31, integer=True),
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
    run.add_argument(
        "--endpoint",
        default="chat",
        choices=["chat", "completions"],
        help="/v1/chat/completions (messages) or /v1/completions (a prompt)",
    )
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
    demo.add_argument("--headless", action="store_true", help="status lines, no dashboard")
    demo.add_argument(
        "--duration", "-d", default=None, help="stop after this long (default: never)"
    )
    demo.add_argument(
        "--concurrency", "-c", type=number(1, 4096, integer=True), default=8, help="streams"
    )
    demo.add_argument("--profile", default="27b-h100", help="simulator profile")
    demo.add_argument(
        "--time-scale",
        type=number(0, 1000, lo_open=True),
        default=1.0,
        help="the simulated servers run this many times faster",
    )
    demo.add_argument(
        "--alternate", default="30s", help="switch arms every DURATION ('off' for never)"
    )
    demo.add_argument("--no-faults", action="store_true", help="no injected faults")
    demo.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, integer=True),
        default=None,
        help="the same workload and simulated servers every time",
    )
    demo.add_argument("--summary-json", default=None, metavar="FILE", help="as tokmon run")
    demo.add_argument("--record", default=None, metavar="FILE", help="as tokmon run")
    demo.add_argument("--status-interval", default="5s", help="headless status line period")
    add_display_options(demo)

    rp = sub.add_parser(
        "replay",
        help="replay a recording in the dashboard",
        formatter_class=_fmt(),
        description="Open a recording in the dashboard: space plays/pauses, "
        "←/→ seek, [ ] jump between events, < > speed, e end.",
    )
    rp.add_argument("file")
    rp.add_argument("--speed", type=number(1, 100), default=1.0, help="1 to 100")
    rp.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep reading a file that a running tokmon is still writing",
    )
    add_display_options(rp)

    rep = sub.add_parser(
        "report",
        help="turn a recording into a report",
        formatter_class=_fmt(),
        description="Summary per arm and segment, the A/B comparison, drift, "
        "errors and the environment, from a recording.",
    )
    rep.add_argument("file")
    rep.add_argument(
        "--format",
        "-F",
        default="text",
        choices=["text", "md", "json", "csv", "html"],
        help="json equals the live --summary-json; html is one self-contained file",
    )
    rep.add_argument("-o", "--output", default=None, help="write to this file (default: stdout)")
    rep.add_argument(
        "--target-rate",
        type=number(0, 1e9, lo_open=True),
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
        "export",
        help="per-request data of a recording as CSV or Parquet",
        description="One row per request, every field of the recording (chunk gaps "
        "excepted), for a spreadsheet, pandas or DuckDB. Text that begins like a formula "
        "is written as text. Parquet needs pyarrow.",
        formatter_class=_fmt(),
    )
    ex.add_argument("file")
    ex.add_argument(
        "--format", "-F", default="csv", choices=["csv", "parquet"], help="output format"
    )
    ex.add_argument(
        "-o",
        "--output",
        default=None,
        help="write to this file (default: stdout; Parquet needs one)",
    )

    sim = sub.add_parser(
        "sim",
        help="serve the built-in simulated OpenAI-compatible server",
        formatter_class=_fmt(),
        description="A simulated inference server (continuous batching, "
        "speculative decoding, vLLM metrics, fault injection).",
    )
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on")
    sim.add_argument(
        "--port", type=number(0, 65535, integer=True), default=8000, help="port (0: any free one)"
    )
    sim.add_argument("--profile", default="27b-h100", help="model/GPU class (see --list-profiles)")
    sim.add_argument("--set", default="", metavar="FIELD=V,...", help="override profile fields")
    sim.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    sim.add_argument("--spec", default="off", choices=["on", "off"], help="speculative decoding")
    sim.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, integer=True),
        default=None,
        help="the same outputs and timings every time",
    )
    sim.add_argument("--model-name", default="sim-27b", help="the id /v1/models answers")
    sim.add_argument(
        "--time-scale",
        type=number(0, 1000, lo_open=True),
        default=1.0,
        help="run this many times faster",
    )
    sim.add_argument(
        "--faults",
        default="",
        metavar="NAME=V,...",
        help="injected faults, a share of requests each: http_500, http_429, "
        "stream_error, drop, malformed, overlong, stall (with stall_s=SECONDS); and "
        "drift=%%/h, kv_creep=%%/h, slowdown=%% (e.g. http_500=0.01,stall=0.02)",
    )
    sim.add_argument(
        "--schedule",
        default=None,
        metavar="TTFT_MS,GAP_MS,TOKENS",
        help="fixed per-request schedule instead of the batching model",
    )
    sim.add_argument(
        "--alter-outputs",
        type=number(0, 1),
        default=0.0,
        help="share of greedy outputs this server changes (output-check tests)",
    )
    return top


# ----------------------------------------------------------------------------- helpers


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
    "metrics_interval",
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
    from tokmon.model.arms import ArmError, arm_from_mapping

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"--config: cannot read {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"--config: {path} is not valid TOML: {e}") from None
    arms_tbl = data.pop("arms", {})
    defaults: dict[str, Any] = {}
    for k, v in data.items():
        key = k.replace("-", "_")
        if key not in CONFIG_KEYS:
            raise UsageError(f"--config: unknown key {k!r} in {path}")
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


# Options whose value is a name, a path or a URL: a number there is a mistake.
_TEXT_KEYS = frozenset(
    ("url", "model", "record", "summary_json", "prompts", "api_key_file", "theme",
     "metrics_url", "dcgm_url", "endpoint", "arrival", "assign", "mix", "ladder")
)  # fmt: skip


def config_argv(parser: argparse.ArgumentParser, defaults: dict[str, Any], path: str) -> list[str]:
    """A config file's keys as command-line words, so that every value goes through the
    very checks its option does (a TOML string "false" is not a boolean; a list is not a
    number). They come before the command line's own words, which win."""
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    out: list[str] = []
    for key, v in defaults.items():
        act = actions.get(key)
        if act is None:
            raise UsageError(f"--config: {key!r} in {path} is not an option of tokmon run")
        opt = next((o for o in act.option_strings if o.startswith("--")), act.option_strings[0])
        where = f"--config: {key} in {path}"
        if isinstance(act, argparse._StoreTrueAction):
            if not isinstance(v, bool):
                raise UsageError(f"{where} must be true or false, got {v!r}")
            out += [opt] if v else []
        elif isinstance(act, argparse._AppendAction):
            items = v if isinstance(v, list) else [v]
            if not all(isinstance(x, str) for x in items):
                raise UsageError(f"{where} must be a string or a list of strings")
            for x in items:
                out += [opt, x]
        elif key == "extra_body" and isinstance(v, dict):
            out += [opt, json.dumps(v)]
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UsageError(f"{where} must be a single value, got {v!r}")
        elif key in _TEXT_KEYS and not isinstance(v, str):
            raise UsageError(f"{where} must be text (a quoted string), got {v!r}")
        else:
            out += [opt, str(v)]
    return out


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
    from tokmon.engine.h1 import prepare
    from tokmon.engine.preflight import PreflightError, fetch_models, resolve_model, server_version
    from tokmon.model.arms import Arm, ArmError, check_unique, parse_arm
    from tokmon.model.config import RunConfig, Timeouts, redact_header
    from tokmon.model.workload import LengthDist, WorkloadError, load_prompt_file, parse_mix

    url = args.url or os.environ.get("TOKMON_URL")
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
    if args.concurrency is not None and args.rate is not None:
        raise UsageError("--concurrency and --rate exclude each other: pick one")
    mode = "rate" if args.rate is not None else "concurrency"
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
    arms: list[Arm] = list(file_arms)
    try:
        arms += [parse_arm(a) for a in args.arm]
        check_unique(arms)
    except ArmError as e:
        raise UsageError(str(e)) from None
    if not arms:
        arms = [Arm(name="default")]
    shown = tuple(str(x) for x in (getattr(args, "show_header", None) or []))
    for k, v in headers.items():
        if redact_header(k, v, shown) != v:
            add_secret(v)  # scrubbed from every output from now on
    key = api_key(getattr(args, "api_key_file", None))
    add_secret(key)
    # Credentials in a URL are Basic authentication for every request, and never written.
    if url:
        url, basic = split_credentials(url)
        if basic:
            if key:
                raise UsageError("credentials in --url and an API key exclude each other: give one")
            headers.setdefault("authorization", basic)
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
    if not url and any(not a.url for a in arms):
        raise UsageError(
            "no target: give --url (e.g. http://127.0.0.1:8000/v1), or url= in every --arm"
        )
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
        # With a request budget, a worker with no stream of its own would hold its share
        # of the budget forever: at most one worker per stream and per request. (Without
        # one, an idle worker waits for + or a ladder step to give it streams.)
        workers=args.workers
        if args.requests is None
        else min(args.workers, args.requests, conc if mode == "concurrency" else args.workers),
        continuous_usage=args.continuous_usage,
        shown_headers=shown,
    )
    versions: dict[str, str] = {}
    for a_url in models_cache:
        ver = server_version(a_url, {**auth, **headers}, args.insecure)
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
    from tokmon.sources.live import LiveSession

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
    interrupted = False
    try:
        session.start()
        if headless:
            interrupted = run_headless(session, status_every)
        else:
            from tokmon.ui.app import run_app

            interrupted = run_app(session, theme=args.theme, fps=args.fps)
        session.command("stop", True)
        session.wait(10.0)
    finally:
        session.close()
    summary = session.final or session.summary()
    say(_summary_text(summary))
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
    if recorder is not None and (recorder.lost_lines or recorder.error):
        lost = f"{recorder.lost_lines} line(s) lost" if recorder.lost_lines else "not all written"
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
        return 130
    if getattr(args, "alerts_exit", False) and summary.get("alerts"):
        say(f"tokmon: {len(summary['alerts'])} alert(s) fired", err=True)
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
    args: argparse.Namespace, cfg: Any, info: dict[str, Any], slo: Any, probes: list[Any]
) -> tuple[Any, dict[str, Any]]:
    """The recorder for --record, and the header that writes the environment down."""
    if not getattr(args, "record", None):
        return None, {}
    from tokmon.model.config import redact_header
    from tokmon.recording.writer import Recorder, environment

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
        with open(path, "ab"):
            pass
    except OSError as e:
        raise UsageError(f"--record: cannot write {args.record}: {e.strerror or e}") from None
    recorder = Recorder(
        args.record, secrets=tuple(secrets), chunks=getattr(args, "record_chunks", False)
    )
    recorder.mode = "wb" if overwrite else "ab"
    gpu_info: dict[str, Any] = {}
    for pr in probes:
        if hasattr(pr, "info") and hasattr(pr, "_init"):
            pr._init()
            gpu_info = pr.info
    header = {
        "tokmon_version": __version__,
        "command": _redact_argv(sys.argv, cfg.shown_headers),
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


_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


def _redact_argv(argv: list[str], shown: tuple[str, ...] = ()) -> list[str]:
    """The command line as it may be written down: URL credentials and the values of
    headers (``--header K:V``) replaced, unless a header is named by --show-header."""
    from tokmon.model.config import redact_header

    out: list[str] = []
    header_next = False
    for a in argv:
        a = _USERINFO.sub("<redacted>@", a)
        if header_next or a.startswith("--header="):
            prefix = "--header=" if a.startswith("--header=") else ""
            k, colon, v = a[len(prefix) :].partition(":")
            if colon:
                a = f"{prefix}{k}:{redact_header(k.strip(), v, shown)}"
        header_next = a in ("--header", "-H")
        out.append(a)
    return out


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
    return probes


def _summary_text(summary: dict[str, Any]) -> str:
    from tokmon.model.summary import summary_table

    return summary_table(summary)


def run_headless(session: Any, every: float) -> bool:
    """Status lines to stderr until the run ends; Ctrl-C drains, a second Ctrl-C stops.
    True when the run was interrupted (the exit code is then 130)."""
    interrupted = {"n": 0}

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted["n"] += 1
        if interrupted["n"] == 1:
            say(
                "\ntokmon: stopping — draining in-flight requests (Ctrl-C again to stop now)",
                err=True,
            )
            session.command("stop")
        else:
            session.command("stop", True)

    def on_sigterm(signum: int, frame: Any) -> None:
        session.command("stop", True)

    old_int = signal.signal(signal.SIGINT, on_sigint)
    old_term = signal.signal(signal.SIGTERM, on_sigterm)
    last_t = None
    try:
        next_print = time.monotonic() + every
        while not session.wait(0.2):
            if time.monotonic() >= next_print:
                next_print = max(next_print + every, time.monotonic())
                s = session.snapshot()
                # a starved process may wake twice before a new snapshot: no repeat
                if s is not None and s.t != last_t:
                    last_t = s.t
                    say(status_line(s), err=True, flush=True)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return interrupted["n"] > 0


def status_line(s: Any) -> str:
    from tokmon.model.summary import fmt_ms

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
            say(
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

    def ready(port: int) -> None:
        say(
            f"tokmon sim: serving {cfg.model_name} ({cfg.profile.name}, spec "
            f"{'on' if cfg.spec else 'off'}) on http://{args.host}:{port}/v1",
            err=True,
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
    sched = None
    if schedule:
        try:
            a, b, c = schedule.split(",")
            sched = (float(a), float(b), int(c))
        except ValueError:
            raise UsageError("--schedule: expected TTFT_MS,GAP_MS,TOKENS_PER_CHUNK") from None
        if not (0 <= sched[0] < 1e6 and 0 <= sched[1] < 1e6) or sched[2] < 1:
            raise UsageError("--schedule: values must be >= 0 and TOKENS >= 1")
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
        write_out(text)
        return
    try:
        write_text(path, text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    say(
        f"tokmon: wrote {path}",
        err=True,
    )


def cmd_report(args: argparse.Namespace) -> int:
    from tokmon.recording.reader import read_recording
    from tokmon.report.text import render

    rec = read_recording(args.file)
    if args.compare:
        from tokmon.report.text import compare_recordings

        other = read_recording(args.compare)
        _write_out(args.output, compare_recordings(rec, other, args.format))
    else:
        _write_out(args.output, render(rec, args.format, args.target_rate))
    if rec.truncated:
        say(
            f"tokmon report: note: {args.file} was cut (the writer did not finish); "
            "figures cover the complete lines",
            err=True,
        )
    if rec.corrupt:
        say(
            f"tokmon report: note: {rec.corrupt} corrupt line(s) skipped",
            err=True,
        )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tokmon.recording.reader import read_recording
    from tokmon.report.text import export_columns, export_csv

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
    from tokmon.sources.replay import SPEEDS, ReplaySource

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
    if argv and argv[0] == "run":
        cfg_path = None
        for i, a in enumerate(argv):
            if a == "--config":
                if i + 1 >= len(argv):
                    parser.error("--config needs a file")
                cfg_path = argv[i + 1]
            elif a.startswith("--config="):
                cfg_path = a.partition("=")[2]
        if cfg_path is not None:
            try:
                defaults, file_arms = load_config(cfg_path)
                argv = ["run", *config_argv(parser.run_parser, defaults, cfg_path), *argv[1:]]
            except UsageError as e:
                say(f"tokmon run: error: {e}", err=True)
                return EXIT_USAGE
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    from tokmon.engine.preflight import PreflightError
    from tokmon.recording import RecordingError

    try:
        if getattr(args, "theme", None):
            from tokmon.ui.themes import ThemeError, check_theme

            try:
                check_theme(args.theme)
            except ThemeError as e:
                raise UsageError(f"--theme: {e}") from None
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
        say(
            f"tokmon {args.command}: error: {e}",
            err=True,
        )
        return EXIT_USAGE
    except RecordingError as e:
        say(
            f"tokmon {args.command}: error: {e}",
            err=True,
        )
        return EXIT_USAGE
    except RuntimeError as e:
        say(
            f"tokmon {args.command}: error: {e}",
            err=True,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        say(
            "tokmon: interrupted",
            err=True,
        )
        return 130
    except Exception as e:  # a bug: one line for the user, the details in a file
        import tempfile
        import traceback

        fd, path = tempfile.mkstemp(prefix="tokmon-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exc(file=f)
        say(
            f"tokmon {args.command}: internal error ({type(e).__name__}: {e}); details in {path}",
            err=True,
        )
        return 70
    return 0
