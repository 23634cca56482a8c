"""The command line's grammar: the subcommands and their options, and a --config file
read as command-line words.

argparse (the standard library) rather than a CLI framework: it starts in milliseconds,
which matters for a tool whose engine processes re-import the package, and it covers
subcommands, defaults and help as well as the frameworks do here.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from tokmon import __version__
from tokmon.cli.options import CONFIG_KEYS, TEXT_KEYS, add_display_options, add_run_options, number
from tokmon.model.data.coerce import json_value
from tokmon.textsafe import say

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad option value or input file: one line, exit 2."""


EXIT_FAILED = 1


class RunFailed(Exception):
    """The run itself failed before it measured (a managed server exited before it was
    ready): one line, exit 1."""


class Parser(argparse.ArgumentParser):
    run_parser: argparse.ArgumentParser

    def error(self, message: str) -> NoReturn:
        say(f"{self.prog}: error: {message}{self.did_you_mean(message)} "
            f"(see {self.prog} --help)", err=True)  # fmt: skip
        raise SystemExit(EXIT_USAGE)

    def did_you_mean(self, message: str) -> str:
        """`` (--recrd: did you mean --record?)`` for a mistyped option, by the closest of every
        option of this command and its subcommands (difflib: the standard library's)."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = {o for p in (self, *self._subs()) for a in p._actions for o in a.option_strings}
        hints = []
        for word in message.partition(":")[2].split():
            name = word.partition("=")[0]
            if name.startswith("--"):
                near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
                if near:
                    hints.append(f"{name}: did you mean {near[0]}?")
        return f" ({'; '.join(hints)})" if hints else ""

    def _subs(self) -> list[argparse.ArgumentParser]:
        out: list[argparse.ArgumentParser] = []
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                out += list(a.choices.values())
        return out


class _Help(argparse.HelpFormatter):
    """Each option's default once: added only where the help does not say it already, and
    only where there is one to say (not None, False or an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # argparse %-formats every help string; tokmon's helps are plain text ("5%/h"),
        # so each % is escaped here, once, for every option of every command.
        text = (action.help or "").replace("%", "%%")
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


def _fmt() -> Any:
    return lambda prog: _Help(prog, max_help_position=32, width=100)


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
    add_run_options(run)

    _demo(sub)
    _replay(sub)
    _report(sub)
    _view(sub)
    _env(sub)
    _export(sub)
    _index(sub)
    _sim(sub)
    return top


def _demo(sub: Any) -> None:
    """``tokmon demo``."""
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
        "--scene",
        choices=("ab", "prefix-cache"),
        default="ab",
        help="ab: speculative decoding off and on, alternating; prefix-cache: one server, "
        "four shared system prompts and three-turn chats (the cache's hit rate under the "
        "server chart, TTFT per turn in the summary)",
    )
    demo.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, integer=True),
        default=None,
        help="the same workload and simulated servers every time",
    )
    demo.add_argument("--summary-json", default=None, metavar="FILE", help="as tokmon run")
    demo.add_argument("--record", default=None, metavar="FILE", help="as tokmon run")
    demo.add_argument("--record-rotate", default=None, metavar="DURATION", help="as tokmon run")
    demo.add_argument("--record-max-size", default=None, metavar="SIZE", help="as tokmon run")
    demo.add_argument("--status-interval", default="5s", help="headless status line period")
    add_display_options(demo)


def _replay(sub: Any) -> None:
    """``tokmon replay``."""
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
    rp.add_argument(
        "--from",
        dest="t_from",
        default=None,
        metavar="TIME",
        help="open at TIME (18h, or a clock time), in the state the run was in, the "
        "figures covering the run from there; of a rotated run, the parts before are not "
        "read",
    )
    rp.add_argument("--to", dest="t_to", default=None, metavar="TIME", help="replay up to TIME")
    add_display_options(rp)


