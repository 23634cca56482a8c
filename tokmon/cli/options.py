"""Every option of ``tokmon run``, once: its flags, default, type and help.

The argparse options and the keys a ``--config`` TOML file may set are both derived from
this table, so a default or a help text is written in one place.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S


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


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None  # "store_true" or "append"
    metavar: str | None = None
    group: str = "run"
    config: bool = True  # may be set in a --config file
    text: bool = False  # a name, a path or a URL: a number there is a mistake

    @property
    def dest(self) -> str:
        return next(f for f in self.flags if f.startswith("--"))[2:].replace("-", "_")

    @property
    def kind(self) -> str:
        """The type of its value once parsed, as ``RunOptions`` declares it."""
        if self.action == "store_true":
            return "bool"
        if self.action == "append":
            return "tuple[str, ...]"
        base = "str" if self.type is None else getattr(self.type, "__name__", "str")
        base = {"integer": "int", "number": "float"}.get(base, base)
        return base if self.default is not None else f"{base} | None"

    def add_to(self, p: Any) -> None:
        kw: dict[str, Any] = {"help": self.help}
        if self.action == "store_true":
            kw["action"] = "store_true"
        elif self.action == "append":
            kw.update(action="append", default=[])
        else:
            kw["default"] = self.default
        if self.choices is not None:
            kw["choices"] = list(self.choices)
        for k in ("type", "metavar"):
            if getattr(self, k) is not None:
                kw[k] = getattr(self, k)
        p.add_argument(*self.flags, **kw)


RUN_OPTIONS: tuple[Option, ...] = (
    # options
    Option(('--url', '-u',), 'base URL of the API, e.g. http://127.0.0.1:8000/v1 (env TOKMON_URL)', group='run', text=True),
    Option(('--endpoint',), '/v1/chat/completions (messages) or /v1/completions (a prompt)', default='chat', choices=('chat', 'completions'), group='run', text=True),
    Option(('--model', '-m',), "model name (default: the server's first)", group='run', text=True),
    Option(('--config',), 'TOML file of defaults (CLI flags win)', group='run', config=False),
    Option(('--api-key-file',), 'read the API key from FILE (else TOKMON_API_KEY or OPENAI_API_KEY)', metavar='FILE', group='run', text=True),
    # load
    Option(('--concurrency', '-c',), 'closed loop: this many streams always in flight (default 4)', type=number(1, 100000, integer=True), group='load'),
    Option(('--rate', '-r',), 'open loop: requests per second (instead of --concurrency)', type=number(0, 1000000.0, lo_open=True), group='load'),
    Option(('--arrival',), 'arrival process under --rate', default='poisson', choices=('poisson', 'constant', 'gamma'), group='load', text=True),
    Option(('--burstiness',), 'gamma shape under --arrival gamma (<1 burstier, >1 smoother)', default=1.0, type=number(0, 1000, lo_open=True), group='load'),
    Option(('--max-concurrency',), 'cap on streams in flight under --rate (waits show as send lag)', default=1024, type=number(1, 100000, integer=True), group='load'),
    Option(('--duration', '-d',), 'run length: 30s, 10m, 2h', group='load'),
    Option(('--requests', '-n',), 'stop after this many requests', type=number(1, 1000000000000, integer=True), group='load'),
    Option(('--repeat',), 'run the same load N times (one seed for all), each a run of its own with its own files (--record r.jsonl writes r-1.jsonl …), then each headline figure over runs: its spread, its interval and whether it reproduces; {run} in a serve command is the run number', type=number(1, 1000, integer=True), metavar='N', group='load', config=False),
    Option(('--between',), 'between repeated runs: restart (serve= arms start their servers anew: the default with them) and/or cooldown=DURATION (a wait)', metavar='restart|cooldown=DUR', group='load', config=False),
    Option(('--warmup',), 'warm-up: N requests or a duration (20s); recorded, excluded from summaries', default='0', group='load'),
    Option(('--workers',), 'engine processes sharing the load', default=1, type=number(1, 64, integer=True), group='load'),
    Option(('--trace',), 'replay a production trace (Mooncake JSON Lines: timestamp ms, input_length, output_length, hash_ids): each request at its own time, equal hash ids as equal prompt blocks', metavar='FILE', group='load', text=True),
    Option(('--replay-load',), 'send the load of an earlier recording again (its times, kinds, lengths; its very prompts if it was made with --record-prompts), e.g. against another --url', metavar='FILE', group='load', text=True),
    Option(('--trace-speed',), 'play --trace or --replay-load this many times faster', default=1.0, type=number(0, 1000, lo_open=True), group='load'),
    Option(('--trace-block',), 'prompt tokens per hash id in --trace', default=512, type=number(1, 1000000, integer=True), group='load'),
    Option(('--ray',), "run the --workers as Ray actors on a cluster (ADDRESS, e.g. 10.0.0.5:6379 or auto; local: a cluster in this process), one per node where it can; needs pip install 'tokmon-live[ray]'", metavar='ADDRESS', group='load', text=True),
    Option(('--ray-resources',), 'Ray options of each worker as JSON, e.g. {"num_cpus": 2, "resources": {"loadgen": 1}}', metavar='JSON', group='load', text=True),
    Option(('--ray-on-loss',), 'a Ray worker lost mid-run: its in-flight requests end as cancelled and the run goes on (continue), or the run stops', default='continue', choices=('continue', 'stop'), group='load', text=True),
    Option(('--ladder',), 'steps of concurrency=1,2,4,8 / rate=1,2,4 / prompt-tokens=128,1k,4k / max-tokens=…, each for --step-duration, for every arm in turn', metavar='PARAM=V1,V2,…', group='load', text=True),
    Option(('--step-duration',), 'length of one ladder step', default='30s', group='load'),
    Option(('--step-warmup',), 'start of each step kept out of its figures', default='5s', group='load'),
    Option(('--scenario',), 'a preset for a kind of service, below your own options and --config: chat (closed loop, multi-turn, TTFT/TPOT SLOs), serve (capacity search under an SLO), batch (saturated, long outputs: throughput and cost), code (code and structured kinds, greedy: the speed-up by kind); --help-scenario prints what it sets', choices=('chat', 'serve', 'batch', 'code'), group='load', config=False, text=True),
    Option(('--help-scenario',), 'print what --scenario sets, and exit', action="store_true", group='load', config=False),
    Option(('--find-capacity',), 'search the highest load that meets every --slo for --slo-target of the requests (goodput): doubling until a probe fails, then bisecting; each probe runs until its goodput interval is clear of the target (--probe-duration), for every arm in turn', choices=('concurrency', 'rate'), group='load', text=True),
    Option(('--probe-duration',), 'a capacity probe runs at least MIN after its --step-warmup, and at most 60 requests (or MAX: auto, as long as 60 of its requests take; then its point decides, and says so)', default='5s,auto', metavar='MIN,MAX', group='load'),
    Option(('--capacity-at-least',), 'with --find-capacity: exit 1 when the capacity found is below this level (streams or req/s), for CI', type=number(0, 1e9, lo_open=True), group='load'),
    Option(('--ladder-stop',), 'end the ladder when a step passes these (the server is saturated)', metavar='errors=5%,ttft_p95=MS', group='load'),
    # requests
    Option(('--prompt-tokens',), "synthetic prompt length in the server's own prompt tokens (template included; measured before the run): 512, 256:2048 (uniform), normal:512,128", default='128', group='requests'),
    Option(('--shared-prefix',), 'a system prompt of this many tokens shared by requests (the prefix cache as a controlled variable); counted in --prompt-tokens', metavar='TOKENS', group='requests'),
    Option(('--prefix-pool',), 'distinct shared prefixes, each request drawing one at random', default=1, type=number(1, 100000, integer=True), group='requests'),
    Option(('--turns',), 'multi-turn chats: requests per conversation (4, or 2:8), each carrying the whole history the server generated; one conversation per stream', metavar='N', group='requests'),
    Option(('--think-time',), 'pause between the turns of a conversation', default='0s', group='requests'),
    Option(('--followup-tokens',), 'length of each later user message in a conversation', default=64, type=number(1, 100000, integer=True), group='requests'),
    Option(('--conversations',), 'conversations from a file (JSON Lines of turns or messages, or ShareGPT JSON): each stream runs the next one, turn by turn; recorded replies go into the history as written', metavar='FILE', group='requests', text=True),
    Option(('--quality-probes',), "mix questions with known answers into the load at this share of requests (5%, or 0.05): arithmetic, counting, reversing, sorting, extraction into JSON, what a short program prints; each answer is read (never run) and checked, and each arm's accuracy shown with its interval", metavar='SHARE', group='requests'),
    Option(('--quality',), 'a run of quality probes only: N questions asked of each arm (several arms take turns request by request), then stop', type=number(1, 1000000, integer=True), metavar='N', group='requests'),
    Option(('--quality-file',), 'your own questions, asked instead of the built-in set (with --quality-probes or --quality): one JSON object a line, {"prompt" or "messages", "answer", "check": number|exact|json|contains, "task": NAME}', metavar='FILE', group='requests'),
    Option(('--tokenizer',), "the model's tokenizer.json (or its folder), for exact prompt lengths on a server without /tokenize (TGI, Ollama, TensorRT-LLM…); needs pip install 'tokmon-live[tokenizer]'", metavar='PATH', group='requests', text=True),
    Option(('--approx-prompt-tokens',), 'skip measuring the server before the run: prompts of about one word a token', action="store_true", group='requests'),
    Option(('--max-tokens',), 'output length, same syntax', default='256', group='requests'),
    Option(('--prompts',), 'prompt file: JSON Lines with prompt or messages (and kind), or ShareGPT JSON', group='requests', text=True),
    Option(('--mix',), 'task kinds by weight: code=0.3,chat=0.5,creative=0.2', group='requests', text=True),
    Option(('--ignore-eos',), 'ask for exactly max-tokens tokens', action="store_true", group='requests'),
    Option(('--image-size',), 'the side of each synthetic PNG the image kind sends (--mix image=N), in pixels: 64, 128, 256, 512, 768, 1024 or 2048; several (256,512,1024) are sent in turn, and the images judgment gives each its tokens and TTFT', default='512', metavar='PX[,PX…]', group='requests'),
    Option(('--temperature',), "sampling temperature sent with each request (default: the server's)", type=number(0, 100), group='requests'),
    Option(('--top-p',), "nucleus sampling sent with each request (default: the server's)", type=number(0, 1), group='requests'),
    Option(('--seed',), 'seed for the workload (and request seed)', type=number(0, 4294967295, integer=True), group='requests'),
    Option(('--extra-body',), 'JSON object merged into every request body', group='requests'),
    Option(('--header',), 'extra request header (repeatable); its value is redacted in every output unless named with --show-header', action="append", metavar='K:V', group='requests'),
    Option(('--show-arg',), 'an option of a serve= command whose value may be written although its name looks secret (repeatable, e.g. --show-arg max-num-batched-tokens)', action="append", metavar='NAME', group='arms', config=False),
    Option(('--show-header',), 'a --header whose value may appear in recordings and reports (repeatable)', action="append", metavar='NAME', group='requests', config=False),
    Option(('--continuous-usage',), 'ask for per-chunk usage (vLLM, SGLang): exact tokens per chunk', action="store_true", group='requests'),
    Option(('--stall-threshold',), 'a chunk gap longer than this is a stall', default='1s', group='requests'),
    Option(('--connect-timeout',), 'to open a connection', default='10s', group='requests'),
    Option(('--first-token-timeout',), 'from the send to the first token', default='120s', group='requests'),
    Option(('--idle-timeout',), 'longest gap between chunks', default='60s', group='requests'),
    Option(('--total-timeout',), 'for a whole request', default='15m', group='requests'),
    Option(('--insecure',), 'do not verify HTTPS certificates', action="store_true", group='requests'),
    # arms (A/B)
    Option(('--arm',), 'an arm: url=, model=, endpoint=, body={json}, header=K:V (repeatable)', action="append", metavar='NAME:key=value,...', group='arms', config=False),
    Option(('--alternate',), 'switch arms automatically every DURATION', group='arms'),
    Option(('--cycles',), 'with --alternate: stop after every arm has run this many times (a reproducible schedule)', type=number(1, 100000, integer=True), group='arms'),
    Option(('--on-server-failure',), 'a managed server (serve=) that exits or is never ready: stop the run (exit 1), skip its arm, or retry once', default='stop', choices=('stop', 'skip-arm', 'retry'), group='arms', text=True),
    Option(('--server-ready-timeout',), 'how long a managed server may take to be ready', default='600s', group='arms'),
    Option(('--server-stop-timeout',), 'SIGTERM, then SIGKILL after this long', default='30s', group='arms'),
    Option(('--server-warmup',), 'short requests to a managed server once it is ready, before it is measured', default=4, type=number(0, 10000, integer=True), group='arms'),
    Option(('--settle',), 'requests sent this soon after a switch are kept out of the comparison', default='0s', group='arms'),
    Option(('--check-outputs',), 'at start (and on key o): N greedy prompts to every arm, outputs compared', default=0, type=number(0, 10000, integer=True), metavar='N', group='arms'),
    Option(('--assign',), 'switch: one arm at a time; alternate/random: each request picks its arm', default='switch', choices=('switch', 'alternate', 'random'), group='arms', text=True),
    # output
    Option(('--headless',), 'no dashboard: status lines and a summary', action="store_true", group='output'),
    Option(('--summary-json',), 'write the summary as JSON', metavar='FILE', group='output', text=True),
    Option(('--status-interval',), 'headless status line period', default='5s', group='output'),
    Option(('--slo',), "SLOs in ms for goodput: ttft=500,tpot=50,e2e=10000; answer=2000 for a reasoning model (the answer's wait: its first token after the thinking)", group='output'),
    Option(('--fail-on-slo',), 'exit 1 when the goodput fraction is below --slo-target', action="store_true", group='output'),
    Option(('--slo-target',), 'share of requests that must meet the SLOs for --fail-on-slo to pass', default=0.95, type=number(0, 1, lo_open=True), group='output'),
    Option(('--theme',), 'dashboard theme: a name or a .toml path', group='display', text=True),
    Option(('--fps',), 'dashboard redraws per second (max)', default=4.0, type=number(0.1, 60), group='display'),
    Option(('--window',), 'width of the sliding window', default=f'{WINDOW_S:g}s', group='output'),
    Option(('--drift-alert',), 'alert when a metric drifts (significantly) faster than this', default=f'{DRIFT_ALERT_PCT_H:g}%/h', group='output'),
    Option(('--alerts-exit',), 'exit 3 if any alert fired (soak tests in CI)', action="store_true", group='output'),
    Option(('--gpu-hour-price',), 'price of one GPU-hour: cost per million output tokens, live and in the summary', type=number(0, 1000000.0), metavar='PRICE', group='output'),
    Option(('--gpu-count',), 'GPUs the server uses (default: the GPUs sampled, else 1)', type=number(1, 100000, integer=True), group='output'),
    Option(('--record',), 'record the session to FILE (JSON Lines; .gz to compress)', metavar='FILE', group='output', text=True),
    Option(('--record-rotate',), 'begin a new part of the recording every DURATION (1h, 6h): numbered files beside it (run.part002.jsonl.gz …) that report and replay read as one run, each readable alone', metavar='DURATION', group='output'),
    Option(('--record-max-size',), 'begin a new part of the recording once a part holds SIZE (500MB, 2GB)', metavar='SIZE', group='output'),
    Option(('--group-readable',), "create the recording, summary and server logs 0640 (the group may read them) instead of 0600", action="store_true", group='output'),
    Option(('--record-prompts',), 'also record every prompt sent (for --replay-load of the very same requests; the file then holds the prompts)', action="store_true", group='output'),
    Option(('--record-chunks',), 'also record every chunk gap of every request', action="store_true", group='output'),
    Option(('--overwrite',), '--record may replace an existing file', action="store_true", group='output', config=False),
    Option(('--append',), '--record may add this session to an existing file (reports read the last one)', action="store_true", group='output', config=False),
    # probes
    Option(('--metrics-url',), 'server Prometheus endpoint (default: /metrics next to each --url)', group='probes', text=True),
    Option(('--no-server-metrics',), 'do not scrape /metrics', action="store_true", group='probes'),
    Option(('--web',), 'also serve the dashboard in a browser on HOST:PORT (textual-serve; e.g. 127.0.0.1:8080); a non-loopback address needs --web-allow-remote and prints a one-time access token', metavar='HOST:PORT', group='display', text=True),
    Option(('--web-control',), "let --web's pages act on the run (switch, pause, load, markers); without it they only watch", action="store_true", group='display'),
    Option(('--web-allow-remote',), 'let --web listen on a non-loopback address (with an access token)', action="store_true", group='display'),
    Option(('--prometheus',), "serve tokmon's own metrics for Prometheus on HOST:PORT (e.g. 127.0.0.1:9464; a non-loopback address needs --prometheus-allow-remote)", metavar='HOST:PORT', group='probes', text=True),
    Option(('--prometheus-linger',), 'after a headless run ends, keep serving --prometheus this long, so that a last scrape sees the final counts', default='0s', group='probes'),
    Option(('--prometheus-allow-remote',), 'let --prometheus listen on a non-loopback address (anyone who can reach it sees the run)', action="store_true", group='probes'),
    Option(('--net-interval',), "how often the round trip to each server is sampled (one TCP connect and one GET /health), or 'off'", default='5s', group='probes'),
    Option(('--no-env',), "do not ask the servers for their configuration, time the way to them or check what they allow before the run", action="store_true", group='probes'),
    Option(('--metrics-interval',), 'how often /metrics is scraped: each scrape costs the server CPU (the README gives the measured cost)', default='2s', group='probes'),
    Option(('--gpu-interval',), 'NVML sampling period', default='0.5s', group='probes'),
    Option(('--gpus',), 'GPU indices to sample, e.g. 0,2', group='probes'),
    Option(('--no-gpu',), 'do not sample the GPU', action="store_true", group='probes'),
    Option(('--server-pid',), "the server's process id, for its own GPU memory (local servers)", type=number(1, 2147483648, integer=True), group='probes', config=False),
    Option(('--dcgm-url',), "a DCGM exporter's /metrics (GPU on another host) instead of NVML", group='probes', text=True),
)  # fmt: skip

GROUPS = {"load": "load", "requests": "requests", "arms": "arms (A/B)", "output": "output",
          "display": "output", "probes": "probes"}  # fmt: skip
# The keys a --config file may set, and those whose value must be text.
CONFIG_KEYS = frozenset(o.dest for o in RUN_OPTIONS if o.config)
TEXT_KEYS = frozenset(o.dest for o in RUN_OPTIONS if o.text)


def add_run_options(p: argparse.ArgumentParser) -> None:
    groups: dict[str, Any] = {}
    for o in RUN_OPTIONS:
        if o.group == "run":
            o.add_to(p)
            continue
        title = GROUPS[o.group]
        if title not in groups:
            groups[title] = p.add_argument_group(title)
        o.add_to(groups[title])


def add_display_options(p: Any) -> None:
    """The dashboard's look, for run, demo and replay alike."""
    for o in RUN_OPTIONS:
        if o.group == "display":
            o.add_to(p)


