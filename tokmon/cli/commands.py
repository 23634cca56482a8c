"""The other commands (demo, sim, replay, report, export) and ``main``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokmon import __version__
from tokmon.cli.options import RunOptions
from tokmon.cli.parser import (
    EXIT_FAILED,
    EXIT_USAGE,
    RunFailed,
    UsageError,
    build_parser,
    config_argv,
    load_config,
)
from tokmon.cli.plan import dur
from tokmon.cli.run import build_run, run_session
from tokmon.cli.shutdown import SHUTDOWN, run_dashboard
from tokmon.model.statistics.words import count
from tokmon.textsafe import clean_text, open_private, say, write_out, write_text

if TYPE_CHECKING:
    from tokmon.recording.window import Window


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

    delay = dur("--net-delay", args.net_delay) or 0.0
    if delay > 10:
        raise UsageError("--net-delay: at most 10 s")
    cfg.net_delay_s = delay
    cfg.close_connections = bool(args.close_connections)
    for opt, v in (("--front-delay", args.front_delay), ("--schedule-queue", args.schedule_queue)):
        if (dur(opt, v) or 0.0) > 10:
            raise UsageError(f"{opt}: at most 10 s")
    cfg.front_ms = 1000.0 * (dur("--front-delay", args.front_delay) or 0.0)
    cfg.schedule_queue_ms = 1000.0 * (dur("--schedule-queue", args.schedule_queue) or 0.0)
    cfg.request_metrics = bool(args.per_request_metrics)
    cfg.schedule_capacity = int(args.schedule_capacity)
    cfg.wobble = float(args.wobble)
    cfg.token_bytes = int(args.token_bytes)
    cfg.wrong = wrong_rates(args.wrong)
    cfg.reasoning = int(args.reasoning)
    cfg.guided_ms = float(args.guided_ms)
    cfg.image_ms_per_token = float(args.image_ms_per_token)
    if args.api_key_env:
        cfg.api_key = os.environ.get(args.api_key_env) or None
        if not cfg.api_key:
            raise UsageError(f"--api-key-env: {args.api_key_env} is not set or empty")

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


def wrong_rates(text: str | None) -> dict[str, float]:
    """``--wrong arith=0.1,json=0.05``: the answer model's error rate per task."""
    from tokmon.model.workloads.questions import TASKS
    from tokmon.model.workloads.workload import WorkloadError, key_numbers

    try:
        return key_numbers(text or "", "--wrong", TASKS, "task", "rate", hi=1.0)
    except WorkloadError as e:
        raise UsageError(str(e)) from None


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
    from tokmon.sim.config import SimConfig
    from tokmon.sim.faults import Faults
    from tokmon.sim.model import parse_profile

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


