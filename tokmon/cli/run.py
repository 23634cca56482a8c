"""``tokmon run``: a checked plan (``cli/plan.py``) performed — what it will write and
where it will listen checked, Ray joined, a managed server started, each arm's model
resolved, the prompts measured, the servers surveyed — then the session driven
(dashboard or headless), and the exit code."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokmon import __version__
from tokmon.cli.listen import can_listen
from tokmon.cli.options import RunOptions
from tokmon.cli.parser import RunFailed, UsageError
from tokmon.cli.plan import ExitPlan, ProbePlan, RecordPlan, RunPlan, ServerPlan, plan_run
from tokmon.cli.shutdown import SHUTDOWN, run_dashboard
from tokmon.model.data.commands import StopRun
from tokmon.model.env.redact import redact_argv
from tokmon.model.statistics.words import count
from tokmon.textsafe import dumps, open_private, say, share_with_group, write_text

if TYPE_CHECKING:
    from tokmon.model.statistics.stats import Slo
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import PromptShape


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A plan performed: the managed servers started, each arm's model resolved, the
    prompts measured and each server's environment surveyed."""

    plan: RunPlan
    cfg: RunConfig  # the plan's, each arm's model resolved and the prompts measured
    models: dict[str, dict[str, Any]]  # per server URL: its /v1/models
    versions: dict[str, str]
    environment: tuple[Any, ...]
    managed: Any
    target: str
    model: str
    notes: tuple[tuple[str, str], ...]  # the set-up's warnings: events as the run starts


def build_run(o: RunOptions, file_arms: list[Any]) -> Prepared:
    """What the options name, read; the options as a checked plan; then what it needs
    performed."""
    from tokmon.cli.given import read_given

    return prepare_run(plan_run(o, read_given(o), file_arms, secrets.token_hex(4)))


def prepare_run(plan: RunPlan) -> Prepared:
    """Perform what the plan needs, in order: check that what it will write can be
    written and where it will listen is free, connect to Ray, start the first managed
    server, resolve each arm's model (the pre-flight), measure the prompts, survey each
    server. A failure is one line; a server started here is stopped on the way out."""
    share_with_group(plan.group_readable)
    prom = plan.view.prometheus
    if prom is not None and prom[1] and not can_listen(*prom):
        raise UsageError(f"--prometheus: {prom[0]}:{prom[1]} is in use")
    made = check_record(plan.record) if plan.record is not None else None
    try:
        return _perform(plan)
    except BaseException:
        # stopped or failed before the run began: a recording it made is not left empty
        if made is not None:
            with contextlib.suppress(OSError):
                if made.stat().st_size == 0:
                    made.unlink()
        raise


def _perform(plan: RunPlan) -> Prepared:
    cfg = plan.cfg
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
    managed = None
    if plan.servers is not None:
        managed = start_managed(plan.servers, list(cfg.arms), {**plan.auth, **cfg.headers})
    try:
        return _resolve(plan, managed, local)
    except BaseException:  # (a failed pre-flight, Ctrl-C while measuring): no server left
        if managed is not None:
            managed.close()
        raise


def _resolve(plan: RunPlan, managed: Any, local: Any) -> Prepared:
    """Each arm's model from its server, the prompts measured, each server surveyed."""
    from tokmon.engine.preflight import PreflightError, fetch_models, resolve_model

    cfg = plan.cfg
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
        plan=plan,
        cfg=cfg,
        models=models_cache,
        versions={u: e.version for u, e in envs.items() if e.version},
        environment=tuple(envs.values()),
        managed=managed,
        target=url or resolved[0].url,
        model=resolved[0].model,
        notes=tuple(notes),
    )


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