_TYPES: Mapping[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "tuple[str, ...]": (tuple,),
}  # fmt: skip


@dataclass(frozen=True)
class RunOptions:
    """Every option of ``tokmon run`` as parsed, typed: the one object the run reads its
    options from (never ``getattr(args, …)``). Its fields are the table's dests, each of
    the type its option gives (``tests/test_options.py`` holds the two together)."""

    # run
    url: str | None
    endpoint: str
    model: str | None
    config: str | None
    api_key_file: str | None
    # load
    concurrency: int | None
    rate: float | None
    arrival: str
    burstiness: float
    max_concurrency: int
    duration: str | None
    requests: int | None
    repeat: int | None
    between: str | None
    warmup: str
    workers: int
    trace: str | None
    replay_load: str | None
    trace_speed: float
    trace_block: int
    ray: str | None
    ray_resources: str | None
    ray_on_loss: str
    ladder: str | None
    step_duration: str
    step_warmup: str
    scenario: str | None
    help_scenario: bool
    find_capacity: str | None
    probe_duration: str
    capacity_at_least: float | None
    ladder_stop: str | None
    # requests
    prompt_tokens: str
    shared_prefix: str | None
    prefix_pool: int
    turns: str | None
    think_time: str
    followup_tokens: int
    conversations: str | None
    quality_probes: str | None
    quality: int | None
    quality_file: str | None
    tokenizer: str | None
    approx_prompt_tokens: bool
    max_tokens: str
    prompts: str | None
    mix: str | None
    ignore_eos: bool
    image_size: str
    temperature: float | None
    top_p: float | None
    seed: int | None
    extra_body: str | None
    header: tuple[str, ...]
    show_header: tuple[str, ...]
    continuous_usage: bool
    stall_threshold: str
    connect_timeout: str
    first_token_timeout: str
    idle_timeout: str
    total_timeout: str
    insecure: bool
    # arms
    show_arg: tuple[str, ...]
    arm: tuple[str, ...]
    alternate: str | None
    cycles: int | None
    on_server_failure: str
    server_ready_timeout: str
    server_stop_timeout: str
    server_warmup: int
    settle: str
    check_outputs: int
    assign: str
    # output
    headless: bool
    summary_json: str | None
    status_interval: str
    slo: str | None
    fail_on_slo: bool
    slo_target: float
    theme: str | None
    fps: float
    window: str
    drift_alert: str
    alerts_exit: bool
    gpu_hour_price: float | None
    gpu_count: int | None
    record: str | None
    record_rotate: str | None
    record_max_size: str | None
    group_readable: bool
    record_prompts: bool
    record_chunks: bool
    overwrite: bool
    append: bool
    web: str | None
    web_control: bool
    web_allow_remote: bool
    # probes
    metrics_url: str | None
    no_server_metrics: bool
    prometheus: str | None
    prometheus_linger: str
    prometheus_allow_remote: bool
    net_interval: str
    no_env: bool
    metrics_interval: str
    gpu_interval: str
    gpus: str | None
    no_gpu: bool
    server_pid: int | None
    dcgm_url: str | None

    def __post_init__(self) -> None:
        # a namespace built by hand (the demo's) is checked as argparse would have
        for o in RUN_OPTIONS:
            v = getattr(self, o.dest)
            kind = o.kind.removesuffix(" | None")
            if v is None and o.kind.endswith("| None"):
                continue
            if not isinstance(v, _TYPES[kind]) or (kind != "bool" and isinstance(v, bool)):
                raise TypeError(f"--{o.dest.replace('_', '-')}: expected {kind}, got {v!r}")

    @classmethod
    def of(cls, ns: argparse.Namespace) -> RunOptions:
        """The options of a parsed ``tokmon run`` command line (a repeatable option's
        list becomes a tuple)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            v = getattr(ns, f.name)
            values[f.name] = tuple(v or ()) if isinstance(v, list) else v
        return cls(**values)