def _report(sub: Any) -> None:
    """``tokmon report``."""
    rep = sub.add_parser(
        "report",
        help="turn a recording into a report",
        formatter_class=_fmt(),
        description="Summary per arm and segment, the A/B comparison, drift, "
        "errors and the environment, from a recording.",
    )
    rep.add_argument(
        "file",
        nargs="+",
        help="a recording; several: the same load run again, their figures over runs",
    )
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
        "--from",
        dest="t_from",
        default=None,
        metavar="TIME",
        help="report the run from TIME: a time into it (18h, 90m) or a clock time "
        "(2026-12-05T14:00, this machine's zone unless given); of a rotated run, the "
        "parts before are not read",
    )
    rep.add_argument(
        "--to",
        dest="t_to",
        default=None,
        metavar="TIME",
        help="report the run up to TIME (as --from); the requests sent and ended "
        "between the two count",
    )
    rep.add_argument(
        "--compare",
        default=None,
        nargs="+",
        metavar="OTHER",
        help="a second recording: its arms against this one's (matched by name, by --map, "
        "or the one arm of each); with several runs on each side, the groups compared "
        "over runs",
    )
    rep.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="A=B",
        help="with --compare: arm A of this recording against arm B of OTHER (repeatable)",
    )


def _view(sub: Any) -> None:
    """``tokmon view``."""
    view = sub.add_parser(
        "view",
        help="attach to a running tokmon: its dashboard here (q detaches)",
        formatter_class=_fmt(),
        description="Draw a running session's dashboard from the socket it serves (what "
        "--web starts for each browser tab); its keys act on the run, q detaches.",
    )
    view.add_argument("--attach", required=True, metavar="SOCKET", help="the run's view socket")
    add_display_options(view)


def _env(sub: Any) -> None:
    """``tokmon env``."""
    env = sub.add_parser(
        "env",
        help="what a server runs on, the way to it and what it allows (no load)",
        formatter_class=_fmt(),
        description="Ask a server for its configuration (vLLM info gauges, SGLang "
        "/get_server_info, llama.cpp /props, TGI /info, /v1/models, /version), time the "
        "network path (TCP connect, TLS handshake, a tiny GET), and report its security "
        "posture (TLS, whether the API and /metrics answer without a key). Read-only: a "
        "few small GETs, no generation.",
    )
    env.add_argument("url", help="base URL of the API, e.g. http://127.0.0.1:8000/v1")
    env.add_argument(
        "--format", "-F", default="text", choices=["text", "md", "json"], help="output format"
    )
    env.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="read the API key from FILE (else TOKMON_API_KEY or OPENAI_API_KEY)",
    )
    env.add_argument(
        "--header", "-H", action="append", default=[], metavar="K:V", help="extra header"
    )
    env.add_argument(
        "--show-header",
        action="append",
        default=[],
        metavar="NAME",
        help="a header whose value may be written (others are redacted)",
    )
    env.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    env.add_argument(
        "--pings",
        type=number(1, 1000, integer=True),
        default=7,
        help="tiny GETs timed on one connection",
    )


def _export(sub: Any) -> None:
    """``tokmon export``."""
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


def _index(sub: Any) -> None:
    """``tokmon index``."""
    ix = sub.add_parser(
        "index",
        help="write a recording's columnar companions (read instead of its JSON lines)",
        description="Beside each part of the recording, its requests as columns "
        "(PART.cols.parquet), as the recorder writes them when a part of 100,000 requests "
        "or more closes. A report or replay then reads the columns, not the JSON; the "
        "JSON stays the source of truth (a companion that does not match its part is "
        "ignored, and says so). Needs pyarrow.",
        formatter_class=_fmt(),
    )
    ix.add_argument("file")