def check_record(rec: RecordPlan) -> Path | None:
    """--record: the file can be written, is not an earlier run's unless it may be
    replaced or added to, and no stale part of an earlier rotated run lies beside it.
    The file's path where this made it (empty), else None."""
    path = Path(rec.path)
    new = not path.exists()
    if path.exists() and not path.is_file():
        raise UsageError(f"--record: {rec.path} is not a regular file")
    if path.exists() and path.stat().st_size and not (rec.append or rec.overwrite):
        raise UsageError(
            f"--record: {rec.path} exists — give --overwrite to replace it, or --append "
            "to add this session to it"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_private(path, append=True):
            pass
    except OSError as e:
        raise UsageError(f"--record: cannot write {rec.path}: {e.strerror or e}") from None
    if rec.rotate_s or rec.max_bytes:
        from tokmon.recording.parts import part_numbers, part_path

        stale = [part_path(rec.path, k) for k in sorted(part_numbers(rec.path))]
        if stale and not rec.overwrite:
            raise UsageError(
                f"--record: {stale[0]} exists (a part of an earlier run) — give --overwrite "
                "to replace the recording and its parts"
            )
        for p in stale:
            try:
                os.remove(p)
            except OSError as e:
                raise UsageError(f"--record: cannot remove {p}: {e.strerror or e}") from None
    return path if new else None


def start_managed(servers: ServerPlan, arms: list[Any], headers: dict[str, str]) -> Any:
    """Arms with serve=: tokmon starts the first one's server now (its model resolves the
    pre-flight); the others start when their turn comes."""
    import tempfile

    from tokmon.probes.env import survey
    from tokmon.sources.managed import Managed, ServerFailed

    log_dir = (
        Path(servers.log_dir).resolve()
        if servers.log_dir is not None
        else Path(tempfile.mkdtemp(prefix="tokmon-"))
    )
    gpu_used = None
    if servers.sample_gpu:
        from tokmon.probes.gpu import gpu_memory_used_gib

        gpu_used = gpu_memory_used_gib
    managed = Managed(
        arms,
        log_dir,
        headers,
        ready_timeout_s=servers.ready_timeout_s,
        stop_timeout_s=servers.stop_timeout_s,
        warmup_n=servers.warmup_n,
        on_failure=servers.on_failure,
        endpoint=servers.endpoint,
        gpu_used=gpu_used,
        survey=lambda u: survey(u, headers),
        shown_args=servers.shown_args,
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
    run: Prepared,
    on_summary: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    from tokmon.cli.scenarios import headline
    from tokmon.sources.live import LiveSession

    plan, cfg, view = run.plan, run.cfg, run.plan.view
    slo = plan.slo
    probes = build_probes(plan.probes, cfg, plan.window_s, plan.record)
    recorder, header = make_recorder(run, probes)
    session = LiveSession(
        cfg,
        target=run.target,
        model=run.model,
        slo=slo,
        window_s=plan.window_s,
        probes=probes,
        recorder=recorder,
        header=header,
        check_outputs_n=plan.check_outputs,
        drift_alert=plan.drift_alert,
        gpu_hour_price=plan.gpu_hour_price,
        gpus=plan.gpu_count,
        ladder=plan.ladder,
        environment=run.environment,
        managed=run.managed,
        cycles=plan.cycles,
        prometheus=view.prometheus,
        notes=run.notes,
        scenario=(plan.scenario, headline(plan.scenario or None, len(cfg.arms))),
    )
    headless = view.headless or not sys.stdout.isatty()
    if recorder is not None:
        # a write failure shows at once: an event on the dashboard, a line on stderr
        def on_record_error(msg: str) -> None:
            session.note("recording", msg)
            if headless:
                say(f"tokmon: {msg}", err=True, flush=True)

        recorder.on_error = on_record_error
    written: list[bool] = []
    summary_path = view.summary_json
    if summary_path:

        def write_summary(summary: dict[str, Any]) -> None:
            # when the run ends, not when the dashboard closes (an SSH session may close
            # first); a failure is reported below, where the summary is written again
            with contextlib.suppress(OSError):
                write_text(summary_path, dumps(summary, indent=2) + "\n")
                written.append(True)

        session.on_finished = write_summary

    def drain(hard: bool) -> None:
        session.command(StopRun(hard=hard))

    # from here on a signal drains the run (and, once it has ended, changes nothing):
    # the summary and every file are written whatever comes (cli/shutdown.py)
    with SHUTDOWN.phase("draining in-flight requests", drain):
        interrupted = 0
        web = None
        try:
            session.start()
            if view.web is not None:
                from tokmon.cli.webview import start_web

                page = [sys.executable, "-m", "tokmon", "view"]
                if view.theme:
                    page += ["--theme", view.theme]
                web = start_web(
                    view.web, page, source=session, title="tokmon run", control=view.web_control
                )
            if headless:
                from tokmon.ui.headless import run_headless

                run_headless(session, view.status_every_s)
                interrupted = SHUTDOWN.code
            else:
                closed_by_ctrl_c = run_dashboard(session, theme=view.theme, fps=view.fps)
                interrupted = 130 if closed_by_ctrl_c else SHUTDOWN.code
            # (after a first signal the drain it began goes on: a second makes it hard)
            session.command(StopRun(hard=not SHUTDOWN.requested or SHUTDOWN.signals > 1))
            session.wait(10.0)
            linger = view.linger_s
            if session.prom is not None and linger > 0 and not interrupted:
                say(
                    f"tokmon: serving the final metrics on :{session.prom.port} for {linger:g} s",
                    err=True,
                    flush=True,
                )
                SHUTDOWN.wait(linger)  # (a signal ends it: Ctrl-C, SIGTERM, SIGHUP)
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
        if summary_path and not written:
            try:
                write_text(summary_path, dumps(summary, indent=2) + "\n")
            except OSError as e:
                say(f"tokmon: cannot write {summary_path}: {e.strerror or e}", err=True)
                code = 1
        for why in session.failures():
            say(f"tokmon: {why}", err=True)
            code = 1
        # where everything went: a reader of a finished run's terminal finds its files
        wrote = []
        if recorder is not None and recorder.lines and plan.record is not None:
            wrote.append(f"recording {plan.record.path}")
        if summary_path and code == 0:
            wrote.append(f"summary {summary_path}")
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
                f"tokmon: the recording {recorder.path} is incomplete ({lost}: "
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
        return exit_code(plan.exits, slo, summary)


def exit_code(exits: ExitPlan, slo: Slo, summary: dict[str, Any]) -> int:
    """A finished run's exit code from what it asked to be held to: 3 for an alert under
    --alerts-exit, 1 for a capacity or an SLO share below its floor, else 0."""
    if exits.alerts and summary.get("alerts"):
        say(f"tokmon: {count(len(summary['alerts']), 'alert')} fired", err=True)
        return 3
    floor = exits.capacity_at_least
    if floor is not None:
        found = [c.get("capacity") for c in (summary.get("capacity_search") or {}).values()]
        short = [c for c in found if c is None or c < floor]
        if short or not found:
            say(f"tokmon: capacity {', '.join(str(c) for c in found) or 'not found'} is below "
                f"--capacity-at-least {floor:g}", err=True)  # fmt: skip
            return 1
    if exits.fail_on_slo and slo.any:
        frac = (summary.get("slo") or {}).get("fraction") or 0.0  # (summary.slo_share)
        if frac < exits.slo_target:
            say(
                f"tokmon: {frac:.1%} of requests met the SLOs, below the target "
                f"{exits.slo_target:.0%}",
                err=True,
            )
            return 1
    return 0


def make_recorder(run: Prepared, probes: list[Any]) -> tuple[Any, dict[str, Any]]:
    """The recorder for --record (its file checked by ``prepare_run``), and the header
    that writes the environment down."""
    rec = run.plan.record
    if rec is None:
        return None, {}
    from tokmon.model.workloads.config import redact_header
    from tokmon.recording.writer import Recorder, environment

    cfg = run.cfg
    secrets = [cfg.api_key or ""] + [
        v
        for h in (cfg.headers, *[a.headers for a in cfg.arms])
        for k, v in h.items()
        if redact_header(k, v, cfg.shown_headers) != v
    ]
    recorder = Recorder(
        rec.path,
        secrets=tuple(secrets),
        chunks=rec.chunks,
        rotate_s=rec.rotate_s,
        max_bytes=rec.max_bytes,
    )
    recorder.mode = "wb" if rec.overwrite else "ab"
    gpu_info: dict[str, Any] = {}
    for pr in probes:
        if hasattr(pr, "info") and hasattr(pr, "init"):
            pr.init()
            gpu_info = pr.info
    header = {
        "tokmon_version": __version__,
        "command": _redact_argv(sys.argv, cfg.shown_headers, cfg.shown_args),
        "settings": cfg.redacted(),
        "slo": {k: v for k, v in vars(run.plan.slo).items() if v is not None},
        "cost": {"gpu_hour_price": run.plan.gpu_hour_price, "gpus": run.plan.gpu_count},
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


def _redact_argv(
    argv: list[str], shown: tuple[str, ...] = (), shown_args: tuple[str, ...] = ()
) -> list[str]:
    """The command line as it may be written down: URL credentials and the values of
    headers (``--header K:V``) replaced, unless a header is named by --show-header, and
    every secret of a serve= command (``tokmon.model.env.redact``)."""
    from tokmon.model.workloads.config import redact_header

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


def build_probes(
    pp: ProbePlan, cfg: RunConfig, window: float, record: RecordPlan | None
) -> list[Any]:
    from tokmon.probes.gpu import DcgmProbe, NvmlProbe
    from tokmon.probes.host import HostProbe
    from tokmon.probes.server import ServerMetricsProbe, metrics_url_for

    probes: list[Any] = [HostProbe(record=record.path if record is not None else None)]
    gpus = list(pp.gpus) if pp.gpus is not None else None
    if pp.gpu == "dcgm" and pp.dcgm_url:
        probes.append(DcgmProbe(pp.dcgm_url, gpus=gpus))
    elif pp.gpu == "nvml":
        from tokmon.probes.gpu import pid_listening_on

        server_pid = pp.server_pid or pid_listening_on(cfg.arms[0].url)
        probes.append(NvmlProbe(pp.gpu_interval_s, gpus=gpus, server_pid=server_pid))
    if pp.server_metrics:
        by_url: dict[str, list[str]] = {}
        for a in cfg.arms:
            url = pp.metrics_url or metrics_url_for(a.url)
            by_url.setdefault(url, []).append(a.name)
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
                    interval=pp.metrics_interval_s,
                    window_s=window,
                    headers=hdr,
                    insecure=cfg.insecure,
                )
            )
    if pp.net_interval_s is not None:
        from tokmon.probes.env import NetProbe

        auth = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        net_arms: dict[str, list[Any]] = {}
        for a in cfg.arms:
            net_arms.setdefault(a.url, []).append(a)
        for url, group in net_arms.items():
            hdr = {**cfg.headers, **auth, **group[0].headers}
            probes.append(
                NetProbe(
                    url, tuple(a.name for a in group), hdr, cfg.insecure,
                    interval=pp.net_interval_s,
                )
            )  # fmt: skip
    return probes