def prefix_scene(args: argparse.Namespace, url: str) -> list[str]:
    """The prefix cache at work: 2,000-token prompts, half of them one of four shared
    system prompts, in three-turn chats whose history the server finds cached."""
    return (
        ["run", "--url", url, "--concurrency", str(args.concurrency), "--prompt-tokens", "2k",
         "--shared-prefix", "1k", "--prefix-pool", "4", "--turns", "3", "--think-time", "1s",
         "--max-tokens", "64:192", "--warmup", "4", "--metrics-interval", "1s"]
        + (["--duration", args.duration] if args.duration else [])
        + (["--seed", str(args.seed)] if args.seed is not None else [])
    )  # fmt: skip


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
    for c in (base, spec):
        # as vLLM with --enable-per-request-metrics behind an API server that takes a few
        # ms: `w` shows where the time goes, from each request's own figures
        c.request_metrics, c.front_ms = True, 4.0
    sims = [SimProcess(base), SimProcess(spec)]
    if args.scene == "prefix-cache":
        sims = sims[:1]
    try:
        for s in sims:
            s.start()
        ns = build_parser().parse_args(
            prefix_scene(args, sims[0].url)
            if args.scene == "prefix-cache"
            else [
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
        ns.record_rotate, ns.record_max_size = args.record_rotate, args.record_max_size
        ns.status_interval = args.status_interval
        ns.theme = args.theme
        ns.fps = args.fps
        ns.web = args.web
        ns.web_allow_remote = args.web_allow_remote
        return run_session(build_run(RunOptions.of(ns), []))
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


def events_path(path: str) -> str:
    """``NAME-events.csv`` beside ``NAME.csv``."""
    p = Path(path)
    stem = p.stem if p.suffix.lower() == ".csv" else p.name
    return str(p.with_name(f"{stem}-events.csv"))


def _write_events_csv(rec: Any, output: str | None) -> None:
    """The requests are one CSV, the events (markers, pauses, load changes, arm
    switches, restarts, alerts) a second one beside it; written to standard output, the
    requests alone, and a line says how to get the events."""
    from tokmon.report.text import export_events_csv

    if output is None:
        say("tokmon: events: give -o NAME.csv to write them to NAME-events.csv", err=True)
        return
    _write_out(events_path(output), export_events_csv(rec))


def cmd_report(args: argparse.Namespace) -> int:
    from tokmon.recording.reader import read_recording
    from tokmon.report.render import render_file

    files, others = list(args.file), list(args.compare or [])
    if args.map and not others:
        raise UsageError("--map goes with --compare (it pairs the two runs' arms)")
    window = _window(args, files[0])
    if window is not None and (len(files) > 1 or others):
        raise UsageError("--from/--to: one recording (not several, nor --compare)")
    if len(files) > 1 or len(others) > 1:
        return _report_runs(args, files, others)
    if others:
        from tokmon.report.text import compare_recordings

        rec = read_recording(files[0])
        other = read_recording(others[0])
        try:
            text = compare_recordings(rec, other, args.format, args.map)
        except ValueError as e:
            raise UsageError(str(e)) from None
        _write_out(args.output, text)
    else:
        try:
            text, rec = render_file(files[0], args.format, args.target_rate, window)
        except ValueError as e:
            raise UsageError(str(e)) from None
        _write_out(args.output, text)
        if args.format == "csv":
            _write_events_csv(rec, args.output)
    _notes(rec, files[0])
    return 0


def _window(args: argparse.Namespace, path: str) -> Window | None:
    """``--from``/``--to``: the stretch of the run to report, in ns from its start."""
    t_from, t_to = getattr(args, "t_from", None), getattr(args, "t_to", None)
    if t_from is None and t_to is None:
        return None
    from tokmon.recording.jsonl import header_of
    from tokmon.recording.window import Window

    head = header_of(path) or {}
    lo = _instant(t_from, head, "--from") if t_from is not None else 0
    hi = _instant(t_to, head, "--to") if t_to is not None else None
    if hi is not None and hi <= lo:
        raise UsageError("--to must be later than --from")
    return Window(lo, hi)


def _instant(value: str, head: dict[str, Any], opt: str) -> int:
    """A time into the run (``18h``, ``90m``, ``3600``) or a clock time
    (``2026-12-05T14:00``; without a zone, this machine's), in ns from the run's start
    (the header's ``started_at``)."""
    from datetime import datetime

    from tokmon.model.workloads.workload import WorkloadError, parse_duration

    try:
        return int(round(parse_duration(value) * 1e9))
    except WorkloadError:
        pass
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(
            f"{opt}: not a time: {value!r} (a time into the run, e.g. 18h or 90m, or a "
            "clock time, e.g. 2026-12-05T14:00)"
        ) from None
    try:
        began = datetime.fromisoformat(str(head.get("started_at") or ""))
    except ValueError:
        raise UsageError(
            f"{opt} {value}: the recording does not say when it began (give a time into "
            "the run, e.g. 18h)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    if began.tzinfo is None:
        began = began.astimezone()
    s = (when - began).total_seconds()
    if s < 0:
        raise UsageError(f"{opt} {value}: before the run began ({began.isoformat()})")
    return int(round(s * 1e9))


def _notes(rec: Any, path: str) -> None:
    for cut in getattr(rec, "cut", None) or ([path] if rec.truncated else []):
        say(
            f"tokmon report: note: {cut} was cut (its writer did not finish, or it was "
            "damaged); figures cover the complete lines",
            err=True,
        )
    if rec.corrupt:
        say(f"tokmon report: note: {count(rec.corrupt, 'corrupt line')} skipped", err=True)
    for m in getattr(rec, "missing", ()):
        say(f"tokmon report: note: a part of this rotated run is missing: {m}", err=True)
    for why in getattr(rec, "notes", ()):
        say(f"tokmon report: note: companion ignored: {why}", err=True)
    if getattr(rec, "part", 0):
        say(f"tokmon report: note: {path} is part {rec.part} of a rotated run, read alone",
            err=True)  # fmt: skip


def _report_runs(args: argparse.Namespace, files: list[str], others: list[str]) -> int:
    """Several recordings of the same load: the figures over runs; with --compare, two
    groups of runs against each other, over runs."""
    from tokmon.model.judge.runs import between_groups, between_runs
    from tokmon.recording.play import summary_of
    from tokmon.recording.reader import read_recording
    from tokmon.report.runs_text import groups_text, runs_text
    from tokmon.textsafe import dumps

    if args.format not in ("text", "md", "json"):
        raise UsageError("several recordings: --format text, md or json")
    if others and (len(files) < 2 or len(others) < 2):
        raise UsageError("--compare of groups needs at least 2 runs on each side (one run "
                         "each: report A --compare B compares their requests)")  # fmt: skip

    def summaries(paths: list[str]) -> list[dict[str, Any]]:
        out = []
        for p in paths:
            rec = read_recording(p)
            _notes(rec, p)
            out.append(summary_of(rec))
        return out

    a = summaries(files)
    if others:
        data = between_groups(a, summaries(others))
        text = groups_text(data, files, others)
    else:
        data = between_runs(a)
        text = runs_text(data, files)
    if args.format == "json":
        text = dumps(data, indent=2) + "\n"
    elif args.format == "md":
        text = "```\n" + text + "```\n"
    _write_out(args.output, text)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    """``tokmon env URL``: the environment record of one server, without a load."""
    from tokmon.cli.parser import api_key
    from tokmon.cli.plan import credentials
    from tokmon.engine.preflight import fetch_models
    from tokmon.probes.env import survey
    from tokmon.textsafe import dumps

    url, headers, key = credentials(
        tuple(args.header), tuple(args.show_header), api_key(args.api_key_file), args.url
    )
    assert url is not None
    if key:
        headers["authorization"] = f"Bearer {key}"
    fetch_models(url, headers, insecure=args.insecure)  # a clear line if it cannot answer
    env = survey(url, headers, insecure=args.insecure, pings=args.pings)
    if args.format == "json":
        write_out(dumps(env.to_json(), indent=2) + "\n")
    else:
        from tokmon.report.environment import env_lines

        write_out("\n".join(env_lines([env], args.format)) + "\n")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tokmon.recording.reader import read_recording
    from tokmon.report.text import export_columns, export_csv

    rec = read_recording(args.file)
    if args.format == "csv":
        _write_out(args.output, export_csv(rec))
        _write_events_csv(rec, args.output)
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
    # every string cleaned as in every other output, and the file written as every file
    # of tokmon's is (open_private: 0600, never through a symbolic link, never over a
    # file that is not tokmon's): pyarrow writes to the descriptor it is handed
    cols = {k: [clean_text(v) if isinstance(v, str) else v for v in vs]
            for k, vs in export_columns(rec).items()}  # fmt: skip
    table = pa.table(cols).replace_schema_metadata({"tokmon": __version__})
    try:
        with open_private(args.output, append=False) as f:
            pq.write_table(table, f)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    say(f"tokmon: wrote {args.output}", err=True)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    """Columnar companions for a recording's parts (``recording.companion``): what the
    recorder writes as each part closes, after the fact (an older recording, one cut by
    a crash, a part too small for the recorder to index)."""
    from tokmon.recording import RecordingError, companion
    from tokmon.recording.jsonl import header_of
    from tokmon.recording.parts import part_numbers, part_path

    if not companion.available():
        raise UsageError("companions need pyarrow: pip install 'tokmon-live[fast]'")
    path = args.file
    if header_of(path) is None:
        raise RecordingError(f"{path} is not a tokmon recording (no header line)")
    parts = [path, *(part_path(path, k) for k in sorted(part_numbers(path)))]
    made = 0
    for part in parts:
        good, _why = companion.load(part)
        if good is not None:  # (the recorder's, still true to its part: not written again)
            made += 1
            say(f"tokmon index: {good.path} is up to date", err=True)
            continue
        try:
            out = companion.build(part)
        except companion.NotIndexed as e:
            say(f"tokmon index: {part}: not indexed: {e}", err=True)
            continue
        made += 1
        say(f"tokmon index: wrote {out}", err=True)
    return 0 if made else EXIT_FAILED


def cmd_view(args: argparse.Namespace) -> int:
    """``tokmon view --attach SOCKET``: a running session's dashboard in this terminal (or
    in a browser tab, through --web); q detaches, the run goes on."""
    from tokmon.sources.remote import RemoteSource

    try:
        src = RemoteSource(args.attach)
    except OSError as e:
        raise UsageError(f"--attach: no run at {args.attach}: {e.strerror or e}") from None
    try:
        run_dashboard(src, theme=args.theme, fps=args.fps)
    finally:
        src.close()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from tokmon.cli.listen import parse_listen
    from tokmon.sources.replay import SPEEDS, ReplaySource

    listen = parse_listen("--web", args.web, args.web_allow_remote)
    if listen is not None:
        # each browser tab plays the file on its own; this terminal serves until Ctrl-C
        from tokmon.cli.webview import start_web
        from tokmon.recording.reader import read_recording

        read_recording(args.file)  # a bad file is one line here, not in the page
        page = [sys.executable, "-m", "tokmon", "replay", os.path.abspath(args.file)]
        page += ["--speed", f"{args.speed:g}"] + (["--theme", args.theme] if args.theme else [])
        for opt, v in (("--from", args.t_from), ("--to", args.t_to)):
            page += [opt, v] if v is not None else []
        web = start_web(listen, page, title=f"tokmon replay {os.path.basename(args.file)}")
        try:
            say("tokmon: serving the replay; Ctrl-C to stop", err=True, flush=True)
            web.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            web.close()
        return 0

    window = _window(args, args.file)
    if window is not None and args.follow:
        raise UsageError("--from/--to do not go with --follow (it reads the run as it grows)")
    src = ReplaySource(
        args.file,
        speed=min(SPEEDS, key=lambda s: abs(s - args.speed)),
        follow=args.follow,
        window=window,
    )
    if window is not None:
        from tokmon.recording.window import past_end

        why = past_end(window, src.end_t)
        if why:
            raise UsageError(why)
    src.start()
    try:
        run_dashboard(src, theme=args.theme, fps=args.fps)
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
        # a --scenario's values come before the config's and the command line's: they win
        from tokmon.cli import scenarios

        name = scenarios.find(argv)
        if name is None and "--help-scenario" in argv:
            say("\n\n".join(scenarios.describe(n) for n in scenarios.NAMES))
            return 0
        if name is not None:
            try:
                if "--help-scenario" in argv:
                    say(scenarios.describe(name))
                    return 0
                words = scenarios.scenario_argv(parser.run_parser, name, argv[1:])
                argv = ["run", *words, *argv[1:]]
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
            opts = RunOptions.of(args)
            if opts.between and (opts.repeat or 1) <= 1:
                raise UsageError("--between says what happens between runs: with --repeat N")
            # one shutdown for every phase: a signal while a server starts, during the
            # run or between runs stops the command the same way (cli/shutdown.py)
            SHUTDOWN.reset()
            with SHUTDOWN.installed():
                if (opts.repeat or 1) > 1:
                    from tokmon.cli.repeat import run_repeated

                    return run_repeated(opts, file_arms)
                return run_session(build_run(opts, file_arms))
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
        if args.command == "index":
            return cmd_index(args)
        if args.command == "env":
            return cmd_env(args)
        if args.command == "view":
            return cmd_view(args)
    except (UsageError, PreflightError) as e:
        say(
            f"tokmon {args.command}: error: {e}",
            err=True,
        )
        return EXIT_USAGE
    except RunFailed as e:
        say(f"tokmon {args.command}: error: {e}", err=True)
        return EXIT_FAILED
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
        say("tokmon: interrupted" + (f" ({SHUTDOWN.name})" if SHUTDOWN.name else ""), err=True)
        return SHUTDOWN.code or 130
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