def _sim(sub: Any) -> None:
    """``tokmon sim``."""
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
        "drift=%%/h, kv_creep=%%/h, slowdown=%%, step=%% from step_at=SECONDS (decoding "
        "that much slower from then: try the alerts) (e.g. http_500=0.01,stall=0.02)",
    )
    sim.add_argument(
        "--schedule",
        default=None,
        metavar="TTFT_MS,GAP_MS,TOKENS",
        help="fixed per-request schedule instead of the batching model",
    )
    sim.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require the key in this environment variable on /v1/* (as vLLM's --api-key); "
        "/health, /version and /metrics stay open",
    )
    sim.add_argument(
        "--net-delay",
        default="0",
        metavar="DURATION",
        help="hold every answer this long before its first byte: a network round trip (e.g. 20ms)",
    )
    sim.add_argument(
        "--close-connections",
        action="store_true",
        help="close every connection after its answer (connection: close), as some "
        "proxies do: each request opens a new one",
    )
    sim.add_argument(
        "--front-delay",
        default="0",
        metavar="DURATION",
        help="the API server's own time before a request reaches the engine's queue "
        "(HTTP, tokenisation, the chat template), e.g. 10ms: the front end of TTFT's split",
    )
    sim.add_argument(
        "--per-request-metrics",
        action="store_true",
        help="as vLLM's --enable-per-request-metrics: the final usage chunk carries each "
        "request's queue, prefill and generation times",
    )
    sim.add_argument(
        "--schedule-queue",
        default="0",
        metavar="DURATION",
        help="with --schedule: the first part of its TTFT reported as waiting in the queue "
        "(the rest as prefill)",
    )
    sim.add_argument(
        "--schedule-capacity",
        type=number(0, 100000, integer=True),
        default=0,
        metavar="N",
        help="with --schedule: above N requests in flight each TTFT grows by (in flight / N)² "
        "(a server whose capacity is known)",
    )
    sim.add_argument(
        "--wobble",
        type=number(0, 1),
        default=0.0,
        metavar="SIGMA",
        help="a run-to-run wobble: every cost × one lognormal factor of σ SIGMA drawn at "
        "start from --seed (e.g. 0.03: runs of the 'same' server differ by about 3%%)",
    )
    sim.add_argument(
        "--reasoning",
        type=number(-1, 1_000_000, integer=True),
        default=0,
        metavar="N",
        help="a reasoning model: the first N tokens of every chat answer are its thinking "
        "(delta.reasoning_content, counted in usage.completion_tokens_details."
        "reasoning_tokens); -1: it never stops thinking",
    )
    sim.add_argument(
        "--guided-ms",
        type=number(0, 10_000),
        default=0.0,
        metavar="MS",
        help="guided decoding's cost: every token of a request under a JSON schema takes MS "
        "more (--schedule mode)",
    )
    sim.add_argument(
        "--image-ms-per-token",
        type=number(0, 1000),
        default=0.0,
        metavar="MS",
        help="each image token (a 28-pixel patch of an image_url PNG) adds MS to TTFT "
        "(--schedule mode; the batching model's prefill cost applies otherwise)",
    )
    sim.add_argument(
        "--token-bytes",
        type=number(0, 64, integer=True),
        default=0,
        metavar="N",
        help="tokenize every N bytes as a token (a byte-level tokenizer: no word is one "
        "token); 0: the word rule",
    )
    sim.add_argument(
        "--wrong",
        metavar="TASK=RATE,...",
        help="the answer model: answer quality probes wrongly at these rates per task "
        "(arith, count, reverse, sort, json), e.g. arith=0.1 for a quantised model; right "
        "otherwise",
    )
    sim.add_argument(
        "--alter-outputs",
        type=number(0, 1),
        default=0.0,
        help="share of greedy outputs this server changes (output-check tests)",
    )


def load_config(path: str) -> tuple[dict[str, Any], list[Any]]:
    from tokmon.inputs import InputError, read_input_bytes
    from tokmon.model.workloads.arms import ArmError, arm_from_mapping

    try:
        data = tomllib.loads(read_input_bytes(path, "--config").decode("utf-8"))
    except InputError as e:
        raise UsageError(str(e)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"--config: {path} is not valid TOML: {e}") from None
    except RecursionError:
        raise UsageError(f"--config: {path} is nested too deeply") from None
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
            try:
                out += [opt, json.dumps(json_value(v, where))]
            except ValueError as e:
                raise UsageError(str(e)) from None
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UsageError(f"{where} must be a single value, got {v!r}")
        elif key in TEXT_KEYS and not isinstance(v, str):
            raise UsageError(f"{where} must be text (a quoted string), got {v!r}")
        else:
            out += [opt, str(v)]
    return out


def api_key(path: str | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
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
    return environ.get("TOKMON_API_KEY") or environ.get("OPENAI_API_KEY") or None
